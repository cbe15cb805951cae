// Internal to trainer/float8: how the element-wise float8 loops get vectorised.
//
// The build has no -march flag (binaries must run on any x86-64), so the hot
// loops are compiled three times — AVX-512, AVX2, baseline — and the loader
// picks one (GCC target_clones). The loops are written branch-free with
// __restrict pointers so GCC vectorises them; inner helpers are force-inlined
// into each clone.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "trainer/parallel_rows.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CTITAN_FP8_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CTITAN_FP8_CLONES
#endif
#define CTITAN_FP8_INLINE inline __attribute__((always_inline))

namespace ctitan::fp8_simd {

CTITAN_FP8_INLINE float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
CTITAN_FP8_INLINE uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// bf16 → float32 is exact: the bf16 bits are the high half of the float's.
CTITAN_FP8_INLINE float bf16_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }
// float32 → bf16, round to nearest even, NaN stays a (quiet) NaN: what
// c10::BFloat16's constructor computes, in a form GCC vectorises.
CTITAN_FP8_INLINE uint16_t float_to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0u : rounded);
}


}  // namespace ctitan::fp8_simd
