// Float8 numerics: ctitan's e4m3fn/e5m2 codec against the OCP FP8 spec and
// LibTorch, dynamic scaling, and float8_linear against at::linear and against
// a plain-ATen re-statement of torchao's recipes.
#include <gtest/gtest.h>

#include <iostream>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "common/errors.h"
#include "trainer/float8/float8_linear.h"
#include "trainer/float8/fp8_codec.h"

namespace ctitan {
namespace {

constexpr Fp8Format kFormats[] = {Fp8Format::kE4M3FN, Fp8Format::kE5M2};
constexpr Float8Recipe kRecipes[] = {Float8Recipe::kTensorwise, Float8Recipe::kRowwise,
                                     Float8Recipe::kRowwiseWithGwHp};

// The OCP FP8 v1.0 value of a code, from its bit fields — written out again
// here, independently of the codec's table.
double spec_value(uint8_t c, Fp8Format f) {
  const bool e4m3 = f == Fp8Format::kE4M3FN;
  const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int exp = (c & 0x7F) >> mbits, mant = c & ((1 << mbits) - 1);
  const double sign = (c & 0x80) ? -1.0 : 1.0;
  if (e4m3 && exp == 15 && mant == 7) return std::numeric_limits<double>::quiet_NaN();
  if (!e4m3 && exp == 31) return mant == 0 ? sign * INFINITY : std::numeric_limits<double>::quiet_NaN();
  if (exp == 0) return sign * std::pow(2.0, 1 - bias) * (mant / double(1 << mbits));
  return sign * std::pow(2.0, exp - bias) * (1.0 + mant / double(1 << mbits));
}

bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

at::Tensor all_codes() { return torch::arange(256, torch::kInt).to(torch::kByte); }

TEST(Float8Codec, EveryCodeDecodesToTheSpecValueAndToLibTorchs) {
  for (auto f : kFormats) {
    const at::Tensor ours = fp8_decode(all_codes(), f);
    const at::Tensor torch_dec = all_codes().view(fp8_torch_dtype(f)).to(torch::kFloat);
    for (int c = 0; c < 256; ++c) {
      const double spec = spec_value(static_cast<uint8_t>(c), f);
      EXPECT_TRUE(same_value(fp8_decode(static_cast<uint8_t>(c), f), spec)) << fp8_format_name(f) << " code " << c;
      EXPECT_TRUE(same_value(ours[c].item<float>(), spec)) << fp8_format_name(f) << " code " << c;
      EXPECT_TRUE(same_value(torch_dec[c].item<float>(), spec)) << fp8_format_name(f) << " code " << c;
    }
  }
}

TEST(Float8Codec, SpecLandmarks) {
  using F = Fp8Format;
  EXPECT_EQ(fp8_decode(0x7E, F::kE4M3FN), 448.0f);
  EXPECT_EQ(fp8_decode(0x08, F::kE4M3FN), std::ldexp(1.0f, -6));   // min normal
  EXPECT_EQ(fp8_decode(0x01, F::kE4M3FN), std::ldexp(1.0f, -9));   // min subnormal
  EXPECT_EQ(fp8_decode(0x38, F::kE4M3FN), 1.0f);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7F, F::kE4M3FN)) && std::isnan(fp8_decode(0xFF, F::kE4M3FN)));
  EXPECT_EQ(fp8_decode(0x7B, F::kE5M2), 57344.0f);
  EXPECT_EQ(fp8_decode(0x04, F::kE5M2), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp8_decode(0x01, F::kE5M2), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_decode(0x3C, F::kE5M2), 1.0f);
  EXPECT_EQ(fp8_decode(0x7C, F::kE5M2), INFINITY);
  EXPECT_EQ(fp8_decode(0xFC, F::kE5M2), -INFINITY);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7D, F::kE5M2)));
  EXPECT_EQ(fp8_max(F::kE4M3FN), 448.0f);
  EXPECT_EQ(fp8_max(F::kE5M2), 57344.0f);
}

TEST(Float8Codec, EncodeRoundTripsEveryFiniteCode) {
  for (auto f : kFormats)
    for (bool sat : {true, false})
      for (int c = 0; c < 256; ++c) {
        const float v = fp8_decode(static_cast<uint8_t>(c), f);
        if (!std::isfinite(v)) continue;
        EXPECT_EQ(fp8_encode(v, f, sat), c) << fp8_format_name(f) << " code " << c;  // -0 → 0x80 too
      }
}

// Between two adjacent finite codes the exact midpoint goes to the code with
// an even mantissa; one float ulp either side goes to the nearer code.
TEST(Float8Codec, MidpointsRoundToNearestEven) {
  for (auto f : kFormats) {
    const int max_code = f == Fp8Format::kE4M3FN ? 0x7E : 0x7B;
    for (int c = 0; c < max_code; ++c) {
      for (int sign : {0, 0x80}) {
        const uint8_t lo = static_cast<uint8_t>(c | sign), hi = static_cast<uint8_t>((c + 1) | sign);
        const float a = fp8_decode(lo, f), b = fp8_decode(hi, f);
        const float mid = (a + b) / 2;  // exact: both have ≤ 4 significant bits
        ASSERT_EQ(static_cast<double>(mid), (double(a) + double(b)) / 2);
        EXPECT_EQ(fp8_encode(mid, f), (c & 1) ? hi : lo) << fp8_format_name(f) << " between " << c << "," << c + 1;
        EXPECT_EQ(fp8_encode(std::nextafter(mid, a), f), lo);
        EXPECT_EQ(fp8_encode(std::nextafter(mid, b), f), hi);
      }
    }
  }
}

TEST(Float8Codec, BeyondMaxSaturatesOrOverflowsPerSpec) {
  using F = Fp8Format;
  for (float v : {449.0f, 464.0f, 465.0f, 480.0f, 1e6f, 3e38f, INFINITY}) {
    EXPECT_EQ(fp8_encode(v, F::kE4M3FN, true), 0x7E) << v;
    EXPECT_EQ(fp8_encode(-v, F::kE4M3FN, true), 0xFE) << v;
  }
  // Non-saturating: 464 is the tie between 448 (even) and the NaN slot.
  EXPECT_EQ(fp8_encode(464.0f, F::kE4M3FN, false), 0x7E);
  EXPECT_EQ(fp8_encode(std::nextafter(464.0f, 500.0f), F::kE4M3FN, false), 0x7F);
  EXPECT_EQ(fp8_encode(INFINITY, F::kE4M3FN, false), 0x7F);
  EXPECT_EQ(fp8_encode(-1e6f, F::kE4M3FN, false), 0xFF);
  for (float v : {57345.0f, 61440.0f, 1e9f, INFINITY}) {
    EXPECT_EQ(fp8_encode(v, F::kE5M2, true), 0x7B) << v;
    EXPECT_EQ(fp8_encode(-v, F::kE5M2, true), 0xFB) << v;
  }
  // Non-saturating e5m2: 61440 ties between 57344 (odd mantissa) and inf.
  EXPECT_EQ(fp8_encode(std::nextafter(61440.0f, 0.0f), F::kE5M2, false), 0x7B);
  EXPECT_EQ(fp8_encode(61440.0f, F::kE5M2, false), 0x7C);
  EXPECT_EQ(fp8_encode(-INFINITY, F::kE5M2, false), 0xFC);
  for (auto f : kFormats)
    for (bool sat : {true, false}) {
      EXPECT_TRUE(std::isnan(fp8_decode(fp8_encode(NAN, f, sat), f)));
      EXPECT_TRUE(std::isnan(fp8_decode(fp8_encode(-NAN, f, sat), f)));
    }
}

TEST(Float8Codec, TinyValuesRoundToSubnormalsOrZero) {
  for (auto f : kFormats) {
    const float sub = fp8_decode(0x01, f);  // smallest subnormal
    EXPECT_EQ(fp8_encode(sub / 2, f), 0x00) << "tie to even (zero)";
    EXPECT_EQ(fp8_encode(std::nextafter(sub / 2, 1.0f), f), 0x01);
    EXPECT_EQ(fp8_encode(1.5f * sub, f), 0x02) << "tie between 1 and 2 → 2";
    EXPECT_EQ(fp8_encode(2.5f * sub, f), 0x02) << "tie between 2 and 3 → 2";
    EXPECT_EQ(fp8_encode(-sub / 4, f), 0x80) << "sign kept";
    EXPECT_EQ(fp8_encode(1e-40f, f), 0x00) << "fp32 subnormal";
    EXPECT_EQ(fp8_encode(std::numeric_limits<float>::denorm_min(), f), 0x00);
    EXPECT_EQ(fp8_encode(0.0f, f), 0x00);
    EXPECT_EQ(fp8_encode(-0.0f, f), 0x80);
    // Largest subnormal rounds up into the smallest normal when appropriate.
    const int first_normal = f == Fp8Format::kE4M3FN ? 0x08 : 0x04;
    const float max_sub = fp8_decode(static_cast<uint8_t>(first_normal - 1), f);
    const float min_norm = fp8_decode(static_cast<uint8_t>(first_normal), f);
    EXPECT_EQ(fp8_encode(std::nextafter((max_sub + min_norm) / 2, 1.0f), f), first_normal);
  }
}

// Random floats over every exponent the formats cover (and the subnormal
// and underflow ranges below): identical to LibTorch's cast. Only in range:
// LibTorch's e5m2 cast does not saturate.
TEST(Float8Codec, EncodeMatchesLibTorchOnMillionsOfRandomFloats) {
  torch::manual_seed(0);
  const int64_t n = 2'000'000;
  for (auto f : kFormats) {
    const double hi = std::log2(fp8_max(f)), lo = f == Fp8Format::kE4M3FN ? -12.0 : -19.0;
    at::Tensor x = torch::randn({n}) * torch::exp2(torch::rand({n}, torch::kDouble) * (hi - lo) + lo).to(torch::kFloat);
    x = x.clamp(-fp8_max(f), fp8_max(f));
    const at::Tensor ours = fp8_encode(x, f, /*saturate=*/false);
    const at::Tensor theirs = x.to(fp8_torch_dtype(f)).view(torch::kByte);
    const int64_t diff = ours.ne(theirs).sum().item<int64_t>();
    EXPECT_EQ(diff, 0) << fp8_format_name(f);
  }
}

// Every bf16 bit pattern in range: exhaustive for bf16 inputs.
TEST(Float8Codec, EncodeMatchesLibTorchOnEveryBf16) {
  const at::Tensor x = torch::arange(65536, torch::kInt).to(torch::kShort).view(torch::kBFloat16).to(torch::kFloat);
  for (auto f : kFormats) {
    const at::Tensor in_range = x.abs().le(fp8_max(f));
    const at::Tensor xs = x.masked_select(in_range);
    const at::Tensor ours = fp8_encode(xs, f, false), theirs = xs.to(fp8_torch_dtype(f)).view(torch::kByte);
    EXPECT_EQ(ours.ne(theirs).sum().item<int64_t>(), 0) << fp8_format_name(f);
    EXPECT_GT(xs.numel(), 30000);
  }
}

TEST(Float8Codec, TensorFormsMatchScalarOnesForAnyLayoutAndDtype) {
  torch::manual_seed(1);
  const at::Tensor base = torch::randn({64, 96}) * 100;
  for (auto f : kFormats) {
    const at::Tensor x = base.t();  // non-contiguous
    const at::Tensor codes = fp8_encode(x, f);
    const at::Tensor flat_codes = codes.contiguous().view(-1), flat_x = x.contiguous().view(-1);
    for (int64_t i = 0; i < x.numel(); ++i)
      ASSERT_EQ(flat_codes[i].item<int>(), fp8_encode(flat_x[i].item<float>(), f));
    // bf16 input: the same codes as its float32 value.
    const at::Tensor xb = x.to(torch::kBFloat16);
    EXPECT_TRUE(fp8_encode(xb, f).equal(fp8_encode(xb.to(torch::kFloat), f)));
    // Decoding to bf16 is exact.
    EXPECT_TRUE(fp8_decode(codes, f, torch::kBFloat16).to(torch::kFloat).equal(fp8_decode(codes, f)));
  }
}

TEST(Float8Codec, FusedScaledQuantiseIsDecodeOfEncode) {
  torch::manual_seed(2);
  const at::Tensor x = torch::randn({600, 70}) * 3;  // big enough to split over threads
  const at::Tensor scales[] = {torch::tensor(37.5f), torch::rand({600, 1}) * 100 + 1, torch::rand({1, 70}) * 100 + 1};
  for (auto f : kFormats)
    for (const auto& s : scales)
      for (auto in : {torch::kFloat, torch::kBFloat16})
        for (auto out : {torch::kFloat, torch::kBFloat16}) {
          const at::Tensor xi = x.to(in);
          const at::Tensor want = fp8_decode(fp8_encode(xi.to(torch::kFloat) * s, f, true), f);
          EXPECT_TRUE(fp8_quantize_scaled(xi, s, f, out).to(torch::kFloat).equal(want));
        }
}

// ---- scales and quantisation ------------------------------------------------

TEST(Float8Scale, AbsMaxMatchesATenAndPropagatesNaN) {
  torch::manual_seed(10);
  for (auto dt : {torch::kFloat, torch::kBFloat16}) {
    const at::Tensor x = (torch::randn({1000, 600}) * 5).to(dt);  // split over threads
    const at::Tensor a = x.abs().to(torch::kFloat);
    EXPECT_TRUE(fp8_abs_max(x, -1).equal(a.max()));
    EXPECT_TRUE(fp8_abs_max(x, 1).equal(a.amax({1}, true)));
    EXPECT_TRUE(fp8_abs_max(x, 0).equal(a.amax({0}, true)));
    at::Tensor y = x.clone();
    y[3][7] = NAN;
    EXPECT_TRUE(std::isnan(fp8_abs_max(y, -1).item<float>()));
    EXPECT_TRUE(std::isnan(fp8_abs_max(y, 1)[3][0].item<float>()));
    EXPECT_FALSE(std::isnan(fp8_abs_max(y, 1)[4][0].item<float>()));
    EXPECT_TRUE(std::isnan(fp8_abs_max(y, 0)[0][7].item<float>()));
  }
}

TEST(Float8Scale, AmaxBasedPerTensorRowAndColumn) {
  const at::Tensor x = torch::tensor({{1.0f, -4.0f, 0.5f}, {0.0f, 0.25f, -0.125f}});
  using S = Float8Scaling;
  const auto e4 = Fp8Format::kE4M3FN;
  EXPECT_EQ(float8_scale(x, {S::kTensorwise, e4}, false).dim(), 0);
  EXPECT_EQ(float8_scale(x, {S::kTensorwise, e4}, false).item<float>(), 112.0f);  // 448 / 4
  EXPECT_EQ(float8_scale(x, {S::kTensorwise, Fp8Format::kE5M2}, false).item<float>(), 14336.0f);
  const at::Tensor rows = float8_scale(x, {S::kPerRow, e4}, false);
  EXPECT_EQ(rows.sizes(), (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(rows.equal(torch::tensor({{112.0f}, {1792.0f}})));
  const at::Tensor cols = float8_scale(x, {S::kPerColumn, e4}, false);
  EXPECT_EQ(cols.sizes(), (std::vector<int64_t>{1, 3}));
  EXPECT_TRUE(cols.equal(torch::tensor({{448.0f, 112.0f, 896.0f}})));
  // float32 of the float64 quotient, as torchao computes it.
  const at::Tensor y = torch::tensor({{3.0f, -7.0f}});
  EXPECT_EQ(float8_scale(y, {S::kTensorwise, e4}, false).item<float>(), static_cast<float>(448.0 / 7.0));
  EXPECT_EQ(float8_scale(y, {S::kTensorwise, e4}, true).item<float>(), 64.0f);  // 64 ≤ 448/7 < 128
  // All zeros: eps keeps the scale finite and the quantised values zero.
  const at::Tensor z = torch::zeros({4, 4});
  const float zs = float8_scale(z, {S::kTensorwise, e4}, false).item<float>();
  EXPECT_EQ(zs, static_cast<float>(448.0 / 1e-12));
  EXPECT_TRUE(float8_dequantize(float8_quantize(z, {S::kTensorwise, e4}, false, true)).equal(z));
}

TEST(Float8Scale, RowwiseScalesArePerRow) {
  torch::manual_seed(3);
  // Rows spanning 8 orders of magnitude: per-row scaling keeps every row's
  // relative precision, one tensor-wide scale flushes the small rows.
  const at::Tensor x = torch::randn({8, 256}) * torch::pow(10.0, torch::arange(-4, 4).to(torch::kFloat)).unsqueeze(1);
  const auto e4 = Fp8Format::kE4M3FN;
  const Float8Tensor rq = float8_quantize(x, {Float8Scaling::kPerRow, e4}, false, true);
  const Float8Tensor tq = float8_quantize(x, {Float8Scaling::kTensorwise, e4}, false, true);
  ASSERT_EQ(rq.scale.sizes(), (std::vector<int64_t>{8, 1}));
  const at::Tensor rd = float8_dequantize(rq), td = float8_dequantize(tq);
  for (int64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(rq.data[r].to(torch::kFloat).abs().max().item<float>(), 448.0f) << "row " << r << " uses the full range";
    EXPECT_GT(sqnr_db(x[r], rd[r]), 28.0) << "row " << r;
  }
  EXPECT_LT(sqnr_db(x[0], td[0]), 10.0) << "tensorwise loses the smallest row";
  // Column scales of the transpose are the row scales.
  EXPECT_TRUE(float8_scale(x.t(), {Float8Scaling::kPerColumn, e4}, false).equal(rq.scale.t()));
}

// |dequant(quant(x)) − x| ≤ half an fp8 ulp of x·scale, divided by the scale:
// relative 2^-(M+1) in the normal range, absolute half the smallest subnormal
// below it. Checked element by element for every cast the recipes use.
TEST(Float8Scale, QuantiseDequantiseErrorBoundsPerRecipeCast) {
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({128, 96}) * 0.02;
  for (auto r : kRecipes) {
    const Float8RecipeSpec s = float8_recipe_spec(r);
    for (const Float8Cast& c : {s.input, s.weight, s.grad_output, s.weight_for_grad_input,
                                s.grad_output_for_grad_weight, s.input_for_grad_weight}) {
      if (c.scaling == Float8Scaling::kHighPrecision) continue;
      const bool e4 = c.format == Fp8Format::kE4M3FN;
      const Float8Tensor q = float8_quantize(x, c, s.pow2_scales, true);
      const at::Tensor scaled = x * q.scale;  // the kernel's fp32 product
      const at::Tensor err = (q.data.to(torch::kFloat) - scaled).abs();  // exact, in fp8 units
      const double min_normal = e4 ? std::ldexp(1.0, -6) : std::ldexp(1.0, -14);
      const at::Tensor bound = torch::where(scaled.abs() >= min_normal, scaled.abs() * std::ldexp(1.0, e4 ? -4 : -3),
                                            torch::full_like(scaled, e4 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -17)));
      EXPECT_TRUE(err.le(bound).all().item<bool>()) << float8_recipe_name(r);
      EXPECT_GT(sqnr_db(x, float8_dequantize(q)), e4 ? 30.0 : 24.0) << float8_recipe_name(r);
    }
  }
}

// ---- float8_linear -----------------------------------------------------------

// torchao's recipe restated with plain ATen: clamp, LibTorch's cast, fp32
// GEMM on the dequantised operands (torchao's own emulation).
at::Tensor ref_q(const at::Tensor& t, Float8Cast c, bool pow2) {
  if (c.scaling == Float8Scaling::kHighPrecision) return t;
  at::Tensor amax = c.scaling == Float8Scaling::kTensorwise ? t.abs().max()
                    : t.abs().amax({c.scaling == Float8Scaling::kPerRow ? 1 : 0}, true);
  at::Tensor scale = (fp8_max(c.format) / amax.to(torch::kDouble).clamp_min(1e-12)).to(torch::kFloat);
  if (pow2) scale = torch::exp2(torch::floor(torch::log2(scale)));
  const double m = fp8_max(c.format);
  return (t * scale).clamp(-m, m).to(fp8_torch_dtype(c.format)).to(torch::kFloat) / scale;
}

// torchao's Float8LinearConfig.from_recipe_name (torchao/float8/config.py)
// and the axiswise dims of float8_linear.py, written out independently of
// float8_recipe_spec(): per-row for the forward operands, per-column for the
// operands whose reduction dim is the row index in the backward GEMMs.
Float8RecipeSpec torchao_recipe(Float8Recipe r) {
  using S = Float8Scaling;
  const auto e4 = Fp8Format::kE4M3FN, e5 = Fp8Format::kE5M2;
  const Float8Cast hp{S::kHighPrecision, e4};
  if (r == Float8Recipe::kTensorwise)
    return {{S::kTensorwise, e4}, {S::kTensorwise, e4}, {S::kTensorwise, e5},
            {S::kTensorwise, e4}, {S::kTensorwise, e5}, {S::kTensorwise, e4}, false};
  if (r == Float8Recipe::kRowwise)
    return {{S::kPerRow, e4}, {S::kPerRow, e4}, {S::kPerRow, e4},
            {S::kPerColumn, e4}, {S::kPerColumn, e4}, {S::kPerColumn, e4}, true};
  return {{S::kPerRow, e4}, {S::kPerRow, e4}, {S::kPerRow, e4}, {S::kTensorwise, e4}, hp, hp, false};
}

TEST(Float8Linear, RecipeTablesAreTorchaos) {
  for (auto r : kRecipes) {
    const Float8RecipeSpec a = float8_recipe_spec(r), b = torchao_recipe(r);
    const Float8Cast as[] = {a.input, a.weight, a.grad_output, a.weight_for_grad_input,
                             a.grad_output_for_grad_weight, a.input_for_grad_weight};
    const Float8Cast bs[] = {b.input, b.weight, b.grad_output, b.weight_for_grad_input,
                             b.grad_output_for_grad_weight, b.input_for_grad_weight};
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(as[i].scaling, bs[i].scaling) << float8_recipe_name(r) << " operand " << i;
      if (bs[i].scaling != Float8Scaling::kHighPrecision) {
        EXPECT_EQ(as[i].format, bs[i].format) << float8_recipe_name(r) << " operand " << i;
      }
    }
    EXPECT_EQ(a.pow2_scales, b.pow2_scales) << float8_recipe_name(r);
  }
}

struct Grads {
  at::Tensor y, gx, gw;
};

Grads run(Float8Recipe r, const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& go, bool f8) {
  at::Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_();
  at::Tensor y = f8 ? float8_linear(x, w, r, true) : at::linear(x, w);
  y.backward(go);
  return {y.detach(), x.grad(), w.grad()};
}

struct Case {
  at::Tensor x, w, go;
};
Case make_case(int64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({4, 32, 64}), torch::randn({48, 64}) * 0.125, torch::randn({4, 32, 48})};
}

double rel_err(const at::Tensor& ref, const at::Tensor& got) {
  return ((got.to(torch::kDouble) - ref.to(torch::kDouble)).norm() / ref.to(torch::kDouble).norm()).item<double>();
}

TEST(Float8Linear, ForwardAndBackwardNearAtLinearPerRecipe) {
  const Case c = make_case(5);
  const Grads ref = run(Float8Recipe::kTensorwise, c.x, c.w, c.go, false);
  // Max relative (Frobenius) error per recipe: y, grad_x, grad_w. e4m3's
  // half-ulp is 2^-4 (≈ 3.6% rms per operand), e5m2's 2^-3.
  struct Tol { Float8Recipe r; double y, gx, gw; };
  for (const Tol t : {Tol{Float8Recipe::kTensorwise, 0.06, 0.09, 0.09}, Tol{Float8Recipe::kRowwise, 0.06, 0.06, 0.06},
                      Tol{Float8Recipe::kRowwiseWithGwHp, 0.06, 0.06, 1e-6}}) {
    const Grads g = run(t.r, c.x, c.w, c.go, true);
    EXPECT_LT(rel_err(ref.y, g.y), t.y) << float8_recipe_name(t.r);
    EXPECT_LT(rel_err(ref.gx, g.gx), t.gx) << float8_recipe_name(t.r);
    EXPECT_LT(rel_err(ref.gw, g.gw), t.gw) << float8_recipe_name(t.r);
    EXPECT_GT(sqnr_db(ref.y, g.y), 25.0) << float8_recipe_name(t.r);
    EXPECT_GT(sqnr_db(ref.gx, g.gx), 21.0) << float8_recipe_name(t.r);
    EXPECT_GT(sqnr_db(ref.gw, g.gw), 21.0) << float8_recipe_name(t.r);
  }
}

// Same numbers as torchao's recipe computed with LibTorch's float8 dtypes up
// to the bf16 rounding of the GEMM result: pins which tensor gets which
// dtype and axis (a wrong format or axis is off by percents, not 2^-8).
TEST(Float8Linear, MatchesTorchaoRecipeRestatedWithLibTorchCasts) {
  const Case c = make_case(6);
  for (auto r : kRecipes) {
    const Float8RecipeSpec s = torchao_recipe(r);
    const bool p2 = s.pow2_scales;
    const at::Tensor x2 = c.x.reshape({-1, 64}), go2 = c.go.reshape({-1, 48});
    const at::Tensor y = at::mm(ref_q(x2, s.input, p2), ref_q(c.w, s.weight, p2).t());
    const at::Tensor gx = at::mm(ref_q(go2, s.grad_output, p2), ref_q(c.w, s.weight_for_grad_input, p2));
    const at::Tensor gw =
        at::mm(ref_q(go2, s.grad_output_for_grad_weight, p2).t(), ref_q(x2, s.input_for_grad_weight, p2));
    const Grads g = run(r, c.x, c.w, c.go, true);
    EXPECT_LT(rel_err(y, g.y.reshape({-1, 48})), 3e-3) << float8_recipe_name(r);
    EXPECT_LT(rel_err(gx, g.gx.reshape({-1, 64})), 3e-3) << float8_recipe_name(r);
    EXPECT_LT(rel_err(gw, g.gw), 3e-3) << float8_recipe_name(r);
  }
}

TEST(Float8Linear, GradientsFlowToInputAndWeightInBf16) {
  torch::manual_seed(7);
  for (auto r : kRecipes) {
    at::Tensor w = (torch::randn({32, 16}) * 0.2).to(torch::kBFloat16).requires_grad_();  // leaf
    at::Tensor leaf = torch::randn({2, 8, 16}).requires_grad_();
    at::Tensor x = (leaf * 2).to(torch::kBFloat16);  // non-leaf, like an activation
    at::Tensor y = float8_linear(x, w, r, true);
    EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 8, 32}));
    y.to(torch::kFloat).pow(2).sum().backward();
    ASSERT_TRUE(w.grad().defined() && leaf.grad().defined()) << float8_recipe_name(r);
    EXPECT_EQ(w.grad().scalar_type(), torch::kBFloat16);
    EXPECT_GT(w.grad().abs().sum().item<float>(), 0.0f);
    EXPECT_GT(leaf.grad().abs().sum().item<float>(), 0.0f);
    const at::Tensor xf = x.detach().to(torch::kFloat), wf = w.detach().to(torch::kFloat);
    const Grads ref = run(r, xf, wf, 2 * at::linear(xf, wf), false);
    EXPECT_GT(sqnr_db(ref.gw, w.grad().to(torch::kFloat)), 18.0) << float8_recipe_name(r);
  }
}

TEST(Float8Linear, RowwiseIsolatesTokensTensorwiseDoesNot) {
  const Case c = make_case(8);
  at::Tensor x2 = c.x.clone();
  x2[0][0].mul_(1000.0);  // one outlier token
  for (auto r : kRecipes) {
    const at::Tensor y1 = float8_linear(c.x, c.w, r, true), y2 = float8_linear(x2, c.w, r, true);
    const bool same_elsewhere = y1.slice(1, 1).equal(y2.slice(1, 1));
    EXPECT_EQ(same_elsewhere, r != Float8Recipe::kTensorwise) << float8_recipe_name(r);
  }
}

// LibTorch's CPU _scaled_mm (a slow reference) takes rowwise scales from
// 2.15 on; 2.11's takes per-tensor scales only (scripts/check_torch.sh 2.11.0).
bool cpu_scaled_mm_takes_rowwise() {
  const at::Tensor a = torch::ones({16, 16}).to(at::kFloat8_e4m3fn);
  try {
    at::_scaled_mm(a, a.t(), torch::ones({16, 1}), torch::ones({1, 16}), std::nullopt, std::nullopt, torch::kBFloat16);
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

// The emulated GEMM agrees with LibTorch's CPU _scaled_mm on the same float8
// operands and scales.
TEST(Float8Linear, EmulatedGemmMatchesLibTorchCpuScaledMm) {
  torch::manual_seed(9);
  const at::Tensor a = torch::randn({32, 64}), b = torch::randn({48, 64});
  using S = Float8Scaling;
  for (auto [sa, sb, fa] : {std::tuple{S::kTensorwise, S::kTensorwise, Fp8Format::kE5M2},
                            std::tuple{S::kPerRow, S::kPerRow, Fp8Format::kE4M3FN}}) {
    if (sa == S::kPerRow && !cpu_scaled_mm_takes_rowwise()) {
      std::cout << "[  NOTE    ] rowwise not compared: this LibTorch's CPU _scaled_mm takes per-tensor scales only\n";
      continue;
    }
    const Float8Tensor qa = float8_quantize(a, {sa, fa}, false, true);
    const Float8Tensor qb = float8_quantize(b, {sb, Fp8Format::kE4M3FN}, false, true).t();
    const at::Tensor ours = float8_mm(qa, qb, torch::kFloat, false);
    const at::Tensor ta = qa.data.to(fp8_torch_dtype(fa));
    const at::Tensor tb = qb.data.t().contiguous().to(at::kFloat8_e4m3fn).t();
    const at::Tensor theirs = at::_scaled_mm(ta, tb, qa.scale.reciprocal(), qb.scale.reciprocal(), std::nullopt,
                                             std::nullopt, torch::kFloat);
    EXPECT_LT(rel_err(theirs, ours), 4e-3);
  }
}

// FSDP's float8 all-gather brings e4m3 codes. On the scaled_mm backend they
// go into _scaled_mm as float8, like the input (LibTorch's CPU _scaled_mm
// refuses a bf16 operand beside a float8 one, as CUDA's does); on the
// emulated backend as their bf16 values, as before.
TEST(Float8Linear, GatheredWeightCodesTakeTheBackendsOperandForm) {
  torch::manual_seed(5);
  constexpr Fp8Format e4m3 = Fp8Format::kE4M3FN;
  const at::Tensor x = torch::randn({16, 32}), w = torch::randn({24, 32});
  const Float8Cast cast{Float8Scaling::kTensorwise, e4m3};
  const at::Tensor sx = float8_scale(x, cast, false), sw = float8_scale(w, cast, false);
  const at::Tensor x_codes = fp8_encode(x * sx, e4m3), w_codes = fp8_encode(w * sw, e4m3);
  const at::Tensor fast = float8_operand_data(w_codes, e4m3, "scaled_mm");
  EXPECT_EQ(fast.scalar_type(), at::kFloat8_e4m3fn);
  EXPECT_TRUE(torch::equal(fast.view(at::kByte), w_codes));  // the gathered bytes, not a decoded copy
  const at::Tensor emul = float8_operand_data(w_codes, e4m3, "emulated");
  EXPECT_EQ(emul.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(torch::equal(emul, fp8_decode(w_codes, e4m3, at::kBFloat16)));
  // y = x @ wᵀ as float8_linear runs it on each backend.
  const Float8Tensor qx_fast{float8_operand_data(x_codes, e4m3, "scaled_mm"), sx, e4m3}, qw_fast{fast, sw, e4m3};
  const Float8Tensor qx_emul{float8_operand_data(x_codes, e4m3, "emulated"), sx, e4m3}, qw_emul{emul, sw, e4m3};
  const at::Tensor y_fast = float8_mm(qx_fast, qw_fast.t(), torch::kBFloat16, true);
  const at::Tensor y_emul = float8_mm(qx_emul, qw_emul.t(), torch::kBFloat16, true);
  EXPECT_LT(rel_err(y_fast.to(torch::kFloat), y_emul.to(torch::kFloat)), 4e-3);
}

// _scaled_mm on sm90 gives rowwise scales only a bf16 output: fp32 (and
// fp16) outputs are asked for in bf16 and cast, as torchao does.
TEST(Float8Linear, RowwiseScaledMmAsksForBf16AndCasts) {
  EXPECT_EQ(scaled_mm_out_dtype(torch::kFloat, true), torch::kBFloat16);
  EXPECT_EQ(scaled_mm_out_dtype(torch::kHalf, true), torch::kBFloat16);
  EXPECT_EQ(scaled_mm_out_dtype(torch::kBFloat16, true), torch::kBFloat16);
  EXPECT_EQ(scaled_mm_out_dtype(torch::kFloat, false), torch::kFloat);
  if (!cpu_scaled_mm_takes_rowwise())
    GTEST_SKIP() << "this LibTorch's CPU _scaled_mm takes per-tensor scales only (2.11); the rule is checked above, "
                    "the GEMM on a GPU (GpuFloat8.RowwiseWithFp32ComputeRunsThroughScaledMm)";
  torch::manual_seed(6);
  const Float8Cast rows{Float8Scaling::kPerRow, Fp8Format::kE4M3FN};
  Float8Tensor qa = float8_quantize(torch::randn({8, 32}), rows, false, true);
  Float8Tensor qb = float8_quantize(torch::randn({12, 32}), rows, false, true).t();
  qa.data = qa.data.to(at::kFloat8_e4m3fn);  // exact: the scaled_mm operand form
  qb.data = qb.data.to(at::kFloat8_e4m3fn);
  const at::Tensor f32 = float8_mm(qa, qb, torch::kFloat, true);
  EXPECT_EQ(f32.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(f32, float8_mm(qa, qb, torch::kBFloat16, true).to(torch::kFloat)));
}

TEST(Float8Linear, UnknownRecipeIsOneLineInputError) {
  for (auto r : kRecipes) EXPECT_EQ(parse_float8_recipe(float8_recipe_name(r)), r);
  try {
    parse_float8_recipe("rowwise_gw_hp");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos);
    for (const char* n : {"rowwise_gw_hp", "tensorwise", "rowwise", "rowwise_with_gw_hp"})
      EXPECT_NE(m.find(n), std::string::npos) << m;
  }
}

// bf16 output (rescaled in place) is the fp32 output rounded once.
// fp32 output: torchao's emulation, the fp32 GEMM of the dequantised
// operands. bf16 output: the same GEMM rounded to bf16 before and after the
// scales (within one bf16 ulp of the fp32 result, 2^-8 relative, + rounding).
TEST(Float8Linear, GemmOutputsAreTheDequantisedFp32Gemm) {
  torch::manual_seed(11);
  const at::Tensor a = torch::randn({1000, 64}), b = torch::randn({24, 64});  // threads split rows
  for (auto s : {Float8Scaling::kTensorwise, Float8Scaling::kPerRow}) {
    const Float8Tensor qa = float8_quantize(a, {s, Fp8Format::kE4M3FN}, false, true);
    const Float8Tensor qb = float8_quantize(b, {s, Fp8Format::kE4M3FN}, false, true).t();
    const at::Tensor want = at::mm(float8_dequantize(qa).to(torch::kDouble), float8_dequantize(qb).to(torch::kDouble));
    const at::Tensor f32 = float8_mm(qa, qb, torch::kFloat, true);
    EXPECT_TRUE(at::allclose(f32.to(torch::kDouble), want, 1e-5, 1e-6));
    const at::Tensor bf16 = float8_mm(qa, qb, torch::kBFloat16, true).to(torch::kDouble);
    EXPECT_LE(((bf16 - want).abs() - want.abs() * std::ldexp(1.0, -7)).max().item<double>(), 1e-6);
  }
}

TEST(Float8Linear, BackendAndSqnr) {
  EXPECT_EQ(float8_backend(torch::kCPU, false), "emulated");
  EXPECT_EQ(float8_backend(torch::kCPU, true), "emulated");
  const Case c = make_case(12);  // emulate=false on CPU runs the same emulation
  for (auto r : kRecipes) EXPECT_TRUE(float8_linear(c.x, c.w, r, false).equal(float8_linear(c.x, c.w, r, true)));
  const at::Tensor ones = torch::ones({100}, torch::kDouble);
  EXPECT_NEAR(sqnr_db(ones, ones * 1.1), 20.0, 1e-9);
  EXPECT_TRUE(std::isinf(sqnr_db(ones, ones)));
}

}  // namespace
}  // namespace ctitan
