#include "trainer/model/activation_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include "trainer/errors.h"

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

}  // namespace

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
  if (option == "op")
    throw InputError("activation_checkpoint.selective_ac_option='op' (per-op selective checkpointing) is not "
                     "implemented in this build yet; use a layer frequency such as \"2\", or mode = \"full\"");
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
  }
  return "?";
}

}  // namespace ctitan
