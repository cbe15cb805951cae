// AdamW over a model's flat fp32 parameter buffer (TorchTitan defaults:
// betas 0.9/0.95, eps 1e-8, weight decay 0.1 on every parameter).
//
// "fused" (default) runs ATen's single-pass fused AdamW kernel once over the
// whole flat buffer; "foreach"/"for_loop" run the textbook multi-op update
// (the same math, more passes over memory). Gradient clipping by global norm
// lives here too because it acts on the same flat gradient.
#pragma once

#include <torch/torch.h>

#include <string>

namespace ctitan {

struct AdamWOptions {
  double lr = 8e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  std::string implementation = "fused";
};

class AdamW {
 public:
  AdamW(at::Tensor flat_params, at::Tensor flat_grads, AdamWOptions opts);
  void step(double lr);               // one update with this step's learning rate
  int64_t steps_taken() const;
  // State for checkpoints: exp_avg, exp_avg_sq (fp32 [N]) and the step count.
  at::Tensor& exp_avg() { return exp_avg_; }
  at::Tensor& exp_avg_sq() { return exp_avg_sq_; }
  at::Tensor& step_tensor() { return step_; }

 private:
  at::Tensor params_, grads_, exp_avg_, exp_avg_sq_, step_;
  AdamWOptions opts_;
};

// Scales `flat_grads` in place so its L2 norm is at most max_norm, as
// torch.nn.utils.clip_grad_norm_ does; returns the norm before clipping.
double clip_grad_norm_(at::Tensor& flat_grads, double max_norm);

}  // namespace ctitan
