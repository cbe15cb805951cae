// The one quantile definition: summary.json's tps_p10/median/p90 (trainer)
// and every report and gate statistic (reports) use it, so a figure read
// from a run directory and the same figure recomputed from step rows agree.
#pragma once

#include <vector>

namespace ctitan {

// Linear interpolation between order statistics (numpy's default method);
// q in [0, 1]. NaN for an empty sample: callers decide what "no data" means.
double quantile(std::vector<double> v, double q);

}  // namespace ctitan
