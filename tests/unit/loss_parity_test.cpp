// Loss parity (reports/loss_parity.h) over hand-built points: the golden
// answer is which step was edited.
#include "reports/loss_parity.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ctitan {
namespace {

PointData point(const std::string& label, std::vector<double> losses, const std::string& status = "ok") {
  PointData p;
  p.label = label;
  p.world_size = 1;
  RunData r;
  r.run.status = status;
  for (size_t i = 0; i < losses.size(); ++i) r.loss.emplace_back(static_cast<int64_t>(i + 1), losses[i]);
  p.runs.push_back(r);
  return p;
}

const std::vector<double> kLosses = {4.1588830833596715, 4.02, 3.871, 3.7, 3.55};

TEST(LossParity, BitIdenticalLossesPass) {
  const auto r = compare_losses({point("a", kLosses)}, {point("a", kLosses)}, "base", "cand", false);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.verdict, "identical");
  ASSERT_EQ(r.points.size(), 1u);
  EXPECT_EQ(r.points[0].steps, 5u);
}

TEST(LossParity, OneUlpAtOneStepIsNamedWithBothValues) {
  auto edited = kLosses;
  edited[2] = std::nextafter(edited[2], 10.0);  // step 3, one ulp up
  const auto r = compare_losses({point("a", kLosses)}, {point("a", edited)}, "base", "cand", false);
  EXPECT_EQ(r.exit_code, 1);
  ASSERT_EQ(r.points.size(), 1u);
  const LossParityPoint& p = r.points[0];
  EXPECT_EQ(p.verdict, "differ");
  EXPECT_EQ(p.first_step, 3);
  EXPECT_EQ(p.steps, 2u);
  // Full precision (%.17g): 3.871 and the next double up.
  EXPECT_NE(p.reason.find("step 3: baseline 3.871, candidate 3.8710000000000004"), std::string::npos)
      << p.reason;
  EXPECT_NE(loss_parity_markdown(r).find("| `a ws=1` | differ |"), std::string::npos) << loss_parity_markdown(r);
}

TEST(LossParity, DifferentStepsAndMissingPointsAreNotIdentical) {
  auto shorter = kLosses;
  shorter.pop_back();
  const auto steps = compare_losses({point("a", kLosses)}, {point("a", shorter)}, "b", "c", false);
  EXPECT_EQ(steps.exit_code, 1);
  EXPECT_EQ(steps.points[0].first_step, 5);
  EXPECT_NE(steps.points[0].reason.find("baseline only"), std::string::npos) << steps.points[0].reason;

  const auto missing = compare_losses({point("a", kLosses), point("b", kLosses)}, {point("a", kLosses)}, "b", "c", false);
  EXPECT_EQ(missing.exit_code, 3);
  const auto failed = compare_losses({point("a", kLosses)}, {point("a", kLosses, "failed")}, "b", "c", false);
  EXPECT_EQ(failed.exit_code, 3);
  EXPECT_NE(failed.points[0].reason.find("no ok run in the candidate"), std::string::npos);
  // Two label selections pair by world size.
  EXPECT_EQ(compare_losses({point("x", kLosses)}, {point("y", kLosses)}, "b", "c", true).exit_code, 0);
  // One point on each side: compared as such, whatever their names.
  EXPECT_EQ(compare_losses({point("x", kLosses)}, {point("y", kLosses)}, "b", "c", false).exit_code, 0);
  EXPECT_EQ(compare_losses({point("x", kLosses), point("z", kLosses)}, {point("y", kLosses)}, "b", "c", false).exit_code, 3);
}

}  // namespace
}  // namespace ctitan
