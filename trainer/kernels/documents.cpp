#include "trainer/kernels/documents.h"

#include <cmath>
#include <random>

#include "trainer/kernels/attention_mask.h"

namespace ctitan {

at::Tensor document_starts(const at::Tensor& tokens, int64_t eos_id) {
  TORCH_CHECK(tokens.dim() == 2, "document_starts: tokens [B,S] expected, got ", tokens.sizes());
  const int64_t S = tokens.size(1);
  const auto opts = tokens.options().dtype(at::kLong);
  if (eos_id < 0 || S == 0) return at::zeros(tokens.sizes(), opts);
  // A position starts a document when the token before it is an EOS; each
  // position's start is the latest such position at or before it.
  const at::Tensor pos = at::arange(S, opts).expand(tokens.sizes());
  at::Tensor begins = at::zeros(tokens.sizes(), tokens.options().dtype(at::kBool));
  begins.narrow(1, 1, S - 1).copy_(tokens.narrow(1, 0, S - 1).eq(eos_id));
  return std::get<0>(at::cummax(at::where(begins, pos, at::zeros_like(pos)), 1));
}

bool single_document(const at::Tensor& starts) { return !starts.defined() || !starts.any().item<bool>(); }

double document_attention_fraction(const at::Tensor& starts) {
  if (!starts.defined() || starts.numel() == 0) return 1.0;
  const int64_t S = starts.size(-1);
  const at::Tensor pos = at::arange(S, starts.options());
  const double visible = (pos - starts + 1).sum().item<double>();
  const double causal = static_cast<double>(starts.numel() / S) * static_cast<double>(S) * (S + 1) / 2.0;
  return visible / causal;
}

at::Tensor c4_like_document_starts(int64_t B, int64_t S, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> length(std::log(230.0), std::sqrt(2.0 * std::log(427.0 / 230.0)));
  at::Tensor tokens = at::ones({B, S}, at::kLong);
  auto t = tokens.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    // The row starts inside a document: a uniform share of one already gone.
    int64_t p = -static_cast<int64_t>(std::uniform_real_distribution<double>(0, 1)(rng) * length(rng));
    while (p < S) {
      p += std::max<int64_t>(1, std::llround(length(rng)));
      if (p >= 1 && p - 1 < S) t[b][p - 1] = 0;  // the EOS ending the document
    }
  }
  return document_starts(tokens, 0);
}

double c4_like_attention_density(int64_t S) { return document_attention_fraction(c4_like_document_starts(8, S, 0)); }

at::Tensor document_mask(const at::Tensor& starts_q, const at::Tensor& qpos, const at::Tensor& kpos,
                         at::ScalarType dtype) {
  return additive_attention_mask(first_visible_key(qpos, starts_q, /*window=*/0), qpos, kpos, dtype);
}

at::Tensor document_attention_sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& starts, std::optional<double> scale) {
  const int64_t S = q.size(2);
  const at::Tensor pos = at::arange(S, starts.options());
  return at::scaled_dot_product_attention(q, k, v, document_mask(starts, pos, pos, q.scalar_type()),
                                          /*dropout_p=*/0.0, /*is_causal=*/false, scale,
                                          /*enable_gqa=*/k.size(1) != q.size(1));
}

VarlenDocuments varlen_documents(const at::Tensor& starts) {
  const int64_t S = starts.size(1), total = starts.numel();
  // A document begins where a token is its own start; the next row's
  // first token always is (start 0).
  const at::Tensor begins = starts.eq(at::arange(S, starts.options())).flatten().nonzero().flatten();
  const at::Tensor cu = at::cat({begins, at::full({1}, total, begins.options())});
  return {cu.to(at::kInt), cu.diff().max().item<int64_t>()};
}

std::string varlen_refuses(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (!q.is_cuda()) return "not on CUDA";
  if (q.scalar_type() != at::kBFloat16 && q.scalar_type() != at::kHalf) return "flash takes bf16/fp16 only";
  if (v.size(3) != q.size(3)) return "v's head size differs from q's (MLA)";
  if (q.size(3) % 8 != 0 || q.size(3) > 256) return "head size not a multiple of 8 up to 256";
  return "";
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [B,n,S,Dh] (a view of [B,S,n,Dh] rows) as the kernel's packed [B·S, n, Dh].
at::Tensor packed(const at::Tensor& x) { return x.transpose(1, 2).reshape({-1, x.size(1), x.size(3)}); }

class VarlenAttention : public torch::autograd::Function<VarlenAttention> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const VarlenDocuments* docs, std::optional<double> scale) {
    const int64_t B = q.size(0), H = q.size(1), S = q.size(2), Dh = q.size(3);
    const at::Tensor qp = packed(q), kp = packed(k), vp = packed(v);
    auto [out, lse, rng, unused, debug] =
        at::_flash_attention_forward(qp, kp, vp, docs->cu_seqlens, docs->cu_seqlens, docs->max_len, docs->max_len,
                                     /*dropout_p=*/0.0, /*is_causal=*/true, /*return_debug_mask=*/false, scale);
    ctx->save_for_backward({qp, kp, vp, out, lse, docs->cu_seqlens, rng, unused});
    ctx->saved_data["max_len"] = docs->max_len;
    ctx->saved_data["scale"] = scale ? c10::IValue(*scale) : c10::IValue();
    return out.view({B, S, H, Dh}).transpose(1, 2);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list s = ctx->get_saved_variables();
    const int64_t max_len = ctx->saved_data["max_len"].toInt();
    const c10::IValue sc = ctx->saved_data["scale"];
    const std::optional<double> scale = sc.isNone() ? std::nullopt : std::optional<double>(sc.toDouble());
    const at::Tensor& g = grad[0];  // [B,H,S,Dh]
    auto [dq, dk, dv] = at::_flash_attention_backward(packed(g).contiguous(), s[0], s[1], s[2], s[3], s[4], s[5], s[5],
                                                      max_len, max_len, /*dropout_p=*/0.0, /*is_causal=*/true, s[6],
                                                      s[7], scale);
    const int64_t B = g.size(0), S = g.size(2);
    const auto unpack = [&](const at::Tensor& t) { return t.view({B, S, t.size(1), t.size(2)}).transpose(1, 2); };
    return {unpack(dq), unpack(dk), unpack(dv), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor document_attention_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const VarlenDocuments& docs, std::optional<double> scale) {
  return VarlenAttention::apply(q, k, v, &docs, scale);
}

}  // namespace ctitan
