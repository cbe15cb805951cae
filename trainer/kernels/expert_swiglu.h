// The routed experts' activation on their two projections h1 = w1·x (+ b1)
// and h3 = w3·x (+ b3), both [N, F]: silu(h1)·h3 (Qwen3, DeepSeek-V3), or
// GPT-OSS's clamped SwiGLU with limit > 0 (MoeArgs swiglu_limit, alpha):
//   g = min(h1, limit), u = clamp(h3, −limit, limit), y = g·σ(alpha·g)·(u + 1).
// torch.clamp passes no gradient at a bound itself, so neither does either
// path here. The per-element math for the CUDA kernel and its CPU tests is
// row_math.h's clamped_swiglu.
#pragma once

#include <ATen/ATen.h>

namespace ctitan {

// The eager ATen chain (any device and dtype; on meta without the clamps,
// which change no shape: clamp's backward has its meta kernel in Python only).
at::Tensor expert_swiglu(const at::Tensor& h1, const at::Tensor& h3, double limit, double alpha);

// `compile.enable`: one pass forward (fp32 math, rounded once into h1's
// dtype) and one backward that recomputes σ and writes dh1 and dh3, saving
// only h1 and h3 (the chain keeps five [N, F] tensors for backward). The
// AVX-512 CPU kernel for float32/bfloat16 where ATen runs AVX-512, the CUDA
// kernel (fused_cuda.h) for CUDA float32/bfloat16, the chain elsewhere.
at::Tensor fused_expert_swiglu(const at::Tensor& h1, const at::Tensor& h3, double limit, double alpha);

}  // namespace ctitan
