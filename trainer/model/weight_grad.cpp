#include "trainer/model/weight_grad.h"
#include "trainer/model/gemm.h"

#include <atomic>

namespace ctitan {
namespace {

// Process-wide, not thread_local: autograd runs a CUDA GEMM's backward on
// its device thread, not on the thread that opened the scope and called
// backward() (only CPU backwards run on the caller's thread).
std::atomic<WeightGradQueue*> current_queue{nullptr};

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

void WeightGradQueue::push(at::Tensor x, at::Tensor dy, at::Tensor w) {
  std::lock_guard<std::mutex> lock(mu_);
  items_.push_back({std::move(x), std::move(dy), std::move(w)});
}

size_t WeightGradQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return items_.size();
}

void WeightGradQueue::run() {
  std::vector<Item> items;
  {
    std::lock_guard<std::mutex> lock(mu_);
    items.swap(items_);
  }
  torch::NoGradGuard no_grad;
  for (Item& item : items) {
    sink_(item.w, linear_grad_weight(item.dy, item.x, item.w));
    item = {};  // free X and dY as we go
  }
}

DeferWeightGrads::DeferWeightGrads(WeightGradQueue* queue) : previous_(current_queue.exchange(queue)) {}
DeferWeightGrads::~DeferWeightGrads() { current_queue.store(previous_); }

WeightGradQueue* deferred_weight_grads() { return current_queue.load(); }

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
