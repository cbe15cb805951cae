// Tensor parallelism's regions against the unsharded computation, in fp64
// on thread ranks over Gloo: an MLP x → W1 (column-wise) → tanh → W2
// (row-wise), with and without sequence parallelism, at tp 2 and 4. Every
// rank's output and the gradients of x, W1's rows and W2's columns must be
// the whole model's, to fp64 rounding.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <vector>

#include "common/errors.h"
#include "tests/unit/thread_ranks.h"
#include "trainer/model/llama.h"
#include "trainer/parallel/tensor_parallel.h"

namespace ctitan {
namespace {

struct Case {
  int tp;
  bool sequence_parallel;
};
void PrintTo(const Case& c, std::ostream* os) { *os << "tp " << c.tp << (c.sequence_parallel ? " with SP" : ""); }

class TensorParallelMlp : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelMlp, MatchesTheUnshardedMlpForwardAndBackward) {
  const auto [tp, sp] = GetParam();
  const int64_t B = 2, S = 8, D = 12, F = 16;
  torch::manual_seed(3);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  const at::Tensor x = torch::randn({B, S, D}, opts), w1 = torch::randn({F, D}, opts), w2 = torch::randn({D, F}, opts);
  const at::Tensor dy = torch::randn({B, S, D}, opts);  // the upstream gradient

  // The whole model.
  at::Tensor xr = x.clone().requires_grad_(), w1r = w1.clone().requires_grad_(), w2r = w2.clone().requires_grad_();
  const at::Tensor y = at::linear(at::tanh(at::linear(xr, w1r)), w2r);
  y.backward(dy);

  std::mutex m;
  std::vector<at::Tensor> outs(tp), dxs(tp), dw1s(tp), dw2s(tp);
  testing::run_group(tp, [&](int r, Communicator& c) {
    at::Tensor xs = (sp ? x.chunk(tp, 1)[r] : x).clone().requires_grad_();
    at::Tensor w1s = w1.chunk(tp, 0)[r].clone().requires_grad_();  // rows: column-wise
    at::Tensor w2s = w2.chunk(tp, 1)[r].clone().requires_grad_();  // columns: row-wise
    const at::Tensor h = at::tanh(column_parallel_linear(xs, w1s, c, sp));
    const at::Tensor out = row_parallel_linear(h, w2s, c, sp);
    out.backward(sp ? dy.chunk(tp, 1)[r] : dy);
    std::lock_guard<std::mutex> lock(m);
    outs[r] = out.detach();
    dxs[r] = xs.grad();
    dw1s[r] = w1s.grad();
    dw2s[r] = w2s.grad();
  });
  const double tol = 1e-12;
  for (int r = 0; r < tp; ++r) {
    const at::Tensor want_y = sp ? y.detach().chunk(tp, 1)[r] : y.detach();
    const at::Tensor want_dx = sp ? xr.grad().chunk(tp, 1)[r] : xr.grad();
    EXPECT_TRUE(at::allclose(outs[r], want_y, tol, tol)) << "rank " << r << " output";
    EXPECT_TRUE(at::allclose(dxs[r], want_dx, tol, tol)) << "rank " << r << " dx";
    EXPECT_TRUE(at::allclose(dw1s[r], w1r.grad().chunk(tp, 0)[r], tol, tol)) << "rank " << r << " dW1 rows";
    EXPECT_TRUE(at::allclose(dw2s[r], w2r.grad().chunk(tp, 1)[r], tol, tol)) << "rank " << r << " dW2 columns";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, TensorParallelMlp,
                         ::testing::Values(Case{2, false}, Case{2, true}, Case{4, false}, Case{4, true}),
                         [](const auto& i) {
                           return "tp" + std::to_string(i.param.tp) + (i.param.sequence_parallel ? "_sp" : "");
                         });

// The sequence regions alone: gather puts rank r's part at chunk r; scatter
// sums over the ranks and keeps chunk r; each is the other's adjoint.
TEST(SequenceParallel, GatherAndScatterAreAdjoint) {
  const int tp = 2;
  testing::run_group(tp, [&](int r, Communicator& c) {
    const auto opts = torch::TensorOptions().dtype(torch::kDouble);
    at::Tensor part = torch::full({1, 3, 2}, static_cast<double>(r + 1), opts).requires_grad_();
    const at::Tensor whole = gather_from_sp(part, c, 1);
    ASSERT_EQ(whole.sizes(), (std::vector<int64_t>{1, 6, 2}));
    EXPECT_EQ(whole[0][0][0].item<double>(), 1.0);
    EXPECT_EQ(whole[0][5][0].item<double>(), 2.0);
    whole.backward(torch::ones({1, 6, 2}, opts) * (r + 1));  // backward: the sum over ranks of chunk r
    EXPECT_TRUE(at::allclose(part.grad(), torch::full({1, 3, 2}, 3.0, opts)));
    const at::Tensor chunk = scatter_to_sp(torch::arange(12, opts).view({1, 6, 2}), c, -2);
    EXPECT_TRUE(at::allclose(chunk, torch::arange(12, opts).view({1, 6, 2}).chunk(2, 1)[r] * 2));
  });
}

}  // namespace
}  // namespace ctitan

namespace ctitan {
namespace {

// TorchTitan's plan on debugmodel's specs (dim 256, 16 heads of 16, 16 KV
// heads, FFN 768, vocab 2048), as rank 1 of tp 2: boxes by hand.
TEST(TensorParallelPlan, TorchTitansLlamaPlanAsBoxes) {
  const LlamaArgs a = llama3_flavor("debugmodel");
  check_tensor_parallel_degree(a, 2);
  std::map<std::string, ParamSpec> by_name;
  for (ParamSpec& s : tensor_parallel_plan(llama3_param_specs(a, ModelPart{}), 2, 1)) by_name[s.name] = s;
  const auto box = [&](const std::string& n) { return std::make_pair(by_name.at(n).box_offset, by_name.at(n).box_shape); };
  using V = std::vector<int64_t>;
  EXPECT_EQ(box("layers.0.attention.wq.weight"), std::make_pair(V{128, 0}, V{128, 256}));
  EXPECT_EQ(box("layers.0.attention.wk.weight"), std::make_pair(V{128, 0}, V{128, 256}));
  EXPECT_EQ(box("layers.0.attention.wo.weight"), std::make_pair(V{0, 128}, V{256, 128}));
  EXPECT_EQ(box("layers.3.feed_forward.w1.weight"), std::make_pair(V{384, 0}, V{384, 256}));
  EXPECT_EQ(box("layers.3.feed_forward.w2.weight"), std::make_pair(V{0, 384}, V{256, 384}));
  EXPECT_EQ(box("tok_embeddings.weight"), std::make_pair(V{1024, 0}, V{1024, 256}));
  EXPECT_EQ(box("output.weight"), std::make_pair(V{1024, 0}, V{1024, 256}));
  EXPECT_EQ(box("norm.weight"), std::make_pair(V{0}, V{256}));
  EXPECT_EQ(by_name.at("norm.weight").placements.at(0).describe(), "Replicate() over tp 2");
  EXPECT_EQ(by_name.at("layers.0.attention.wo.weight").describe(),
            "layers.0.attention.wo.weight  global [256, 256]  local [256, 128]  Shard(1) over tp 2");
  // tp 1: the whole model.
  EXPECT_EQ(tensor_parallel_plan(llama3_param_specs(a, ModelPart{}), 1, 0)[1].shape, (V{256, 256}));
}

TEST(TensorParallelPlan, DegreeMustDivideHeadsKvHeadsFfnAndVocab) {
  const LlamaArgs a = llama3_flavor("debugmodel");
  try {
    check_tensor_parallel_degree(a, 3);
    FAIL() << "tp 3 accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "parallelism.tensor_parallel_degree 3 does not divide n_heads 16, n_kv_heads 16, vocab_size 2048; "
                 "choose a degree that divides the heads, KV heads, FFN width and vocabulary");
  }
  EXPECT_NO_THROW(check_tensor_parallel_degree(a, 16));
  EXPECT_THROW(check_tensor_parallel_degree(llama3_flavor("125M"), 8), InputError);  // 4 KV heads
  EXPECT_THROW(shard_even(whole_param("w", {6, 4}), "tp", 4, 0, 0), InputError);
}

}  // namespace
}  // namespace ctitan
