#include "trainer/kernels/flash_sinks.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "trainer/kernels/attention_mask.h"
#include "trainer/kernels/documents.h"

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

// CUDA: FlashAttention-2 through ATen (q, k, v as [B,S,n,Dh], GQA native),
// the window as its window_size_left (keys i − w + 1 … i), the sinks applied
// to its output and log-sum-exp [B,H,S]; backward: the flash backward
// against the rescaled pair, with the same window.
class CudaFlashSinks : public torch::autograd::Function<CudaFlashSinks> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& sinks, int64_t window, double scale) {
    const int64_t S = q.size(2), Sk = k.size(2);
    const at::Tensor qb = q.transpose(1, 2).contiguous(), kb = k.transpose(1, 2).contiguous(),
                     vb = v.transpose(1, 2).contiguous();  // [B,S,n,Dh]
    const std::optional<int64_t> left{window > 0 ? window - 1 : -1}, right{window > 0 ? 0 : -1};  // −1: none
    auto [o, lse, rng, unused, debug] =
        at::_flash_attention_forward(qb, kb, vb, std::nullopt, std::nullopt, S, Sk, /*dropout_p=*/0.0,
                                     /*is_causal=*/true, /*return_debug_mask=*/false, scale, left, right);
    auto [out, l] = apply_sinks(o.transpose(1, 2), lse, sinks);  // [B,H,S,Dh], [B,H,S]
    const at::Tensor outb = out.transpose(1, 2).contiguous();
    ctx->save_for_backward({qb, kb, vb, outb, l.contiguous(), rng, unused, sinks});
    ctx->saved_data["window"] = window;
    ctx->saved_data["scale"] = scale;
    return outb.transpose(1, 2);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const variable_list s = ctx->get_saved_variables();
    const int64_t window = ctx->saved_data["window"].toInt();
    const std::optional<int64_t> left{window > 0 ? window - 1 : -1}, right{window > 0 ? 0 : -1};  // −1: none
    const at::Tensor dob = g[0].transpose(1, 2).contiguous().to(s[0].scalar_type());  // [B,S,H,Dh]
    auto [dq, dk, dv] = at::_flash_attention_backward(dob, s[0], s[1], s[2], s[3], s[4], at::Tensor(), at::Tensor(),
                                                      s[0].size(1), s[1].size(1), /*dropout_p=*/0.0,
                                                      /*is_causal=*/true, s[5], s[6],
                                                      ctx->saved_data["scale"].toDouble(), left, right);
    const at::Tensor dsinks =
        s[7].numel() > 0 ? sink_grad(dob.transpose(1, 2), s[3].transpose(1, 2), s[4], s[7]) : at::Tensor();
    return {dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2), dsinks, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool cuda_flash_sinks_run(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& starts) {
  return !starts.defined() && varlen_refuses(q, k, v).empty();
}

at::Tensor cuda_flash_sink_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const AttentionExtras& extras, std::optional<double> scale) {
  TORCH_CHECK(cuda_flash_sinks_run(q, k, v, {}) && q.dim() == 4 && k.size(1) > 0 && q.size(1) % k.size(1) == 0 &&
                  k.size(2) == q.size(2),
              "cuda_flash_sink_window_attention: CUDA bf16/fp16 q [B,H,S,Dh], k/v [B,G,S,Dh] with G | H expected, got ",
              q.sizes(), " ", q.scalar_type(), " on ", q.device(), " (", varlen_refuses(q, k, v), ")");
  const at::Tensor sinks = extras.sinks.defined() ? extras.sinks.to(at::kFloat)
                                                  : at::empty({0}, q.options().dtype(at::kFloat));
  const double sc = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  return CudaFlashSinks::apply(q, k, v, sinks, extras.window, sc);
}

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
    const at::Tensor first = first_visible_key(pos, starts.defined() ? starts.to(q.device()) : starts, extras.window);
    mask = additive_attention_mask(first, pos, pos, q.scalar_type());  // [B or 1, 1, S, S]
  }
  const at::Tensor sinks = extras.sinks.defined()
                               ? extras.sinks.to(at::promote_types(extras.sinks.scalar_type(), at::kFloat))
                               : at::empty({0}, q.options().dtype(at::kFloat));
  const double sc = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  return FlashSinks::apply(q, heads(k), heads(v), sinks, &mask, sc);
}

}  // namespace ctitan
