#include "trainer/kernels/flash_sinks.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace ctitan {

std::pair<at::Tensor, at::Tensor> apply_sinks(const at::Tensor& out, const at::Tensor& lse, const at::Tensor& sinks) {
  if (sinks.numel() == 0) return {out, lse};
  const at::Tensor s = sinks.to(lse.scalar_type()).view({1, -1, 1});
  const at::Tensor scaled = out.to(lse.scalar_type()) * at::sigmoid(lse - s).unsqueeze(-1);
  return {scaled.to(out.scalar_type()), at::logaddexp(lse, s.expand_as(lse))};
}

at::Tensor sink_grad(const at::Tensor& dout, const at::Tensor& out, const at::Tensor& lse, const at::Tensor& sinks) {
  const at::Tensor s = sinks.to(lse.scalar_type()).view({1, -1, 1});
  const at::Tensor delta = (dout.to(lse.scalar_type()) * out.to(lse.scalar_type())).sum(-1);  // [B, H, L]
  return -(at::exp(s - lse) * delta).sum({0, 2}).to(sinks.scalar_type());
}

bool flash_sinks_run(const at::Tensor& q) {
  const auto t = q.scalar_type();
  return q.device().is_cpu() && (t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::optional<at::Tensor> optional(const at::Tensor& t) { return t.defined() ? std::optional(t) : std::nullopt; }

// One flash call with its mask (undefined: causal), the sinks applied to
// its output; backward: the flash backward against the rescaled output.
class FlashSinks : public torch::autograd::Function<FlashSinks> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& sinks, const at::Tensor* mask_in, double scale) {
    const at::Tensor mask = *mask_in;  // not an autograd input (it may be undefined)
    auto [o, lse] =
        at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, !mask.defined(), optional(mask), scale);
    auto [out, l] = apply_sinks(o, lse, sinks);
    ctx->save_for_backward({q, k, v, out, l, sinks});
    if (mask.defined()) ctx->saved_data["mask"] = mask;
    ctx->saved_data["scale"] = scale;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const variable_list s = ctx->get_saved_variables();
    const auto m = ctx->saved_data.find("mask");
    const at::Tensor mask = m == ctx->saved_data.end() ? at::Tensor() : m->second.toTensor();
    const at::Tensor dout = g[0].contiguous();
    auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        dout, s[0], s[1], s[2], s[3], s[4], 0.0, !mask.defined(), optional(mask), ctx->saved_data["scale"].toDouble());
    return {gq, gk, gv, s[5].numel() > 0 ? sink_grad(dout, s[3], s[4], s[5]) : at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor flash_sink_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       const at::Tensor& starts, const AttentionExtras& extras,
                                       std::optional<double> scale) {
  const int64_t B = q.size(0), H = q.size(1), G = k.size(1), S = q.size(2);
  TORCH_CHECK(flash_sinks_run(q) && k.size(2) == S && H % G == 0,
              "flash_sink_window_attention: CPU q [B,H,S,Dh], k/v [B,G,S,Dh] with G | H expected, got ", q.sizes(),
              " on ", q.device());
  const auto heads = [&](const at::Tensor& t) {
    return G == H ? t : t.unsqueeze(2).expand({B, G, H / G, S, t.size(3)}).reshape({B, H, S, t.size(3)});
  };
  at::Tensor mask;  // additive: 0 visible, −inf hidden
  if (extras.window > 0 || starts.defined()) {
    const at::Tensor pos = at::arange(S, q.options().dtype(at::kLong));
    const at::Tensor qp = pos.view({1, S, 1}), kp = pos.view({1, 1, S});
    at::Tensor first = extras.window > 0 ? qp - (extras.window - 1) : at::zeros({1, S, 1}, qp.options());
    if (starts.defined()) first = at::maximum(first, starts.to(q.device()).unsqueeze(-1));
    const at::Tensor visible = kp.ge(first) & kp.le(qp);  // [B or 1, S, S]
    const auto opts = q.options();
    mask = at::where(visible, at::zeros({}, opts), at::full({}, -std::numeric_limits<double>::infinity(), opts))
               .unsqueeze(1);
  }
  const at::Tensor sinks = extras.sinks.defined()
                               ? extras.sinks.to(at::promote_types(extras.sinks.scalar_type(), at::kFloat))
                               : at::empty({0}, q.options().dtype(at::kFloat));
  const double sc = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  return FlashSinks::apply(q, heads(k), heads(v), sinks, &mask, sc);
}

}  // namespace ctitan
