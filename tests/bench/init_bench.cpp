// Transformer::init_weights for debugmodel and the ~125M flavor (fp32 master).
//   build/ctitan_bench --benchmark_filter=InitWeights
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "trainer/models/llama3.h"
#include "trainer/model/transformer.h"

namespace {

void BM_InitWeights(benchmark::State& state, const std::string& flavor) {
  ctitan::Transformer model(ctitan::llama3_flavor(flavor), torch::kFloat, 256);
  for (auto _ : state) model.init_weights(0);
  state.counters["params/s"] =
      benchmark::Counter(static_cast<double>(model.store().num_params()), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_InitWeights, debugmodel, "debugmodel")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_InitWeights, llama125M, "125M")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5.0);

}  // namespace
