// `compile.enable` on CUDA: ctitan's fused CUDA kernels (kernels/cuda/) as
// autograd functions, the CUDA twins of fused_ops.h's CPU kernels.
// fused_rms_norm and fused_swiglu route CUDA tensors here; the model calls
// cuda_rope_qk and cuda_linear_cross_entropy itself (they take other
// arguments than their CPU twins).
//
// Legend: B batch, S sequence, H query heads, K kv heads, Dh head dim, D model
// dim, N rows (B·S tokens), V vocab.
#pragma once

#include <torch/torch.h>

#include <utility>

namespace ctitan {

// True when this build has the CUDA kernels: the CUDA toolkit compiled them
// and LibTorch has CUDA. False on a CPU-only LibTorch.
bool cuda_kernels_built();

// True when the kernels take t: built, t on CUDA, float32 or bfloat16.
bool cuda_kernels_take(const at::Tensor& t);

// at::rms_norm(x, {D}, w, eps) in one pass per row; saves x and an fp32 rstd per row.
at::Tensor cuda_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps);

// silu(gate_up[..., :F])·gate_up[..., F:]; saves only gate_up.
at::Tensor cuda_swiglu(const at::Tensor& gate_up);

// The experts' SwiGLU (expert_swiglu.h, whose autograd node calls these):
// y = clamped_swiglu(h1, h3) elementwise, and its gradients dh1 and dh3
// (row_math.h), on contiguous CUDA tensors of one shape and dtype.
void cuda_expert_swiglu_forward(const at::Tensor& h1, const at::Tensor& h3, at::Tensor& y, double limit, double alpha);
void cuda_expert_swiglu_backward(const at::Tensor& dy, const at::Tensor& h1, const at::Tensor& h3, at::Tensor& dh1,
                                 at::Tensor& dh3, double limit, double alpha);

// RoPE of q [B,S,H,Dh] and k [B,S,K,Dh] (views of the QKV GEMM's output)
// in one launch, as Transformer::apply_rope: contiguous outputs in out_dtype;
// nothing saved but the freqs table.
std::pair<at::Tensor, at::Tensor> cuda_rope_qk(const at::Tensor& q, const at::Tensor& k, const at::Tensor& freqs_cis,
                                               at::ScalarType out_dtype);

// Mean cross-entropy of the output projection, cross_entropy((h·wᵀ).float(),
// labels), over chunks of rows (at most 2^27 logits each) so that the whole
// [N,V] logits never exist. With `grad`, each chunk's gradient is formed
// while its logits are at hand (the CE kernel writes it in place, then two
// GEMMs give dh and accumulate dw) and backward only scales them.
// h [N,D], w [V,D] in one dtype, labels [N] int64.
at::Tensor cuda_linear_cross_entropy(const at::Tensor& h, const at::Tensor& w, const at::Tensor& labels);

// Rows per chunk of cuda_linear_cross_entropy for a vocabulary of V.
int64_t linear_cross_entropy_rows_per_chunk(int64_t V);

// AdamW in one pass over flat fp32 buffers on CUDA (row_math.h's adamw:
// ATen's _fused_adamw_ math, the same result as grads.mul_(grad_scale) and
// then _fused_adamw_), with `step` already incremented. With `compute`
// defined (bf16, params' numel), the updated parameters are also rounded
// into it: the next step's compute copy without a cast pass over the master.
void cuda_adamw_(at::Tensor& params, const at::Tensor& grads, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                 const at::Tensor& step, double lr, double beta1, double beta2, double weight_decay, double eps,
                 double grad_scale, const at::Tensor& compute);

// dst (fp32, contiguous) = src, or dst += src with `accumulate`; src float32
// or bfloat16 of dst's numel, contiguous. The vectorised copy of backward's
// bf16 gradients into the fp32 gradient buffer.
void cuda_accumulate_into(at::Tensor& dst, const at::Tensor& src, bool accumulate);

}  // namespace ctitan
