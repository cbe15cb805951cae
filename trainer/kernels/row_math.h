// The per-element math of ctitan's fused CUDA kernels, written once for the
// host and the device. The kernels (trainer/kernels/cuda/fused_kernels.cu)
// call these functions; the CPU unit tests (tests/unit/row_math_test.cpp) run
// the same functions row by row against the eager ATen chain. What only a GPU
// can check is the launch: the indexing, the block reductions, the grid.
//
// Everything is fp32 in, fp32 out: callers widen bf16 inputs and round the
// result once into the output dtype (round to nearest even, as ATen does).
//
// Legend: D model dim, F ffn hidden dim, Dh head dim, V vocab.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define CTITAN_HD __host__ __device__ __forceinline__
#else
#define CTITAN_HD inline
#endif

namespace ctitan::row_math {

// --- RMSNorm, as at::rms_norm ------------------------------------------------
// rstd = 1/sqrt(Σx²/D + eps); y = (x·rstd)·w, in eager's order.
CTITAN_HD float rms_rstd(float sum_sq, int64_t D, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(D) + eps);
}
CTITAN_HD float rms_out(float x, float rstd, float w) { return (x * rstd) * w; }
// Backward, with g = dy·w summed into Σ(g·x) over the row:
//   dx = rstd·g − x·(rstd³·Σ(g·x)/D),   dw += dy·(x·rstd) over the rows.
CTITAN_HD float rms_dx_coef(float sum_gx, float rstd, int64_t D) {
  return rstd * rstd * rstd * sum_gx / static_cast<float>(D);
}
CTITAN_HD float rms_dx(float x, float g, float rstd, float coef) { return rstd * g - x * coef; }
CTITAN_HD float rms_dw(float x, float dy, float rstd) { return dy * (x * rstd); }

// --- SwiGLU: y = silu(a)·b on a fused gate|up projection --------------------
CTITAN_HD float sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }
CTITAN_HD float swiglu(float a, float b) { return a * sigmoid(a) * b; }
// da = dy·b·σ(a)·(1 + a·(1 − σ(a))),  db = dy·silu(a).
CTITAN_HD void swiglu_grad(float a, float b, float dy, float& da, float& db) {
  const float s = sigmoid(a);
  da = dy * b * (s * (1.0f + a * (1.0f - s)));
  db = dy * (a * s);
}

// --- RoPE: the pair (x0, x1) as x0 + i·x1 times cos + i·sin ---------------------
// The inverse (conjugate) rotation is the backward.
CTITAN_HD void rope(float x0, float x1, float c, float s, float& y0, float& y1) {
  y0 = x0 * c - x1 * s;
  y1 = x1 * c + x0 * s;
}
CTITAN_HD void rope_inverse(float x0, float x1, float c, float s, float& y0, float& y1) {
  y0 = x0 * c + x1 * s;
  y1 = x1 * c - x0 * s;
}

// --- Cross-entropy over a row of logits ------------------------------------------
// An online log-sum-exp: m is the running max, s = Σ exp(x − m). Start from
// m = −inf, s = 0. A NaN logit makes s NaN (as eager's loss is), a −inf one
// adds nothing.
CTITAN_HD void lse_add(float& m, float& s, float x) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;
    m = x;
  } else if (!(x == -INFINITY)) {
    s += expf(x - m);
  }
}
// Folds another partial (m2, s2) into (m, s): the block reductions' step.
CTITAN_HD void lse_merge(float& m, float& s, float m2, float s2) {
  if (m2 > m) {
    s = s * expf(m - m2) + s2;
    m = m2;
  } else if (!(m2 == -INFINITY)) {
    s += s2 * expf(m2 - m);
  }
}
CTITAN_HD float lse_value(float m, float s) { return m + logf(s); }
// The row's loss, −log softmax(x)[label] = lse − x[label].
CTITAN_HD float ce_loss(float lse, float x_label) { return lse - x_label; }
// d loss/d x = (softmax(x) − onehot)·scale, scale = d(mean loss)/d(row loss).
CTITAN_HD float ce_grad(float x, float lse, bool is_label, float scale) {
  return (expf(x - lse) - (is_label ? 1.0f : 0.0f)) * scale;
}

}  // namespace ctitan::row_math
