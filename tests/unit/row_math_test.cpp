// The per-element math of the fused CUDA kernels (trainer/kernels/row_math.h)
// run here on the CPU, row by row as the kernels run it, against the eager
// ATen chain with autograd: fp32 within 1e-6 (relative to the tensor's
// largest value, plus 1e-6 relative), bf16 within its rounding (the kernels
// round once from fp32; tests/fused_cases.h's bf16 tolerance). The GPU test
// GpuFused.* checks the launches of the same math on a GPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "trainer/kernels/fused_cuda.h"
#include "trainer/kernels/row_math.h"

namespace ctitan {
namespace {

namespace rm = row_math;

struct Tol {
  double atol, rtol;
};
constexpr Tol kFp32{1e-6, 1e-6};
constexpr Tol kBf16{8e-3, 1.6e-2};

Tol tol_for(at::ScalarType t) { return t == at::kBFloat16 ? kBf16 : kFp32; }

::testing::AssertionResult close(const at::Tensor& got, const at::Tensor& want, Tol tol) {
  if (got.sizes() != want.sizes() || got.scalar_type() != want.scalar_type())
    return ::testing::AssertionFailure() << "got " << got.sizes() << " " << got.scalar_type() << ", want "
                                         << want.sizes() << " " << want.scalar_type();
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  const double scale = w.abs().max().item<double>();
  const at::Tensor excess = (g - w).abs() - tol.rtol * w.abs() - tol.atol * scale;
  const int64_t k = excess.flatten().argmax().item<int64_t>();
  if (excess.flatten()[k].item<double>() <= 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << k << ": got " << g.flatten()[k].item<double>() << ", want "
                                       << w.flatten()[k].item<double>() << " (scale " << scale << ")";
}

// Rows of a float copy of t, and a tensor of t's dtype from rows of floats
// (rounded once, to nearest even, as the kernels' stores round).
std::vector<float> floats(const at::Tensor& t) {
  const at::Tensor f = t.to(at::kFloat).contiguous();
  return {f.data_ptr<float>(), f.data_ptr<float>() + f.numel()};
}
at::Tensor tensor_of(const std::vector<float>& v, at::IntArrayRef sizes, at::ScalarType t) {
  return torch::from_blob(const_cast<float*>(v.data()), sizes, at::kFloat).clone().to(t);
}

class RowMath : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(RowMath, RmsNormForwardAndBackwardMatchEager) {
  const auto dt = GetParam();
  const int64_t N = 64, D = 256;
  const float eps = 1e-5f;
  torch::manual_seed(1);
  // Not unit variance: rstd must differ from 1 for its powers to matter.
  const at::Tensor x = (3 * torch::randn({N, D})).to(dt), w = (1 + 0.1 * torch::randn({D})).to(dt);
  const at::Tensor dy = torch::randn({N, D}).to(dt);
  // The eager chain: at::rms_norm and autograd.
  const at::Tensor xe = x.clone().requires_grad_(), we = w.clone().requires_grad_();
  const at::Tensor ye = at::rms_norm(xe, {D}, we, eps);
  ye.backward(dy);
  // The kernels' math, row by row.
  const auto xv = floats(x), wv = floats(w), gv = floats(dy);
  std::vector<float> y(N * D), dx(N * D), dw(D, 0.f);
  for (int64_t r = 0; r < N; ++r) {
    const float* xr = &xv[r * D];
    const float* gr = &gv[r * D];
    float sq = 0.f, gx = 0.f;
    for (int64_t d = 0; d < D; ++d) sq += xr[d] * xr[d];
    const float rstd = rm::rms_rstd(sq, D, eps);
    for (int64_t d = 0; d < D; ++d) y[r * D + d] = rm::rms_out(xr[d], rstd, wv[d]);
    for (int64_t d = 0; d < D; ++d) gx += gr[d] * wv[d] * xr[d];
    const float coef = rm::rms_dx_coef(gx, rstd, D);
    for (int64_t d = 0; d < D; ++d) {
      dx[r * D + d] = rm::rms_dx(xr[d], gr[d] * wv[d], rstd, coef);
      dw[d] += rm::rms_dw(xr[d], gr[d], rstd);
    }
  }
  EXPECT_TRUE(close(tensor_of(y, {N, D}, dt), ye.detach(), tol_for(dt))) << "y";
  EXPECT_TRUE(close(tensor_of(dx, {N, D}, dt), xe.grad(), tol_for(dt))) << "dx";
  EXPECT_TRUE(close(tensor_of(dw, {D}, dt), we.grad(), tol_for(dt))) << "dw";
}

TEST_P(RowMath, SwiGLUForwardAndBackwardMatchEager) {
  const auto dt = GetParam();
  const int64_t N = 64, F = 96;
  torch::manual_seed(2);
  const at::Tensor gu = (2 * torch::randn({N, 2 * F})).to(dt), dy = torch::randn({N, F}).to(dt);
  const at::Tensor gue = gu.clone().requires_grad_();
  const auto parts = gue.split(F, 1);
  const at::Tensor ye = at::silu(parts[0]) * parts[1];
  ye.backward(dy);
  const auto g = floats(gu), d = floats(dy);
  std::vector<float> y(N * F), dg(N * 2 * F);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < F; ++c) {
      const float a = g[r * 2 * F + c], b = g[r * 2 * F + F + c];
      y[r * F + c] = rm::swiglu(a, b);
      rm::swiglu_grad(a, b, d[r * F + c], dg[r * 2 * F + c], dg[r * 2 * F + F + c]);
    }
  EXPECT_TRUE(close(tensor_of(y, {N, F}, dt), ye.detach(), tol_for(dt))) << "y";
  EXPECT_TRUE(close(tensor_of(dg, {N, 2 * F}, dt), gue.grad(), tol_for(dt))) << "d gate_up";
}

// The experts' activation, GPT-OSS's clamped form (limit 7, alpha 1.702) and
// the plain one (limit 0), against TorchTitan's chain with autograd; values
// spread past ±7 and some exactly at the bounds, where torch.clamp passes
// no gradient.
TEST_P(RowMath, ClampedExpertSwiGLUForwardAndBackwardMatchEager) {
  const auto dt = GetParam();
  const int64_t N = 48, F = 40;
  torch::manual_seed(5);
  for (const float limit : {7.0f, 0.0f}) {
    const float alpha = 1.702f;
    at::Tensor h1 = (4 * torch::randn({N, F})), h3 = (4 * torch::randn({N, F}));
    h1.view(-1).narrow(0, 0, 3).fill_(7.0);
    h3.view(-1).narrow(0, 3, 3).fill_(-7.0);
    h3.view(-1).narrow(0, 6, 3).fill_(7.0);
    h1 = h1.to(dt), h3 = h3.to(dt);
    const at::Tensor dy = torch::randn({N, F}).to(dt);
    const at::Tensor a = h1.clone().requires_grad_(), b = h3.clone().requires_grad_();
    at::Tensor ye;
    if (limit > 0) {
      const at::Tensor g = a.clamp_max(limit), u = b.clamp(-limit, limit);
      ye = g * at::sigmoid(g * alpha) * (u + 1);
    } else {
      ye = at::silu(a) * b;
    }
    ye.backward(dy);
    const auto av = floats(h1), bv = floats(h3), d = floats(dy);
    std::vector<float> y(N * F), da(N * F), db(N * F);
    for (int64_t i = 0; i < N * F; ++i) {
      y[i] = rm::clamped_swiglu(av[i], bv[i], limit, alpha);
      rm::clamped_swiglu_grad(av[i], bv[i], d[i], limit, alpha, da[i], db[i]);
    }
    EXPECT_TRUE(close(tensor_of(y, {N, F}, dt), ye.detach(), tol_for(dt))) << "y, limit " << limit;
    EXPECT_TRUE(close(tensor_of(da, {N, F}, dt), a.grad(), tol_for(dt))) << "dh1, limit " << limit;
    EXPECT_TRUE(close(tensor_of(db, {N, F}, dt), b.grad(), tol_for(dt))) << "dh3, limit " << limit;
    if (limit > 0) {  // at the bounds: no gradient
      EXPECT_EQ(da[0], 0.f);
      EXPECT_EQ(db[3], 0.f);
      EXPECT_EQ(db[6], 0.f);
    }
  }
}

TEST_P(RowMath, RopeAndItsInverseMatchEagerComplexRotation) {
  const auto dt = GetParam();
  const int64_t B = 2, S = 16, n = 4, Dh = 16;
  torch::manual_seed(3);
  const at::Tensor x = torch::randn({B, S, n, Dh}).to(dt), dy = torch::randn({B, S, n, Dh}).to(dt);
  // Llama 3's table: freqs_cis[s, i] = exp(i·s·θ^(−2i/Dh)), θ = 500000.
  const at::Tensor inv = at::pow(500000.0, -at::arange(0, Dh, 2, at::kDouble) / Dh);
  const at::Tensor ang = at::outer(at::arange(S, at::kDouble), inv).to(at::kFloat);
  const at::Tensor freqs = at::polar(at::ones_like(ang), ang);  // complex64 [S, Dh/2]
  // Eager: as Transformer::apply_rope, a complex multiply in fp32.
  const at::Tensor xe = x.clone().requires_grad_();
  const at::Tensor xc = at::view_as_complex(xe.to(at::kFloat).reshape({B, S, n, Dh / 2, 2}));
  const at::Tensor ye = at::view_as_real(xc * freqs.view({1, S, 1, Dh / 2})).flatten(3).to(dt);
  ye.backward(dy);
  const auto xv = floats(x), gv = floats(dy);
  const at::Tensor fr = at::view_as_real(freqs).contiguous();
  const float* f = fr.data_ptr<float>();
  std::vector<float> y(xv.size()), dx(xv.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < n; ++h)
        for (int64_t i = 0; i < Dh / 2; ++i) {
          const int64_t o = ((b * S + s) * n + h) * Dh + 2 * i;
          const float c = f[(s * Dh / 2 + i) * 2], sn = f[(s * Dh / 2 + i) * 2 + 1];
          rm::rope(xv[o], xv[o + 1], c, sn, y[o], y[o + 1]);
          rm::rope_inverse(gv[o], gv[o + 1], c, sn, dx[o], dx[o + 1]);
        }
  EXPECT_TRUE(close(tensor_of(y, {B, S, n, Dh}, dt), ye.detach(), tol_for(dt))) << "y";
  EXPECT_TRUE(close(tensor_of(dx, {B, S, n, Dh}, dt), xe.grad(), tol_for(dt))) << "dx";
}

// The kernel's order: an online log-sum-exp per lane, lanes merged, then the
// loss and the gradient written in the logits' dtype.
TEST_P(RowMath, CrossEntropyMatchesEagerThroughLanesAndMerges) {
  const auto dt = GetParam();
  const int64_t N = 64, V = 1000, lanes = 32;
  torch::manual_seed(4);
  const at::Tensor logits = (3 * torch::randn({N, V})).to(dt);
  const at::Tensor labels = torch::randint(0, V, {N}, at::kLong);
  const at::Tensor le = logits.clone().requires_grad_();
  const at::Tensor loss = at::cross_entropy_loss(le.to(at::kFloat), labels);
  loss.backward();
  const auto x = floats(logits);
  const int64_t* lab = labels.data_ptr<int64_t>();
  std::vector<float> grad(N * V);
  double total = 0;
  for (int64_t r = 0; r < N; ++r) {
    const float* xr = &x[r * V];
    float m = -INFINITY, s = 0.f;
    for (int64_t lane = 0; lane < lanes; ++lane) {
      float lm = -INFINITY, ls = 0.f;
      for (int64_t v = lane; v < V; v += lanes) rm::lse_add(lm, ls, xr[v]);
      rm::lse_merge(m, s, lm, ls);
    }
    const float lse = rm::lse_value(m, s);
    total += rm::ce_loss(lse, xr[lab[r]]);
    for (int64_t v = 0; v < V; ++v) grad[r * V + v] = rm::ce_grad(xr[v], lse, v == lab[r], 1.0f / N);
  }
  EXPECT_NEAR(total / N, loss.item<double>(), 1e-6 * loss.item<double>());
  EXPECT_TRUE(close(tensor_of(grad, {N, V}, dt), le.grad(), tol_for(dt))) << "d logits";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RowMath, ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const auto& info) { return info.param == at::kFloat ? "fp32" : "bf16"; });

// AdamW's per-element math (the CUDA kernel of compile.enable's optimizer)
// against ATen's fused AdamW after a separate clipping multiply — what it
// replaces — and a float64 textbook AdamW, over three steps with
// different gradient scales (1 = nothing clipped).
TEST(RowMath, AdamWMatchesAtenFusedAdamWAfterClippingAndATextbookFloat64) {
  const int64_t N = 4099;
  const double lr = 3e-3, b1 = 0.9, b2 = 0.95, wd = 0.1, eps = 1e-8;
  torch::manual_seed(3);
  const at::Tensor p0 = torch::randn({N});
  std::vector<float> p = floats(p0), m(N, 0.f), v(N, 0.f);
  at::Tensor ap = p0.clone(), am = torch::zeros({N}), av = torch::zeros({N}), astep = torch::zeros({});
  at::Tensor dp = p0.to(at::kDouble), dm = torch::zeros({N}, at::kDouble), dv = torch::zeros({N}, at::kDouble);
  const float scales[] = {1.0f, 0.37f, 1.0f};
  for (int t = 1; t <= 3; ++t) {
    const at::Tensor g = torch::randn({N}) * (t == 2 ? 5.0 : 0.5);
    const float scale = scales[t - 1];
    const auto s = rm::adamw_step(lr, b1, b2, wd, eps, static_cast<float>(t), scale);
    const std::vector<float> gv = floats(g);
    for (int64_t i = 0; i < N; ++i) rm::adamw(p[i], gv[i], m[i], v[i], s);
    // ATen: clip in place, then the fused update.
    at::Tensor ag = g.clone();
    if (scale != 1.0f) ag.mul_(static_cast<double>(scale));
    astep.add_(1);
    at::_fused_adamw_({ap}, {ag}, {am}, {av}, {}, {astep}, lr, b1, b2, wd, eps, false, false);
    // Textbook, float64.
    const at::Tensor dg = g.to(at::kDouble) * static_cast<double>(scale);
    dp.mul_(1 - lr * wd);
    dm.mul_(b1).add_(dg, 1 - b1);
    dv.mul_(b2).addcmul_(dg, dg, 1 - b2);
    const at::Tensor denom = dv.sqrt() / std::sqrt(1 - std::pow(b2, t)) + eps;
    dp.addcdiv_(dm, denom, -lr / (1 - std::pow(b1, t)));
  }
  const at::Tensor got = tensor_of(p, {N}, at::kFloat);
  EXPECT_TRUE(close(got, ap, kFp32)) << "against ATen's fused AdamW";
  EXPECT_TRUE(close(tensor_of(m, {N}, at::kFloat), am, kFp32)) << "exp_avg";
  EXPECT_TRUE(close(tensor_of(v, {N}, at::kFloat), av, kFp32)) << "exp_avg_sq";
  EXPECT_TRUE(close(got.to(at::kDouble), dp, kFp32)) << "against float64";
  // The step moved every parameter (a kernel that skipped the update would pass nothing above).
  EXPECT_GT((got - p0).abs().min().item<double>(), 0.0);
}

TEST(RowMath, LogSumExpIgnoresMinusInfinityAndKeepsNaN) {
  float m = -INFINITY, s = 0.f;
  rm::lse_add(m, s, -INFINITY);
  rm::lse_add(m, s, 0.f);
  rm::lse_add(m, s, -INFINITY);
  EXPECT_FLOAT_EQ(rm::lse_value(m, s), 0.f);
  float m2 = -INFINITY, s2 = 0.f;
  rm::lse_merge(m, s, m2, s2);  // an empty lane changes nothing
  EXPECT_FLOAT_EQ(rm::lse_value(m, s), 0.f);
  rm::lse_add(m, s, NAN);
  EXPECT_TRUE(std::isnan(rm::lse_value(m, s)));
}

TEST(RowMath, LinearCrossEntropyChunksHoldAtMostTwoToThe27Logits) {
  EXPECT_EQ(linear_cross_entropy_rows_per_chunk(128256), (int64_t{1} << 27) / 128256);
  EXPECT_EQ(linear_cross_entropy_rows_per_chunk(int64_t{1} << 28), 1);
  EXPECT_LE(linear_cross_entropy_rows_per_chunk(2048) * 2048, int64_t{1} << 27);
}

}  // namespace
}  // namespace ctitan
