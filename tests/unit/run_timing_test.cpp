// The straggler figures and the goodput ledger (common/run_timing.h) on
// hand-made rank times: what busy time is, which rank is named, when a run
// is marked (and when chance alone could explain it), and what the
// projection to N tokens adds up.
#include "common/run_timing.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ctitan;

namespace {

// `steps` steps of `ranks` ranks: every rank busy 100 ms and waiting the
// rest of a 100 + extra ms step, except `slow`, busy 100 + extra ms.
std::vector<std::vector<RankStepTime>> one_slow_rank(int steps, int ranks, int slow, double extra_s) {
  std::vector<std::vector<RankStepTime>> out(steps);
  for (auto& step : out)
    for (int r = 0; r < ranks; ++r) step.push_back({0.1 + extra_s, 0.0, r == slow ? 0.0 : extra_s});
  return out;
}

}  // namespace

TEST(RunTimingFigures, BusyTimeIsTheStepLessItsWaits) {
  const StepSpread s = step_spread({{0.15, 0.0, 0.05}, {0.15, 0.0, 0.0}, {0.15, 0.01, 0.04}});
  EXPECT_EQ(s.slowest_rank, 1);
  EXPECT_DOUBLE_EQ(s.max_s, 0.15);
  EXPECT_DOUBLE_EQ(s.min_s, 0.10);
  EXPECT_DOUBLE_EQ(s.median_s, 0.11);
  EXPECT_DOUBLE_EQ(s.straggler_share, (0.15 - 0.11) / 0.15);
}

TEST(RunTimingFigures, ALongRunWithOneSlowRankIsMarkedAShortOneIsNot) {
  EXPECT_DOUBLE_EQ(binomial_tail(5, 5, 0.5), 1.0 / 32);
  EXPECT_DOUBLE_EQ(binomial_tail(2, 3, 0.5), 0.5);
  EXPECT_DOUBLE_EQ(binomial_tail(0, 3, 0.5), 1.0);
  // Rank 1 of 2, 30 ms more work in every step: 12 steps are beyond chance.
  const StragglerFigures longer = straggler_figures(one_slow_rank(12, 2, 1, 0.03));
  EXPECT_EQ(longer.rank, 1);
  EXPECT_DOUBLE_EQ(longer.persistence, 1.0);
  EXPECT_DOUBLE_EQ(longer.chance_p, 2.0 / 4096);
  EXPECT_NEAR(longer.spread_s, 0.03, 1e-12);
  EXPECT_NEAR(longer.share, 0.015 / 0.13, 1e-12);  // max − median of two, over the step
  EXPECT_TRUE(longer.marked);
  // The same in 5 steps: two ranks go 5 of 5 one way one time in 16.
  const StragglerFigures shorter = straggler_figures(one_slow_rank(5, 2, 1, 0.03));
  EXPECT_DOUBLE_EQ(shorter.chance_p, 2.0 / 32);
  EXPECT_FALSE(shorter.marked);
  // Persistent but small: 5 ms of a 105 ms step is not a tenth of it.
  EXPECT_FALSE(straggler_figures(one_slow_rank(12, 4, 3, 0.005)).marked);
}

TEST(RunTimingFigures, TimeToTokensIsTheFixedPartsAndTheRestPerSteadyToken) {
  Goodput g;
  g.wall_s = 20;
  g.init_s = 4, g.checkpoint_load_s = 1, g.warmup_steps_s = 2, g.teardown_s = 1;  // fixed: 8 s
  g.steady_steps_s = 9, g.data_s = 1, g.validation_s = 1, g.logging_s = 1;         // 12 s for 3000 tokens
  g.steady_tokens = 3000;
  EXPECT_DOUBLE_EQ(g.parts_s(), 20);
  EXPECT_DOUBLE_EQ(g.unaccounted_s(), 0);
  EXPECT_DOUBLE_EQ(g.time_to_tokens_s(3000), 20);
  EXPECT_DOUBLE_EQ(g.time_to_tokens_s(1e6), 8 + 1e6 * 12 / 3000);
  EXPECT_TRUE(g.set_part("validation_s", 2));
  EXPECT_FALSE(g.set_part("lunch_s", 1));
  EXPECT_DOUBLE_EQ(g.to_json()["validation_s"].get<double>(), 2);
  EXPECT_DOUBLE_EQ(g.to_json()["goodput"].get<double>(), 9.0 / 20);
}
