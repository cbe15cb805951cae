// What the profiler's hooks cost, side by side in one run:
//  - a TraceRange while not recording (what every training step pays for
//    each range when profiling is off) and while recording;
//  - the communicator's observer check (an atomic load per collective);
//  - a 64 KiB CPU tensor allocation under the accounting allocator with and
//    without a MemoryCategoryScope.
//   build/ctitan_bench --benchmark_filter='Trace|Observer|Alloc'
// The whole-step comparison (a build without the tracer against this one,
// training debugmodel) is tests/bench/profiling_overhead.sh; numbers in
// docs/profiling.md.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "profiling/collective_observer.h"
#include "profiling/memory.h"
#include "profiling/trace.h"

namespace {

void BM_TraceRangeNotRecording(benchmark::State& state) {
  for (auto _ : state) {
    ctitan::TraceRange r(ctitan::trace_cat::kCompute, "forward", "layers.0");
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_TraceRangeNotRecording);

void BM_TraceRangeRecording(benchmark::State& state) {
  ctitan::Tracer& t = ctitan::Tracer::get();
  t.start();
  int64_t n = 0;
  for (auto _ : state) {
    ctitan::TraceRange r(ctitan::trace_cat::kCompute, "forward", "layers.0");
    if (++n % 65536 == 0) {  // drain, or the buffer grows without bound
      state.PauseTiming();
      t.stop();
      t.start();
      state.ResumeTiming();
    }
  }
  t.stop();
}
BENCHMARK(BM_TraceRangeRecording);

void BM_ObserverCheck(benchmark::State& state) {
  for (auto _ : state) {
    ctitan::CollectiveObserver* o = ctitan::collective_observer();
    benchmark::DoNotOptimize(o);
  }
}
BENCHMARK(BM_ObserverCheck);

void BM_AllocPlain(benchmark::State& state) {
  ctitan::install_accounting_allocator();
  for (auto _ : state) benchmark::DoNotOptimize(torch::empty({16384}, torch::kFloat));
}
BENCHMARK(BM_AllocPlain);

void BM_AllocWithCategoryScope(benchmark::State& state) {
  ctitan::install_accounting_allocator();
  for (auto _ : state) {
    ctitan::MemoryCategoryScope s(ctitan::MemoryCategory::kActivations);
    benchmark::DoNotOptimize(torch::empty({16384}, torch::kFloat));
  }
}
BENCHMARK(BM_AllocWithCategoryScope);

}  // namespace
