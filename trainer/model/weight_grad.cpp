#include "trainer/model/weight_grad.h"
#include "trainer/model/gemm.h"

namespace ctitan {
namespace {

thread_local WeightGradQueue* current_queue = nullptr;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class DeferrableLinear : public torch::autograd::Function<DeferrableLinear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->save_for_backward({x, w});
    return gemm_linear(x, w);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    at::Tensor gx = ctx->needs_input_grad(0) ? linear_grad_input(g[0], w, x) : at::Tensor();
    at::Tensor gw;
    if (ctx->needs_input_grad(1)) {
      if (WeightGradQueue* q = deferred_weight_grads()) {
        q->push(x, g[0], w);
      } else {
        gw = linear_grad_weight(g[0], x, w);
      }
    }
    return {gx, gw};
  }
};

}  // namespace

void WeightGradQueue::run() {
  torch::NoGradGuard no_grad;
  for (Item& item : items_) {
    sink_(item.w, linear_grad_weight(item.dy, item.x, item.w));
    item = {};  // free X and dY as we go
  }
  items_.clear();
}

DeferWeightGrads::DeferWeightGrads(WeightGradQueue* queue) : previous_(current_queue) { current_queue = queue; }
DeferWeightGrads::~DeferWeightGrads() { current_queue = previous_; }

WeightGradQueue* deferred_weight_grads() { return current_queue; }

at::Tensor deferrable_linear(const at::Tensor& x, const at::Tensor& w) {
  if (!at::GradMode::is_enabled() || !w.requires_grad()) return gemm_linear(x, w);
  return DeferrableLinear::apply(x, w);
}

at::Tensor linear_grad_input(const at::Tensor& dy, const at::Tensor& w, const at::Tensor& x) {
  return gemm_mm(dy.reshape({-1, w.size(0)}), w).view(x.sizes());
}

at::Tensor linear_grad_weight(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w) {
  return gemm_mm(x.reshape({-1, w.size(1)}).t(), dy.reshape({-1, w.size(0)})).t();
}

}  // namespace ctitan
