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
#include "trainer/models/llama3.h"
#include "trainer/model/transformer.h"
#include "trainer/parallel/layout_seams.h"
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
  const ModelArgs a = llama3_flavor("debugmodel");
  check_tensor_parallel_degree(a, 2);
  std::map<std::string, ParamSpec> by_name;
  for (ParamSpec& s : tensor_parallel_plan(model_param_specs(a, ModelPart{}), 2, 1)) by_name[s.name] = s;
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
  EXPECT_EQ(tensor_parallel_plan(model_param_specs(a, ModelPart{}), 1, 0)[1].shape, (V{256, 256}));
}

TEST(TensorParallelPlan, DegreeMustDivideHeadsKvHeadsFfnAndVocab) {
  const ModelArgs a = llama3_flavor("debugmodel");
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

namespace ctitan {
namespace {

const auto kF64 = torch::TensorOptions().dtype(torch::kDouble);

// The vocab-parallel embedding and loss against the whole vocabulary, fp64:
// the lookup and the loss equal, each rank's rows of the embedding's
// gradient and columns of the logits' gradient are the whole one's.
TEST(VocabParallel, EmbeddingAndCrossEntropyMatchTheWholeVocabulary) {
  for (const int tp : {2, 4}) {
    for (const bool sp : {false, true}) {
      const int64_t V = 12, D = 5, B = 2, S = 8;
      torch::manual_seed(11);
      const at::Tensor emb = torch::randn({V, D}, kF64), logits = torch::randn({B * S, V}, kF64);
      const at::Tensor tokens = torch::randint(V, {B, S}, torch::kLong), labels = torch::randint(V, {B * S}, torch::kLong);
      const at::Tensor dy = torch::randn({B, S, D}, kF64);
      at::Tensor emb_r = emb.clone().requires_grad_(), logits_r = logits.clone().requires_grad_();
      const at::Tensor want_e = at::embedding(emb_r, tokens);
      want_e.backward(dy);
      const at::Tensor want_loss = at::cross_entropy_loss(logits_r, labels);
      want_loss.backward();
      std::mutex m;
      std::vector<std::string> failures;
      testing::run_group(tp, [&](int r, Communicator& c) {
        at::Tensor e_shard = emb.chunk(tp, 0)[r].clone().requires_grad_();
        const at::Tensor e = vocab_parallel_embedding(e_shard, tokens, c, sp);
        e.backward(sp ? dy.chunk(tp, 1)[r] : dy);
        at::Tensor l_shard = logits.chunk(tp, 1)[r].clone().requires_grad_();
        const at::Tensor loss = vocab_parallel_cross_entropy(l_shard, labels, c);
        loss.backward();
        std::lock_guard<std::mutex> lock(m);
        const auto check = [&](bool ok, const std::string& what) {
          if (!ok) failures.push_back("tp " + std::to_string(tp) + (sp ? " sp" : "") + " rank " + std::to_string(r) + ": " + what);
        };
        check(at::allclose(e, sp ? want_e.detach().chunk(tp, 1)[r] : want_e.detach(), 0, 0), "lookup");
        check(at::allclose(e_shard.grad(), emb_r.grad().chunk(tp, 0)[r], 1e-12, 1e-12), "embedding gradient rows");
        check(std::abs(loss.item<double>() - want_loss.item<double>()) < 1e-12, "loss");
        check(at::allclose(l_shard.grad(), logits_r.grad().chunk(tp, 1)[r], 1e-12, 1e-12), "logits gradient columns");
      });
      for (const auto& f : failures) ADD_FAILURE() << f;
    }
  }
}

// Async TP's micro-pipelined GEMMs give the synchronous regions' values and
// gradients, with pieces that split each rank's sequence unevenly too.
TEST(AsyncTensorParallel, PipelinedGemmsMatchTheSynchronousRegions) {
  for (const int tp : {2, 4}) {
    for (const int64_t chunks : {2, 4}) {
      const int64_t B = 2, Sl = 3, I = 6, O = 8;
      torch::manual_seed(5);
      const at::Tensor x = torch::randn({B, tp * Sl, I}, kF64), w1 = torch::randn({O, I}, kF64);
      const at::Tensor w2 = torch::randn({I, O}, kF64), dy = torch::randn({B, tp * Sl, I}, kF64);
      std::mutex m;
      std::vector<std::string> failures;
      testing::run_group(tp, [&](int r, Communicator& c) {
        const at::Tensor w1s = w1.chunk(tp, 0)[r], w2s = w2.chunk(tp, 1)[r];
        // The MLP of the first test through both forms: column-wise in, row-wise out.
        std::vector<at::Tensor> out, grads;
        for (const bool async : {false, true}) {
          at::Tensor xs = x.chunk(tp, 1)[r].clone().requires_grad_();
          at::Tensor a = w1s.clone().requires_grad_(), b = w2s.clone().requires_grad_();
          const at::Tensor h = at::tanh(async ? async_gather_linear(xs, a, c, chunks) : column_parallel_linear(xs, a, c, true));
          const at::Tensor y = async ? async_linear_scatter(h, b, c, chunks) : row_parallel_linear(h, b, c, true);
          y.backward(dy.chunk(tp, 1)[r]);
          out.push_back(y.detach());
          grads.insert(grads.end(), {xs.grad(), a.grad(), b.grad()});
        }
        std::lock_guard<std::mutex> lock(m);
        const std::string at_ = "tp " + std::to_string(tp) + " chunks " + std::to_string(chunks) + " rank " + std::to_string(r);
        if (!at::allclose(out[0], out[1], 1e-12, 1e-12)) failures.push_back(at_ + ": output");
        const char* names[] = {"dx", "dW1", "dW2"};
        for (int i = 0; i < 3; ++i)
          if (!at::allclose(grads[i], grads[3 + i], 1e-12, 1e-12)) failures.push_back(at_ + ": " + names[i]);
      });
      for (const auto& f : failures) ADD_FAILURE() << f;
    }
  }
}

struct LlamaCase {
  bool sequence_parallel, loss_parallel, async;
  const char* ac;  // activation checkpointing mode
};
void PrintTo(const LlamaCase& c, std::ostream* os) {
  *os << (c.sequence_parallel ? "SP" : "no SP") << (c.loss_parallel ? ", loss parallel" : "")
      << (c.async ? ", async" : "") << ", AC " << c.ac;
}

class TensorParallelLlama : public ::testing::TestWithParam<LlamaCase> {};

// The whole Llama 3 (tiny: 4 heads, 2 KV heads — grouped-query attention
// with 2 and 1 heads per rank) at tp 2 in fp64 on thread ranks: every
// rank's loss is the whole model's and its gradients are the whole model's
// over its boxes, the replicated norms included.
TEST_P(TensorParallelLlama, LossAndGradientsAreTheWholeModels) {
  const LlamaCase c = GetParam();
  const ModelArgs args = llama3_flavor("tiny");
  const int tp = 2;
  const int64_t S = 16;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor batch = at::randint(args.vocab_size, {2, S + 1}, gen, at::kLong);
  const at::Tensor tokens = batch.narrow(1, 0, S).contiguous(), labels = batch.narrow(1, 1, S).contiguous();
  ModelTechniques techniques;
  techniques.activation_checkpointing = ActivationCheckpointPolicy::parse(c.ac, "op");
  Transformer whole(args, torch::kDouble, S, c10::Device(c10::kCPU), ModelPart{}, ParamStore::Storage::kFlat, {},
                    techniques);
  whole.init_weights(5);
  const at::Tensor want = whole.forward_loss(tokens, labels);
  want.backward();
  whole.store().accumulate_grads();
  std::mutex m;
  std::vector<std::string> failures;
  testing::run_group(tp, [&](int r, Communicator& comm) {
    TensorParallelOptions o{&comm, c.sequence_parallel, c.loss_parallel, c.async};
    Transformer part(args, torch::kDouble, S, c10::Device(c10::kCPU), ModelPart{}, ParamStore::Storage::kFlat,
                     parallel_layout(o), techniques);
    part.init_weights(5);
    const at::Tensor loss = part.forward_loss(tokens, labels);
    loss.backward();
    part.store().accumulate_grads();
    std::lock_guard<std::mutex> lock(m);
    if (std::abs(loss.item<double>() - want.item<double>()) > 1e-12)
      failures.push_back("rank " + std::to_string(r) + " loss " + std::to_string(loss.item<double>()));
    for (const auto& s : part.slots()) {
      at::Tensor w = whole.store().grad(s.name);
      for (size_t d = 0; d < s.box_shape.size(); ++d)
        w = w.narrow(static_cast<int64_t>(d), s.box_offset[d], s.box_shape[d]);
      if (!at::allclose(part.store().grad(s.name), w, 1e-10, 1e-12))
        failures.push_back("rank " + std::to_string(r) + " gradient of " + s.name);
    }
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
}

INSTANTIATE_TEST_SUITE_P(Options, TensorParallelLlama,
                         ::testing::Values(LlamaCase{true, true, false, "none"}, LlamaCase{false, true, false, "none"},
                                           LlamaCase{true, false, false, "none"}, LlamaCase{false, false, false, "none"},
                                           LlamaCase{true, true, true, "none"}, LlamaCase{true, true, false, "full"},
                                           LlamaCase{true, true, true, "selective"}),
                         [](const auto& i) {
                           const LlamaCase& c = i.param;
                           return std::string(c.sequence_parallel ? "sp" : "nosp") + (c.loss_parallel ? "_lossparallel" : "") +
                                  (c.async ? "_async" : "") + "_ac_" + c.ac;
                         });

TEST(TensorParallelLlama, AsyncWithoutSequenceParallelIsAnInputError) {
  testing::run_group(2, [&](int, Communicator& comm) {
    TensorParallelOptions o{&comm, false, true, true};
    EXPECT_THROW(Transformer(llama3_flavor("tiny"), torch::kFloat, 16, c10::Device(c10::kCPU), ModelPart{},
                        ParamStore::Storage::kFlat, parallel_layout(o)),
                 InputError);
  });
}

}  // namespace
}  // namespace ctitan

namespace ctitan {
namespace {

double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-30);
}

// Float8 GEMMs on tensor-parallel shards quantise with the whole tensors'
// scales: at tp 2, a column-wise GEMM (w's rows split) and a row-wise one
// (x's and w's columns split, partial outputs summed) give the whole float8
// GEMM's output and gradients, for every recipe. The shards are made to
// differ in magnitude (rank 1's part x10), so a scale from a shard's own
// amax would quantise differently by far more than the tolerance.
TEST(Float8TensorParallel, ShardedGemmsQuantiseWithTheWholeTensorsScales) {
  const int tp = 2;
  const int64_t N = 24, I = 32, O = 16;
  torch::manual_seed(9);
  at::Tensor x = torch::randn({N, I}), w = torch::randn({O, I}), dy = torch::randn({N, O});
  x.narrow(1, I / 2, I / 2).mul_(10);  // row-wise: rank 1's columns
  w.narrow(0, O / 2, O / 2).mul_(10);  // column-wise: rank 1's rows
  w.narrow(1, I / 2, I / 2).mul_(10);  // row-wise: rank 1's columns
  dy.narrow(1, O / 2, O / 2).mul_(10);  // column-wise: rank 1's output columns
  for (const Float8Recipe recipe : {Float8Recipe::kTensorwise, Float8Recipe::kRowwise, Float8Recipe::kRowwiseWithGwHp}) {
    at::Tensor xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_();
    const at::Tensor y = float8_linear(xr, wr, recipe, true);
    y.backward(dy);
    std::mutex m;
    std::vector<std::string> failures;
    testing::run_group(tp, [&](int r, Communicator& c) {
      const auto check = [&](const at::Tensor& got, const at::Tensor& want, const std::string& what) {
        const double d = rel_diff(got, want);
        std::lock_guard<std::mutex> lock(m);
        if (d > 1e-5)
          failures.push_back(std::string(float8_recipe_name(recipe)) + " rank " + std::to_string(r) + " " + what +
                             ": relative difference " + std::to_string(d));
      };
      {  // column-wise: this rank's rows of w, x whole, this rank's output columns
        at::Tensor xs = x.clone().requires_grad_(), ws = w.chunk(tp, 0)[r].clone().requires_grad_();
        const at::Tensor ys = float8_linear(xs, ws, recipe, true, nullptr, Float8TpSharding::column(&c));
        ys.backward(dy.chunk(tp, 1)[r]);
        at::Tensor dx = xs.grad().contiguous();
        c.all_reduce(dx)->wait();  // the column-wise input's gradient sums over tp (copy_to_tp)
        check(ys, y.detach().chunk(tp, 1)[r], "column-wise output");
        check(dx, xr.grad(), "column-wise dx");
        check(ws.grad(), wr.grad().chunk(tp, 0)[r], "column-wise dw");
      }
      {  // row-wise: this rank's columns of x and w, partial outputs summed
        at::Tensor xs = x.chunk(tp, 1)[r].clone().requires_grad_(), ws = w.chunk(tp, 1)[r].clone().requires_grad_();
        const at::Tensor part = float8_linear(xs, ws, recipe, true, nullptr, Float8TpSharding::row(&c));
        at::Tensor ys = part.detach().contiguous();
        c.all_reduce(ys)->wait();
        part.backward(dy);
        check(ys, y.detach(), "row-wise output");
        check(xs.grad(), xr.grad().chunk(tp, 1)[r], "row-wise dx");
        check(ws.grad(), wr.grad().chunk(tp, 1)[r], "row-wise dw");
      }
    });
    for (const auto& f : failures) ADD_FAILURE() << f;
  }
}

}  // namespace
}  // namespace ctitan
