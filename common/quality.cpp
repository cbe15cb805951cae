#include "common/quality.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ctitan {

TargetCrossing first_crossing(const std::vector<EvalPoint>& curve, double target) {
  TargetCrossing c;
  for (size_t i = 0; i < curve.size(); ++i) {
    const EvalPoint& e = curve[i];
    if (!(e.loss <= target)) continue;  // NaN compares false: never reached
    c.reached = true;
    c.evaluation = static_cast<int>(i);
    c.seconds = e.elapsed_s;
    c.tokens = e.train_tokens;
    if (i > 0 && std::isfinite(curve[i - 1].loss) && curve[i - 1].loss > e.loss) {
      const EvalPoint& before = curve[i - 1];
      const double f = (before.loss - target) / (before.loss - e.loss);  // in (0, 1]
      c.tokens = before.train_tokens + f * (e.train_tokens - before.train_tokens);
    }
    return c;
  }
  return c;
}

std::optional<double> olympic_mean(std::vector<double> values) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  if (values.size() >= 3) values = std::vector<double>(values.begin() + 1, values.end() - 1);
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

}  // namespace ctitan
