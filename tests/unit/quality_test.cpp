// The quality arithmetic (common/quality.h) on curves whose answers are
// known by hand: a linear loss curve crosses its target where algebra says,
// the clock stops at the evaluation that met it, the olympic mean drops one
// value at each end.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/quality.h"

namespace ctitan {
namespace {

// loss = 5 - 0.001 · tokens, evaluated every 256 tokens from 256 on; each
// evaluation ends 0.5 s per 256 tokens plus 0.1 s per evaluation so far.
std::vector<EvalPoint> linear_curve(int evaluations) {
  std::vector<EvalPoint> c;
  for (int i = 1; i <= evaluations; ++i) {
    const double tokens = 256.0 * i;
    c.push_back({tokens, 0.5 * i + 0.1 * i, 5 - 0.001 * tokens});
  }
  return c;
}

TEST(Quality, ALinearCurveCrossesItsTargetWhereAlgebraSays) {
  const auto curve = linear_curve(20);
  // 5 - 0.001 t = 4.2  =>  t = 800, between the evaluations at 768 and 1024.
  const TargetCrossing c = first_crossing(curve, 4.2);
  ASSERT_TRUE(c.reached);
  EXPECT_NEAR(c.tokens, 800.0, 1e-9);
  EXPECT_EQ(c.evaluation, 3);                  // the one at 1024 tokens
  EXPECT_DOUBLE_EQ(c.seconds, 0.6 * 4);        // its end, not an interpolated time
  // A target met exactly at an evaluation: its tokens.
  EXPECT_NEAR(first_crossing(curve, 5 - 0.001 * 2048).tokens, 2048.0, 1e-9);
}

TEST(Quality, TheFirstEvaluationAlreadyBelowAndATargetNeverReached) {
  const auto curve = linear_curve(4);  // losses 4.744 .. 3.976
  const TargetCrossing first = first_crossing(curve, 4.9);
  ASSERT_TRUE(first.reached);
  EXPECT_EQ(first.evaluation, 0);
  EXPECT_DOUBLE_EQ(first.tokens, 256.0) << "nothing before the first evaluation to interpolate from";
  const TargetCrossing never = first_crossing(curve, 3.0);
  EXPECT_FALSE(never.reached);
  EXPECT_EQ(never.evaluation, -1);
  EXPECT_FALSE(first_crossing({}, 1.0).reached);
}

TEST(Quality, ANonFiniteLossNeverReachesTheTarget) {
  auto curve = linear_curve(6);
  curve[3].loss = std::nan("");  // a diverged pass
  // 5 - 0.001 t = 4.0 => t = 1000 would be inside the NaN pass's interval;
  // the next finite one (1280 tokens, 3.72) is the first at or below 4.0, and
  // nothing finite before it is interpolated across the NaN.
  const TargetCrossing c = first_crossing(curve, 4.0);
  ASSERT_TRUE(c.reached);
  EXPECT_EQ(c.evaluation, 4);
  EXPECT_DOUBLE_EQ(c.tokens, 1280.0);
}

TEST(Quality, TheOlympicMeanDropsTheFastestAndTheSlowest) {
  EXPECT_DOUBLE_EQ(*olympic_mean({4, 100, 1, 3, 2}), 3.0);
  EXPECT_DOUBLE_EQ(*olympic_mean({5, 7}), 6.0) << "under three values: the plain mean";
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_DOUBLE_EQ(*olympic_mean({1, inf, 3, 4}), 3.5) << "one run that missed the target is the slowest dropped";
  EXPECT_TRUE(std::isinf(*olympic_mean({1, inf, 3, inf}))) << "two are not";
  EXPECT_FALSE(olympic_mean({}).has_value());
}

}  // namespace
}  // namespace ctitan
