// `ctitan plan`: predicted per-rank memory and step time of a recipe on a
// hardware spec (planner/plan.h), calibration of a spec from a results
// database (--calibrate), and the published tables checked against the
// predictions (--validate).
#pragma once

#include <string>
#include <vector>

namespace ctitan {

int plan_command(const std::vector<std::string>& args);

}  // namespace ctitan
