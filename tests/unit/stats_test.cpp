// reports/stats: quantiles, the Mann–Whitney U test against published
// values (every reference below names its source), and the bootstrap.
#include "reports/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace st = ctitan::stats;

namespace {

TEST(Stats, QuantilesInterpolateLinearlyLikeNumpy) {
  const std::vector<double> v = {10, 1, 9, 2, 8, 3, 7, 4, 6, 5};
  // numpy.quantile([1..10], [0.1, 0.25, 0.5, 0.75, 0.9]) = 1.9, 3.25, 5.5, 7.75, 9.1
  const st::Distribution d = st::describe(v);
  EXPECT_EQ(d.n, 10u);
  EXPECT_NEAR(d.p10, 1.9, 1e-12);
  EXPECT_NEAR(d.q1, 3.25, 1e-12);
  EXPECT_NEAR(d.median, 5.5, 1e-12);
  EXPECT_NEAR(d.q3, 7.75, 1e-12);
  EXPECT_NEAR(d.p90, 9.1, 1e-12);
  EXPECT_EQ(d.min, 1);
  EXPECT_EQ(d.max, 10);
  EXPECT_EQ(st::describe({}).n, 0u);
}

// scipy.stats.mannwhitneyu docstring example (from Shier 2004, "Statistics:
// 2.3 The Mann-Whitney U Test"): males = [19, 22, 16, 29, 24], females =
// [20, 11, 17, 12]; U1 = 17; exact p = 0.1111111111111111; asymptotic
// (continuity-corrected) p = 0.11134688653314041; without the continuity
// correction p = 0.0864107329737.
TEST(MannWhitney, ScipyDocumentedExampleExactAndNormal) {
  const std::vector<double> males = {19, 22, 16, 29, 24}, females = {20, 11, 17, 12};
  const st::UTest exact = st::mann_whitney_u(males, females);  // auto: n ≤ 8, no ties → exact
  EXPECT_EQ(exact.method, st::UMethod::exact);
  EXPECT_DOUBLE_EQ(exact.u1, 17);
  EXPECT_NEAR(exact.p_value, 0.1111111111111111, 1e-12);
  const st::UTest normal = st::mann_whitney_u(males, females, st::UMethod::normal);
  EXPECT_NEAR(normal.p_value, 0.11134688653314041, 1e-12);
  const st::UTest no_cc = st::mann_whitney_u(males, females, st::UMethod::normal, /*continuity=*/false);
  EXPECT_NEAR(no_cc.p_value, 0.0864107329737, 1e-11);
  // U is reported for the first sample: swapping gives U2 = n1·n2 − U1 = 3, same p.
  const st::UTest swapped = st::mann_whitney_u(females, males);
  EXPECT_DOUBLE_EQ(swapped.u1, 3);
  EXPECT_NEAR(swapped.p_value, exact.p_value, 1e-15);
}

// scipy's test suite, test_gh_9184, checked there against R:
//   x <- c(0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46)
//   y <- c(1.15, 0.88, 0.90, 0.74, 1.21)
//   wilcox.test(x, y, alternative = "two.sided", exact = TRUE)   p = 0.2544122544123
//   wilcox.test(x, y, exact = FALSE)                              p = 0.244623605127
//   wilcox.test(x, y, exact = FALSE, correct = FALSE)             p = 0.2206713619198
// with U = 35.
TEST(MannWhitney, MatchesRWilcoxTestTenVersusFive) {
  const std::vector<double> x = {0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46};
  const std::vector<double> y = {1.15, 0.88, 0.90, 0.74, 1.21};
  const st::UTest exact = st::mann_whitney_u(x, y);
  EXPECT_EQ(exact.method, st::UMethod::exact);
  EXPECT_DOUBLE_EQ(exact.u1, 35);
  EXPECT_NEAR(exact.p_value, 0.2544122544123, 1e-12);
  EXPECT_NEAR(st::mann_whitney_u(x, y, st::UMethod::normal).p_value, 0.244623605127, 1e-11);
  EXPECT_NEAR(st::mann_whitney_u(x, y, st::UMethod::normal, false).p_value, 0.2206713619198, 1e-11);
}

// Normal approximation with the tie correction, against R's
// wilcox.test(x, y, exact = FALSE) as quoted in scipy's test suite
// (test_tie_correct and test_gh_11355b; there an infinity plays the
// largest value — any value above the rest ranks the same, here 1e9).
TEST(MannWhitney, TieCorrectedNormalApproximationMatchesR) {
  struct Case {
    std::vector<double> x, y;
    double u, p;
  };
  const double big = 1e9;
  const std::vector<Case> cases = {
      {{1, 2, 3, 4}, {1, 2, 3, 4, 5}, 8, 0.7086240584439},
      {{1, 2, 3, 4}, {3, 6, 7, 8, big, 3, 2, 1, 4, 4, 5}, 10, 0.1297704873477},
      {{1, 2, 3, 4}, {3, 6, 7, 8, big, big, 2, 1, 4, 4, 5}, 8.5, 0.08735617507695},
      {{1, 2, big, 4}, {3, 6, 7, 8, big, 3, 2, 1, 4, 4, 5}, 17.5, 0.5988856695752},
      {{1, big, big, 4}, {3, 6, 7, 8, big, big, 2, 1, 4, 4, 5}, 24.5, 0.7912517950119},
  };
  for (const Case& c : cases) {
    const st::UTest t = st::mann_whitney_u(c.x, c.y);  // ties → auto picks the normal approximation
    EXPECT_EQ(t.method, st::UMethod::normal);
    EXPECT_TRUE(t.ties);
    EXPECT_DOUBLE_EQ(t.u1, c.u);
    EXPECT_NEAR(t.p_value, c.p, 1e-12) << "U = " << c.u;
  }
}

// The exact null distribution against Mann & Whitney (1947), Annals of
// Mathematical Statistics 18, table on p. 52: P(U ≤ u) for small n, m (three
// decimals, as printed; the values are also in scipy's test_exact_distribution).
TEST(MannWhitney, ExactCdfMatchesMannWhitney1947Table) {
  struct Row {
    int n, m;
    std::vector<double> cdf;  // u = 0, 1, 2, ...
  };
  const std::vector<Row> table = {
      {3, 3, {0.05, 0.1, 0.2, 0.35, 0.5, 0.65}},
      {4, 2, {0.067, 0.133, 0.267, 0.4, 0.6}},
      {4, 4, {0.014, 0.029, 0.057, 0.1, 0.171, 0.243, 0.343, 0.443, 0.557}},
      {5, 3, {0.018, 0.036, 0.071, 0.125, 0.196, 0.286, 0.393, 0.5, 0.607}},
      {6,
       5,
       {0.002, 0.004, 0.009, 0.015, 0.026, 0.041, 0.063, 0.089, 0.123, 0.165, 0.214, 0.268, 0.331, 0.396, 0.465,
        0.535}},
      {6,
       6,
       {0.001, 0.002, 0.004, 0.008, 0.013, 0.021, 0.032, 0.047, 0.066, 0.09, 0.12, 0.155, 0.197, 0.242, 0.294, 0.350,
        0.409, 0.469, 0.531}},
  };
  for (const Row& r : table)
    for (size_t u = 0; u < r.cdf.size(); ++u)
      EXPECT_NEAR(st::mann_whitney_cdf(static_cast<int64_t>(u), r.n, r.m), r.cdf[u], 1e-3)
          << "n=" << r.n << " m=" << r.m << " u=" << u;
  // The whole distribution sums to one and is symmetric around n·m/2.
  EXPECT_NEAR(st::mann_whitney_cdf(20, 4, 5), 1.0, 1e-15);
  EXPECT_NEAR(st::mann_whitney_cdf(7, 4, 4), 1.0 - st::mann_whitney_cdf(8, 4, 4), 1e-15);
}

TEST(MannWhitney, SmallestReachablePValue) {
  // 2 / C(6, 3) = 0.1: three runs a side can never be significant at 0.05.
  EXPECT_NEAR(st::mann_whitney_min_p(3, 3), 0.1, 1e-15);
  EXPECT_NEAR(st::mann_whitney_min_p(3, 4), 2.0 / 35, 1e-15);
  EXPECT_NEAR(st::mann_whitney_min_p(4, 4), 2.0 / 70, 1e-15);
  EXPECT_LT(st::mann_whitney_min_p(20, 20), 1e-6);
  // Fully separated samples reach it.
  EXPECT_NEAR(st::mann_whitney_u({1, 2, 3, 4}, {5, 6, 7, 8}).p_value, 2.0 / 70, 1e-15);
}

TEST(MannWhitney, IdenticalSamplesGivePOne) {
  const std::vector<double> v = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  EXPECT_DOUBLE_EQ(st::mann_whitney_u(v, v).p_value, 1.0);
  EXPECT_DOUBLE_EQ(st::mann_whitney_u({2, 2, 2}, {2, 2}).p_value, 1.0);  // all tied: σ = 0
}

TEST(MannWhitney, LargeSamplesUseTheNormalLawAndAgreeWithExact) {
  std::vector<double> x, y;
  for (int i = 0; i < 40; ++i) {
    x.push_back(i * 1.0);
    y.push_back(i * 1.0 + 7.5);
  }
  const st::UTest normal = st::mann_whitney_u(x, y);
  EXPECT_EQ(normal.method, st::UMethod::normal);
  const st::UTest exact = st::mann_whitney_u(x, y, st::UMethod::exact);
  EXPECT_DOUBLE_EQ(normal.u1, exact.u1);
  EXPECT_NEAR(normal.p_value, exact.p_value, 1e-3);  // as scipy's test_asymptotic_behavior expects at n = 40
}

TEST(Bootstrap, DeterministicAndCoversTheTrueChange) {
  const std::vector<double> x = {100, 101, 99, 100.5, 99.5, 100.2};
  const std::vector<double> y = {90, 91, 89, 90.5, 89.5, 90.2};
  const st::Interval a = st::bootstrap_relative_median_change(x, y, 0.05);
  const st::Interval b = st::bootstrap_relative_median_change(x, y, 0.05);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  EXPECT_LT(a.lo, -0.1);
  EXPECT_GT(a.hi, -0.1);
  EXPECT_LT(a.hi, 0);  // excludes 0: a real 10 % drop
  // Constant samples: no uncertainty left.
  const st::Interval c = st::bootstrap_relative_median_change({100, 100, 100}, {120, 120, 120}, 0.05);
  EXPECT_NEAR(c.lo, 0.2, 1e-12);
  EXPECT_NEAR(c.hi, 0.2, 1e-12);
  EXPECT_TRUE(std::isnan(st::bootstrap_relative_median_change({}, {1}, 0.05).lo));
}

}  // namespace

// Wilcoxon signed-rank: R's documented example (Hollander & Wolfe's
// depression scores, `wilcox.test(x, y, paired = TRUE)`: V = 40,
// p-value = 0.03906), and small cases counted by hand.
TEST(Wilcoxon, MatchesRsPairedExample) {
  const std::vector<double> x = {1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30};
  const std::vector<double> y = {0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29};
  std::vector<double> d;
  for (size_t i = 0; i < x.size(); ++i) d.push_back(x[i] - y[i]);
  const st::WilcoxonTest t = st::wilcoxon_signed_rank(d);
  EXPECT_EQ(t.n, 9u);
  EXPECT_DOUBLE_EQ(t.w_plus, 40);
  EXPECT_NEAR(t.p_value, 0.03906, 5e-6);
}

// The sign test's interval for a median, against binomial tables: n = 10
// takes ranks 2 and 9 (coverage 1 − 2·11/1024), n = 20 ranks 6 and 15
// (1 − 2·21700/2^20, 95.86 %); six values give [min, max] at 1 − 2/64,
// fewer than six cannot reach 95 %.
TEST(MedianInterval, OrderStatisticsFromTheBinomialLaw) {
  std::vector<double> ten, twenty;
  for (int i = 10; i >= 1; --i) ten.push_back(i);  // unsorted on purpose
  for (int i = 1; i <= 20; ++i) twenty.push_back(i * 0.5);
  const st::MedianInterval m10 = st::median_interval(ten);
  EXPECT_EQ(m10.n, 10u);
  EXPECT_DOUBLE_EQ(m10.median, 5.5);
  EXPECT_DOUBLE_EQ(m10.lo, 2);
  EXPECT_DOUBLE_EQ(m10.hi, 9);
  EXPECT_NEAR(m10.level, 1 - 2 * 11.0 / 1024, 1e-12);
  const st::MedianInterval m20 = st::median_interval(twenty);
  EXPECT_DOUBLE_EQ(m20.lo, 3.0);
  EXPECT_DOUBLE_EQ(m20.hi, 7.5);
  EXPECT_NEAR(m20.level, 1 - 2 * 21700.0 / 1048576, 1e-12);
  const st::MedianInterval m6 = st::median_interval({3, 1, 2, 6, 5, 4});
  EXPECT_DOUBLE_EQ(m6.lo, 1);
  EXPECT_DOUBLE_EQ(m6.hi, 6);
  EXPECT_DOUBLE_EQ(m6.level, 1 - 2.0 / 64);
  EXPECT_DOUBLE_EQ(st::median_interval({1, 2, 3}).level, 0.75);  // [min, max] of three covers 75 %
  // A looser alpha narrows it: n = 10 at 80 % takes ranks 3 and 8 (1 − 2·56/1024 = 89 %).
  const st::MedianInterval m10_80 = st::median_interval(ten, 0.2);
  EXPECT_DOUBLE_EQ(m10_80.lo, 3);
  EXPECT_DOUBLE_EQ(m10_80.hi, 8);
  EXPECT_EQ(st::median_interval({}).n, 0u);
}

TEST(Wilcoxon, SmallCasesCountedByHand) {
  // Six pairs all one way: 2 of 64 sign patterns are as extreme.
  EXPECT_DOUBLE_EQ(st::wilcoxon_signed_rank({-0.1, -0.2, -0.15, -0.12, -0.3, -0.11}).p_value, 2.0 / 64);
  EXPECT_DOUBLE_EQ(st::wilcoxon_min_p(6), 2.0 / 64);
  EXPECT_DOUBLE_EQ(st::wilcoxon_min_p(5), 2.0 / 32);  // five pairs can never reach 0.05
  // {1, -2, 3}: W+ = 4; of 8 patterns, sums 4, 5, 6 are >= 4: p = 2 · 3/8.
  const auto t = st::wilcoxon_signed_rank({1, -2, 3});
  EXPECT_DOUBLE_EQ(t.w_plus, 4);
  EXPECT_DOUBLE_EQ(t.p_value, 0.75);
  // Ties share the mean rank (2, 2, 2): W+ = 4, the centre of the law: p = 1.
  EXPECT_DOUBLE_EQ(st::wilcoxon_signed_rank({1, 1, -1}).p_value, 1.0);
  // Zeros are dropped; nothing left is no evidence.
  EXPECT_EQ(st::wilcoxon_signed_rank({0, 1, 2}).n, 2u);
  EXPECT_DOUBLE_EQ(st::wilcoxon_signed_rank({0, 0}).p_value, 1.0);
}
