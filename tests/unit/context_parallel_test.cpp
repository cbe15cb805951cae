// Context parallelism's pieces against one process: the head-tail split of
// a sequence, and causal attention over the cp ranks (both rotate methods,
// with and without GQA and load balancing) — outputs and the gradients of
// q, k and v equal those of ATen's causal SDPA over the whole sequence.
// Ranks are threads with their own Gloo communicators.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>

#include "common/errors.h"
#include "tests/unit/thread_ranks.h"
#include "trainer/parallel/context_parallel.h"

namespace ctitan {
namespace {

TEST(ContextParallel, HeadTailGivesRankRChunksRAndTwoCpMinusOneMinusR) {
  // seq 16 over cp 2: chunks of 4; rank 0 holds 0-3 and 12-15, rank 1 4-11.
  EXPECT_TRUE(torch::equal(cp_positions("headtail", 2, 0, 16),
                           torch::tensor({0, 1, 2, 3, 12, 13, 14, 15}, torch::kLong)));
  EXPECT_TRUE(torch::equal(cp_positions("headtail", 2, 1, 16), torch::arange(4, 12, torch::kLong)));
  EXPECT_TRUE(torch::equal(cp_positions("none", 4, 3, 16), torch::arange(12, 16, torch::kLong)));
  EXPECT_THROW(check_context_parallel("ring", "headtail", 2, 16), InputError);
  EXPECT_THROW(check_context_parallel("alltoall", "zigzag", 2, 16), InputError);
  EXPECT_NO_THROW(check_context_parallel("alltoall", "ptrr", 2, 16));
  EXPECT_THROW(check_context_parallel("alltoall", "ptrr", 4, 6), InputError);
  EXPECT_NO_THROW(check_context_parallel("alltoall", "headtail", 4, 16));
  EXPECT_NO_THROW(check_context_parallel("allgather", "none", 4, 12));
  try {
    check_context_parallel("allgather", "headtail", 4, 12);
    FAIL() << "seq 12 over 2 x 4 chunks accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "training.seq_len 12 is not divisible by 2 x context_parallel_degree 4 = 8 (each rank holds "
                           "two chunks of every sequence); choose a multiple");
  }
}

struct Case {
  int cp;
  const char* method;
  const char* balancer;
  int64_t kv_heads;
};

class CpAttention : public ::testing::TestWithParam<Case> {};

TEST_P(CpAttention, MatchesCausalAttentionOverTheWholeSequence) {
  const Case c = GetParam();
  const int64_t B = 2, H = 4, S = 32, Dh = 8;
  torch::manual_seed(11);
  const at::Tensor q0 = torch::randn({B, H, S, Dh}, torch::kDouble);
  const at::Tensor k0 = torch::randn({B, c.kv_heads, S, Dh}, torch::kDouble);
  const at::Tensor v0 = torch::randn({B, c.kv_heads, S, Dh}, torch::kDouble);
  const at::Tensor dout = torch::randn({B, H, S, Dh}, torch::kDouble);
  // One process: causal SDPA with the KV heads repeated (math, fp64).
  at::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
             v = v0.clone().requires_grad_(true);
  const int64_t rep = H / c.kv_heads;
  const at::Tensor want = at::scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                                           {}, 0.0, /*is_causal=*/true);
  want.backward(dout);
  std::mutex mu;
  testing::run_group(c.cp, [&](int r, Communicator& g) {
    ContextParallelOptions cp;
    cp.group = &g;
    cp.rotate_method = c.method;
    cp.load_balancer = c.balancer;
    const at::Tensor pos = cp_positions(c.balancer, c.cp, r, S);
    at::Tensor ql = q0.index_select(2, pos).requires_grad_(true), kl = k0.index_select(2, pos).requires_grad_(true),
               vl = v0.index_select(2, pos).requires_grad_(true);
    // Laid out [B, S, H, Dh] and viewed as [B, H, S, Dh], as the model passes them.
    const auto model_layout = [](const at::Tensor& t) { return t.transpose(1, 2).contiguous().transpose(1, 2); };
    const at::Tensor out = context_parallel_attention(model_layout(ql), model_layout(kl), model_layout(vl), pos, cp);
    out.backward(dout.index_select(2, pos));
    std::lock_guard<std::mutex> lock(mu);
    const std::string at = std::string(c.method) + " cp " + std::to_string(c.cp) + " rank " + std::to_string(r);
    EXPECT_TRUE(torch::allclose(out, want.detach().index_select(2, pos), 1e-10, 1e-12)) << at;
    EXPECT_TRUE(torch::allclose(ql.grad(), q.grad().index_select(2, pos), 1e-10, 1e-12)) << at << " dq";
    EXPECT_TRUE(torch::allclose(kl.grad(), k.grad().index_select(2, pos), 1e-10, 1e-12)) << at << " dk";
    EXPECT_TRUE(torch::allclose(vl.grad(), v.grad().index_select(2, pos), 1e-10, 1e-12)) << at << " dv";
  });
}

INSTANTIATE_TEST_SUITE_P(Methods, CpAttention,
                         ::testing::Values(Case{2, "allgather", "headtail", 4}, Case{2, "alltoall", "headtail", 4},
                                           Case{4, "allgather", "headtail", 2}, Case{4, "alltoall", "headtail", 2},
                                           Case{4, "alltoall", "none", 4}, Case{2, "allgather", "none", 1}),
                         [](const auto& info) {
                           return std::string(info.param.method) + "_cp" + std::to_string(info.param.cp) + "_" +
                                  info.param.balancer + "_kv" + std::to_string(info.param.kv_heads);
                         });

}  // namespace
}  // namespace ctitan
