// Fused CPU kernels (trainer/kernels/fused_ops.h): every case of the shared
// table (tests/fused_cases.h) checked forward and backward against the plain
// ATen chain with autograd, within the case's per-dtype tolerance; plus the
// edge behaviour a table cannot express (fallback dtypes, NaN, bad labels).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "tests/fused_cases.h"
#include "trainer/kernels/fused_ops.h"

namespace ctitan::fused_cases {

// gtest prints a failing case by its name (found by argument lookup).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

namespace {

// |got − want| ≤ atol·max|want| + rtol·|want| everywhere (see fused_cases.h).
// Compared in fp32, in chunks: a 125M-vocab gradient is 65M elements.
::testing::AssertionResult close(const at::Tensor& got, const at::Tensor& want, Tol tol) {
  if (got.sizes() != want.sizes() || got.scalar_type() != want.scalar_type())
    return ::testing::AssertionFailure() << "got " << got.sizes() << " " << got.scalar_type() << ", want "
                                         << want.sizes() << " " << want.scalar_type();
  const at::Tensor g = got.flatten(), w = want.flatten();
  const int64_t n = w.numel(), chunk = int64_t{1} << 20;
  double scale = 0, worst = -1, worst_diff = 0, worst_got = 0, worst_want = 0;
  for (int64_t i = 0; i < n; i += chunk)
    scale = std::max(scale, w.narrow(0, i, std::min(chunk, n - i)).abs().max().item<double>());
  for (int64_t i = 0; i < n; i += chunk) {
    const at::Tensor gc = g.narrow(0, i, std::min(chunk, n - i)).to(at::kFloat);
    const at::Tensor wc = w.narrow(0, i, gc.numel()).to(at::kFloat);
    if (!gc.isfinite().all().item<bool>()) return ::testing::AssertionFailure() << "non-finite values";
    const at::Tensor diff = (gc - wc).abs();
    const at::Tensor excess = diff - tol.rtol * wc.abs() - tol.atol * scale;
    const int64_t k = excess.argmax().item<int64_t>();
    if (excess[k].item<double>() > worst) {
      worst = excess[k].item<double>();
      worst_diff = diff[k].item<double>();
      worst_got = gc[k].item<double>();
      worst_want = wc[k].item<double>();
    }
  }
  if (worst <= 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "|diff| " << worst_diff << " beyond tolerance (scale " << scale
                                       << "): got " << worst_got << " want " << worst_want;
}

class FusedKernelsCase : public ::testing::TestWithParam<Case> {};

TEST_P(FusedKernelsCase, ForwardAndBackwardMatchEager) {
  Case c = GetParam();
  // Loss rows are independent: 256 of the 2048 keep the 125M-vocab cases at
  // ~1 s instead of ~7 s (the benchmark runs all rows).
  if (c.op == Op::kCrossEntropy) c.shape[0] = std::min<int64_t>(c.shape[0], 256);
  const Inputs in = make_inputs(c);
  const at::Tensor want_out = forward(c, Impl::kReference, in);
  const at::Tensor dy = output_grad(want_out);
  const auto want_grads = torch::autograd::grad({want_out}, in.wrt, {dy});
  const Result got = forward_backward(c, Impl::kFused, in, dy);
  EXPECT_TRUE(close(got.out, want_out, c.tol)) << "forward";
  ASSERT_EQ(got.grads.size(), want_grads.size());
  for (size_t i = 0; i < want_grads.size(); ++i) EXPECT_TRUE(close(got.grads[i], want_grads[i], c.tol)) << "grad " << i;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = info.param.name;
  for (auto& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(FusedKernels, FusedKernelsCase, ::testing::ValuesIn(all_cases()), case_name);

TEST(FusedKernels, RunOnThisCpu) {
  // The numbers in the table are only about the kernels if they ran; a CPU
  // without AVX-512 runs the eager fallback (and says so in techniques()).
  if (at::get_cpu_capability().find("AVX512") == std::string::npos)
    GTEST_SKIP() << "this CPU runs ATen at " << at::get_cpu_capability() << ": no AVX-512, the fused kernels fall back";
  EXPECT_TRUE(fused_kernels_available()) << "ATen CPU capability: " << at::get_cpu_capability();
}

TEST(FusedKernels, Float64RunsTheEagerChainExactly) {
  at::Tensor x = at::randn({4, 8}, at::kDouble), w = at::randn({8}, at::kDouble);
  EXPECT_TRUE(at::equal(fused_rms_norm(x, w, 1e-5), at::rms_norm(x, {8}, w, 1e-5)));
  at::Tensor gu = at::randn({4, 16}, at::kDouble);
  EXPECT_TRUE(at::equal(fused_swiglu(gu), at::silu(gu.narrow(1, 0, 8)) * gu.narrow(1, 8, 8)));
}

TEST(FusedKernels, RmsNormTakesNonContiguousInput) {
  at::Tensor x = at::randn({32, 6}).t(), w = at::randn({6});  // [6,32] viewed as [32,6]ᵀ
  at::Tensor xt = x.t();
  EXPECT_TRUE(close(fused_rms_norm(xt, w, 1e-5), at::rms_norm(xt, {6}, w, 1e-5), kFp32Tol));
}

TEST(FusedKernels, RmsNormWithoutWeightGrad) {
  at::Tensor x = at::randn({5, 40}).requires_grad_(true), w = at::randn({40});
  const auto gx = torch::autograd::grad({fused_rms_norm(x, w, 1e-5).sum()}, {x})[0];
  const auto gx_ref = torch::autograd::grad({at::rms_norm(x, {40}, w, 1e-5).sum()}, {x})[0];
  EXPECT_TRUE(close(gx, gx_ref, kFp32Tol));
}

TEST(FusedKernels, CrossEntropyPropagatesNaNAndInf) {
  at::Tensor logits = at::randn({3, 40});
  logits[1][7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(fused_cross_entropy(logits, at::zeros({3}, at::kLong)).item<float>()));
  logits[1][7] = -std::numeric_limits<float>::infinity();  // a masked logit is fine
  const auto labels = at::ones({3}, at::kLong);
  EXPECT_TRUE(close(fused_cross_entropy(logits, labels), at::cross_entropy_loss(logits, labels), kFp32Tol));
}

TEST(FusedKernels, CrossEntropyGradIntoLogitsOverwritesThem) {
  const at::Tensor labels = at::randint(0, 300, {17}, at::kLong);
  const at::Tensor logits = at::randn({17, 300}).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor want = torch::autograd::grad({fused_cross_entropy(logits, labels)}, {logits})[0];
  const at::Tensor scratch = logits.detach().clone().requires_grad_(true);
  const at::Tensor got = torch::autograd::grad({fused_cross_entropy(scratch, labels, true)}, {scratch})[0];
  EXPECT_TRUE(at::equal(got, want));
  if (!fused_kernels_available()) GTEST_SKIP() << "no AVX-512: the eager fallback allocates its gradient";
  EXPECT_EQ(got.data_ptr(), scratch.data_ptr());  // no [N,V] allocation
}

TEST(FusedKernels, CrossEntropyRejectsOutOfRangeLabels) {
  at::Tensor logits = at::randn({2, 10});
  EXPECT_THROW(fused_cross_entropy(logits, at::full({2}, 10, at::kLong)), c10::Error);
  EXPECT_THROW(fused_cross_entropy(logits, at::full({2}, -1, at::kLong)), c10::Error);
}

TEST(FusedKernels, RopeRejectsMismatchedFreqs) {
  const at::Tensor freqs = precompute_freqs_cis(16, 4, 10000.0, RopeScaling{});
  EXPECT_THROW(fused_rope(at::randn({1, 8, 2, 16}), freqs, at::kFloat), c10::Error);  // S 8 > 4
  EXPECT_THROW(fused_rope(at::randn({1, 4, 2, 8}), freqs, at::kFloat), c10::Error);   // Dh 8 ≠ 16
}

}  // namespace
}  // namespace ctitan::fused_cases
