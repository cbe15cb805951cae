#include "trainer/optim/adamw.h"

#include <cmath>

#include "trainer/kernels/fused_cuda.h"

namespace ctitan {

AdamW::AdamW(at::Tensor flat_params, at::Tensor flat_grads, AdamWOptions opts)
    : params_(std::move(flat_params)), grads_(std::move(flat_grads)), opts_(std::move(opts)) {
  exp_avg_ = torch::zeros_like(params_);
  exp_avg_sq_ = torch::zeros_like(params_);
  step_ = torch::zeros({}, params_.options().dtype(torch::kFloat));
}

int64_t AdamW::steps_taken() const { return static_cast<int64_t>(step_.item<float>()); }

bool AdamW::write_compute_copy(at::Tensor compute) {
  if (opts_.implementation != "fused" || !cuda_kernels_take(params_) || !compute.defined() ||
      !cuda_kernels_take(compute) || compute.numel() != params_.numel() || !compute.is_contiguous())
    return false;
  compute_ = std::move(compute);
  return true;
}

void AdamW::step(double lr, double grad_scale) {
  torch::NoGradGuard no_grad;
  step_.add_(1);  // the fused kernel reads the step count; torch.optim increments it first too
  if (compute_.defined()) {
    cuda_adamw_(params_, grads_, exp_avg_, exp_avg_sq_, step_, lr, opts_.beta1, opts_.beta2, opts_.weight_decay,
                opts_.eps, grad_scale, compute_);
    return;
  }
  if (grad_scale != 1.0) grads_.mul_(grad_scale);
  if (opts_.implementation == "fused") {
    at::_fused_adamw_({params_}, {grads_}, {exp_avg_}, {exp_avg_sq_}, /*max_exp_avg_sqs=*/{}, {step_}, lr,
                      opts_.beta1, opts_.beta2, opts_.weight_decay, opts_.eps, /*amsgrad=*/false,
                      /*maximize=*/false);
    return;
  }
  const double t = step_.item<double>();
  const double bias1 = 1.0 - std::pow(opts_.beta1, t);
  const double bias2 = 1.0 - std::pow(opts_.beta2, t);
  params_.mul_(1.0 - lr * opts_.weight_decay);
  exp_avg_.lerp_(grads_, 1.0 - opts_.beta1);
  exp_avg_sq_.mul_(opts_.beta2).addcmul_(grads_, grads_, 1.0 - opts_.beta2);
  at::Tensor denom = (exp_avg_sq_.sqrt() / std::sqrt(bias2)).add_(opts_.eps);
  params_.addcdiv_(exp_avg_, denom, -lr / bias1);
}

void clip_to_norm_(at::Tensor& grads, double norm, double max_norm, double* deferred_coef) {
  const double coef = std::min(1.0, max_norm / (norm + 1e-6));
  if (deferred_coef != nullptr) {
    *deferred_coef = coef;
  } else if (coef < 1.0) {
    torch::NoGradGuard no_grad;
    grads.mul_(coef);
  }
}

double clip_grad_norm_(at::Tensor& flat_grads, double max_norm, double* deferred_coef) {
  torch::NoGradGuard no_grad;
  const double norm = at::linalg_vector_norm(flat_grads, 2).item<double>();
  clip_to_norm_(flat_grads, norm, max_norm, deferred_coef);
  return norm;
}

}  // namespace ctitan
