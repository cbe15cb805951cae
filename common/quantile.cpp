#include "common/quantile.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace ctitan {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

double t90(int dof) {
  // Student's t, 0.90 quantile (tables to four places).
  static const double table[] = {3.0777, 1.8856, 1.6377, 1.5332, 1.4759, 1.4398, 1.4149, 1.3968, 1.3830, 1.3722,
                                 1.3634, 1.3562, 1.3502, 1.3450, 1.3406, 1.3368, 1.3334, 1.3304, 1.3277, 1.3253,
                                 1.3232, 1.3212, 1.3195, 1.3178, 1.3163, 1.3150, 1.3137, 1.3125, 1.3114, 1.3104};
  if (dof < 1) dof = 1;
  return dof <= 30 ? table[dof - 1] : 1.2816;
}

LogSpread log_spread(const std::vector<double>& log_ratios) {
  LogSpread s;
  for (double r : log_ratios)
    if (std::isfinite(r)) s.mean += r, ++s.n;
  if (s.n == 0) return s;
  s.mean /= s.n;
  double ss = 0;
  for (double r : log_ratios)
    if (std::isfinite(r)) ss += (r - s.mean) * (r - s.mean);
  s.sd = s.n > 1 ? std::sqrt(ss / (s.n - 1)) : 0;
  return s;
}

std::optional<std::pair<double, double>> interval80(double predicted, const LogSpread& s) {
  if (s.n < LogSpread::kMinForInterval || !(predicted > 0)) return std::nullopt;
  const double half = t90(s.n - 1) * s.sd * std::sqrt(1.0 + 1.0 / s.n);
  return std::make_pair(predicted * std::exp(s.mean - half), predicted * std::exp(s.mean + half));
}

}  // namespace ctitan
