// Statistics for reports and the regression gate: order statistics, the
// Mann–Whitney U test, a bootstrap confidence interval and, for the seeds
// of a quality comparison, Student's t intervals and Welch's test.
//
// All functions are pure and deterministic (the bootstrap has a fixed seed
// and its own index generator, so a verdict never changes between runs or
// standard libraries). Empty inputs give NaN rather than throwing: callers
// decide what "no data" means.
//
// The U test follows scipy.stats.mannwhitneyu (two-sided, method="auto"),
// so its p-values can be checked against scipy and R's wilcox.test:
//   exact     when either sample has at most 8 values and there are no ties
//             (the null distribution of U, computed by recursion);
//   normal    otherwise: z = (|U − n1·n2/2| − 0.5) / σ with the tie-corrected
//             σ² = n1·n2/12 · ((n+1) − Σ(t³ − t) / (n(n−1))).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/quantile.h"

namespace ctitan::stats {

// common/quantile.h's definition, the one summary.json's tps_p10/p90 use,
// so a report's percentiles match the run directory's.
using ::ctitan::quantile;
double median(const std::vector<double>& v);

// The spread a report prints: median with p10–p90 and the quartiles.
struct Distribution {
  size_t n = 0;
  double median = 0, p10 = 0, p90 = 0, q1 = 0, q3 = 0, min = 0, max = 0;
};
Distribution describe(const std::vector<double>& v);  // n == 0: everything 0

enum class UMethod { exact, normal };

struct UTest {
  double u1 = 0;       // U of the first sample: pairs (x, y) with x > y, ties counting 1/2
  double p_value = 1;  // two-sided
  UMethod method = UMethod::exact;
  bool ties = false;
};

// Two-sided Mann–Whitney U test of x against y (both non-empty).
UTest mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y);
// The same with the method forced and, for `normal`, the continuity
// correction optional (scipy's use_continuity).
UTest mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y, UMethod method,
                     bool continuity = true);

// P(U ≤ u) under the null for sample sizes n1, n2 (no ties): the exact CDF
// that Mann & Whitney (1947) tabulate.
double mann_whitney_cdf(int64_t u, int n1, int n2);

// The smallest two-sided p-value the test can return for these sizes
// (2 / C(n1+n2, n1) where the exact method applies). Below alpha or not
// decides whether the U test can ever reject, or a bootstrap must stand in.
double mann_whitney_min_p(size_t n1, size_t n2);

struct Interval {
  double lo = 0, hi = 0;
};

// Percentile bootstrap CI (level 1 − alpha) of median(y) / median(x) − 1:
// both samples are resampled with replacement `resamples` times from a
// fixed seed. Used where the U test cannot reach alpha with so few values.
Interval bootstrap_relative_median_change(const std::vector<double>& x, const std::vector<double>& y, double alpha,
                                          int resamples = 4000, uint64_t seed = 0x6374697461ULL);

// Wilcoxon's signed-rank test of paired differences d (candidate − baseline,
// or log-ratios), two-sided, zero differences dropped (scipy's default
// zero_method "wilcox"). Exact: the null distribution of W+ over all 2^n
// sign assignments of the ranks (average ranks for ties, counted in half
// ranks), so ties keep an exact p-value rather than scipy's normal switch.
// The pairing is what makes it strong on a drifting machine: both runs of a
// pair see the same drift.
struct WilcoxonTest {
  size_t n = 0;         // non-zero differences used
  double w_plus = 0;    // sum of the ranks of the positive differences
  double p_value = 1;   // two-sided; 1 when n == 0
};
WilcoxonTest wilcoxon_signed_rank(const std::vector<double>& d);
// The smallest two-sided p-value with n pairs: 2 / 2^n (6 pairs: 0.031).
double wilcoxon_min_p(size_t n);

// A distribution-free confidence interval for the median of v (the sign
// test's, e.g. Conover, Practical Nonparametric Statistics, §3.2): the
// order statistics [v(k), v(n+1−k)], k the largest rank whose coverage
// 1 − 2·P(B ≤ k−1), B ~ Binomial(n, 1/2), is at least 1 − alpha. With too
// few values for that even at k = 1 (n ≤ 5 at alpha 0.05) the interval is
// [min, max] and `level` says what it covers (5 values: 93.75 %).
struct MedianInterval {
  size_t n = 0;
  double median = 0, lo = 0, hi = 0;
  double level = 0;  // the interval's exact coverage
};
MedianInterval median_interval(std::vector<double> v, double alpha = 0.05);

// Standard normal survival function 1 − Φ(z).
double normal_sf(double z);

// Student's t (Boost.Math): the quantile t_{df}(p) and the CDF.
double student_t_quantile(double p, double df);
double student_t_cdf(double t, double df);

// The mean of v with its t interval (level 1 − alpha): mean ± t_{n−1}(1 −
// alpha/2) · s / √n. For seeds of one recipe, where the values are one
// draw each and their spread is the whole story. n < 2: lo = hi = mean
// and sd = 0 (no interval can be drawn from one value).
struct MeanInterval {
  size_t n = 0;
  double mean = 0, sd = 0, lo = 0, hi = 0;
};
MeanInterval mean_interval(const std::vector<double>& v, double alpha = 0.05);

// Where one more draw from v's (normal) distribution falls with
// probability 1 − alpha: mean ± t_{n−1}(1 − alpha/2) · s · √(1 + 1/n), the
// prediction interval. What a new seed of the same recipe may do; exact
// coverage for normal values at any n ≥ 2 (n < 2: [mean, mean]).
Interval prediction_interval(const std::vector<double>& v, double alpha);

// Welch's t test, one-sided: the p-value of "mean(y) < mean(x)" (unequal
// variances, Welch–Satterthwaite degrees of freedom). 0.5 when both samples
// are constant and equal; 0 or 1 when constant and different. Needs two
// values on each side (else 1: nothing can be shown).
double welch_less_p(const std::vector<double>& x, const std::vector<double>& y);
// The interval (level 1 − alpha) of mean(y) − mean(x) that goes with it.
Interval welch_difference_interval(const std::vector<double>& x, const std::vector<double>& y, double alpha);

}  // namespace ctitan::stats
