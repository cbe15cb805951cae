// Fused kernels vs the eager chain the model runs today, forward+backward,
// for the `bench` cases of tests/fused_cases.h (debugmodel and 125M shapes).
// Both run in the same benchmark, interleaved (alternating which goes first)
// so machine load hits both alike; the counters give the per-call times and
// speedup = eager / fused (eager: the model's chain today, for the loss
// ctitan::chunked_cross_entropy). Set OMP_NUM_THREADS=1 to compare the
// kernels without thread wake-up noise on a shared machine.
//   build/tests/ctitan_bench --benchmark_filter=Fused
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <chrono>

#include "tests/fused_cases.h"

namespace ctitan::fused_cases {
namespace {

double seconds_of(const Case& c, Impl impl, const Inputs& in, const at::Tensor& dy) {
  const auto t0 = std::chrono::steady_clock::now();
  Result r = forward_backward(c, impl, in, dy);
  benchmark::DoNotOptimize(r.grads.front().const_data_ptr());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BM_FusedVsEager(benchmark::State& state, const Case& c) {
  const Inputs in = make_inputs(c);
  const at::Tensor dy = output_grad(forward(c, Impl::kEager, in).detach());
  for (int i = 0; i < 2; ++i) {  // first calls allocate and pick kernels
    seconds_of(c, Impl::kEager, in, dy);
    seconds_of(c, Impl::kFused, in, dy);
  }
  double eager = 0, fused = 0;
  bool eager_first = true;
  for (auto _ : state) {
    if (eager_first) {
      eager += seconds_of(c, Impl::kEager, in, dy);
      fused += seconds_of(c, Impl::kFused, in, dy);
    } else {
      fused += seconds_of(c, Impl::kFused, in, dy);
      eager += seconds_of(c, Impl::kEager, in, dy);
    }
    eager_first = !eager_first;
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["eager_ms"] = 1e3 * eager / n;
  state.counters["fused_ms"] = 1e3 * fused / n;
  state.counters["speedup"] = eager / fused;
  if (c.op == Op::kCrossEntropy) {
    // The loss as the model would call it: gradient written over the logits
    // (a fresh copy each time, made outside the timing, like the GEMM output).
    double inplace = 0;
    for (int64_t i = 0; i < state.iterations(); ++i) {
      const at::Tensor logits = in.leaves[0].detach().clone().requires_grad_(true);
      const auto t0 = std::chrono::steady_clock::now();
      const at::Tensor g = torch::autograd::grad({fused_cross_entropy(logits, in.labels, true)}, {logits}, {dy})[0];
      benchmark::DoNotOptimize(g.const_data_ptr());
      inplace += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    state.counters["fused_inplace_ms"] = 1e3 * inplace / n;
    state.counters["speedup_inplace"] = eager / inplace;
  }
}

const bool registered = [] {
  for (const Case& c : all_cases()) {
    if (!c.bench) continue;
    benchmark::RegisterBenchmark(("FusedKernels/" + c.name).c_str(),
                                 [c](benchmark::State& st) { BM_FusedVsEager(st, c); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(c.shape[0] * c.shape[1] > (int64_t{1} << 24) ? 1.5 : 0.3);  // ≥ 4 samples of the 125M loss
  }
  return true;
}();

}  // namespace
}  // namespace ctitan::fused_cases
