// parallel_rows: split [0, n) over ATen's intra-op threads from code that
// is not compiled with OpenMP (shared by the fused kernels and Float8).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>

#include <algorithm>
#include <cstdint>

namespace ctitan {

// f(begin, end) over contiguous ranges of [0, n) on ATen's intra-op threads,
// at least `grain` rows per range. at::parallel_for is header-only and only
// goes parallel in translation units compiled with OpenMP, which ctitan's
// are not (no -fopenmp); then the split runs through
// TensorIterator::for_each, whose at::parallel_for was compiled inside
// libtorch — the same OpenMP pool every eager op uses, so no extra threads.
template <typename F>
void parallel_rows(int64_t n, int64_t grain, const F& f) {
#ifdef _OPENMP
  at::parallel_for(0, n, grain, f);
#else
  const int64_t tasks = std::min<int64_t>(at::get_num_threads(), (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (tasks < 2 || at::in_parallel_region()) {
    if (n > 0) f(0, n);
    return;
  }
  const int64_t per_task = (n + tasks - 1) / tasks;
  const at::Tensor ids = at::arange(tasks, at::kLong), unused = at::empty_like(ids);
  at::TensorIterator iter = at::TensorIteratorConfig().add_output(unused).add_const_input(ids).build();
  // A 1-d iterator: size1 is 1 and the ids of a call are contiguous.
  // (A named lambda: loop2d_t is a function_ref and must not outlive it.)
  const auto loop = [&](char** data, const int64_t*, int64_t size0, int64_t) {
    const int64_t first = *reinterpret_cast<const int64_t*>(data[1]);
    f(first * per_task, std::min(n, (first + size0) * per_task));
  };
  iter.for_each(at::TensorIteratorBase::loop2d_t(loop), /*grain_size=*/1);
#endif
}

}  // namespace ctitan
