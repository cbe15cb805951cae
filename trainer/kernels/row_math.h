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

// --- The experts' SwiGLU: plain, or GPT-OSS's clamped form -------------------
// On h1 = a (gate) and h3 = b (up) of an expert, limit > 0 (MoeArgs
// swiglu_limit): g = min(a, limit), u = clamp(b, −limit, limit),
// y = g·σ(alpha·g)·(u + 1). limit ≤ 0: silu(a)·b. NaN passes through the
// clamps, as torch.clamp's.
CTITAN_HD float clamped_swiglu(float a, float b, float limit, float alpha) {
  if (limit <= 0.0f) return swiglu(a, b);
  const float g = a > limit ? limit : a;
  const float u = b > limit ? limit : (b < -limit ? -limit : b);
  return g * sigmoid(alpha * g) * (u + 1.0f);
}
// da = dy·(u+1)·(s + alpha·g·s·(1 − s)) with s = σ(alpha·g) for a < limit,
// db = dy·g·s for −limit < b < limit, 0 elsewhere (torch.clamp passes no
// gradient at a bound itself).
CTITAN_HD void clamped_swiglu_grad(float a, float b, float dy, float limit, float alpha, float& da, float& db) {
  if (limit <= 0.0f) return swiglu_grad(a, b, dy, da, db);
  const float g = a > limit ? limit : a;
  const float u = b > limit ? limit : (b < -limit ? -limit : b);
  const float s = sigmoid(alpha * g), dgs = dy * (u + 1.0f);
  da = a < limit ? dgs * s + alpha * (dgs * g * (s * (1.0f - s))) : 0.0f;
  db = (b > -limit && b < limit) ? dy * (g * s) : 0.0f;
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

// --- AdamW, as ATen's _fused_adamw_ (ADAMW mode) ------------------------------------
// The scalars are doubles, as ATen's kernel takes them, so the mixed
// double/float arithmetic below rounds where ATen's does; the state is fp32.
// grad_scale multiplies the gradient first, as a separate grads.mul_(coef)
// (a float op) would: gradient clipping folded into the step.
struct AdamWStep {
  double lr, beta1, beta2, weight_decay, eps;
  double bias_correction1, bias_correction2_sqrt;  // 1 − β1^t and sqrt(1 − β2^t) of step t
  float grad_scale;
};
CTITAN_HD AdamWStep adamw_step(double lr, double beta1, double beta2, double weight_decay, double eps, float t,
                               float grad_scale) {
  return {lr, beta1, beta2, weight_decay, eps, 1 - pow(beta1, static_cast<double>(t)),
          sqrt(1 - pow(beta2, static_cast<double>(t))), grad_scale};
}
// One element: p, m (exp_avg) and v (exp_avg_sq) updated in place.
CTITAN_HD void adamw(float& p, float g, float& m, float& v, const AdamWStep& s) {
  const float grad = g * s.grad_scale;
  float param = p;
  param -= s.lr * s.weight_decay * param;
  m = s.beta1 * m + (1 - s.beta1) * grad;
  v = s.beta2 * v + (1 - s.beta2) * grad * grad;
  const float step_size = s.lr / s.bias_correction1;
  const float denom = (sqrtf(v) / s.bias_correction2_sqrt) + s.eps;
  p = param - step_size * m / denom;
}

}  // namespace ctitan::row_math
