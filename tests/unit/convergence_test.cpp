// The quality comparison (reports/convergence.h) on answers known without
// the code under test: Student's t against printed tables, intervals whose
// coverage over many synthetic seeds is their stated level, crossings of
// linear curves where algebra puts them, and a band gate that passes A/A
// seeds at its level and catches a shifted, a slower and a suspiciously fast
// candidate.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "reports/convergence.h"
#include "reports/stats.h"

namespace ctitan {
namespace {

TEST(Convergence, StudentTMatchesPrintedTables) {
  // Two-sided 95 % critical values (any table of Student's t).
  EXPECT_NEAR(stats::student_t_quantile(0.975, 1), 12.706, 5e-4);
  EXPECT_NEAR(stats::student_t_quantile(0.975, 4), 2.776, 5e-4);
  EXPECT_NEAR(stats::student_t_quantile(0.95, 10), 1.812, 5e-4);
  EXPECT_NEAR(stats::student_t_quantile(0.995, 30), 2.750, 5e-4);
  EXPECT_NEAR(stats::student_t_cdf(0, 3), 0.5, 1e-12);
}

TEST(Convergence, WelchOnAHandWorkedPair) {
  // x = {1,2,3}, y = {4,5,6}: s² = 1 each, se = √(2/3), t = 3/√(2/3) = 3.674,
  // Welch df = (2/3)² / (2 · (1/3)² / 2) = 4. Tables: t_{4, 0.99} = 3.747 and
  // t_{4, 0.975} = 2.776, so the one-sided p lies in (0.01, 0.025).
  const std::vector<double> x = {1, 2, 3}, y = {4, 5, 6};
  const double p = stats::welch_less_p(y, x);  // "mean(x) < mean(y)"
  EXPECT_GT(p, 0.01);
  EXPECT_LT(p, 0.025);
  EXPECT_NEAR(p, stats::student_t_cdf(-3.0 / std::sqrt(2.0 / 3.0), 4), 1e-12);
  EXPECT_NEAR(stats::welch_less_p(x, y), 1 - p, 1e-12);
  const stats::Interval d = stats::welch_difference_interval(x, y, 0.05);  // y − x = 3 ± 2.776 · 0.8165
  EXPECT_NEAR(d.lo, 3 - 2.7764451 * std::sqrt(2.0 / 3.0), 1e-5);
  EXPECT_NEAR(d.hi, 3 + 2.7764451 * std::sqrt(2.0 / 3.0), 1e-5);
  // Constant samples: no spread, the means decide.
  EXPECT_EQ(stats::welch_less_p({2, 2}, {1, 1}), 0.0);
  EXPECT_EQ(stats::welch_less_p({2, 2}, {2, 2}), 0.5);
}

// Many synthetic draws: the prediction interval holds a new draw, the mean
// interval the true mean, at their stated 95 % (binomial sd at 20,000
// trials: 0.15 %), and Welch's one-sided test rejects a true null 5 % of
// the time with unequal variances.
TEST(Convergence, IntervalsCoverAtTheirStatedLevelOverManySyntheticSeeds) {
  std::mt19937_64 rng(2026);
  std::normal_distribution<double> n01(0, 1);
  const int trials = 20000;
  for (size_t n : {3u, 5u}) {
    int predicted = 0, covered = 0, rejected = 0;
    for (int t = 0; t < trials; ++t) {
      std::vector<double> v(n), w(n + 2);
      for (double& x : v) x = 3 + 0.05 * n01(rng);
      for (double& x : w) x = 3 + 0.15 * n01(rng);
      const double next = 3 + 0.05 * n01(rng);
      const stats::Interval pi = stats::prediction_interval(v, 0.05);
      predicted += next >= pi.lo && next <= pi.hi;
      const stats::MeanInterval m = stats::mean_interval(v, 0.05);
      covered += 3 >= m.lo && 3 <= m.hi;
      rejected += stats::welch_less_p(v, w) < 0.05;
    }
    EXPECT_NEAR(predicted / double(trials), 0.95, 0.006) << n << " seeds";
    EXPECT_NEAR(covered / double(trials), 0.95, 0.006) << n << " seeds";
    EXPECT_NEAR(rejected / double(trials), 0.05, 0.008) << n << " seeds";
  }
}

// loss = 5 − slope · tokens, evaluated every 1,000 tokens; 1 s per evaluation.
SeedCurve linear_seed(int64_t seed, double slope, int evaluations = 10) {
  SeedCurve c;
  c.seed = seed;
  for (int i = 1; i <= evaluations; ++i) c.curve.push_back({1000.0 * i, 1.0 * i, 5 - slope * 1000.0 * i});
  return c;
}

TEST(Convergence, TokensToTargetOverSeedsAreTheCrossingsWhereAlgebraPutsThem) {
  // Slopes 1e-4, 2e-4, 4e-4 reach 4.0 at 10,000, 5,000 and 2,500 tokens.
  const SeedSet s = seed_set({linear_seed(2, 2e-4), linear_seed(1, 1e-4), linear_seed(3, 4e-4)}, 4.0);
  ASSERT_EQ(s.reached, 3u);
  EXPECT_EQ(s.seeds.front().seed, 1);
  EXPECT_NEAR(s.tokens.mean, (10000 + 5000 + 2500) / 3.0, 1e-9);
  EXPECT_NEAR(*s.tokens_olympic, 5000, 1e-9);   // the middle one of three after dropping both ends
  EXPECT_NEAR(s.seconds.mean, (10 + 5 + 3) / 3.0, 1e-12);  // the evaluations that met it end at 10, 5, 3 s
  // The band at each evaluation: median, min, max over the seeds.
  ASSERT_EQ(s.band.size(), 10u);
  EXPECT_DOUBLE_EQ(s.band[0].median, 5 - 0.2);
  EXPECT_DOUBLE_EQ(s.band[0].min, 5 - 0.4);
  EXPECT_DOUBLE_EQ(s.band[0].max, 5 - 0.1);
  // A target one seed misses: the olympic mean drops it as the slowest.
  const SeedSet missed = seed_set({linear_seed(1, 1e-4), linear_seed(2, 2e-4), linear_seed(3, 4e-4)}, 3.5);
  EXPECT_EQ(missed.reached, 2u);  // 1e-4 reaches 4.0 only at its last evaluation
  EXPECT_NEAR(*missed.tokens_olympic, 7500, 1e-9);
}

// A synthetic recipe: loss = 2.5 + 2.5·exp(−tokens / scale) + a per-seed
// offset (initialisation) + a small per-evaluation wobble (data order).
SeedCurve noisy_seed(int64_t seed, double scale, std::mt19937_64& rng, double shift = 0) {
  std::normal_distribution<double> n01(0, 1);
  const double offset = 0.02 * n01(rng);
  SeedCurve c;
  c.seed = seed;
  for (int i = 1; i <= 12; ++i) {
    const double tokens = 2000.0 * i;
    c.curve.push_back({tokens, 0.5 * i, 2.5 + 2.5 * std::exp(-tokens / scale) + offset + 0.01 * n01(rng) + shift});
  }
  return c;
}

SeedSet noisy_recipe(double scale, std::mt19937_64& rng, int seeds = 5, double shift = 0) {
  std::vector<SeedCurve> v;
  for (int s = 0; s < seeds; ++s) v.push_back(noisy_seed(s, scale, rng, shift));
  return seed_set(std::move(v), 3.0);
}

TEST(Convergence, TheBandPassesAaSeedsAtItsLevelAndCatchesBrokenRecipes) {
  std::mt19937_64 rng(58);
  const int trials = 400;
  int aa_fail = 0, shifted = 0, slower = 0, faster = 0;
  for (int t = 0; t < trials; ++t) {
    const SeedSet base = noisy_recipe(8000, rng);
    aa_fail += compare_quality(base, noisy_recipe(8000, rng)).verdict != QualityVerdict::inside;
    // Converges to a worse loss (a dropped gradient, a bad scale).
    shifted += compare_quality(base, noisy_recipe(8000, rng, 5, 0.25)).verdict == QualityVerdict::outside;
    // Needs 40 % more tokens (lr too low, a doubled batch at the same lr).
    const QualityVerdict s = compare_quality(base, noisy_recipe(11200, rng)).verdict;
    slower += s == QualityVerdict::slower || s == QualityVerdict::outside;
    // Needs 40 % fewer tokens: not what a faster kernel can do.
    const QualityVerdict f = compare_quality(base, noisy_recipe(4800, rng)).verdict;
    faster += f == QualityVerdict::suspicious || f == QualityVerdict::outside;
  }
  // Bonferroni over the 60 evaluations judged (≤ alpha, conservative with
  // curves correlated across evaluations) and Welch's test at alpha/2 each
  // way (alpha): an A/A comparison fails at most about 2 · alpha of the time.
  EXPECT_LE(aa_fail, trials * 0.10) << aa_fail << " of " << trials << " A/A comparisons failed";
  EXPECT_GE(shifted, trials * 0.95);
  EXPECT_GE(slower, trials * 0.90);
  EXPECT_GE(faster, trials * 0.90);
}

TEST(Convergence, AWorseFinalLossIsFlaggedWithItsPairedDifferenceBySeed) {
  std::vector<SeedCurve> base, cand;
  // Final losses 4.00, 3.99, 3.98, 3.97: mean 3.985, s = 0.0129, so the
  // band's top is 3.985 + t_{3}(0.975) · s · √(1 + 1/4) = 4.031.
  for (int s = 0; s < 4; ++s) {
    base.push_back(linear_seed(s, 1e-4 * (1 + 0.01 * s)));
    SeedCurve c = linear_seed(s, 1e-4 * (1 + 0.01 * s));
    for (EvalPoint& e : c.curve) e.loss += 0.1 * e.train_tokens / 10000;  // drifts up to +0.1 at the end
    cand.push_back(c);
  }
  const QualityComparison q = compare_quality(seed_set(base, 4.5), seed_set(cand, 4.5));
  EXPECT_TRUE(q.final_worse);
  EXPECT_EQ(q.final_diff.n, 4u);
  EXPECT_NEAR(*q.final_band_hi, 3.985 + 3.182446 * 0.0129099 * std::sqrt(1.25), 1e-5);
  EXPECT_NEAR(q.final_diff.mean, 0.1, 1e-12);  // every seed exactly +0.1: a zero-width interval
  EXPECT_NEAR(q.final_diff.lo, 0.1, 1e-12);
  EXPECT_NEAR(q.final_diff.hi, 0.1, 1e-12);
  // The same seeds are their own match: nothing flagged.
  const QualityComparison same = compare_quality(seed_set(base, 4.5), seed_set(base, 4.5));
  EXPECT_EQ(same.verdict, QualityVerdict::inside);
  EXPECT_FALSE(same.final_worse);
  ASSERT_TRUE(same.speedup_at_quality);
  EXPECT_NEAR(*same.speedup_at_quality, 1.0, 1e-12);
}

TEST(Convergence, TwoBaselineSeedsAreTooFewForABand) {
  const QualityComparison q = compare_quality(seed_set({linear_seed(0, 1e-4), linear_seed(1, 2e-4)}, 4.0),
                                              seed_set({linear_seed(0, 1e-4)}, 4.0));
  EXPECT_EQ(q.verdict, QualityVerdict::too_few);
  EXPECT_NE(q.reason.find("3 or more"), std::string::npos);
}

}  // namespace
}  // namespace ctitan
