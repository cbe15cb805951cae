#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/gemm.h"

#include "trainer/model/weight_grad.h"

#include <ATen/CPUGeneratorImpl.h>

#include "common/errors.h"

namespace ctitan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FnHolder : torch::CustomClassHolder {
  explicit FnHolder(CheckpointedFn f) : fn(std::move(f)) {}
  CheckpointedFn fn;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // `inputs` must be a TensorList (not a std::vector) for autograd to see
  // its elements as inputs of this node.
  static at::Tensor forward(AutogradContext* ctx, c10::intrusive_ptr<FnHolder> holder, at::TensorList inputs) {
    ctx->saved_data["rng"] = at::detail::getDefaultCPUGenerator().get_state();
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    const std::vector<at::Tensor> in = inputs.vec();
    ctx->save_for_backward(in);
    torch::NoGradGuard no_grad;
    return holder->fn(in);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto holder = ctx->saved_data["fn"].toCapsule();
    const CheckpointedFn& fn = static_cast<FnHolder*>(holder.get())->fn;
    const variable_list saved = ctx->get_saved_variables();
    variable_list detached, wants_grad;
    for (const auto& t : saved) {
      at::Tensor d = t.detach();
      d.requires_grad_(t.requires_grad());
      if (d.requires_grad()) wants_grad.push_back(d);
      detached.push_back(d);
    }
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    const at::Tensor rng_now = gen.get_state();
    gen.set_state(ctx->saved_data["rng"].toTensor());
    at::Tensor out;
    {
      torch::AutoGradMode enable(true);
      out = fn(detached);
    }
    gen.set_state(rng_now);
    const variable_list grads =
        torch::autograd::grad({out}, wants_grad, {grad_outputs[0]}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
    variable_list result{at::Tensor()};  // for the FnHolder argument
    size_t next = 0;
    for (const auto& d : detached) result.push_back(d.requires_grad() ? grads[next++] : at::Tensor());
    return result;
  }
};

// y = x·wᵀ whose forward returns the kept output; backward is at::linear's
// (the same mm calls in the same layouts, so gradients are bit-identical).
class CachedLinear : public torch::autograd::Function<CachedLinear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& y) {
    ctx->save_for_backward({x, w});
    return y.view_as(y);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    at::Tensor gx = linear_grad_input(g[0], w, x);
    // A zero-bubble pipeline's I pass leaves dW for its W pass (weight_grad.h).
    WeightGradQueue* deferred = deferred_weight_grads();
    if (deferred) deferred->push(x, g[0], w);
    return {gx, deferred ? at::Tensor() : linear_grad_weight(g[0], x, w), at::Tensor()};
  }
};

class CachedAttention : public torch::autograd::Function<CachedAttention> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& out, const at::Tensor& lse) {
    ctx->save_for_backward({q, k, v, out, lse});
    return out.view_as(out);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto s = ctx->get_saved_variables();
    auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        g[0], s[0], s[1], s[2], s[3], s[4], /*dropout_p=*/0.0, /*is_causal=*/true);
    return {gq, gk, gv, at::Tensor(), at::Tensor()};
  }
};

bool replaying() { return torch::GradMode::is_enabled(); }

}  // namespace

at::Tensor cached_linear(OpCache* cache, bool save, const at::Tensor& x, const at::Tensor& w) {
  if (cache == nullptr || !save) return gemm_linear(x, w);
  if (!replaying()) {
    cache->saved.push_back(gemm_linear(x, w));
    return cache->saved.back();
  }
  return CachedLinear::apply(x, w, cache->saved.at(cache->next++));
}

at::Tensor cached_causal_attention(OpCache* cache, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (cache == nullptr)
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  if (!replaying()) {
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, /*is_causal=*/true);
    cache->saved.push_back(out);
    cache->saved.push_back(lse);
    return out;
  }
  const at::Tensor out = cache->saved.at(cache->next++);
  const at::Tensor lse = cache->saved.at(cache->next++);
  return CachedAttention::apply(q, k, v, out, lse);
}

at::Tensor checkpoint(CheckpointedFn fn, const std::vector<at::Tensor>& inputs) {
  return CheckpointFunction::apply(c10::make_intrusive<FnHolder>(std::move(fn)), at::TensorList(inputs));
}

ActivationCheckpointPolicy ActivationCheckpointPolicy::parse(const std::string& mode, const std::string& option) {
  ActivationCheckpointPolicy p;
  if (mode == "none") return p;
  if (mode == "full") {
    p.mode = Mode::kFull;
    return p;
  }
  if (mode != "selective")
    throw InputError("activation_checkpoint.mode='" + mode + "' is unknown; use none, full or selective");
  if (option == "op") {
    p.mode = Mode::kSelectiveOp;
    return p;
  }
  int64_t every = 0;
  try {
    size_t used = 0;
    every = std::stoll(option, &used);
    if (used != option.size()) every = 0;
  } catch (const std::exception&) {
    every = 0;
  }
  if (every <= 0)
    throw InputError("activation_checkpoint.selective_ac_option='" + option +
                     "' must be \"op\" or a positive integer N (checkpoint every Nth TransformerBlock)");
  p.mode = Mode::kSelectiveLayer;
  p.every = every;
  return p;
}

bool ActivationCheckpointPolicy::checkpoints_layer(int64_t layer) const {
  switch (mode) {
    case Mode::kNone:
      return false;
    case Mode::kFull:
    case Mode::kSelectiveOp:
      return true;
    case Mode::kSelectiveLayer:
      return (layer + 1) % every == 0;
  }
  return false;
}

std::string ActivationCheckpointPolicy::describe() const {
  switch (mode) {
    case Mode::kNone:
      return "none";
    case Mode::kFull:
      return "full";
    case Mode::kSelectiveLayer:
      return "selective every " + std::to_string(every);
    case Mode::kSelectiveOp:
      return "selective op";
  }
  return "?";
}

}  // namespace ctitan
