#include "reports/stats.h"

#include <boost/math/distributions/students_t.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

namespace ctitan::stats {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kExactMaxSmall = 8;     // scipy's rule: exact when a sample has at most 8 values
constexpr size_t kExactMaxLarge = 2000;  // beyond this the recursion costs too much; the normal law is excellent

// Average ranks (1-based) of the pooled sample, and Σ(t³ − t) over tie groups.
struct Ranks {
  std::vector<double> rank;
  double tie_term = 0;
};

Ranks average_ranks(const std::vector<double>& pooled) {
  std::vector<size_t> order(pooled.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pooled[a] < pooled[b]; });
  Ranks r;
  r.rank.resize(pooled.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && pooled[order[j + 1]] == pooled[order[i]]) ++j;
    const double avg = 0.5 * static_cast<double>(i + j) + 1.0;
    for (size_t k = i; k <= j; ++k) r.rank[order[k]] = avg;
    const double t = static_cast<double>(j - i + 1);
    r.tie_term += t * t * t - t;
    i = j + 1;
  }
  return r;
}

// P(U = u) for u in 0..small·large, by the recursion on who holds the
// largest value: P_{i,j}(u) = i/(i+j)·P_{i−1,j}(u − j) + j/(i+j)·P_{i,j−1}(u).
// Probabilities (not counts) keep every term positive and in range.
std::vector<double> exact_pmf(size_t small, size_t large) {
  // col[i] = P_{i, j} for the current j; starts at j = 0 (U = 0 surely).
  std::vector<std::vector<double>> col(small + 1, std::vector<double>{1.0});
  for (size_t j = 1; j <= large; ++j) {
    std::vector<std::vector<double>> next(small + 1);
    next[0] = {1.0};
    for (size_t i = 1; i <= small; ++i) {
      std::vector<double> p(i * j + 1, 0.0);
      const double wi = static_cast<double>(i) / static_cast<double>(i + j);
      const double wj = 1.0 - wi;
      const std::vector<double>& left = next[i - 1];  // P_{i−1, j}
      for (size_t u = 0; u < left.size(); ++u) p[u + j] += wi * left[u];
      const std::vector<double>& up = col[i];  // P_{i, j−1}
      for (size_t u = 0; u < up.size(); ++u) p[u] += wj * up[u];
      next[i] = std::move(p);
    }
    col = std::move(next);
  }
  return col[small];
}

double log_binomial(size_t n, size_t k) {
  return std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(k) + 1) -
         std::lgamma(static_cast<double>(n - k) + 1);
}

bool exact_applies(size_t n1, size_t n2) {
  return std::min(n1, n2) <= kExactMaxSmall && std::max(n1, n2) <= kExactMaxLarge;
}

// splitmix64: tiny, fast and the same on every platform (std's
// distributions are not), which is what a reproducible verdict needs.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
};

double resampled_median(const std::vector<double>& v, SplitMix64& rng, std::vector<double>& scratch) {
  scratch.resize(v.size());
  for (double& s : scratch) s = v[rng.below(v.size())];
  return quantile(scratch, 0.5);
}

}  // namespace

double median(const std::vector<double>& v) { return quantile(v, 0.5); }

Distribution describe(const std::vector<double>& v) {
  Distribution d;
  if (v.empty()) return d;
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  d.n = s.size();
  d.median = quantile(s, 0.5);
  d.p10 = quantile(s, 0.1);
  d.p90 = quantile(s, 0.9);
  d.q1 = quantile(s, 0.25);
  d.q3 = quantile(s, 0.75);
  d.min = s.front();
  d.max = s.back();
  return d;
}

double normal_sf(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

double mann_whitney_cdf(int64_t u, int n1, int n2) {
  if (u < 0) return 0.0;
  const auto small = static_cast<size_t>(std::min(n1, n2)), large = static_cast<size_t>(std::max(n1, n2));
  const std::vector<double> pmf = exact_pmf(small, large);
  double c = 0;
  for (int64_t k = 0; k <= u && k < static_cast<int64_t>(pmf.size()); ++k) c += pmf[static_cast<size_t>(k)];
  return std::min(c, 1.0);
}

UTest mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y, UMethod method, bool continuity) {
  UTest t;
  t.method = method;
  if (x.empty() || y.empty()) {
    t.p_value = kNaN;
    return t;
  }
  std::vector<double> pooled = x;
  pooled.insert(pooled.end(), y.begin(), y.end());
  const Ranks r = average_ranks(pooled);
  const double n1 = static_cast<double>(x.size()), n2 = static_cast<double>(y.size()), n = n1 + n2;
  double rank_sum = 0;
  for (size_t i = 0; i < x.size(); ++i) rank_sum += r.rank[i];
  t.u1 = rank_sum - n1 * (n1 + 1) / 2;
  t.ties = r.tie_term > 0;
  const double u = std::max(t.u1, n1 * n2 - t.u1);  // the larger of U1, U2: the two-sided statistic

  if (method == UMethod::exact) {
    // P(U ≥ u) = P(U ≤ n1·n2 − u) by symmetry; two-sided doubles it.
    const std::vector<double> pmf = exact_pmf(std::min(x.size(), y.size()), std::max(x.size(), y.size()));
    const auto lower = static_cast<int64_t>(std::llround(n1 * n2 - u));
    double tail = 0;
    for (int64_t k = 0; k <= lower; ++k) tail += pmf[static_cast<size_t>(k)];
    t.p_value = std::clamp(2 * tail, 0.0, 1.0);
    return t;
  }
  const double mu = n1 * n2 / 2;
  const double sigma = std::sqrt(n1 * n2 / 12 * ((n + 1) - r.tie_term / (n * (n - 1))));
  double numerator = u - mu;  // ≥ 0
  if (continuity && numerator > 0) numerator -= 0.5;
  if (!(sigma > 0)) {
    t.p_value = 1.0;  // every value tied: no evidence of a difference
    return t;
  }
  t.p_value = std::clamp(2 * normal_sf(numerator / sigma), 0.0, 1.0);
  return t;
}

UTest mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<double> pooled = x;
  pooled.insert(pooled.end(), y.begin(), y.end());
  const bool ties = average_ranks(pooled).tie_term > 0;
  const bool exact = !ties && exact_applies(x.size(), y.size());
  return mann_whitney_u(x, y, exact ? UMethod::exact : UMethod::normal, true);
}

double mann_whitney_min_p(size_t n1, size_t n2) {
  if (n1 == 0 || n2 == 0) return 1.0;
  if (exact_applies(n1, n2)) return std::min(1.0, 2.0 * std::exp(-log_binomial(n1 + n2, n1)));
  const double a = static_cast<double>(n1), b = static_cast<double>(n2);
  const double sigma = std::sqrt(a * b / 12 * (a + b + 1));
  return std::min(1.0, 2 * normal_sf((a * b / 2 - 0.5) / sigma));
}

Interval bootstrap_relative_median_change(const std::vector<double>& x, const std::vector<double>& y, double alpha,
                                          int resamples, uint64_t seed) {
  if (x.empty() || y.empty() || resamples <= 0) return {kNaN, kNaN};
  SplitMix64 rng{seed};
  std::vector<double> changes, scratch;
  changes.reserve(static_cast<size_t>(resamples));
  for (int b = 0; b < resamples; ++b) {
    const double mx = resampled_median(x, rng, scratch);
    const double my = resampled_median(y, rng, scratch);
    if (mx != 0) changes.push_back(my / mx - 1);
  }
  if (changes.empty()) return {kNaN, kNaN};
  return {quantile(changes, alpha / 2), quantile(changes, 1 - alpha / 2)};
}

WilcoxonTest wilcoxon_signed_rank(const std::vector<double>& d) {
  WilcoxonTest t;
  std::vector<double> nz;
  for (double x : d)
    if (x != 0 && !std::isnan(x)) nz.push_back(x);
  t.n = nz.size();
  if (nz.empty()) return t;
  // Ranks of |d| with ties averaged, doubled so that they are integers.
  std::vector<size_t> order(nz.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return std::abs(nz[a]) < std::abs(nz[b]); });
  std::vector<int64_t> rank2(nz.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && std::abs(nz[order[j + 1]]) == std::abs(nz[order[i]])) ++j;
    for (size_t k = i; k <= j; ++k) rank2[order[k]] = static_cast<int64_t>(i + j + 2);  // 2 × mean of ranks i+1..j+1
    i = j + 1;
  }
  int64_t total = 0, observed = 0;
  for (size_t i = 0; i < nz.size(); ++i) {
    total += rank2[i];
    if (nz[i] > 0) observed += rank2[i];
  }
  t.w_plus = static_cast<double>(observed) / 2;
  // counts[s]: sign assignments whose positive doubled ranks sum to s.
  std::vector<double> counts(static_cast<size_t>(total) + 1, 0.0);
  counts[0] = 1;
  for (int64_t r : rank2)
    for (int64_t s = total; s >= r; --s) counts[static_cast<size_t>(s)] += counts[static_cast<size_t>(s - r)];
  const double all = std::ldexp(1.0, static_cast<int>(nz.size()));
  double le = 0, ge = 0;
  for (int64_t s = 0; s <= total; ++s) {
    if (s <= observed) le += counts[static_cast<size_t>(s)];
    if (s >= observed) ge += counts[static_cast<size_t>(s)];
  }
  t.p_value = std::min(1.0, 2 * std::min(le, ge) / all);
  return t;
}

MedianInterval median_interval(std::vector<double> v, double alpha) {
  MedianInterval m;
  std::erase_if(v, [](double x) { return std::isnan(x); });
  m.n = v.size();
  if (v.empty()) return m;
  std::sort(v.begin(), v.end());
  m.median = median(v);
  // tail[j] = P(B ≤ j) for B ~ Binomial(n, 1/2), from the exact binomial terms.
  const size_t n = v.size();
  auto tail = [&](size_t j) {
    double p = 0;
    for (size_t i = 0; i <= j; ++i) p += std::exp(log_binomial(n, i) - static_cast<double>(n) * std::log(2.0));
    return p;
  };
  size_t k = 1;
  while (k + 1 <= (n + 1) / 2 && 1 - 2 * tail(k) >= 1 - alpha) ++k;
  m.lo = v[k - 1];
  m.hi = v[n - k];
  m.level = std::max(0.0, 1 - 2 * tail(k - 1));
  return m;
}

double wilcoxon_min_p(size_t n) { return n == 0 ? 1.0 : std::min(1.0, 2.0 / std::ldexp(1.0, static_cast<int>(n))); }

double student_t_quantile(double p, double df) {
  return boost::math::quantile(boost::math::students_t_distribution<double>(df), p);
}

double student_t_cdf(double t, double df) {
  return boost::math::cdf(boost::math::students_t_distribution<double>(df), t);
}

namespace {
// Mean and sample standard deviation (n − 1).
std::pair<double, double> mean_sd(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, v.size() > 1 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) : 0.0};
}
}  // namespace

MeanInterval mean_interval(const std::vector<double>& v, double alpha) {
  MeanInterval m;
  m.n = v.size();
  if (v.empty()) return m;
  std::tie(m.mean, m.sd) = mean_sd(v);
  m.lo = m.hi = m.mean;
  if (m.n < 2) return m;
  const double h = student_t_quantile(1 - alpha / 2, static_cast<double>(m.n - 1)) * m.sd /
                   std::sqrt(static_cast<double>(m.n));
  m.lo = m.mean - h;
  m.hi = m.mean + h;
  return m;
}

Interval prediction_interval(const std::vector<double>& v, double alpha) {
  if (v.empty()) return {std::nan(""), std::nan("")};
  const auto [mean, sd] = mean_sd(v);
  if (v.size() < 2) return {mean, mean};
  const double n = static_cast<double>(v.size());
  const double h = student_t_quantile(1 - alpha / 2, n - 1) * sd * std::sqrt(1 + 1 / n);
  return {mean - h, mean + h};
}

namespace {
struct Welch {
  double diff = 0, se = 0, df = 1;  // mean(y) − mean(x), its standard error, Welch–Satterthwaite df
};
Welch welch(const std::vector<double>& x, const std::vector<double>& y) {
  const auto [mx, sx] = mean_sd(x);
  const auto [my, sy] = mean_sd(y);
  const double vx = sx * sx / static_cast<double>(x.size()), vy = sy * sy / static_cast<double>(y.size());
  Welch w;
  w.diff = my - mx;
  w.se = std::sqrt(vx + vy);
  const double den = vx * vx / static_cast<double>(x.size() - 1) + vy * vy / static_cast<double>(y.size() - 1);
  w.df = den > 0 ? (vx + vy) * (vx + vy) / den : 1;
  return w;
}
}  // namespace

double welch_less_p(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() < 2 || y.size() < 2) return 1;
  const Welch w = welch(x, y);
  if (w.se == 0) return w.diff < 0 ? 0.0 : (w.diff > 0 ? 1.0 : 0.5);
  return student_t_cdf(w.diff / w.se, w.df);
}

Interval welch_difference_interval(const std::vector<double>& x, const std::vector<double>& y, double alpha) {
  if (x.size() < 2 || y.size() < 2) return {std::nan(""), std::nan("")};
  const Welch w = welch(x, y);
  const double h = w.se > 0 ? student_t_quantile(1 - alpha / 2, w.df) * w.se : 0;
  return {w.diff - h, w.diff + h};
}

}  // namespace ctitan::stats
