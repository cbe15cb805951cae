#include "trainer/model/feed_forward.h"

#include <optional>
#include <utility>

#include "trainer/kernels/fused_ops.h"

namespace ctitan {

at::Tensor dense_feed_forward(const BlockOps& ops, int64_t layer, const at::Tensor& w13, const at::Tensor& w2,
                              const at::Tensor& x, OpCache* cache) {
  const int64_t F = w2.size(1);
  at::Tensor gate_up = ops.column_gemm(x, w13, layer, "feed_forward.w1|w3", cache);  // [B,S,2F]
  at::Tensor act;
  if (ops.fused_model()) {
    act = fused_swiglu(gate_up);
  } else {
    auto parts = gate_up.split(F, 2);
    act = at::silu(parts[0]) * parts[1];
  }
  return ops.row_gemm(act, w2, layer, "feed_forward.w2");
}

MoeLayer::MoeLayer(const MoeArgs& args, c10::Device device)
    : args_(args),
      bias_(at::zeros({args.num_experts}, at::TensorOptions(at::kFloat).device(device))),
      counts_(at::zeros({args.num_experts}, at::TensorOptions(at::kLong).device(device))) {}

at::Tensor MoeLayer::take_counts() {
  at::Tensor out = counts_.clone();
  counts_.zero_();
  return out;
}

int64_t MoeLayer::take_received() { return std::exchange(received_, 0); }

at::Tensor MoeLayer::forward(const BlockOps& ops, const MoeWeights& w, const at::Tensor& x, bool count) {
  const TensorParallelOptions& tp = ops.tp();
  const ExpertParallelOptions& ep = ops.ep();
  const bool sp = tp.on() && tp.sequence_parallel;
  const int64_t D = x.size(-1);
  MoeWeights mw = w;
  at::Tensor counts, y;
  int64_t received = 0;
  if (ep.on() && ep.etp && tp.on()) {
    // Expert tensor parallelism: every tp rank routes all the tp group's
    // tokens (gathered under SP), dispatches them over ep and computes
    // its slice of each expert's hidden dimension: partial sums, reduced
    // over tp (reduce-scattered under SP). The router's gradient is
    // partial too (its gate weights meet partial outputs); the shared
    // experts run on the rank's own tokens as in the dense layout.
    Communicator& g = *tp.group;
    const at::Tensor all = sp ? ops.seams().gather_from_sp(x, g, 1) : ops.seams().copy_to_tp(x, g);
    MoeWeights routed = mw;
    routed.router = ops.tp_summed(mw.router, true);
    if (mw.router_bias.defined()) routed.router_bias = ops.tp_summed(mw.router_bias, true);
    // w2's bias meets every tp rank's partial sum: each adds its 1/tp share
    // (TorchTitan's ScaleBiasForward); its gradient, the whole on every
    // rank, is summed back to one.
    if (mw.b2.defined()) routed.b2 = ops.tp_summed(mw.b2, true) / static_cast<double>(g.size());
    routed.shared_w1 = routed.shared_w2 = routed.shared_w3 = at::Tensor();
    const ExpertDispatch dispatch{*ep.group, ops.seams()};
    const at::Tensor partial =
        moe_forward(all.reshape({-1, D}), routed, bias_, args_, &counts, &dispatch, &received, ops.fused_model())
            .view(all.sizes());
    y = sp ? ops.seams().scatter_to_sp(partial, g, 1) : ops.seams().reduce_from_tp(partial, g);
    if (mw.shared_w1.defined()) {
      for (at::Tensor* t : {&mw.shared_w1, &mw.shared_w2, &mw.shared_w3}) *t = ops.tp_summed(*t, sp);
      y = y + moe_shared_experts(x.reshape({-1, D}), mw).view(x.sizes());
    }
  } else {
    // Each rank routes the tokens it holds (its sequence part under SP,
    // else all of them, as every rank). Without EP the experts are
    // replicated over tp; with EP (spanning tp) each rank owns its own.
    for (at::Tensor* t : {&mw.router, &mw.router_bias, &mw.shared_w1, &mw.shared_w2, &mw.shared_w3})
      if (t->defined()) *t = ops.tp_summed(*t, sp);
    if (!ep.on())
      for (at::Tensor* t : {&mw.w1, &mw.w2, &mw.w3, &mw.b1, &mw.b2, &mw.b3})
        if (t->defined()) *t = ops.tp_summed(*t, sp);
    std::optional<ExpertDispatch> dispatch;
    if (ep.on()) dispatch.emplace(ExpertDispatch{*ep.group, ops.seams()});
    y = moe_forward(x.reshape({-1, D}), mw, bias_, args_, &counts, dispatch ? &*dispatch : nullptr, &received,
                    ops.fused_model())
            .view(x.sizes());
  }
  if (count && !counts.is_meta()) {
    counts_.add_(counts);
    received_ += received;
  }
  return y;
}

}  // namespace ctitan
