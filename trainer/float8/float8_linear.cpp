#include "trainer/float8/float8_linear.h"

#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/errors.h"
#include "trainer/float8/simd.h"
#include "trainer/kernels/fused_ops.h"  // aten_cpu_is_avx512

#if __has_include(<ATen/cuda/CUDAContext.h>)
#include <ATen/cuda/CUDAContext.h>
#define CTITAN_HAVE_ATEN_CUDA 1
#endif

namespace ctitan {

namespace {

constexpr double kAmaxEps = 1e-12;  // torchao's EPS: keeps all-zero tensors finite

constexpr Float8Cast kHp{Float8Scaling::kHighPrecision, Fp8Format::kE4M3FN};
constexpr Float8Cast e4m3(Float8Scaling s) { return {s, Fp8Format::kE4M3FN}; }
constexpr Float8Cast e5m2(Float8Scaling s) { return {s, Fp8Format::kE5M2}; }

// fp32 bits with the mantissa cleared: the largest power of two ≤ scale.
// torchao computes exp2(floor(log2(scale))) in fp32, which is the same except
// when log2 rounds up to an integer just below a power of two; clearing bits
// never exceeds the scale, so x·scale can never pass fp8_max.
at::Tensor round_down_pow2(const at::Tensor& scale) {
  at::Tensor p = at::bitwise_and(scale.contiguous().view(at::kInt), 0x7F800000).view(at::kFloat);
  return at::where(scale.isnan(), scale, p);
}

}  // namespace

Float8Recipe parse_float8_recipe(const std::string& name) {
  if (name == "tensorwise") return Float8Recipe::kTensorwise;
  if (name == "rowwise") return Float8Recipe::kRowwise;
  if (name == "rowwise_with_gw_hp") return Float8Recipe::kRowwiseWithGwHp;
  throw InputError("quantize.linear.float8.recipe_name: unknown recipe '" + name +
                   "' (valid: tensorwise, rowwise, rowwise_with_gw_hp)");
}

const char* float8_recipe_name(Float8Recipe r) {
  switch (r) {
    case Float8Recipe::kTensorwise: return "tensorwise";
    case Float8Recipe::kRowwise: return "rowwise";
    case Float8Recipe::kRowwiseWithGwHp: return "rowwise_with_gw_hp";
  }
  return "?";
}

Float8RecipeSpec float8_recipe_spec(Float8Recipe r) {
  using S = Float8Scaling;
  switch (r) {
    case Float8Recipe::kTensorwise:
      return {e4m3(S::kTensorwise), e4m3(S::kTensorwise), e5m2(S::kTensorwise),
              e4m3(S::kTensorwise), e5m2(S::kTensorwise), e4m3(S::kTensorwise), false};
    case Float8Recipe::kRowwise:
      return {e4m3(S::kPerRow), e4m3(S::kPerRow), e4m3(S::kPerRow),
              e4m3(S::kPerColumn), e4m3(S::kPerColumn), e4m3(S::kPerColumn), true};
    case Float8Recipe::kRowwiseWithGwHp:
      return {e4m3(S::kPerRow), e4m3(S::kPerRow), e4m3(S::kPerRow),
              e4m3(S::kTensorwise), kHp, kHp, false};
  }
  TORCH_CHECK(false, "float8_recipe_spec: bad recipe");
}

Float8Tensor Float8Tensor::t() const {
  return {data.t(), scale.dim() == 2 ? scale.t() : scale, format};
}

at::Tensor float8_scale(const at::Tensor& x2d, const Float8Cast& cast, bool pow2, AmaxShard shard) {
  TORCH_CHECK(x2d.dim() == 2, "float8_scale: 2-D tensor expected, got ", x2d.sizes());
  TORCH_CHECK(cast.scaling != Float8Scaling::kHighPrecision, "float8_scale: high-precision operand has no scale");
  const int64_t dim = cast.scaling == Float8Scaling::kTensorwise ? -1 : cast.scaling == Float8Scaling::kPerRow ? 1 : 0;
  at::Tensor amax;
  if (x2d.device().is_cpu()) {
    amax = fp8_abs_max(x2d, dim);
  } else {  // the inf-norm is max|x| without materialising |x|
    const double inf = std::numeric_limits<double>::infinity();
    amax = dim < 0 ? at::linalg_vector_norm(x2d, inf) : at::linalg_vector_norm(x2d, inf, at::IntArrayRef{dim}, true);
  }
  const bool reduces_shard_dim = shard.dim >= 0 && (dim < 0 || dim == shard.dim);
  if (shard.group != nullptr && shard.group->size() > 1 && reduces_shard_dim) {
    amax = amax.contiguous();
    shard.group->all_reduce(amax, ReduceOp::kMax)->wait();
  }
  const at::Tensor den = amax.to(at::kDouble).clamp_min(kAmaxEps);
  const at::Tensor scale = at::full_like(den, static_cast<double>(fp8_max(cast.format))).div_(den).to(at::kFloat);
  return pow2 ? round_down_pow2(scale) : scale;
}

Float8Tensor float8_quantize(const at::Tensor& x2d, const Float8Cast& cast, bool pow2, bool emulate,
                             AmaxShard shard) {
  at::Tensor scale = float8_scale(x2d, cast, pow2, shard);
  if (x2d.device().is_cpu())  // ctitan's codec: the tested one
    return {fp8_quantize_scaled(x2d, scale, cast.format, at::kBFloat16), scale, cast.format};
  // Other devices: torchao's to_fp8_saturated (clamp, then LibTorch's cast).
  const double m = fp8_max(cast.format);
  at::Tensor q = (x2d.to(at::kFloat) * scale).clamp_(-m, m).to(fp8_torch_dtype(cast.format));
  return {float8_operand_data(q, cast.format, float8_backend(x2d.device(), emulate)), scale, cast.format};
}

at::Tensor float8_operand_data(const at::Tensor& fp8, Fp8Format format, const std::string& backend) {
  TORCH_CHECK(fp8.scalar_type() == at::kByte || fp8.scalar_type() == fp8_torch_dtype(format),
              "float8_operand_data: uint8 codes or ", fp8_torch_dtype(format), " expected, got ", fp8.scalar_type());
  if (backend == "scaled_mm") return fp8.view(fp8_torch_dtype(format));
  TORCH_CHECK(backend == "emulated", "float8_operand_data: unknown backend '", backend, "'");
  return fp8_decode(fp8, format, at::kBFloat16);
}

at::ScalarType scaled_mm_out_dtype(at::ScalarType wanted, bool rowwise) {
  return rowwise && (wanted == at::kFloat || wanted == at::kHalf) ? at::kBFloat16 : wanted;
}

at::Tensor float8_dequantize(const Float8Tensor& q, at::ScalarType dtype) {
  return (q.data.to(at::kFloat) / q.scale).to(dtype);
}

namespace {

// GEMM epilogue, one pass: out[i,j] = acc[i,j] · ia[i] · ib[j or 0] with
// acc bf16, fp32 math, out float32 or bf16 (may alias acc).
CTITAN_FP8_INLINE void store(float* o, int64_t j, float v) { o[j] = v; }
CTITAN_FP8_INLINE void store(uint16_t* o, int64_t j, float v) { o[j] = fp8_simd::float_to_bf16(v); }
template <typename Out>
CTITAN_FP8_INLINE void epilogue_loop(const uint16_t* a, float si, const float* __restrict pb, bool per_col, Out* o,
                                     int64_t n) {
  // o may be a (in place): element j reads a[j] before writing o[j], so there
  // is no loop-carried dependence — ivdep lets GCC vectorise without an
  // overlap check that would send the in-place case to the scalar loop.
  if (per_col) {
#pragma GCC ivdep
    for (int64_t j = 0; j < n; ++j) store(o, j, fp8_simd::bf16_to_float(a[j]) * si * pb[j]);
  } else {
    const float s = si * pb[0];
#pragma GCC ivdep
    for (int64_t j = 0; j < n; ++j) store(o, j, fp8_simd::bf16_to_float(a[j]) * s);
  }
}
CTITAN_FP8_CLONES void epilogue_f32(const uint16_t* a, float si, const float* pb, bool per_col, float* o, int64_t n) {
  epilogue_loop(a, si, pb, per_col, o, n);
}
CTITAN_FP8_CLONES void epilogue_bf16(const uint16_t* a, float si, const float* pb, bool per_col, uint16_t* o,
                                     int64_t n) {
  epilogue_loop(a, si, pb, per_col, o, n);
}

void scale_epilogue(const at::Tensor& acc, const at::Tensor& ia, const at::Tensor& ib, at::Tensor& out) {
  const int64_t M = acc.size(0), N = acc.size(1);
  const auto* a = static_cast<const uint16_t*>(acc.const_data_ptr());
  const float* pa = ia.const_data_ptr<float>();
  const float* pb = ib.const_data_ptr<float>();
  const bool row_a = ia.numel() > 1, col_b = ib.numel() > 1;
  const bool f32 = out.scalar_type() == at::kFloat;
  void* o = out.mutable_data_ptr();
  parallel_rows(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(N, 1)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float si = pa[row_a ? i : 0];
      if (f32) epilogue_f32(a + i * N, si, pb, col_b, static_cast<float*>(o) + i * N, N);
      else epilogue_bf16(a + i * N, si, pb, col_b, static_cast<uint16_t*>(o) + i * N, N);
    }
  });
}

bool cuda_fp8_gemm_capable(const at::Device& d) {
#ifdef CTITAN_HAVE_ATEN_CUDA
  if (!d.is_cuda() || !at::hasCUDA()) return false;
  const auto* p = at::cuda::getDeviceProperties(d.has_index() ? d.index() : at::cuda::current_device());
  return p->major > 8 || (p->major == 8 && p->minor >= 9);  // sm89 (Ada) and newer
#else
  return false;
#endif
}

}  // namespace

std::string float8_backend(const at::Device& device, bool emulate) {
  return !emulate && cuda_fp8_gemm_capable(device) ? "scaled_mm" : "emulated";
}

at::Tensor float8_mm(const Float8Tensor& a, const Float8Tensor& b, at::ScalarType dtype, bool fast_accum) {
  TORCH_CHECK(a.data.dim() == 2 && b.data.dim() == 2 && a.data.size(1) == b.data.size(0), "float8_mm: shapes ",
              a.data.sizes(), " and ", b.data.sizes());
  const int64_t M = a.data.size(0), N = b.data.size(1);
  TORCH_CHECK(a.scale.numel() == 1 || (a.scale.dim() == 2 && a.scale.size(0) == M && a.scale.size(1) == 1),
              "float8_mm: scale of A must be [] or [M,1], got ", a.scale.sizes());
  TORCH_CHECK(b.scale.numel() == 1 || (b.scale.dim() == 2 && b.scale.size(0) == 1 && b.scale.size(1) == N),
              "float8_mm: scale of B must be [] or [1,N], got ", b.scale.sizes());
  const at::Tensor ia = a.scale.reciprocal(), ib = b.scale.reciprocal();
  if (a.data.scalar_type() != at::kBFloat16) {
    // Untested here (no GPU): _scaled_mm wants A row-major, B column-major,
    // the inverse (dequantising) scales, and both scales tensorwise or both
    // rowwise — rowwise_with_gw_hp's grad_input mixes them, so expand.
    at::Tensor sa = ia, sb = ib;
    if (sa.numel() == 1 && sb.numel() > 1 && M > 1) sa = sa.reshape({1, 1}).expand({M, 1}).contiguous();
    if (sb.numel() == 1 && sa.numel() > 1 && N > 1) sb = sb.reshape({1, 1}).expand({1, N}).contiguous();
    const at::ScalarType out = scaled_mm_out_dtype(dtype, sa.numel() > 1 || sb.numel() > 1);
    return at::_scaled_mm(a.data.contiguous(), b.data.t().contiguous().t(), sa, sb, std::nullopt, std::nullopt, out,
                          fast_accum)
        .to(dtype);
  }
  // An fp32 output (fp32 training: the equivalence tests) keeps the fp32
  // accumulation, as torchao's emulation does (dequantise, fp32 GEMM): no
  // bf16 rounding of partial sums that a tensor-parallel GEMM adds up later.
  if (dtype == at::kFloat && a.data.device().is_cpu()) {
    at::Tensor out = at::mm(a.data.to(at::kFloat), b.data.to(at::kFloat));
    return out.mul_(ia).mul_(ib);
  }
  // bf16 GEMM, fp32 accumulation, rounded once to bf16. Where ATen has no
  // fast bf16 GEMM on this CPU (below AVX-512 it runs a reference loop, about
  // 70x slower than fp32 on an AVX2 EPYC), the same math runs as an fp32 GEMM:
  // float8 values and their products are exact in fp32.
  at::Tensor acc = !a.data.device().is_cpu() || aten_cpu_is_avx512()
                       ? at::mm(a.data, b.data)
                       : at::mm(a.data.to(at::kFloat), b.data.to(at::kFloat)).to(at::kBFloat16);
  if (!acc.device().is_cpu() || (dtype != at::kFloat && dtype != at::kBFloat16))
    return (acc.to(at::kFloat) * ia * ib).to(dtype);
  // bf16 out: rescale the GEMM result in place, no second buffer.
  at::Tensor out = dtype == at::kBFloat16 ? acc : at::empty(acc.sizes(), acc.options().dtype(dtype));
  scale_epilogue(acc, ia.contiguous(), ib.contiguous(), out);
  return out;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool same_cast(const Float8Cast& a, const Float8Cast& b) { return a.scaling == b.scaling && a.format == b.format; }

// An operand as saved for backward: its float8 form when the backward GEMM
// casts it exactly as the forward did (same scale, same codes: no need to
// quantise again), else the high-precision tensor. Undefined scale = hp.
struct Saved {
  at::Tensor data, scale;
};
Saved keep(const at::Tensor& hp, const Float8Tensor& q, const Float8Cast& fwd, const Float8Cast& bwd) {
  if (same_cast(fwd, bwd)) return {q.data, q.scale};
  return {hp, at::Tensor()};
}
// The backward GEMM operand for cast `c`: reuse the saved float8 form, keep
// high precision, or quantise now.
struct Operand {
  at::Tensor hp;       // defined when the GEMM runs in high precision
  Float8Tensor q;      // otherwise
};
Operand operand(const Saved& s, const Float8Cast& c, bool pow2, bool emulate, AmaxShard shard) {
  if (s.scale.defined()) return {at::Tensor(), Float8Tensor{s.data, s.scale, c.format}};
  if (c.scaling == Float8Scaling::kHighPrecision) return {s.data, {}};
  return {at::Tensor(), float8_quantize(s.data, c, pow2, emulate, shard)};
}
Operand transposed(const Operand& o) { return o.hp.defined() ? Operand{o.hp.t(), {}} : Operand{at::Tensor(), o.q.t()}; }

// a @ b with both operands float8 or both high precision (as torchao requires).
at::Tensor gemm(const Operand& a, const Operand& b, at::ScalarType dtype, bool fast_accum) {
  TORCH_CHECK(a.hp.defined() == b.hp.defined(), "float8 GEMM: one operand float8, the other not");
  if (!a.hp.defined()) return float8_mm(a.q, b.q, dtype, fast_accum);
  // torchao's ScalingType.DISABLED: the GEMM in the operands' own dtype.
  return at::mm(a.hp, b.hp.to(a.hp.scalar_type())).to(dtype);
}

struct Float8LinearFn : public torch::autograd::Function<Float8LinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, int64_t recipe,
                            bool emulate, const Float8Tensor* w_quantized, Float8TpSharding tp) {
    const Float8RecipeSpec spec = float8_recipe_spec(static_cast<Float8Recipe>(recipe));
    const at::Tensor x2d = x.reshape({-1, x.size(-1)});
    const Float8Tensor qx = float8_quantize(x2d, spec.input, spec.pow2_scales, emulate, {tp.tp, tp.x_dim});
    const Float8Tensor qw =
        w_quantized ? *w_quantized : float8_quantize(w, spec.weight, spec.pow2_scales, emulate, {tp.tp, tp.w_dim});
    // The tp group travels to backward as its address (it outlives the graph).
    ctx->saved_data["tp"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(tp.tp));
    ctx->saved_data["tp_dims"] = std::vector<int64_t>{tp.x_dim, tp.w_dim, tp.go_dim};
    at::Tensor y = float8_mm(qx, qw.t(), x.scalar_type(), /*fast_accum=*/true);  // torchao's output GEMM default
    ctx->saved_data["recipe"] = recipe;
    ctx->saved_data["emulate"] = emulate;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    const Saved sx = keep(x2d, qx, spec.input, spec.input_for_grad_weight);
    const Saved sw = keep(w, qw, spec.weight, spec.weight_for_grad_input);
    ctx->save_for_backward({sx.data, sx.scale, sw.data, sw.scale});
    auto out_sizes = x.sizes().vec();
    out_sizes.back() = w.size(0);
    return y.view(out_sizes);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto recipe = static_cast<Float8Recipe>(ctx->saved_data["recipe"].toInt());
    const bool emulate = ctx->saved_data["emulate"].toBool();
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    const auto x_sizes = ctx->saved_data["x_sizes"].toIntVector();
    const Float8RecipeSpec spec = float8_recipe_spec(recipe);
    const bool p2 = spec.pow2_scales;
    const auto saved = ctx->get_saved_variables();
    const Saved sx{saved[0], saved[1]}, sw{saved[2], saved[3]};
    const at::Tensor go = grads[0].reshape({-1, grads[0].size(-1)}).contiguous();  // [N, out]
    const Saved sgo{go, at::Tensor()};
    auto* group = reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["tp"].toInt()));
    const auto dims = ctx->saved_data["tp_dims"].toIntVector();
    const AmaxShard x_shard{group, static_cast<int>(dims[0])}, w_shard{group, static_cast<int>(dims[1])},
        go_shard{group, static_cast<int>(dims[2])};

    at::Tensor grad_x, grad_w;
    Operand go_gi;
    const bool need_x = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    if (need_x) {  // grad_input [N,in] = go [N,out] @ w [out,in]
      go_gi = operand(sgo, spec.grad_output, p2, emulate, go_shard);
      grad_x = gemm(go_gi, operand(sw, spec.weight_for_grad_input, p2, emulate, w_shard), x_dtype, false)
                   .view(x_sizes);
    }
    if (need_w) {  // grad_weight [out,in] = goᵀ [out,N] @ x [N,in]
      // One cast of go serves both GEMMs when the recipe casts it alike.
      const Operand go_gw = need_x && same_cast(spec.grad_output, spec.grad_output_for_grad_weight)
                                ? go_gi : operand(sgo, spec.grad_output_for_grad_weight, p2, emulate, go_shard);
      grad_w = gemm(transposed(go_gw), operand(sx, spec.input_for_grad_weight, p2, emulate, x_shard), w_dtype, false);
    }
    return {grad_x, grad_w, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor float8_linear(const at::Tensor& x, const at::Tensor& w, Float8Recipe recipe, bool emulate,
                         const Float8Tensor* w_quantized, Float8TpSharding tp) {
  TORCH_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1), "float8_linear: x ", x.sizes(),
              " and w ", w.sizes(), " do not match ([*, in] and [out, in])");
  if (w_quantized) {
    const Float8RecipeSpec spec = float8_recipe_spec(recipe);
    TORCH_CHECK(spec.weight.scaling == Float8Scaling::kTensorwise &&
                    same_cast(spec.weight, spec.weight_for_grad_input) &&
                    w_quantized->data.sizes() == w.sizes(),
                "float8_linear: a pre-quantised weight needs the tensorwise recipe and w's shape");
  }
  return Float8LinearFn::apply(x, w, static_cast<int64_t>(recipe), emulate, w_quantized, tp);
}

double sqnr_db(const at::Tensor& ref, const at::Tensor& quantised) {
  const at::Tensor r = ref.to(at::kDouble);
  const double signal = r.norm().item<double>();
  const double noise = (r - quantised.to(at::kDouble)).norm().item<double>();
  if (noise == 0.0) return std::numeric_limits<double>::infinity();
  return 20.0 * std::log10(signal / noise);
}

}  // namespace ctitan
