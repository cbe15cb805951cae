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
  // One update with this step's learning rate, the gradient multiplied by
  // grad_scale first (gradient clipping's coefficient, applied in the
  // update's own pass where the optimizer runs ctitan's CUDA kernel).
  void step(double lr, double grad_scale = 1.0);
  int64_t steps_taken() const;
  // compile.enable on CUDA with the "fused" implementation: each step runs
  // ctitan's AdamW kernel (fused_cuda.h), which also rounds the updated
  // parameters into `compute` (the model's bf16 compute copy of the flat
  // master) — one pass instead of ATen's update, a clipping pass and a cast
  // pass. False (nothing changed) where the kernel cannot: not "fused",
  // not on CUDA, no kernels in this build.
  bool write_compute_copy(at::Tensor compute);
  bool writes_compute_copy() const { return compute_.defined(); }
  // State for checkpoints: exp_avg, exp_avg_sq (fp32 [N]) and the step count.
  at::Tensor& exp_avg() { return exp_avg_; }
  at::Tensor& exp_avg_sq() { return exp_avg_sq_; }
  at::Tensor& step_tensor() { return step_; }

 private:
  at::Tensor params_, grads_, exp_avg_, exp_avg_sq_, step_;
  at::Tensor compute_;  // written by each step (write_compute_copy)
  AdamWOptions opts_;
};

// Scales `flat_grads` in place so its L2 norm is at most max_norm, as
// torch.nn.utils.clip_grad_norm_ does; returns the norm before clipping.
// With `deferred_coef`, the gradient is left as it is and the coefficient
// (1 when nothing is clipped) written there, for AdamW::step's grad_scale.
double clip_grad_norm_(at::Tensor& flat_grads, double max_norm, double* deferred_coef = nullptr);
// The clipping step on its own, for a norm computed elsewhere (sharded
// gradients): torch.nn.utils.clip_grad_norm_'s coefficient, at most 1,
// applied to `grads` or written to `deferred_coef`.
void clip_to_norm_(at::Tensor& grads, double norm, double max_norm, double* deferred_coef);

}  // namespace ctitan
