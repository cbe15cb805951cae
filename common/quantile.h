// The one quantile definition: summary.json's tps_p10/median/p90 (trainer)
// and every report and gate statistic (reports) use it, so a figure read
// from a run directory and the same figure recomputed from step rows agree.
#pragma once

#include <optional>
#include <utility>
#include <vector>

namespace ctitan {

// Linear interpolation between order statistics (numpy's default method);
// q in [0, 1]. NaN for an empty sample: callers decide what "no data" means.
double quantile(std::vector<double> v, double q);

// Student's t quantile for a one-sided 90 % (a two-sided 80 % interval)
// with `dof` degrees of freedom (dof >= 1; the normal's 1.2816 beyond 30).
double t90(int dof);

// The spread of a prediction's log errors, log(measured / predicted), over
// runs the prediction did not see: the planner's calibration hold-out
// (stored in a spec's [calibration]) and a sweep's out-of-sample points.
struct LogSpread {
  int n = 0;         // how many errors; an interval needs kMinForInterval
  double mean = 0;   // their mean (a bias: > 0 when the runs were faster)
  double sd = 0;     // their sample standard deviation
  static constexpr int kMinForInterval = 3;
  bool operator==(const LogSpread&) const = default;
};
LogSpread log_spread(const std::vector<double>& log_ratios);

// An 80 % prediction interval for a new measurement of `predicted`:
// predicted * exp(mean -/+ t90(n - 1) * sd * sqrt(1 + 1/n)); nothing under
// kMinForInterval errors or for a non-positive prediction.
std::optional<std::pair<double, double>> interval80(double predicted, const LogSpread& s);

}  // namespace ctitan
