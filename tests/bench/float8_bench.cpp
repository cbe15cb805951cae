// Float8 linear (CPU emulation) against the bf16 at::linear it replaces, at
// debugmodel's QKV shape: x [2048, 256] (batch 8 × seq 256 tokens) times
// w [768, 256], forward + backward. Plus the codec's quantise pass alone.
//   build/tests/ctitan_bench --benchmark_filter=Float8   (OMP_NUM_THREADS=1 on a busy machine)
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "trainer/float8/float8_linear.h"

namespace {

constexpr int64_t kTokens = 2048, kIn = 256, kOut = 768;

struct Operands {
  at::Tensor x, w, go;
  Operands() {
    torch::manual_seed(0);
    x = torch::randn({kTokens, kIn}).to(torch::kBFloat16).requires_grad_();
    w = (torch::randn({kOut, kIn}) * 0.05).to(torch::kBFloat16).requires_grad_();
    go = torch::randn({kTokens, kOut}).to(torch::kBFloat16);
  }
};

void set_counters(benchmark::State& state) {
  // forward + two backward GEMMs, 2 FLOPs per multiply-add
  const double flops = 3.0 * 2.0 * kTokens * kIn * kOut;
  state.counters["TFLOPs"] = benchmark::Counter(flops / 1e12, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Float8Linear_Bf16Baseline(benchmark::State& state) {
  Operands o;
  for (auto _ : state) {
    at::Tensor y = at::linear(o.x, o.w);
    y.backward(o.go);
    o.x.mutable_grad().reset();
    o.w.mutable_grad().reset();
  }
  set_counters(state);
}

void BM_Float8Linear_Emulated(benchmark::State& state, ctitan::Float8Recipe recipe) {
  Operands o;
  for (auto _ : state) {
    at::Tensor y = ctitan::float8_linear(o.x, o.w, recipe, /*emulate=*/true);
    y.backward(o.go);
    o.x.mutable_grad().reset();
    o.w.mutable_grad().reset();
  }
  set_counters(state);
}

// One quantise pass (amax, scale, encode+decode) of x, as the linear does it.
void BM_Float8Quantize(benchmark::State& state, ctitan::Float8Scaling scaling) {
  Operands o;
  const at::Tensor x = o.x.detach();
  for (auto _ : state) {
    auto q = ctitan::float8_quantize(x, {scaling, ctitan::Fp8Format::kE4M3FN}, false, true);
    benchmark::DoNotOptimize(q.data.data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * x.numel());
}

BENCHMARK(BM_Float8Linear_Bf16Baseline)->Unit(benchmark::kMillisecond)->UseRealTime()->MinWarmUpTime(0.3)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Float8Linear_Emulated, tensorwise, ctitan::Float8Recipe::kTensorwise)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinWarmUpTime(0.3)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Float8Linear_Emulated, rowwise, ctitan::Float8Recipe::kRowwise)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinWarmUpTime(0.3)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Float8Linear_Emulated, rowwise_with_gw_hp, ctitan::Float8Recipe::kRowwiseWithGwHp)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinWarmUpTime(0.3)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Float8Quantize, tensorwise, ctitan::Float8Scaling::kTensorwise)
    ->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_Float8Quantize, per_row, ctitan::Float8Scaling::kPerRow)
    ->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_Float8Quantize, per_column, ctitan::Float8Scaling::kPerColumn)
    ->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(1.0);

}  // namespace
