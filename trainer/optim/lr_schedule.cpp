#include "trainer/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <iostream>

namespace ctitan {

LrSchedule::LrSchedule(int64_t training_steps, int64_t warmup_steps, std::optional<double> decay_ratio,
                       std::string decay_type, double min_lr_factor)
    : warmup_(warmup_steps), decay_type_(std::move(decay_type)), min_lr_factor_(min_lr_factor) {
  if (decay_ratio) {
    decay_ = static_cast<int64_t>(std::nearbyint(training_steps * *decay_ratio));
    if (warmup_ > training_steps - decay_) {
      std::cerr << "ctitan: warning: lr_scheduler.warmup_steps (" << warmup_
                << ") + decay steps exceed training.steps; warmup shortened to " << training_steps - decay_
                << "\n";
      warmup_ = training_steps - decay_;
    }
  } else {
    decay_ = training_steps - warmup_;
  }
  stable_ = training_steps - warmup_ - decay_;
  if (stable_ < 0) stable_ = 0;
}

double LrSchedule::factor(int64_t step) const {
  // TorchTitan divides by (warmup + 1) and (decay + 1), so neither the first
  // step nor the last one runs at a learning rate of exactly zero.
  step = std::min(step, warmup_ + stable_ + decay_);
  if (step < warmup_) return static_cast<double>(step + 1) / static_cast<double>(warmup_ + 1);
  if (step < warmup_ + stable_ || decay_ <= 0) return 1.0;
  const double progress = static_cast<double>(step + 1 - warmup_ - stable_) / static_cast<double>(decay_ + 1);
  double adjust;
  if (decay_type_ == "sqrt") {
    adjust = 1.0 - std::sqrt(progress);
  } else if (decay_type_ == "cosine") {
    adjust = 0.5 * (1.0 + std::cos(M_PI * progress));
  } else {
    adjust = 1.0 - progress;
  }
  return min_lr_factor_ + (1.0 - min_lr_factor_) * adjust;
}

}  // namespace ctitan
