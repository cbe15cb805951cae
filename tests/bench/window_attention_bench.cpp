// GPT-OSS's sliding-window attention against full causal attention,
// forward + backward through the fused CPU kernel (compile.enable), side by
// side (interleaved, alternating which goes first):
//   full_ms        causal attention
//   window_ms      the window of 128 keys: the kernel skips the key blocks
//                  before each row block's window
//   window_sink_ms the window with a sink per head (GPT-OSS's even layers)
//   time_ratio     window_ms / full_ms
//   pair_ratio     the visible pairs' ratio, window_visible_pairs(S, 128) /
//                  window_visible_pairs(S, 0): what the time should follow
// Heads of 64 (GPT-OSS's head_dim), fp32, one KV head per 4 or 8 queries.
//   OMP_NUM_THREADS=1 build/tests/ctitan_bench --benchmark_filter=WindowAttention
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <chrono>

#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/sink_attention.h"

namespace ctitan {
namespace {

constexpr int64_t kWindow = 128;

double seconds(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
               const AttentionExtras& extras) {
  const at::Tensor ql = q.detach().requires_grad_(true), kl = k.detach().requires_grad_(true),
                   vl = v.detach().requires_grad_(true);
  const auto t0 = std::chrono::steady_clock::now();
  const at::Tensor o = fused_causal_attention(ql, kl, vl, {}, extras);
  const auto g = torch::autograd::grad({o}, {ql, kl, vl}, {dout});
  benchmark::DoNotOptimize(g[0].const_data_ptr());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// {B, H, G, S}: q [B,S,H,64], k/v [B,S,G,64] memory as the model lays them out.
void BM_WindowAttention(benchmark::State& state, std::vector<int64_t> shape) {
  const int64_t B = shape[0], H = shape[1], G = shape[2], S = shape[3], Dh = 64;
  if (!fused_attention_runs(torch::zeros({1, 1, 1, Dh}), torch::zeros({1, 1, 1, Dh}), torch::zeros({1, 1, 1, Dh}))) {
    state.SkipWithError("the fused CPU attention kernel needs ATen at AVX-512");
    return;
  }
  torch::manual_seed(0);
  const at::Tensor q = torch::randn({B, S, H, Dh}).transpose(1, 2), k = torch::randn({B, S, G, Dh}).transpose(1, 2),
                   v = torch::randn({B, S, G, Dh}).transpose(1, 2), dout = torch::randn({B, H, S, Dh});
  const AttentionExtras cases[3] = {{}, {kWindow, {}}, {kWindow, torch::randn({H})}};
  double t[3] = {0, 0, 0};
  for (int w = 0; w < 3; ++w) seconds(q, k, v, dout, cases[w]);  // first calls allocate
  int first = 0;
  for (auto _ : state) {
    for (int i = 0; i < 3; ++i) t[(first + i) % 3] += seconds(q, k, v, dout, cases[(first + i) % 3]);
    first = (first + 1) % 3;
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["full_ms"] = 1e3 * t[0] / n;
  state.counters["window_ms"] = 1e3 * t[1] / n;
  state.counters["window_sink_ms"] = 1e3 * t[2] / n;
  state.counters["time_ratio"] = t[1] / t[0];
  state.counters["pair_ratio"] = window_visible_pairs(S, kWindow) / window_visible_pairs(S, 0);
}

BENCHMARK_CAPTURE(BM_WindowAttention, s2048, std::vector<int64_t>{1, 8, 1, 2048})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_CAPTURE(BM_WindowAttention, s8192, std::vector<int64_t>{1, 4, 1, 8192})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);

}  // namespace
}  // namespace ctitan
