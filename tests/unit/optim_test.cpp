// AdamW, gradient clipping and the LR schedule against hand-computed values.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "trainer/optim/adamw.h"
#include "trainer/optim/lr_schedule.h"

namespace ctitan {
namespace {

// Worked by hand from TorchTitan's formula: warmup (s+1)/(w+1), decay
// progress (s+1−w−stable)/(decay+1).
TEST(LrSchedule, LinearWarmupThenLinearDecay) {
  LrSchedule s(10, 2, std::nullopt, "linear", 0.0);
  EXPECT_DOUBLE_EQ(s.factor(0), 1.0 / 3);
  EXPECT_DOUBLE_EQ(s.factor(1), 2.0 / 3);
  EXPECT_DOUBLE_EQ(s.factor(2), 1.0 - 1.0 / 9);
  EXPECT_DOUBLE_EQ(s.factor(9), 1.0 - 8.0 / 9);
}

TEST(LrSchedule, WarmupStableDecayShapes) {
  // 10 steps, warmup 2, decay_ratio 0.5 → decay 5, stable 3.
  LrSchedule lin(10, 2, 0.5, "linear", 0.0);
  EXPECT_EQ(lin.stable_steps(), 3);
  EXPECT_DOUBLE_EQ(lin.factor(4), 1.0);
  EXPECT_NEAR(lin.factor(5), 5.0 / 6, 1e-12);  // progress (6−5)/6
  LrSchedule cosine(10, 2, 0.5, "cosine", 0.0);
  EXPECT_NEAR(cosine.factor(5), 0.9330127018922193, 1e-12);
  LrSchedule sqrt_decay(10, 2, 0.5, "sqrt", 0.0);
  EXPECT_NEAR(sqrt_decay.factor(5), 0.591751709536137, 1e-12);
  LrSchedule floor(10, 2, 0.5, "linear", 0.1);
  EXPECT_NEAR(floor.factor(5), 0.85, 1e-12);
  EXPECT_NEAR(floor.factor(9), 0.25, 1e-12);
}

TEST(LrSchedule, WarmupLongerThanRoomIsShortened) {
  LrSchedule s(10, 8, 0.5, "linear", 0.0);
  EXPECT_EQ(s.warmup_steps(), 5);
  EXPECT_EQ(s.stable_steps(), 0);
}

// One AdamW step on three numbers, worked by hand:
// m = (1−β1)g, v = (1−β2)g², m̂ = g, v̂ = g², p ← p(1−lr·wd) − lr·g/(|g|+eps).
TEST(AdamW, FirstStepMatchesHandComputation) {
  for (const std::string impl : {"fused", "for_loop"}) {
    auto p = torch::tensor({1.0f, -2.0f, 0.5f});
    auto g = torch::tensor({0.1f, -0.3f, 0.0f});
    AdamW opt(p, g, {0.01, 0.9, 0.95, 1e-8, 0.1, impl});
    opt.step(0.01);
    const double expected[] = {1.0 * (1 - 0.001) - 0.01 * 0.1 / (0.1 + 1e-8),
                               -2.0 * (1 - 0.001) + 0.01 * 0.3 / (0.3 + 1e-8), 0.5 * (1 - 0.001)};
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(p[i].item<double>(), expected[i], 1e-6) << impl << " " << i;
    EXPECT_EQ(opt.steps_taken(), 1);
  }
}

TEST(AdamW, FusedAndForLoopAgreeOverManySteps) {
  torch::manual_seed(0);
  auto p1 = torch::randn({1000}), p2 = p1.clone();
  auto g1 = torch::zeros({1000}), g2 = torch::zeros({1000});
  AdamW fused(p1, g1, {8e-4, 0.9, 0.95, 1e-8, 0.1, "fused"});
  AdamW loop(p2, g2, {8e-4, 0.9, 0.95, 1e-8, 0.1, "for_loop"});
  for (int s = 0; s < 20; ++s) {
    auto g = torch::randn({1000});
    g1.copy_(g);
    g2.copy_(g);
    fused.step(8e-4);
    loop.step(8e-4);
  }
  EXPECT_TRUE(torch::allclose(p1, p2, 1e-5, 1e-6)) << (p1 - p2).abs().max().item<double>();
}

TEST(ClipGradNorm, ScalesToMaxNormAndReportsTheOriginal) {
  auto g = torch::tensor({3.0f, 4.0f});
  EXPECT_NEAR(clip_grad_norm_(g, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(g[0].item<double>(), 0.6, 1e-5);
  EXPECT_NEAR(g[1].item<double>(), 0.8, 1e-5);
  auto small = torch::tensor({0.3f, 0.4f});
  EXPECT_NEAR(clip_grad_norm_(small, 1.0), 0.5, 1e-6);
  EXPECT_FLOAT_EQ(small[0].item<float>(), 0.3f);
}

}  // namespace
}  // namespace ctitan
