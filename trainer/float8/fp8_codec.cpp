#include "trainer/float8/fp8_codec.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "trainer/float8/simd.h"

namespace ctitan {

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::kE4M3FN ? "e4m3fn" : "e5m2"; }

at::ScalarType fp8_torch_dtype(Fp8Format f) {
  return f == Fp8Format::kE4M3FN ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
}

namespace fp8_detail {
namespace {

std::array<float, 256> build_table(int exp_bits, int mant_bits, bool has_inf) {
  std::array<float, 256> t{};
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int exp_all_ones = (1 << exp_bits) - 1;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int c = 0; c < 256; ++c) {
    const int sign = c >> 7;
    const int exp = (c >> mant_bits) & exp_all_ones;
    const int mant = c & ((1 << mant_bits) - 1);
    float v;
    if (exp == exp_all_ones && has_inf) {  // IEEE-style specials (e5m2)
      v = mant == 0 ? std::numeric_limits<float>::infinity() : nan;
    } else if (exp == exp_all_ones && mant == (1 << mant_bits) - 1) {  // e4m3fn's only NaN
      v = nan;
    } else if (exp == 0) {  // subnormal: mant · 2^(1 - bias - M)
      v = std::ldexp(static_cast<float>(mant), 1 - bias - mant_bits);
    } else {  // normal: (2^M + mant) · 2^(exp - bias - M)
      v = std::ldexp(static_cast<float>((1 << mant_bits) + mant), exp - bias - mant_bits);
    }
    t[c] = sign ? -v : v;
  }
  return t;
}

}  // namespace

const std::array<float, 256>& decode_table(Fp8Format f) {
  static const std::array<float, 256> e4m3 = build_table(4, 3, false);
  static const std::array<float, 256> e5m2 = build_table(5, 2, true);
  return f == Fp8Format::kE4M3FN ? e4m3 : e5m2;
}

}  // namespace fp8_detail

namespace {

using fp8_detail::encode_bits;
using fp8_detail::kE4M3;
using fp8_detail::kE5M2;

using fp8_simd::bits_to_float;

// bf16 → float32 is exact: the bf16 bits are the high half of the float's.
CTITAN_FP8_INLINE uint32_t load_bits(const float* p, int64_t i) { return fp8_detail::float_bits(p[i]); }
CTITAN_FP8_INLINE uint32_t load_bits(const uint16_t* p, int64_t i) { return static_cast<uint32_t>(p[i]) << 16; }
// Every e4m3fn / e5m2 value has ≤ 3 significant bits, so dropping the low
// half of its float32 pattern is the exact bf16.
CTITAN_FP8_INLINE void store(float* p, int64_t i, float v) { p[i] = v; }
CTITAN_FP8_INLINE void store(uint16_t* p, int64_t i, float v) {
  p[i] = static_cast<uint16_t>(fp8_detail::float_bits(v) >> 16);
}

template <const fp8_detail::Spec& S, typename In>
CTITAN_FP8_INLINE void encode_loop(const In* __restrict x, uint8_t* __restrict out, int64_t n, bool sat) {
  for (int64_t i = 0; i < n; ++i) out[i] = encode_bits<S>(load_bits(x, i), sat);
}

CTITAN_FP8_CLONES void encode_f32(const float* __restrict x, uint8_t* __restrict out, int64_t n, bool e4m3, bool sat) {
  if (e4m3) encode_loop<kE4M3>(x, out, n, sat);
  else encode_loop<kE5M2>(x, out, n, sat);
}

// quantise-dequantise of one row: out[j] = table[encode(x[j] · scale_j)],
// scale_j = scale[0] (scalar / per-row) or scale[j] (per column).
template <const fp8_detail::Spec& S, typename In, typename Out>
CTITAN_FP8_INLINE void qdq_loop(const In* __restrict x, const float* __restrict scale, bool per_col,
                                const float* __restrict table, Out* __restrict out, int64_t n) {
  if (per_col) {
    for (int64_t j = 0; j < n; ++j)
      store(out, j, table[encode_bits<S>(fp8_detail::float_bits(bits_to_float(load_bits(x, j)) * scale[j]), true)]);
  } else {
    const float s = scale[0];
    for (int64_t j = 0; j < n; ++j)
      store(out, j, table[encode_bits<S>(fp8_detail::float_bits(bits_to_float(load_bits(x, j)) * s), true)]);
  }
}

#define CTITAN_FP8_QDQ(NAME, IN, OUT)                                                          \
  CTITAN_FP8_CLONES void NAME(const IN* __restrict x, const float* __restrict scale, bool per_col,   \
                              const float* __restrict table, OUT* __restrict out, int64_t n, bool e4m3) { \
    if (e4m3) qdq_loop<kE4M3>(x, scale, per_col, table, out, n);                              \
    else qdq_loop<kE5M2>(x, scale, per_col, table, out, n);                                   \
  }
CTITAN_FP8_QDQ(qdq_f32_f32, float, float)
CTITAN_FP8_QDQ(qdq_f32_bf16, float, uint16_t)
CTITAN_FP8_QDQ(qdq_bf16_f32, uint16_t, float)
CTITAN_FP8_QDQ(qdq_bf16_bf16, uint16_t, uint16_t)
#undef CTITAN_FP8_QDQ

// |x| as ordered integers: for non-negative floats the bit patterns sort
// like the values, and NaN patterns sort above inf, so an integer max of
// (bits & 0x7FFFFFFF) is max|x| with NaN propagating. bf16 works on its 16 bits.
CTITAN_FP8_INLINE uint32_t abs_bits(const float* p, int64_t i) { return fp8_detail::float_bits(p[i]) & 0x7FFFFFFFu; }
CTITAN_FP8_INLINE uint32_t abs_bits(const uint16_t* p, int64_t i) {
  return (static_cast<uint32_t>(p[i]) & 0x7FFFu) << 16;
}

template <typename In>
CTITAN_FP8_INLINE uint32_t row_absmax_loop(const In* __restrict x, int64_t n) {
  uint32_t m = 0;
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t v = abs_bits(x, j);
    m = v > m ? v : m;
  }
  return m;
}
template <typename In>
CTITAN_FP8_INLINE void col_absmax_loop(const In* __restrict x, uint32_t* __restrict m, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t v = abs_bits(x, j);
    m[j] = v > m[j] ? v : m[j];
  }
}
CTITAN_FP8_CLONES uint32_t row_absmax_f32(const float* x, int64_t n) { return row_absmax_loop(x, n); }
CTITAN_FP8_CLONES uint32_t row_absmax_bf16(const uint16_t* x, int64_t n) { return row_absmax_loop(x, n); }
CTITAN_FP8_CLONES void col_absmax_f32(const float* x, uint32_t* m, int64_t n) { col_absmax_loop(x, m, n); }
CTITAN_FP8_CLONES void col_absmax_bf16(const uint16_t* x, uint32_t* m, int64_t n) { col_absmax_loop(x, m, n); }

// ctitan's codec loops run on CPU tensors; on any other device (CUDA, and
// meta in the dry run) the same math runs as ATen ops: float8 casts round to
// nearest even like the loops, saturation is a clamp.
at::Tensor aten_encode(const at::Tensor& x, Fp8Format f, bool saturate) {
  const at::Tensor xf = x.to(at::kFloat);
  const float m = fp8_max(f);
  return (saturate ? xf.clamp(-m, m) : xf).to(fp8_torch_dtype(f)).view(at::kByte);
}

}  // namespace

at::Tensor fp8_encode(const at::Tensor& x, Fp8Format f, bool saturate) {
  TORCH_CHECK(at::isFloatingType(x.scalar_type()), "fp8_encode: floating input expected, got ", x.scalar_type());
  if (!x.device().is_cpu()) return aten_encode(x, f, saturate);
  const at::Tensor xf = x.to(at::kFloat).contiguous();  // exact for fp32/bf16/fp16
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(at::kByte));
  const float* src = xf.const_data_ptr<float>();
  uint8_t* dst = out.mutable_data_ptr<uint8_t>();
  const bool e4m3 = f == Fp8Format::kE4M3FN;
  parallel_rows(xf.numel(), 1 << 15, [&](int64_t b, int64_t e) {
    encode_f32(src + b, dst + b, e - b, e4m3, saturate);
  });
  return out;
}

at::Tensor fp8_decode(const at::Tensor& codes, Fp8Format f, at::ScalarType dtype) {
  TORCH_CHECK(codes.scalar_type() == at::kByte || codes.scalar_type() == fp8_torch_dtype(f),
              "fp8_decode: uint8 codes expected, got ", codes.scalar_type());
  if (!codes.device().is_cpu()) return codes.view(fp8_torch_dtype(f)).to(dtype);
  const at::Tensor c = codes.contiguous();
  at::Tensor out = at::empty(c.sizes(), c.options().dtype(at::kFloat));
  const uint8_t* src = static_cast<const uint8_t*>(c.const_data_ptr());
  float* dst = out.mutable_data_ptr<float>();
  const float* table = fp8_detail::decode_table(f).data();
  parallel_rows(c.numel(), 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = table[src[i]];
  });
  return dtype == at::kFloat ? out : out.to(dtype);
}

at::Tensor fp8_quantize_scaled(const at::Tensor& x, const at::Tensor& scale, Fp8Format f,
                               at::ScalarType dtype) {
  TORCH_CHECK(x.dim() == 2, "fp8_quantize_scaled: 2-D input expected, got ", x.sizes());
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, "fp8_quantize_scaled: float or bf16 out, got ", dtype);
  if (!x.device().is_cpu())
    return aten_encode(x.to(at::kFloat) * scale.to(at::kFloat), f, true).view(fp8_torch_dtype(f)).to(dtype);
  const int64_t R = x.size(0), C = x.size(1);
  at::Tensor xin = x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16
                       ? x.contiguous() : x.to(at::kFloat).contiguous();
  // Scale layout: one value, one per row ([R,1]) or one per column ([1,C]).
  at::Tensor s = scale.to(at::kFloat).contiguous();
  bool per_row = false, per_col = false;
  if (s.numel() != 1) {
    TORCH_CHECK(s.dim() == 2 && ((s.size(0) == R && s.size(1) == 1) || (s.size(0) == 1 && s.size(1) == C)),
                "fp8_quantize_scaled: scale ", s.sizes(), " does not broadcast per row or column to ", x.sizes());
    per_row = s.size(0) == R && s.size(1) == 1 && R != 1;
    per_col = !per_row;
  }
  at::Tensor out = at::empty({R, C}, x.options().dtype(dtype));
  const float* sp = s.const_data_ptr<float>();
  const float* table = fp8_detail::decode_table(f).data();
  const bool e4m3 = f == Fp8Format::kE4M3FN;
  const bool in_bf16 = xin.scalar_type() == at::kBFloat16;
  const bool out_bf16 = dtype == at::kBFloat16;
  const void* in = xin.const_data_ptr();
  void* o = out.mutable_data_ptr();
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(C, 1));
  parallel_rows(R, grain, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const float* sr = per_row ? sp + r : sp;
      const int64_t off = r * C;
      const auto* xb = static_cast<const uint16_t*>(in) + off;
      const auto* xf = static_cast<const float*>(in) + off;
      auto* ob = static_cast<uint16_t*>(o) + off;
      auto* of = static_cast<float*>(o) + off;
      if (in_bf16 && out_bf16) qdq_bf16_bf16(xb, sr, per_col, table, ob, C, e4m3);
      else if (in_bf16) qdq_bf16_f32(xb, sr, per_col, table, of, C, e4m3);
      else if (out_bf16) qdq_f32_bf16(xf, sr, per_col, table, ob, C, e4m3);
      else qdq_f32_f32(xf, sr, per_col, table, of, C, e4m3);
    }
  });
  return out;
}

at::Tensor fp8_abs_max(const at::Tensor& x, int64_t dim) {
  TORCH_CHECK(x.dim() == 2 && dim >= -1 && dim <= 1, "fp8_abs_max: 2-D input and dim -1, 0 or 1, got ", x.sizes(),
              " dim ", dim);
  if (!x.device().is_cpu())
    return dim == -1 ? at::linalg_vector_norm(x.to(at::kFloat), INFINITY)
                     : at::linalg_vector_norm(x.to(at::kFloat), INFINITY, at::IntArrayRef{dim}, /*keepdim=*/true);
  const at::Tensor xin = x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16
                             ? x.contiguous() : x.to(at::kFloat).contiguous();
  const bool bf16 = xin.scalar_type() == at::kBFloat16;
  const int64_t R = xin.size(0), C = xin.size(1);
  const auto* f32 = bf16 ? nullptr : xin.const_data_ptr<float>();
  const auto* b16 = bf16 ? static_cast<const uint16_t*>(xin.const_data_ptr()) : nullptr;
  auto row = [&](int64_t r) { return bf16 ? row_absmax_bf16(b16 + r * C, C) : row_absmax_f32(f32 + r * C, C); };
  // ~0.1 ns per element: only tensors of ≥ 2^18 elements are worth a second thread.
  const int64_t row_grain = std::max<int64_t>(1, (1 << 18) / std::max<int64_t>(C, 1));
  at::Tensor bits;
  if (dim == 1) {  // per row
    bits = at::empty({R, 1}, xin.options().dtype(at::kInt));
    auto* out = static_cast<uint32_t*>(bits.mutable_data_ptr());
    parallel_rows(R, row_grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) out[r] = row(r);
    });
  } else if (dim == 0) {  // per column: each task owns a block of columns
    bits = at::zeros({1, C}, xin.options().dtype(at::kInt));
    auto* out = static_cast<uint32_t*>(bits.mutable_data_ptr());
    parallel_rows(C, std::max<int64_t>(16, (1 << 18) / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = 0; r < R; ++r) {
        if (bf16) col_absmax_bf16(b16 + r * C + b, out + b, e - b);
        else col_absmax_f32(f32 + r * C + b, out + b, e - b);
      }
    });
  } else {
    std::atomic<uint32_t> m{0};  // max of the per-range maxima
    parallel_rows(R, row_grain, [&](int64_t b, int64_t e) {
      uint32_t acc = 0;
      for (int64_t r = b; r < e; ++r) acc = std::max(acc, row(r));
      uint32_t seen = m.load();
      while (acc > seen && !m.compare_exchange_weak(seen, acc)) {
      }
    });
    bits = at::empty({}, xin.options().dtype(at::kInt));
    *static_cast<uint32_t*>(bits.mutable_data_ptr()) = m.load();
  }
  return bits.view(at::kFloat);  // bf16 patterns were widened to float32 ones
}

}  // namespace ctitan
