// Expert parallelism's token dispatch and combine (trainer/parallel/
// expert_parallel.h) with thread ranks over Gloo, against a float64
// reference written here: each row times its expert's weight, row by row.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

#include "tests/unit/thread_ranks.h"
#include "trainer/model/moe.h"
#include "trainer/parallel/expert_parallel.h"

namespace ctitan {
namespace {

using testing::run_group;

constexpr int64_t kExperts = 8, kIn = 6, kOut = 5;

// One rank's routed rows: the expert of each row (sorted), the rows and the
// upstream gradient, a pure function of (case, rank).
struct Rows {
  at::Tensor expert, x, grad;
};

using Picker = std::function<std::vector<int64_t>(int rank, int world)>;  // the experts of a rank's rows

Rows rows_of(const Picker& pick, int rank, int world) {
  std::vector<int64_t> ex = pick(rank, world);
  std::sort(ex.begin(), ex.end());
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + rank);
  const auto n = static_cast<int64_t>(ex.size());
  return {at::tensor(ex, at::kLong), at::randn({n, kIn}, gen), at::randn({n, kOut}, gen)};
}

at::Tensor weights() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  return at::randn({kExperts, kOut, kIn}, gen);
}

// Runs dispatch → grouped GEMM over the local experts → combine on every
// rank and checks the outputs and both gradients against float64 row-by-row
// products (the weights' gradient summed over every rank's rows).
void expect_exact_dispatch(int world, const Picker& pick) {
  const at::Tensor w = weights();
  run_group(world, [&](int r, Communicator& ep) {
    const int64_t L = kExperts / world;
    const Rows mine = rows_of(pick, r, world);
    const at::Tensor counts = at::bincount(mine.expert, {}, kExperts);
    const EpRoute route = ep_route(counts, ep);
    const at::Tensor x = mine.x.clone().requires_grad_(true);
    const at::Tensor w_local = w.narrow(0, r * L, L).clone().requires_grad_(true);
    const at::Tensor y = ep_combine(grouped_linear(ep_dispatch(x, route, ep), w_local, route.local_counts), route, ep);
    (y * mine.grad).sum().backward();

    const at::Tensor w64 = w.to(at::kDouble);
    at::Tensor want_y = at::zeros({mine.x.size(0), kOut}, at::kDouble), want_gx = at::zeros_like(mine.x, at::kDouble);
    for (int64_t i = 0; i < mine.x.size(0); ++i) {
      const at::Tensor we = w64[mine.expert[i].item<int64_t>()];
      want_y[i] = at::mv(we, mine.x[i].to(at::kDouble));
      want_gx[i] = at::mv(we.t(), mine.grad[i].to(at::kDouble));
    }
    at::Tensor want_gw = at::zeros({L, kOut, kIn}, at::kDouble);
    int64_t received = 0;
    for (int s = 0; s < world; ++s) {
      const Rows theirs = rows_of(pick, s, world);
      for (int64_t i = 0; i < theirs.x.size(0); ++i) {
        const int64_t e = theirs.expert[i].item<int64_t>() - r * L;
        if (e < 0 || e >= L) continue;
        ++received;
        want_gw[e] += at::outer(theirs.grad[i].to(at::kDouble), theirs.x[i].to(at::kDouble));
      }
    }
    EXPECT_EQ(route.local_counts.sum().item<int64_t>(), received) << "rank " << r;
    EXPECT_TRUE(at::allclose(y.to(at::kDouble), want_y, 1e-5, 1e-5)) << "rank " << r;
    EXPECT_TRUE(at::allclose(x.grad().to(at::kDouble), want_gx, 1e-5, 1e-5)) << "rank " << r;
    EXPECT_TRUE(at::allclose(w_local.grad().to(at::kDouble), want_gw, 1e-5, 1e-5)) << "rank " << r;
  });
}

// Uneven random routing: 12 rows per rank over 8 experts, experts 3 and 6
// receive no row from anyone.
TEST(ExpertParallel, DispatchAndCombineAreExactWithUnevenRouting) {
  const Picker uneven = [](int rank, int) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(40 + rank);
    std::vector<int64_t> ex;
    const int64_t allowed[] = {0, 1, 2, 4, 5, 7};
    for (int i = 0; i < 12; ++i) ex.push_back(allowed[at::randint(6, {1}, gen).item<int64_t>()]);
    return ex;
  };
  for (int world : {2, 4}) expect_exact_dispatch(world, uneven);
}

// Every rank routes every row to expert 0 (rank 0's): the other ranks
// receive nothing and their experts' gradients are zero.
TEST(ExpertParallel, AllRowsToOneRankAndRanksThatReceiveNothing) {
  for (int world : {2, 4}) expect_exact_dispatch(world, [](int, int) { return std::vector<int64_t>(5, 0); });
}

// The last rank routes no row at all (it still joins every exchange).
TEST(ExpertParallel, ARankWithNoRows) {
  const Picker some = [](int rank, int world) {
    return rank == world - 1 ? std::vector<int64_t>{} : std::vector<int64_t>{1, 7, 7, 3, 4};
  };
  for (int world : {2, 4}) expect_exact_dispatch(world, some);
}

}  // namespace
}  // namespace ctitan
