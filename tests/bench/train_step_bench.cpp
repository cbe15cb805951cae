// One full training step (forward, backward, clip, AdamW) of debugmodel and
// the ~125M flavor, in bf16 and fp32, at seq 256 × batch 8.
//   build/ctitan_bench --benchmark_filter=TrainStep
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "trainer/models/llama3.h"
#include "trainer/model/transformer.h"
#include "trainer/optim/adamw.h"

namespace {

void BM_TrainStep(benchmark::State& state, const std::string& flavor, at::ScalarType dtype) {
  const int64_t B = 8, S = 256;
  ctitan::Transformer model(ctitan::llama3_flavor(flavor), dtype, S);
  model.init_weights(0);
  ctitan::AdamW opt(model.store().flat_params(), model.store().flat_grads(), {});
  auto tokens = torch::randint(0, model.args().vocab_size, {B, S}, torch::kLong);
  auto labels = torch::randint(0, model.args().vocab_size, {B, S}, torch::kLong);
  const double fpt = ctitan::flops_per_token(model.args(), S);
  for (auto _ : state) {
    model.forward_loss(tokens, labels).backward();
    model.store().accumulate_grads();
    ctitan::clip_grad_norm_(model.store().flat_grads(), 1.0);
    opt.step(8e-4);
    model.store().zero_grad();
    model.store().begin_step();
  }
  state.counters["tokens/s"] = benchmark::Counter(B * S, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["TFLOPs"] = benchmark::Counter(fpt * B * S / 1e12, benchmark::Counter::kIsIterationInvariantRate);
}

// The first steps allocate and pick kernels: warm up before timing.
BENCHMARK_CAPTURE(BM_TrainStep, debugmodel_bf16, "debugmodel", torch::kBFloat16)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinWarmUpTime(1.0);
BENCHMARK_CAPTURE(BM_TrainStep, debugmodel_fp32, "debugmodel", torch::kFloat)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinWarmUpTime(1.0);
BENCHMARK_CAPTURE(BM_TrainStep, llama125M_bf16, "125M", torch::kBFloat16)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinWarmUpTime(5.0)->MinTime(8.0);
BENCHMARK_CAPTURE(BM_TrainStep, llama125M_fp32, "125M", torch::kFloat)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinWarmUpTime(8.0)->MinTime(15.0);

}  // namespace

BENCHMARK_MAIN();
