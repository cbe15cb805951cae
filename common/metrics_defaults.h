// Defaults that readers of a run must share with the trainer that wrote it.
// A stored config that leaves a key out ran with the trainer's default, so
// reports must assume the same value without linking the trainer.
#pragma once

#include <cstdint>

namespace ctitan {

// metrics.warmup_steps: leading steps left out of the steady-state
// statistics (summary.json's tps median/p10/p90, a report's step rows).
inline constexpr int64_t kDefaultMetricsWarmupSteps = 5;

}  // namespace ctitan
