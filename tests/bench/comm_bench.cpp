// Collectives through ctitan's communicator: all_reduce, all_gather and
// reduce_scatter, bf16 and fp32, 64 KiB / 1 MiB / 16 MiB, world 2 and 4.
// Ranks are threads of this process, each its own Gloo group member over
// one HashStore; Gloo still moves the data over loopback TCP as between
// processes, so threads change only who shares the two cores (all of it, in
// both cases). Bytes/s counts the collective's full buffer per iteration:
// all_reduce's tensor, all_gather's output, reduce_scatter's input
// ("algorithm bandwidth" in nccl-tests terms).
//
// BM_TpPattern: tensor parallelism's collective pattern with its GEMMs —
// all-gather + column-wise GEMM, row-wise GEMM + reduce-scatter, forward
// and backward (sequence parallel, an MLP of debugmodel's shape: B 8,
// S 128, D 256, F 768, fp32) — synchronous (gather, then GEMM) and async
// (micro-pipelined: the collective of one piece overlaps the GEMM of the
// previous one; async_chunks pieces per rank, 0 = synchronous), at world 2
// and 4.
//   build/tests/ctitan_bench --benchmark_filter='Comm|TpPattern'
//   build/tests/ctitan_bench --benchmark_filter=TpPattern
#include <benchmark/benchmark.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>

#include <map>
#include <thread>

#include "trainer/distributed/comm.h"
#include "trainer/parallel/exposed_comm.h"
#include "trainer/parallel/tensor_parallel.h"

namespace {

using ctitan::Communicator;

enum class Op { kAllReduce, kAllGather, kReduceScatter };

// One rank's buffers for `op` on a `bytes` buffer, and how to issue it once.
struct Buffers {
  at::Tensor a, b;
  Buffers(Op op, at::ScalarType dtype, int64_t bytes, int world) {
    const int64_t n = bytes / static_cast<int64_t>(c10::elementSize(dtype));
    switch (op) {
      case Op::kAllReduce:  // zeros: repeated sums stay finite
        a = torch::zeros({n}, dtype);
        break;
      case Op::kAllGather:
        a = torch::empty({n}, dtype);
        b = torch::zeros({n / world}, dtype);
        break;
      case Op::kReduceScatter:
        a = torch::empty({n / world}, dtype);
        b = torch::zeros({n}, dtype);
        break;
    }
  }
  void run(Op op, Communicator& c) {
    switch (op) {
      case Op::kAllReduce: c.all_reduce(a)->wait(); break;
      case Op::kAllGather: c.all_gather(a, b)->wait(); break;
      case Op::kReduceScatter: c.reduce_scatter(a, b)->wait(); break;
    }
  }
};

// The communicators of one world size, created once for the whole run.
std::vector<std::shared_ptr<Communicator>>& group(int world) {
  static std::map<int, std::vector<std::shared_ptr<Communicator>>> groups;
  auto& comms = groups[world];
  if (comms.empty()) {
    comms.resize(world);
    auto store = c10::make_intrusive<c10d::HashStore>();
    std::vector<std::thread> joining;
    for (int r = 0; r < world; ++r) {
      joining.emplace_back([&, r] {
        comms[r] = Communicator::create(c10::make_intrusive<c10d::PrefixStore>("bench", store), r, world, "world", r,
                                        {});
      });
    }
    for (auto& t : joining) t.join();
  }
  return comms;
}

// Rank 0 is the benchmark's thread; ranks 1.. repeat the same number of
// collectives on helper threads (state.max_iterations is fixed per run).
void BM_Comm(benchmark::State& state, Op op, at::ScalarType dtype) {
  const int world = static_cast<int>(state.range(0));
  const int64_t bytes = state.range(1);
  auto& comms = group(world);
  std::vector<Buffers> buffers;
  for (int r = 0; r < world; ++r) buffers.emplace_back(op, dtype, bytes, world);
  const auto iterations = state.max_iterations;
  std::vector<std::thread> helpers;
  std::vector<std::string> errors(world);
  for (int r = 1; r < world; ++r) {
    helpers.emplace_back([&, r] {
      try {
        for (benchmark::IterationCount i = 0; i < iterations; ++i) buffers[r].run(op, *comms[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto _ : state) buffers[0].run(op, *comms[0]);
  for (auto& t : helpers) t.join();
  for (const auto& e : errors) {
    if (!e.empty()) state.SkipWithError(e.c_str());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

// One rank's forward and backward of the TP MLP pattern.
struct TpMlp {
  at::Tensor x, w1, w2, dy;
  TpMlp(int world) {
    const int64_t B = 8, S = 128, D = 256, F = 768;
    x = torch::randn({B, S / world, D}).requires_grad_();
    w1 = (torch::randn({F / world, D}) * 0.05).requires_grad_();
    w2 = (torch::randn({D, F / world}) * 0.05).requires_grad_();
    dy = torch::randn({B, S / world, D});
  }
  void run(Communicator& c, bool async, int64_t chunks) {
    const at::Tensor h = async ? ctitan::async_gather_linear(x, w1, c, chunks)
                               : ctitan::column_parallel_linear(x, w1, c, /*sequence_parallel=*/true);
    const at::Tensor y = async ? ctitan::async_linear_scatter(h, w2, c, chunks)
                               : ctitan::row_parallel_linear(h, w2, c, /*sequence_parallel=*/true);
    y.backward(dy);
    x.mutable_grad() = at::Tensor();
    w1.mutable_grad() = at::Tensor();
    w2.mutable_grad() = at::Tensor();
  }
};

void BM_TpPattern(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const int64_t chunks = state.range(1);  // 0: synchronous
  const bool async = chunks > 0;
  auto& comms = group(world);
  std::vector<TpMlp> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(world);
  const auto iterations = state.max_iterations;
  std::vector<std::thread> helpers;
  std::vector<std::string> errors(world);
  for (int r = 1; r < world; ++r) {
    helpers.emplace_back([&, r] {
      try {
        for (benchmark::IterationCount i = 0; i < iterations; ++i) ranks[r].run(*comms[r], async, chunks);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  ctitan::take_exposed_seconds(*comms[0]);  // from zero: earlier runs and warm-up left theirs
  for (auto _ : state) ranks[0].run(*comms[0], async, chunks);
  for (auto& t : helpers) t.join();
  for (const auto& e : errors) {
    if (!e.empty()) state.SkipWithError(e.c_str());
  }
  state.counters["tp_exposed_ms"] =
      benchmark::Counter(1e3 * ctitan::take_exposed_seconds(*comms[0]) / static_cast<double>(state.iterations()));
}

BENCHMARK(BM_TpPattern)
    ->ArgNames({"world", "async_chunks"})
    ->ArgsProduct({{2, 4}, {0, 2, 4}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinWarmUpTime(0.2)
    ->MinTime(1.0);

void comm_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"world", "bytes"});
  for (int world : {2, 4}) {
    for (int64_t bytes : {int64_t{64} << 10, int64_t{1} << 20, int64_t{16} << 20}) b->Args({world, bytes});
  }
  b->Unit(benchmark::kMicrosecond)->UseRealTime()->MinWarmUpTime(0.1)->MinTime(0.5);
}

BENCHMARK_CAPTURE(BM_Comm, all_reduce_bf16, Op::kAllReduce, at::kBFloat16)->Apply(comm_args);
BENCHMARK_CAPTURE(BM_Comm, all_reduce_fp32, Op::kAllReduce, at::kFloat)->Apply(comm_args);
BENCHMARK_CAPTURE(BM_Comm, all_gather_bf16, Op::kAllGather, at::kBFloat16)->Apply(comm_args);
BENCHMARK_CAPTURE(BM_Comm, all_gather_fp32, Op::kAllGather, at::kFloat)->Apply(comm_args);
BENCHMARK_CAPTURE(BM_Comm, reduce_scatter_bf16, Op::kReduceScatter, at::kBFloat16)->Apply(comm_args);
BENCHMARK_CAPTURE(BM_Comm, reduce_scatter_fp32, Op::kReduceScatter, at::kFloat)->Apply(comm_args);

}  // namespace
