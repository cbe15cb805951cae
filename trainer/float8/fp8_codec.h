// ctitan's own OCP FP8 (v1.0) codec: float32 <-> e4m3fn / e5m2 byte codes.
//
// Why our own instead of LibTorch's `.to(at::kFloat8_*)`: the Float8 linear
// needs torchao's saturating cast (clamp to ±max, then cast) with behaviour
// we pin ourselves (LibTorch's CPU cast saturates one format and not the
// other, see below), FSDP's float8 all-gather moves raw bytes, and the codec
// is the one piece of float8 numerics we can check exhaustively
// (tests/unit/float8_test.cpp: all 256 codes of each format against the
// spec's bit-field formula and against LibTorch).
//
//   format  bias  max finite  min normal  min subnormal  specials
//   e4m3fn   7      448        2^-6        2^-9           S.1111.111 = NaN, no inf
//   e5m2    15    57344        2^-14       2^-16          S.11111.00 = inf, S.11111.{01,10,11} = NaN
//
// Encoding rounds to nearest, ties to even. Overflow (|x| rounding above max,
// and ±inf): saturate=true → ±max (torchao's clamp-then-cast, the OCP
// "saturating" mode); saturate=false → NaN for e4m3fn, ±inf for e5m2 (OCP
// "non-saturating"). NaN encodes as sign|0x7F (a NaN in both formats).
// Values below half the smallest subnormal become ±0 (sign kept).
//
// LibTorch 2.15's own CPU cast, for comparison (probed): e5m2 does not
// saturate (≥ 61440 → inf); e4m3fn does saturate, even ±inf → ±448.
//
// CPU only (the tensors' data are read directly); on CUDA the Float8 linear
// clamps and uses LibTorch's cast instead (float8_linear.cpp).
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <cstring>

namespace ctitan {

enum class Fp8Format { kE4M3FN, kE5M2 };

const char* fp8_format_name(Fp8Format f);
at::ScalarType fp8_torch_dtype(Fp8Format f);  // at::kFloat8_e4m3fn / at::kFloat8_e5m2

inline constexpr float fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3FN ? 448.0f : 57344.0f; }

namespace fp8_detail {

// Field widths and the codes the encoder needs, per format.
struct Spec {
  int mant_bits;
  int bias;
  uint32_t max_code;       // magnitude code of the largest finite value
  uint32_t overflow_code;  // non-saturating overflow: NaN (e4m3fn) or inf (e5m2)
};
inline constexpr Spec kE4M3 = {3, 7, 0x7E, 0x7F};
inline constexpr Spec kE5M2 = {2, 15, 0x7B, 0x7C};

// Branch-free so that the loops in fp8_codec.cpp vectorise. Works on the
// float32 bit pattern: a finite |x| = s · 2^(e-23) with s the 24-bit
// significand. Target quantum is 2^(max(e, emin) - M); r = s / quantum
// rounded to nearest even; then code = ((max(e, emin) + bias - 1) << M) + r,
// which also carries a mantissa overflow into the exponent and handles
// subnormals (exponent field 0) with the same formula.
template <const Spec& S>
inline uint8_t encode_bits(uint32_t u, bool saturate) {
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  const int32_t e = static_cast<int32_t>(a >> 23) - 127;
  const int32_t emin = 1 - S.bias;
  const int32_t ee = e > emin ? e : emin;
  const uint32_t s = (a & 0x7FFFFFu) | ((a >> 23) != 0 ? 0x800000u : 0u);
  int32_t sh = 23 - S.mant_bits + (ee - e);
  sh = sh < 31 ? sh : 31;  // ≥ 25 already rounds to 0; 31 keeps shifts defined
  uint32_t r = s >> sh;
  const uint32_t rem = s & ((1u << sh) - 1u);
  const uint32_t half = 1u << (sh - 1);
  // Two selects rather than bool arithmetic: GCC 12 vectorises only this form.
  r += rem > half ? 1u : 0u;
  r += (rem == half && (r & 1u) != 0u) ? 1u : 0u;
  // ee + bias - 1 >= 0 by construction; e ≤ 128 keeps this far below 2^31.
  const uint32_t code = (static_cast<uint32_t>(ee + S.bias - 1) << S.mant_bits) + r;
  uint32_t out = code > S.max_code ? (saturate ? S.max_code : S.overflow_code) : code;
  out = a > 0x7F800000u ? 0x7Fu : out;  // NaN in, NaN out
  return static_cast<uint8_t>(out | sign);
}

inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// The 256 decoded values of a format, from the spec's bit-field formula.
const std::array<float, 256>& decode_table(Fp8Format f);

}  // namespace fp8_detail

// Scalar encode / decode (the tensor functions below use the same code).
inline uint8_t fp8_encode(float x, Fp8Format f, bool saturate = true) {
  const uint32_t u = fp8_detail::float_bits(x);
  return f == Fp8Format::kE4M3FN ? fp8_detail::encode_bits<fp8_detail::kE4M3>(u, saturate)
                                 : fp8_detail::encode_bits<fp8_detail::kE5M2>(u, saturate);
}
inline float fp8_decode(uint8_t code, Fp8Format f) { return fp8_detail::decode_table(f)[code]; }

// Tensor forms: any floating dtype in (converted to float32 exactly for
// fp32/bf16/fp16), uint8 codes out, same shape; decode gives `dtype`
// (float32, or bf16/fp16, which hold every e4m3fn/e5m2 value exactly).
at::Tensor fp8_encode(const at::Tensor& x, Fp8Format f, bool saturate = true);
at::Tensor fp8_decode(const at::Tensor& codes, Fp8Format f, at::ScalarType dtype = at::kFloat);

// Fused quantise for the Float8 linear: for a 2-D x [R, C] and an fp32 scale
// that broadcasts to it ([], [1], [R, 1] or [1, C]), returns
// decode(encode(float(x) · scale, saturate=true)) in `dtype`: the float8
// values of x · scale, not yet divided by the scale. One pass, no uint8
// temporary.
at::Tensor fp8_quantize_scaled(const at::Tensor& x, const at::Tensor& scale, Fp8Format f,
                               at::ScalarType dtype);

// Every function runs ctitan's vectorised loops on CPU tensors and the same
// math as ATen ops on other devices (CUDA; meta in the dry run).
//
// max|x| of a 2-D float32/bf16 tensor as float32: dim -1 → shape [],
// dim 1 → [R, 1] (per row), dim 0 → [1, C] (per column). NaN propagates.
// The amax of the dynamic scales: at::linalg_vector_norm(x, inf) took ~4 ms
// of CPU on a [2048, 256] bf16 tensor here, this vectorised loop ~0.04 ms.
at::Tensor fp8_abs_max(const at::Tensor& x, int64_t dim);

}  // namespace ctitan
