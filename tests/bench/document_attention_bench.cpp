// block_causal attention against causal on C4-like documents, forward +
// backward, side by side (interleaved, alternating which goes first):
//   causal_ms     the fused causal kernel (compile.enable)
//   docs_ms       the same kernel with document starts: it skips the key
//                 blocks before each row block's document
//   docs_sdpa_ms  ATen's SDPA with the document mask (the path without the
//                 kernel: every block computed, the masked ones discarded)
//   density       visible (query, key) pairs over causal's
// The documents: c4_like_document_starts (documents.h: log-normal lengths
// with C4's mean of 427 tokens, median 230 assumed, packed).
//   OMP_NUM_THREADS=1 build/tests/ctitan_bench --benchmark_filter=DocumentAttention
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <chrono>

#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/documents.h"

namespace ctitan {
namespace {

double seconds(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
               const at::Tensor& starts, bool sdpa) {
  const at::Tensor ql = q.detach().requires_grad_(true), kl = k.detach().requires_grad_(true),
                   vl = v.detach().requires_grad_(true);
  const auto t0 = std::chrono::steady_clock::now();
  const at::Tensor o = sdpa ? document_attention_sdpa(ql, kl, vl, starts) : fused_causal_attention(ql, kl, vl, starts);
  const auto g = torch::autograd::grad({o}, {ql, kl, vl}, {dout});
  benchmark::DoNotOptimize(g[0].const_data_ptr());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// {B, H, G, S, Dh}: q [B,S,H,Dh], k/v [B,S,G,Dh] memory as the model lays them out.
void BM_DocumentAttention(benchmark::State& state, std::vector<int64_t> shape) {
  const int64_t B = shape[0], H = shape[1], G = shape[2], S = shape[3], Dh = shape[4];
  torch::manual_seed(0);
  const at::Tensor q = torch::randn({B, S, H, Dh}).transpose(1, 2), k = torch::randn({B, S, G, Dh}).transpose(1, 2),
                   v = torch::randn({B, S, G, Dh}).transpose(1, 2), dout = torch::randn({B, H, S, Dh});
  const at::Tensor starts = c4_like_document_starts(B, S, 42);
  double t[3] = {0, 0, 0};
  const at::Tensor none;
  auto run = [&](int which) {
    return which == 0 ? seconds(q, k, v, dout, none, false) : seconds(q, k, v, dout, starts, which == 2);
  };
  for (int w = 0; w < 3; ++w) run(w);  // first calls allocate
  int first = 0;
  for (auto _ : state) {
    for (int i = 0; i < 3; ++i) t[(first + i) % 3] += run((first + i) % 3);
    first = (first + 1) % 3;
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["causal_ms"] = 1e3 * t[0] / n;
  state.counters["docs_ms"] = 1e3 * t[1] / n;
  state.counters["docs_sdpa_ms"] = 1e3 * t[2] / n;
  state.counters["docs_vs_causal"] = t[1] / t[0];
  state.counters["density"] = document_attention_fraction(starts);
}

BENCHMARK_CAPTURE(BM_DocumentAttention, debugmodel_s2048, std::vector<int64_t>{2, 16, 16, 2048, 16})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_CAPTURE(BM_DocumentAttention, 125M_s2048_fp32, std::vector<int64_t>{1, 12, 4, 2048, 64})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_CAPTURE(BM_DocumentAttention, debugmodel_s8192, std::vector<int64_t>{1, 16, 16, 8192, 16})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);

}  // namespace
}  // namespace ctitan
