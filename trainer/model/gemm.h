// The model's GEMMs: ATen's, except bf16 on a CPU where ATen has no fast
// bf16 kernel (below AVX-512: no oneDNN bf16 path), whose reference loop
// runs ~20x slower than fp32 — `Linear` forward + backward on [2048, 256] x
// [768, 256] measured 3.05 s in bf16 against 0.14 s in fp32 and 0.13 s for
// this path on the 2-core AMD EPYC (AVX2) dev machine. There the operands
// are widened to fp32, multiplied, and the product rounded back to bf16:
// products of bf16 values are exact in fp32 and ATen accumulates bf16 GEMMs
// in fp32 too, so results differ only in summation order. Autograd sees the
// casts, so gradients flow through the same fp32 GEMMs.
#pragma once

#include <torch/torch.h>

namespace ctitan {

// True when a GEMM on `t` takes the widened path.
bool widen_gemm(const at::Tensor& t);
// The dtype GEMMs of `dtype` tensors on `device` run in (kFloat where
// widened): the dtype whose peak FLOPs MFU is measured against.
at::ScalarType gemm_dtype(at::ScalarType dtype, const c10::Device& device);

at::Tensor gemm_linear(const at::Tensor& x, const at::Tensor& w);  // at::linear(x, w): x·wᵀ
at::Tensor gemm_matmul(const at::Tensor& a, const at::Tensor& b);  // at::matmul(a, b)
at::Tensor gemm_mm(const at::Tensor& a, const at::Tensor& b);      // at::mm(a, b)

}  // namespace ctitan
