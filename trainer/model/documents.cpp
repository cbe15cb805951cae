#include "trainer/model/documents.h"

#include <cmath>
#include <random>

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
  const at::Tensor k = kpos.to(starts_q.device()).view({1, 1, -1});
  const at::Tensor visible =
      k.ge(starts_q.unsqueeze(-1)) & k.le(qpos.to(starts_q.device()).view({1, -1, 1}));  // [B, Lq, Lk]
  const auto opts = starts_q.options().dtype(dtype);
  return at::where(visible, at::zeros({}, opts), at::full({}, -std::numeric_limits<double>::infinity(), opts))
      .unsqueeze(1);
}

at::Tensor document_attention_sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& starts, std::optional<double> scale) {
  const int64_t S = q.size(2);
  const at::Tensor pos = at::arange(S, starts.options());
  return at::scaled_dot_product_attention(q, k, v, document_mask(starts, pos, pos, q.scalar_type()),
                                          /*dropout_p=*/0.0, /*is_causal=*/false, scale,
                                          /*enable_gqa=*/k.size(1) != q.size(1));
}

}  // namespace ctitan
