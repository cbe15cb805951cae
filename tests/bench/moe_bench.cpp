// The MoE experts' SwiGLU over tokens grouped by expert, forward and
// backward in fp32: ctitan's grouped_linear (one at::_grouped_mm per
// projection) against the per-expert loop a plain implementation writes
// (split, unbind, three linears per expert, concatenate). Tokens are
// spread evenly.
//   build/tests/ctitan_bench --benchmark_filter=MoeExperts
// Shapes: Qwen3 debugmodel_moe (64 experts, D 256, width 768, 512 tokens x
// top 8) and DeepSeek-V3 16B's experts (64 experts, D 2048, width 1408, 256
// tokens x top 6).
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "trainer/model/moe.h"

namespace {

struct Shape {
  int64_t experts, dim, width, rows;
};

void run(benchmark::State& state, const Shape& s, bool grouped) {
  at::manual_seed(0);
  const auto leaf = [](at::Tensor t) { return (t * 0.05).requires_grad_(true); };
  const at::Tensor w1 = leaf(at::randn({s.experts, s.width, s.dim})), w3 = leaf(at::randn({s.experts, s.width, s.dim}));
  const at::Tensor w2 = leaf(at::randn({s.experts, s.dim, s.width}));
  const at::Tensor x = at::randn({s.rows, s.dim}).requires_grad_(true);
  const at::Tensor counts = at::full({s.experts}, s.rows / s.experts, at::kLong);
  for (auto _ : state) {
    at::Tensor y;
    if (grouped) {
      y = ctitan::grouped_linear(at::silu(ctitan::grouped_linear(x, w1, counts)) * ctitan::grouped_linear(x, w3, counts),
                                 w2, counts);
    } else {
      // unbind/split (one backward node each), not w1[e]: a select's
      // backward would build a full-size zero gradient per expert.
      std::vector<at::Tensor> out;
      const auto xs = x.split(s.rows / s.experts);
      const auto w1s = w1.unbind(0), w2s = w2.unbind(0), w3s = w3.unbind(0);
      for (int64_t e = 0; e < s.experts; ++e)
        out.push_back(at::linear(at::silu(at::linear(xs[e], w1s[e])) * at::linear(xs[e], w3s[e]), w2s[e]));
      y = at::cat(out);
    }
    y.sum().backward();
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(s.rows), benchmark::Counter::kIsIterationInvariantRate);
}

const Shape kDebug{64, 256, 768, 512 * 8}, k16B{64, 2048, 1408, 256 * 6};

BENCHMARK_CAPTURE(run, MoeExperts_debugmodel_moe_grouped, kDebug, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run, MoeExperts_debugmodel_moe_loop, kDebug, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run, MoeExperts_16B_grouped, k16B, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run, MoeExperts_16B_loop, k16B, false)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
