// Loss parity between two builds (or recipes): are the losses bit-identical
// step by step? What a refactor's pull request has to show for a
// deterministic recipe — TorchTitan's `loss_compare.py --assert-equal`.
//
// Per point (matched by label and world size, or by world size alone for two
// label selections) the first ok run of each side is compared: the same
// logged steps, and every loss equal to the last bit. The first step whose
// loss differs (or that only one side logged) is named with both values at
// full precision.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "reports/points.h"

namespace ctitan {

struct LossParityPoint {
  std::string name;     // "LABEL ws=N"
  std::string verdict;  // "identical", "differ", "missing"
  size_t steps = 0;     // steps compared (identical: all of them)
  int64_t first_step = -1;  // differ: the first step that differs
  double base = std::numeric_limits<double>::quiet_NaN(), cand = std::numeric_limits<double>::quiet_NaN();
  std::string reason;  // one line
};

struct LossParityResult {
  std::string baseline, candidate;
  std::vector<LossParityPoint> points;
  std::string verdict;  // "identical", "differ", "needs action"
  int exit_code = 0;    // 0 identical, 1 differ, 3 a point missing or without an ok run
};

LossParityResult compare_losses(const std::vector<PointData>& base, const std::vector<PointData>& cand,
                                const std::string& base_desc, const std::string& cand_desc,
                                bool match_by_world_size);
std::string loss_parity_markdown(const LossParityResult& r);

}  // namespace ctitan
