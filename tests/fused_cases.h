// The one case table for the fused kernels (trainer/kernels/fused_ops.h):
// tests/unit/fused_kernels_test.cpp checks every case's forward and backward
// against the eager ATen chain, tests/bench/fused_kernels_bench.cpp times
// fused vs eager forward+backward for the cases marked `bench`.
//
// Legend: B batch, S sequence, D model dim, F ffn hidden dim, H query heads,
// K kv heads, Dh head dim, N tokens (B·S), V vocab.
// Shapes: debugmodel B 8 × S 256, D 256, F 768, H = K = 16, Dh 16;
// 125M B 8 × S 256, D 768, F 2048, H 12, K 4, Dh 64, V 32000.
//
// Tolerance: every element must satisfy |fused − eager| ≤ atol·max|eager| +
// rtol·|eager| (atol is relative to the tensor's largest value, so outputs
// with cancellation, like RMSNorm's dx, are judged on their scale). bf16:
// the fused kernels round once from fp32 where the eager bf16 chain rounds
// after each op, so a one-ulp (2^-8) difference is expected.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "trainer/kernels/expert_swiglu.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/model/cross_entropy.h"
#include "trainer/model/transformer.h"

namespace ctitan::fused_cases {

enum class Op { kRmsNorm, kSwiGLU, kRope, kCrossEntropy, kAttention, kExpertSwiGLU };
enum class Impl {
  kFused,      // ctitan::fused_*
  kEager,      // what the model runs today (Transformer / chunked_cross_entropy)
  kReference,  // the plain ATen chain the fused op must match
};

struct Tol {
  double atol, rtol;
};
constexpr Tol kFp32Tol{2e-5, 2e-5};
constexpr Tol kBf16Tol{8e-3, 1.6e-2};  // 2 bf16 ulps (2^-7 relative = 1 ulp worst case)

struct Case {
  std::string name;
  Op op;
  // rms_norm {B,S,D}; swiglu {B,S,F}; rope {B,S,n,Dh,n_total} (x is heads
  // [0,n) of a [B,S,n_total·Dh] projection, a strided view as in the model);
  // cross_entropy {N,V}; attention {B,H,G,S,Dh} (q/k/v are [B,S,n,Dh]
  // tensors seen as [B,n,S,Dh], as the model passes them); expert_swiglu
  // {N,F,clamped} (h1 and h3 [N,F]; clamped 1: GPT-OSS's limit 7 and alpha
  // 1.702, with values at and beyond both bounds; 0: silu(h1)·h3).
  std::vector<int64_t> shape;
  at::ScalarType dtype;
  at::ScalarType out_dtype;  // rope only (the model casts q/k for attention)
  Tol tol;
  bool bench;  // also timed by the benchmark (model shapes)
};

inline Tol tol_for(at::ScalarType t) { return t == at::kBFloat16 ? kBf16Tol : kFp32Tol; }

inline std::vector<Case> all_cases() {
  using at::kBFloat16;
  using at::kFloat;
  std::vector<Case> cases;
  constexpr auto both = at::ScalarType::Undefined;  // case for bf16 and fp32
  constexpr auto same = at::ScalarType::Undefined;  // rope output dtype = input dtype
  // dt: one dtype or both; out: rope's output dtype (same: the input's).
  auto add = [&](std::string name, Op op, std::vector<int64_t> shape, at::ScalarType dt, bool bench,
                 at::ScalarType out = at::ScalarType::Undefined) {
    for (auto t : {kBFloat16, kFloat}) {
      if (dt != both && dt != t) continue;
      const auto o = out == same ? t : out;
      const Tol tol = tol_for(t == kBFloat16 || o == kBFloat16 ? kBFloat16 : kFloat);
      cases.push_back({name + (t == kBFloat16 ? "_bf16" : "_fp32"), op, shape, t, o, tol, bench});
    }
  };
  // debugmodel
  add("rms_norm/debug", Op::kRmsNorm, {8, 256, 256}, both, true);
  add("swiglu/debug", Op::kSwiGLU, {8, 256, 768}, both, true);
  // Dh 16 < 32: the model attends in fp32, so bf16 q/k come out as fp32.
  add("rope/debug_q", Op::kRope, {8, 256, 16, 16, 48}, both, true, at::kFloat);
  add("cross_entropy/debug", Op::kCrossEntropy, {2048, 2048}, both, true);
  add("attention/debug", Op::kAttention, {8, 16, 16, 256, 16}, kFloat, true);  // fp32 below Dh 32
  // 125M
  add("rms_norm/125M", Op::kRmsNorm, {8, 256, 768}, both, true);
  add("swiglu/125M", Op::kSwiGLU, {8, 256, 2048}, both, true);
  add("rope/125M_q", Op::kRope, {8, 256, 12, 64, 20}, both, true);
  add("rope/125M_k", Op::kRope, {8, 256, 4, 64, 20}, kBFloat16, true);
  add("cross_entropy/125M", Op::kCrossEntropy, {2048, 32000}, both, true);
  add("attention/125M_fp32", Op::kAttention, {8, 12, 4, 256, 64}, kFloat, true);  // the model uses bf16 here
  // The routed experts' activation (GPT-OSS's clamped form; Qwen3's and
  // DeepSeek-V3's plain one) on [tokens·top_k, F].
  add("expert_swiglu/clamped", Op::kExpertSwiGLU, {2048, 512, 1}, both, true);
  add("expert_swiglu/plain", Op::kExpertSwiGLU, {2048, 512, 0}, both, true);
  // Odd sizes: vector tails and rows shorter than one register.
  add("rms_norm/tail", Op::kRmsNorm, {3, 5, 100}, both, false);
  add("rms_norm/short", Op::kRmsNorm, {2, 3, 7}, both, false);
  add("swiglu/tail", Op::kSwiGLU, {2, 7, 37}, both, false);
  add("rope/tail", Op::kRope, {2, 5, 3, 12, 7}, both, false);
  add("rope/fp32_to_bf16", Op::kRope, {2, 5, 3, 32, 3}, kFloat, false, kBFloat16);
  add("cross_entropy/tail", Op::kCrossEntropy, {9, 1000}, both, false);
  add("cross_entropy/short", Op::kCrossEntropy, {4, 5}, both, false);
  add("expert_swiglu/clamped_tail", Op::kExpertSwiGLU, {7, 37, 1}, both, false);
  add("expert_swiglu/plain_tail", Op::kExpertSwiGLU, {5, 19, 0}, both, false);
  add("attention/gqa_tail", Op::kAttention, {2, 4, 2, 37, 32}, kFloat, false);
  add("attention/two_rows", Op::kAttention, {1, 2, 2, 2, 16}, kFloat, false);  // (S 1: dq ≡ 0)
  add("attention/bf16_runs_sdpa", Op::kAttention, {2, 4, 4, 19, 16}, kBFloat16, false);
  return cases;
}

// Inputs of a case. `leaves` require grad; `wrt` are the tensors whose
// gradients are compared and timed: the op's own inputs (for rope the
// strided q/k view of the QKV projection, not the projection, so the split's
// backward — the same for both implementations — is not part of the timing).
struct Inputs {
  std::vector<at::Tensor> leaves, wrt, attn;  // attn: q, k, v as [B,n,S,Dh] views
  at::Tensor labels, freqs_cis, rope_x;
};

inline Inputs make_inputs(const Case& c, uint64_t seed = 0) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const auto opt = at::TensorOptions().dtype(c.dtype);
  auto leaf = [](at::Tensor t) { return t.requires_grad_(true); };
  Inputs in;
  const auto& s = c.shape;
  switch (c.op) {
    case Op::kRmsNorm:
      in.leaves = {leaf(at::randn({s[0], s[1], s[2]}, gen, opt)),
                   leaf((1.0 + 0.1 * at::randn({s[2]}, gen, at::kFloat)).to(c.dtype))};
      break;
    case Op::kSwiGLU:
      in.leaves = {leaf(2.0 * at::randn({s[0], s[1], 2 * s[2]}, gen, at::kFloat).to(c.dtype))};
      break;
    case Op::kRope: {
      const int64_t B = s[0], S = s[1], n = s[2], Dh = s[3];
      in.leaves = {leaf(at::randn({B, S, s[4] * Dh}, gen, opt))};
      in.rope_x = in.leaves[0].split_with_sizes({n * Dh, (s[4] - n) * Dh}, 2)[0].view({B, S, n, Dh});
      in.freqs_cis = precompute_freqs_cis(Dh, S + 3, 500000.0, RopeScaling{});
      break;
    }
    case Op::kCrossEntropy:
      in.leaves = {leaf(2.0 * at::randn({s[0], s[1]}, gen, at::kFloat).to(c.dtype))};
      in.labels = at::randint(0, s[1], {s[0]}, gen, at::kLong);
      break;
    case Op::kAttention:
      for (int64_t n : {s[1], s[2], s[2]}) in.leaves.push_back(leaf(at::randn({s[0], s[3], n, s[4]}, gen, opt)));
      for (const auto& t : in.leaves) in.attn.push_back(t.transpose(1, 2));
      break;
    case Op::kExpertSwiGLU: {
      // Spread past ±7; a few values exactly at the bounds (no gradient there).
      at::Tensor h1 = 4.0 * at::randn({s[0], s[1]}, gen, at::kFloat), h3 = 4.0 * at::randn({s[0], s[1]}, gen, at::kFloat);
      h1.view(-1).narrow(0, 0, 2).fill_(7.0);
      h3.view(-1).narrow(0, 2, 2).fill_(-7.0);
      h3.view(-1).narrow(0, 4, 1).fill_(7.0);
      in.leaves = {leaf(h1.to(c.dtype)), leaf(h3.to(c.dtype))};
      break;
    }
  }
  in.wrt = c.op == Op::kRope ? std::vector<at::Tensor>{in.rope_x} : c.op == Op::kAttention ? in.attn : in.leaves;
  return in;
}

constexpr double kEps = 1e-5;  // TorchTitan's norm_eps

// The op's forward, by implementation.
inline at::Tensor forward(const Case& c, Impl impl, const Inputs& in) {
  const auto& s = c.shape;
  switch (c.op) {
    case Op::kRmsNorm:
      if (impl == Impl::kFused) return fused_rms_norm(in.leaves[0], in.leaves[1], kEps);
      return at::rms_norm(in.leaves[0], {s[2]}, in.leaves[1], kEps);
    case Op::kSwiGLU: {
      if (impl == Impl::kFused) return fused_swiglu(in.leaves[0]);
      auto gate_up = in.leaves[0].split(s[2], 2);  // Transformer::hidden_states
      return at::silu(gate_up[0]) * gate_up[1];
    }
    case Op::kRope: {
      const int64_t B = s[0], S = s[1], n = s[2];
      const at::Tensor& x = in.rope_x;
      if (impl == Impl::kFused) return fused_rope(x, in.freqs_cis, c.out_dtype);
      // Transformer::apply_rope
      at::Tensor xc = at::view_as_complex(x.to(at::kFloat).reshape({B, S, n, -1, 2}));
      at::Tensor f = in.freqs_cis.narrow(0, 0, S).view({1, S, 1, -1});
      return at::view_as_real(xc * f).flatten(3).to(c.out_dtype);
    }
    case Op::kCrossEntropy:
      if (impl == Impl::kFused) return fused_cross_entropy(in.leaves[0], in.labels);
      if (impl == Impl::kEager) return chunked_cross_entropy(in.leaves[0], in.labels);
      return at::cross_entropy_loss(in.leaves[0].to(at::kFloat), in.labels);
    case Op::kAttention:
      if (impl == Impl::kFused) return fused_causal_attention(in.attn[0], in.attn[1], in.attn[2]);
      return at::scaled_dot_product_attention(in.attn[0], in.attn[1], in.attn[2], {}, 0.0, /*is_causal=*/true,
                                              std::nullopt, /*enable_gqa=*/s[1] != s[2]);
    case Op::kExpertSwiGLU: {
      const double limit = s[2] ? 7.0 : 0.0, alpha = 1.702;
      const at::Tensor &h1 = in.leaves[0], &h3 = in.leaves[1];
      if (impl == Impl::kFused) return fused_expert_swiglu(h1, h3, limit, alpha);
      if (limit <= 0) return at::silu(h1) * h3;
      // GPT-OSS's expert activation as TorchTitan writes it.
      const at::Tensor g = h1.clamp_max(limit), u = h3.clamp(-limit, limit);
      return g * at::sigmoid(g * alpha) * (u + 1);
    }
  }
  return {};
}

// The upstream gradient a case's output receives (fixed per seed).
inline at::Tensor output_grad(const at::Tensor& out, uint64_t seed = 1) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  if (out.dim() == 0) return at::full({}, 0.75, out.options());
  return at::randn(out.sizes(), gen, out.options().dtype(at::kFloat)).to(out.scalar_type());
}

struct Result {
  at::Tensor out;
  std::vector<at::Tensor> grads;  // one per in.wrt
};

// Forward, then backward of <out, dy> into in.wrt (torch::autograd::grad:
// nothing accumulates, so the same inputs can run again).
inline Result forward_backward(const Case& c, Impl impl, const Inputs& in, const at::Tensor& dy) {
  Result r;
  r.out = forward(c, impl, in);
  r.grads = torch::autograd::grad({r.out}, in.wrt, {dy});
  return r;
}

}  // namespace ctitan::fused_cases
