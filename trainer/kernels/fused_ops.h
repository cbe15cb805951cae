// Fused CPU kernels with hand-written backward: what `compile.enable` means
// in ctitan (C++ has no torch.compile). Each op is a
// torch::autograd::Function whose forward and backward are single
// vectorised passes (at::vec, AVX-512, fp32 accumulation) over the data the
// eager ATen chain walks several times, and which saves less for backward.
//
// Legend: B batch, S sequence, D model dim, F ffn hidden dim, n heads of a
// projection (H query, G = K kv heads), Dh head dim, N rows (tokens), V vocab.
//
// Dtypes: float32 and bfloat16 run the kernels (attention: float32 only);
// other dtypes (float64 for gradient checks), or a CPU on which ATen does
// not run AVX-512 kernels run the eager ATen chain the model uses (same
// math). CUDA tensors of those dtypes go to ctitan's CUDA kernels
// (fused_cuda.h) for RMSNorm and SwiGLU; on CUDA the model calls
// cuda_rope_qk (q and k together) and cuda_linear_cross_entropy itself, and
// attention is ATen's SDPA (flash / cuDNN / memory-efficient).
// Rounding: the kernels compute in fp32 and round once into the output
// dtype, where the bf16 eager chain rounds after every op, so bf16 results
// differ from eager by about one bf16 ulp (tests/fused_cases.h states the
// tolerances).
//
// Threads: rows are split over ATen's intra-op threads (at::get_num_threads,
// the pool eager ops use; see parallel_rows in vec.h for how, since ctitan
// is not compiled with OpenMP).
#pragma once

#include <ATen/Version.h>
#include <torch/torch.h>

#include "trainer/kernels/sink_attention.h"

namespace ctitan {

// True when ATen runs this CPU at AVX512. Below it, ATen's bf16 GEMM is a
// reference loop (about 70x slower than fp32 on an AVX2 EPYC).
inline bool aten_cpu_is_avx512() {
  static const bool ok = at::get_cpu_capability() == "AVX512";
  return ok;
}

// True when the fused kernels run here (ATen's CPU capability is AVX512);
// otherwise every fused_* below runs the eager ATen chain.
inline bool fused_kernels_available() { return aten_cpu_is_avx512(); }

// RMSNorm as at::rms_norm: y = x · rsqrt(mean(x²) + eps) · weight, fp32
// math, y in x's dtype. x [..., D] (any leading dims), weight [D].
// Backward: dx in x's dtype, dweight (rows summed in fp32) in weight's dtype.
at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// SwiGLU on a fused gate|up projection: gate_up [..., 2F] →
// silu(gate_up[..., :F]) · gate_up[..., F:], [..., F] in gate_up's dtype.
// Saves only gate_up; backward recomputes silu and writes d(gate_up) [..., 2F]
// in one pass.
at::Tensor fused_swiglu(const at::Tensor& gate_up);

// Rotary embedding as Transformer::apply_rope: x [B,S,n,Dh] is read as complex
// pairs (x[2i], x[2i+1]) rotated by freqs_cis[s, i] (complex64 [S_max, Dh/2],
// the first S rows are used), fp32 math, output [B,S,n,Dh] contiguous in
// out_dtype. x may be a strided view (e.g. a split of a fused QKV output)
// as long as each [n,Dh] block is contiguous. Backward: the inverse
// rotation, dx in x's dtype. No activation is saved.
at::Tensor fused_rope(const at::Tensor& x, const at::Tensor& freqs_cis, at::ScalarType out_dtype);

// Causal scaled-dot-product attention, as at::scaled_dot_product_attention(
// q, k, v, is_causal=true, enable_gqa=G != H) with scale 1/sqrt(Dh):
// q [B,H,S,Dh], k/v [B,G,S,Dh], H a multiple of G, rows (Dh) contiguous.
// Runs the kernel for float32 with Dh 16, 32 or 64 (the model attends in
// fp32 below Dh 32); anything else runs ATen's SDPA. The result [B,H,S,Dh]
// is a view of [B,S,H,Dh] memory: result.transpose(1,2) is contiguous.
// With `starts` (int64 [B,S], documents.h) the attention is block_causal:
// row i sees keys [starts[b,i], i], and the kernel skips the key blocks
// before a row block's document (elsewhere: document_attention_sdpa).
// With `extras` (sink_attention.h) the rows also keep to the sliding
// window — the key blocks before a row block's window are skipped too — and
// each head's sink joins the softmax (its gradient comes back); where the
// kernel cannot run, sink_window_attention.
at::Tensor fused_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& starts = {}, const AttentionExtras& extras = {});
// Whether the kernel above runs q, k, v (else its fallbacks do).
bool fused_attention_runs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// Mean token cross-entropy, at::cross_entropy_loss(logits.float(), labels):
// logits [N,V] bf16/fp32, labels [N] int64 in [0,V). One pass per row with an
// online max / log-sum-exp; returns an fp32 scalar. Backward writes
// (softmax − onehot) · g / N straight in the logits' dtype.
// grad_into_logits: backward writes that gradient over the logits' own
// memory instead of a new [N,V] tensor, whose fresh pages cost more than the
// kernel (2048 × 32000 bf16, one core: 130 → 80 ms fwd+bwd). Only for
// logits that nothing reads after backward — like the model's, which only
// the loss uses.
at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& labels, bool grad_into_logits = false);

}  // namespace ctitan
