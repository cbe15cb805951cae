// Internal to trainer/kernels: ATen's at::vec compiled for AVX-512 inside
// an otherwise generic (x86-64 baseline) build.
//
// Why this dance: ATen selects its Vectorized<> implementation with the
// CPU_CAPABILITY_* macros and compiles each kernel once per capability; the
// ctitan build passes no -m flags (and shares one precompiled header, so it
// cannot add them per file). Here the vec headers are included under
// `#pragma GCC target` with CPU_CAPABILITY_AVX512 defined, and every kernel
// body sits between CTITAN_KERNELS_BEGIN / CTITAN_KERNELS_END (lambdas too,
// which a target attribute would not reach). Code outside the region calls
// kernels only after fused_kernels_available() (fused_ops.h) said ATen runs
// AVX-512 here, so the binary still starts, and falls back to the eager
// chain, on other CPUs.
//
// The vec headers' inline namespace is renamed (CPU_CAPABILITY =
// ctitan_avx512) so their inline functions never merge with libtorch's own
// AVX512 instantiations.
//
// The helpers are pure functions (thread-safe).
#pragma once

// Everything the vec headers pull in that is not vector code is included
// first, outside the target region, so no non-kernel inline function gets
// compiled with AVX-512 instructions (the linker could pick that copy).
#include <ATen/AccumulateType.h>
#include <ATen/NumericUtils.h>
#include <ATen/Parallel.h>
#include <ATen/jiterator_macros.h>
#include <ATen/native/Math.h>
#include <c10/util/BFloat16-math.h>
#include <c10/util/BFloat16.h>
#include <c10/util/MathConstants.h>
#include <c10/util/copysign.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "trainer/parallel_rows.h"

// -W(maybe-)uninitialized: g++ 12 flags the `__Y = __Y` idiom of
// _mm512_undefined_*() inside its own intrinsics once they are inlined.
#define CTITAN_KERNELS_BEGIN                                                                          \
  _Pragma("GCC push_options")                                                                         \
      _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt\")") \
          _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
              _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define CTITAN_KERNELS_END _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")

#if defined(CPU_CAPABILITY) || defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
#error "trainer/kernels/vec.h must be the only place that selects the at::vec capability"
#endif
#define CPU_CAPABILITY ctitan_avx512
#define CPU_CAPABILITY_AVX512

// g++ does not update the ISA macros for `#pragma GCC target` in C++, and
// sleef.h declares its 512-bit functions only under __AVX512F__: define
// them for the headers' sake and drop them again right after.
#if defined(__AVX512F__)
#define CTITAN_KEEP_ISA_MACROS
#else
#define __AVX512F__ 1
#define __AVX512BW__ 1
#define __AVX512VL__ 1
#define __AVX512DQ__ 1
#define __AVX2__ 1
#define __AVX__ 1
#define __FMA__ 1
#define __F16C__ 1
#endif

CTITAN_KERNELS_BEGIN
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <sleef.h>

namespace ctitan::kernels {

using fVec = at::vec::Vectorized<float>;
using bVec = at::vec::Vectorized<c10::BFloat16>;
constexpr int64_t kLanes = fVec::size();  // 16 fp32 lanes per AVX-512 register

// Load up to 16 elements (n < 16: the tail, zero-filled) as fp32.
inline fVec load(const float* p) { return fVec::loadu(p); }
inline fVec load(const float* p, int64_t n) { return fVec::loadu(p, n); }
inline fVec load(const c10::BFloat16* p) {
  fVec out;
  at::vec::load_fp32_from_bf16(p, out);
  return out;
}
inline fVec load(const c10::BFloat16* p, int64_t n) {
  __m512 out;
  at::vec::cvtbf16_fp32(_mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << n) - 1), p), out);
  return out;
}

// Store 16 (or n) fp32 lanes; bf16 is rounded to nearest-even (ATen's rule).
inline void store(float* p, const fVec& v) { v.store(p); }
inline void store(float* p, const fVec& v, int64_t n) { v.store(p, n); }
inline void store(c10::BFloat16* p, const fVec& v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), at::vec::cvtfp32_bf16(__m512(v)));
}
inline void store(c10::BFloat16* p, const fVec& v, int64_t n) {
  _mm256_mask_storeu_epi16(p, static_cast<__mmask16>((1u << n) - 1), at::vec::cvtfp32_bf16(__m512(v)));
}

// Calls f(T{}) with T the C++ type of dtype (float or c10::BFloat16).
template <typename F>
void dispatch_fp32_bf16(at::ScalarType dtype, const F& f) {
  if (dtype == at::kFloat) {
    f(float{});
  } else {
    TORCH_CHECK(dtype == at::kBFloat16, "fused kernels take float32 or bfloat16, got ", dtype);
    f(c10::BFloat16{});
  }
}

// Fast exp (ATen's exp_u20, what its flash attention uses): ≤20 ulp.
inline fVec exp(const fVec& v) { return v.exp_u20(); }

// sigmoid(x) = 1 / (1 + exp(−x)), ATen's form (silu = x / (1 + exp(−x))).
inline fVec sigmoid(const fVec& x) { return fVec(1.f) / (fVec(1.f) + kernels::exp(fVec(0.f) - x)); }

// 2^t for the hot loops of softmax-like kernels, in half the instructions of
// exp_u20: t = n + f with n = round(t), 2^f by Cephes' exp2f polynomial on
// [-1/2, 1/2] (relative error 1.7e-7), scaled by 2^n with vscalefps, which
// also handles overflow (inf) and underflow (t ≤ −151 → 0). NaN stays NaN.
// Callers fold log2(e) into an FMA they already do: exp(x − m) =
// exp2(x·log2e − m·log2e).
inline fVec exp2(const fVec& t_in) {
  const __m512 t = _mm512_max_ps(_mm512_set1_ps(-151.f), t_in);  // max(c, NaN) = NaN
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

}  // namespace ctitan::kernels
CTITAN_KERNELS_END

#if !defined(CTITAN_KEEP_ISA_MACROS)
#undef __AVX512F__
#undef __AVX512BW__
#undef __AVX512VL__
#undef __AVX512DQ__
#undef __AVX2__
#undef __AVX__
#undef __FMA__
#undef __F16C__
#endif

namespace ctitan::kernels {

// Rows per parallel task so that each task touches about `bytes_per_task`:
// 256 KB is ~50 µs of streaming work, enough to pay for waking a thread.
inline int64_t grain_rows(int64_t bytes_per_row, int64_t bytes_per_task = 256 << 10) {
  return bytes_per_row >= bytes_per_task ? 1 : bytes_per_task / bytes_per_row;
}


}  // namespace ctitan::kernels
