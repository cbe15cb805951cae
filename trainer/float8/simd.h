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
#include <ATen/TensorIterator.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

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

// f(begin, end) over contiguous ranges of [0, n), at least `grain` per range,
// on ATen's intra-op threads. at::parallel_for is header-only and goes
// parallel only where the includer is compiled with OpenMP, which ctitan is
// not (no -fopenmp: it silently runs serially). TensorIterator::for_each
// calls the at::parallel_for compiled inside libtorch, so the ranges are
// handed out from there: the OpenMP pool eager ops use, no extra threads.
template <typename F>
void parallel_for(int64_t n, int64_t grain, const F& f) {
#ifdef _OPENMP
  at::parallel_for(0, n, grain, f);
#else
  grain = std::max<int64_t>(grain, 1);
  const int64_t tasks = std::min<int64_t>(at::get_num_threads(), (n + grain - 1) / grain);
  if (tasks < 2 || at::in_parallel_region()) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
  const int64_t per_task = (n + tasks - 1) / tasks;
  const at::Tensor ids = at::arange(tasks, at::kLong), unused = at::empty_like(ids);
  at::TensorIterator iter = at::TensorIteratorConfig().add_output(unused).add_const_input(ids).build();
  // One dimension, so a call gets size0 consecutive task ids; the lambda is
  // named because loop2d_t is a non-owning function_ref.
  const auto loop = [&](char** data, const int64_t*, int64_t size0, int64_t) {
    const int64_t first = *reinterpret_cast<const int64_t*>(data[1]);
    f(first * per_task, std::min(n, (first + size0) * per_task));
  };
  iter.for_each(at::TensorIteratorBase::loop2d_t(loop), /*grain_size=*/1);
#endif
}

}  // namespace ctitan::fp8_simd
