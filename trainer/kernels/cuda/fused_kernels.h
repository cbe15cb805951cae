// Launchers of ctitan's fused CUDA kernels: what `compile.enable` runs on
// CUDA (trainer/kernels/fused_cuda.cpp wraps them in autograd functions).
// Plain C++, so that nvcc compiles the kernels without LibTorch's headers.
// The per-element math is trainer/kernels/row_math.h, shared with the CPU
// tests; only the launches here need a GPU.
//
// Every pointer is a device pointer, `stream` a cudaStream_t. Each launcher
// returns the CUDA error of its launch (0 when it started); error_string
// names it. Dtypes: float32 and bfloat16; math in fp32, rounded once.
#pragma once

#include <cstdint>

namespace ctitan::cuda_kernels {

enum class Dtype : int { kFloat32 = 0, kBFloat16 = 1 };

// y = rms_norm(x)·w over rows of D; rstd[rows] kept for backward.
int rms_norm_forward(const void* x, Dtype xt, const void* w, Dtype wt, void* y, float* rstd, int64_t rows, int64_t D,
                     float eps, void* stream);
// dx (x's dtype) and per-block fp32 partial sums of dw: dw_partial is
// [partial_rows, D], zero-filled by the caller; dw = its sum over rows.
int rms_norm_backward(const void* dy, const void* x, Dtype xt, const void* w, Dtype wt, const float* rstd, void* dx,
                      float* dw_partial, int64_t partial_rows, int64_t rows, int64_t D, void* stream);
// The number of partial rows rms_norm_backward wants for `rows` rows.
int64_t rms_norm_partial_rows(int64_t rows);

// y[r, :F] = silu(gate_up[r, :F])·gate_up[r, F:]; backward writes d(gate_up).
int swiglu_forward(const void* gate_up, void* y, Dtype t, int64_t rows, int64_t F, void* stream);
int swiglu_backward(const void* dy, const void* gate_up, void* dgate_up, Dtype t, int64_t rows, int64_t F,
                    void* stream);

// The experts' SwiGLU, elementwise over n values of h1 and h3 (row_math.h
// clamped_swiglu; limit <= 0: silu(h1)·h3).
int expert_swiglu_forward(const void* h1, const void* h3, void* y, Dtype t, int64_t n, float limit, float alpha,
                          void* stream);
int expert_swiglu_backward(const void* dy, const void* h1, const void* h3, void* dh1, void* dh3, Dtype t, int64_t n,
                           float limit, float alpha, void* stream);

// One side of RoPE: x's [n, Dh] block of token (b, s) starts at element
// b·sb + s·ss and is contiguous (a split view of the QKV GEMM output is);
// out is a contiguous [B, S, n, Dh].
struct RopeSide {
  const void* x;
  int64_t sb, ss, n;
  void* out;
};
// q and k in one launch: (x[2i], x[2i+1]) rotated by freqs[s, i] (fp32
// [S, Dh/2, 2], cos and sin), or by its conjugate when `inverse` (backward).
int rope(const RopeSide& q, const RopeSide& k, Dtype in, Dtype out, const float* freqs, int64_t B, int64_t S,
         int64_t Dh, bool inverse, void* stream);

// Cross-entropy of `rows` rows of logits (row stride ld): loss_rows[r] =
// lse − x[label]. With write_grad, each row is overwritten by
// (softmax − onehot)·grad_scale in place, in the logits' dtype.
int cross_entropy_rows(void* logits, int64_t ld, Dtype t, const int64_t* labels, int64_t rows, int64_t V,
                       bool write_grad, float grad_scale, float* loss_rows, void* stream);

// AdamW (ATen's _fused_adamw_, ADAMW mode: row_math.h's adamw) over n
// elements of flat fp32 buffers, in one pass. The gradient is multiplied by
// grad_scale first (gradient clipping folded in); step_count is the step
// tensor (fp32, already incremented). With compute_out, the updated
// parameters are also rounded into it (compute_dtype): the next step's
// compute copy, written without a separate cast pass over the master.
int adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const float* step_count, int64_t n,
          double lr, double beta1, double beta2, double weight_decay, double eps, float grad_scale, void* compute_out,
          Dtype compute_dtype, void* stream);

// dst[i] = src[i] (or dst[i] += src[i] with accumulate), fp32 dst, src
// float32 or bfloat16: the backward's gradients into the fp32 buffer.
int accumulate_into(float* dst, const void* src, Dtype src_dtype, int64_t n, bool accumulate, void* stream);

const char* error_string(int code);

}  // namespace ctitan::cuda_kernels
