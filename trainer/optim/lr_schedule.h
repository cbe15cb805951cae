// TorchTitan's learning-rate schedule: linear warmup, a stable phase, then a
// decay (linear | sqrt | cosine) towards min_lr_factor · lr. Warmup factor
// (s+1)/(warmup+1); decay progress (s+1−warmup−stable)/(decay+1).
//
// `step` is 0-based, as TorchTitan's LambdaLR sees it: training step s
// (1-based, as printed) uses factor(s − 1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ctitan {

class LrSchedule {
 public:
  // decay_ratio unset: decay starts right after warmup (no stable phase).
  LrSchedule(int64_t training_steps, int64_t warmup_steps, std::optional<double> decay_ratio,
             std::string decay_type, double min_lr_factor);
  double factor(int64_t step) const;  // multiplier on optimizer.lr
  int64_t warmup_steps() const { return warmup_; }
  int64_t stable_steps() const { return stable_; }
  int64_t decay_steps() const { return decay_; }

 private:
  int64_t warmup_ = 0, stable_ = 0, decay_ = 0;
  std::string decay_type_;
  double min_lr_factor_ = 0.0;
};

}  // namespace ctitan
