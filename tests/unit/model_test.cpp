// Llama 3 model: parameter counts and FLOPs against published/independent
// numbers, shapes, and finite-difference gradients of every parameter tensor.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/errors.h"
#include "trainer/models/llama3.h"
#include "trainer/model/cross_entropy.h"
#include "trainer/model/transformer.h"
#include "trainer/model/model_args.h"

namespace ctitan {
namespace {

// Facts from ../shared/published/torchtitan_llama3.json (TorchTitan's own counts).
TEST(ModelArgs, ParameterCountsMatchTorchTitan) {
  EXPECT_EQ(count_params(llama3_flavor("debugmodel")).total, 6163712);
  EXPECT_EQ(count_params(llama3_flavor("8B")).total, 8030261248LL);
  EXPECT_EQ(count_params(llama3_flavor("70B")).total, 70553706496LL);
  EXPECT_EQ(count_params(llama3_flavor("405B")).total, 405853388800LL);
  EXPECT_EQ(count_params(llama3_flavor("8B")).embedding, 128256LL * 4096);
}

TEST(ModelArgs, FfnHiddenDimFollowsTorchTitanRule) {
  EXPECT_EQ(llama3_flavor("debugmodel").ffn_hidden_dim(), 768);   // 4·256·2/3=682 → 768
  EXPECT_EQ(llama3_flavor("8B").ffn_hidden_dim(), 14336);
  EXPECT_EQ(llama3_flavor("70B").ffn_hidden_dim(), 28672);
  EXPECT_EQ(llama3_flavor("405B").ffn_hidden_dim(), 53248);
}

TEST(ModelArgs, FlopsPerTokenByTorchTitanFormula) {
  // Worked by hand: 6·(N − N_emb) + 12·L·H·Dh·S.
  EXPECT_DOUBLE_EQ(flops_per_token(llama3_flavor("debugmodel"), 2048),
                   6.0 * (6163712 - 2048 * 256) + 12.0 * 6 * 16 * 16 * 2048);
  EXPECT_DOUBLE_EQ(flops_per_token(llama3_flavor("8B"), 8192), 57914449920.0);
  for (const auto& name : llama3_flavor_names()) {
    const auto a = llama3_flavor(name);
    EXPECT_GT(flops_per_token(a, 1024), 6.0 * (count_params(a).total - count_params(a).embedding)) << name;
  }
}

TEST(ModelArgs, UnknownFlavorIsInputErrorListingFlavors) {
  try {
    llama3_flavor("7B");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("debugmodel"), std::string::npos) << e.what();
  }
}

TEST(Model, AllocatedParametersEqualTheCount) {
  Transformer model(llama3_flavor("debugmodel"), torch::kFloat, 16);
  EXPECT_EQ(model.store().num_params(), 6163712);
  int64_t sum = 0;
  for (const auto& s : model.slots()) sum += s.numel;
  EXPECT_EQ(sum, 6163712);
  EXPECT_EQ(model.store().param("layers.5.feed_forward.w2.weight").sizes(), (std::vector<int64_t>{256, 768}));
}

TEST(Model, ForwardBackwardShapes) {
  Transformer model(llama3_flavor("tiny"), torch::kFloat, 8);
  model.init_weights(0);
  auto tokens = torch::randint(0, 64, {2, 8}, torch::kLong);
  auto logits = model.forward_logits(tokens);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 8, 64}));
  auto loss = model.forward_loss(tokens, tokens);
  EXPECT_EQ(loss.dim(), 0);
  loss.backward();
  EXPECT_GT(model.store().flat_grads().abs().sum().item<double>(), 0.0);
  for (const auto& s : model.slots())
    EXPECT_GT(model.store().grad(s.name).abs().sum().item<double>(), 0.0) << s.name << " got no gradient";
}

TEST(Model, InitMatchesTorchTitanStatistics) {
  Transformer model(llama3_flavor("debugmodel"), torch::kFloat, 8);
  model.init_weights(1);
  EXPECT_NEAR(model.store().param("tok_embeddings.weight").std().item<double>(), 1.0, 0.01);
  EXPECT_NEAR(model.store().param("layers.0.attention.wq.weight").std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(model.store().param("layers.0.attention.wo.weight").std().item<double>(), 0.02 / std::sqrt(2.0), 0.001);
  EXPECT_NEAR(model.store().param("layers.5.feed_forward.w3.weight").std().item<double>(), 0.02 / std::sqrt(12.0), 0.0005);
  const double out_std = 1.0 / 16.0;  // dim^-0.5, truncated at ±3σ
  EXPECT_LE(model.store().param("output.weight").abs().max().item<double>(), 3 * out_std + 1e-6);
  EXPECT_EQ(model.store().param("norm.weight").min().item<double>(), 1.0);
}

TEST(Model, CausalityFutureTokensDoNotChangePastLogits) {
  Transformer model(llama3_flavor("tiny"), torch::kFloat, 8);
  model.init_weights(3);
  auto a = torch::randint(0, 64, {1, 8}, torch::kLong);
  auto b = a.clone();
  b.index_put_({0, 7}, (a.index({0, 7}).item<int64_t>() + 1) % 64);
  torch::NoGradGuard ng;
  auto la = model.forward_logits(a), lb = model.forward_logits(b);
  EXPECT_TRUE(torch::allclose(la.narrow(1, 0, 7), lb.narrow(1, 0, 7)));
  EXPECT_FALSE(torch::allclose(la.narrow(1, 7, 1), lb.narrow(1, 7, 1)));
}

// Central differences in float64 against autograd, for sampled elements of
// every parameter tensor (embedding, attention, FFN, norms, output).
TEST(Model, FiniteDifferenceGradientsOfEveryParameter) {
  Transformer model(llama3_flavor("tiny"), torch::kDouble, 6);
  model.init_weights(7);
  torch::manual_seed(0);
  auto tokens = torch::randint(0, 64, {2, 6}, torch::kLong);
  auto labels = torch::randint(0, 64, {2, 6}, torch::kLong);
  model.store().zero_grad();
  model.forward_loss(tokens, labels).backward();
  const double h = 1e-6;
  for (const auto& s : model.slots()) {
    at::Tensor p = model.store().param(s.name).view(-1), g = model.store().grad(s.name).view(-1);
    for (int64_t k = 0; k < 3; ++k) {
      // Embedding rows are only touched for tokens in the batch.
      const int64_t idx = s.name == "tok_embeddings.weight" ? tokens[0][k].item<int64_t>() * 32 + k
                                                            : (k * 7919) % s.numel;
      torch::NoGradGuard ng;
      const double orig = p[idx].item<double>();
      p[idx] = orig + h;
      const double up = model.forward_loss(tokens, labels).item<double>();
      p[idx] = orig - h;
      const double down = model.forward_loss(tokens, labels).item<double>();
      p[idx] = orig;
      const double numeric = (up - down) / (2 * h);
      const double analytic = g[idx].item<double>();
      EXPECT_NEAR(analytic, numeric, 1e-6 + 1e-5 * std::abs(numeric)) << s.name << "[" << idx << "]";
    }
  }
}

TEST(Model, Bf16LossTracksFp32Loss) {
  Transformer f32(llama3_flavor("debugmodel"), torch::kFloat, 64);
  Transformer b16(llama3_flavor("debugmodel"), torch::kBFloat16, 64);
  f32.init_weights(5);
  b16.init_weights(5);
  auto tokens = torch::randint(0, 2048, {2, 64}, torch::kLong);
  torch::NoGradGuard ng;
  const double a = f32.forward_loss(tokens, tokens).item<double>();
  const double b = b16.forward_loss(tokens, tokens).item<double>();
  EXPECT_NEAR(a, b, 0.02 * a);
}

TEST(Model, RopeScalingLeavesHighFrequenciesAndDividesLowOnes) {
  RopeScaling s;
  auto f = precompute_freqs_cis(128, 2, 500000.0, s);  // row 1 = e^{i·freq}
  auto angle = torch::angle(f[1]);
  EXPECT_NEAR(angle[0].item<double>(), 1.0, 1e-6);  // freq 1: wavelength 2π < 2048, unscaled
  const double f_last = 1.0 / std::pow(500000.0, 126.0 / 128.0);  // wavelength ≫ 8192: divided by 8
  EXPECT_NEAR(angle[63].item<double>(), f_last / 8.0, 1e-9);
}

}  // namespace
}  // namespace ctitan

namespace ctitan {
namespace {

// The chunked loss against ATen's cross_entropy on fp32 logits (TorchTitan's
// formulation): 3 chunks of rows (V=2048 → 512 rows each), fp32 and bf16.
TEST(ChunkedCrossEntropy, MatchesAtenCrossEntropyForwardAndBackward) {
  torch::manual_seed(0);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    auto base = (torch::randn({1100, 2048}) * 3).to(dtype);
    auto labels = torch::randint(0, 2048, {1100}, torch::kLong);
    auto a = base.clone().requires_grad_(true), b = base.clone().requires_grad_(true);
    auto mine = chunked_cross_entropy(a, labels);
    auto ref = at::cross_entropy_loss(b.to(torch::kFloat), labels);
    EXPECT_NEAR(mine.item<double>(), ref.item<double>(), 1e-5) << c10::toString(dtype);
    (mine * 3).backward();
    (ref * 3).backward();
    const double tol = dtype == torch::kFloat ? 1e-8 : 2e-6;  // bf16: one rounding of the gradient
    EXPECT_LT((a.grad().to(torch::kFloat) - b.grad().to(torch::kFloat)).abs().max().item<double>(), tol)
        << c10::toString(dtype);
  }
}

// The chunking is a CPU cache optimisation: a CUDA (or meta) device takes
// chunks bounded by memory, so a step's loss at vocab 32k–128k is a handful
// of kernels per pass, not one per few rows. B·S = 16384 tokens.
TEST(ChunkedCrossEntropy, ChunksAreCacheSizedOnlyOnTheCpu) {
  const c10::Device cpu(c10::kCPU), cuda(c10::kCUDA, 0), meta(c10::kMeta);
  EXPECT_EQ(cross_entropy_rows_per_chunk(cpu, 2048), 512);
  EXPECT_EQ(cross_entropy_chunks(cpu, 16384, 128256), 2048);  // 8 rows (4 MB) each
  EXPECT_EQ(cross_entropy_chunks(cpu, 16384, 32000), 512);
  EXPECT_EQ(cross_entropy_rows_per_chunk(cuda, 128256), 523);  // 2^26 fp32 = 256 MB
  EXPECT_EQ(cross_entropy_chunks(cuda, 16384, 128256), 32);
  EXPECT_EQ(cross_entropy_chunks(cuda, 16384, 32000), 8);
  EXPECT_EQ(cross_entropy_chunks(cuda, 2048, 32000), 1);
  EXPECT_EQ(cross_entropy_chunks(meta, 16384, 32000), 8);
  EXPECT_EQ(cross_entropy_rows_per_chunk(cuda, int64_t{1} << 27), 1) << "a vocab beyond the bound: one row";
}

}  // namespace
}  // namespace ctitan

namespace ctitan {
namespace {

// Two half-batches with loss/2 accumulate to the full batch's gradient
// (mean over equal token counts), in fp32 and through the bf16 → fp32 path.
TEST(Model, GradientAccumulationEqualsTheFullBatch) {
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    Transformer model(llama3_flavor("tiny"), dtype, 16);
    model.init_weights(11);
    auto tokens = torch::randint(0, 64, {4, 16}, torch::kLong);
    auto labels = torch::randint(0, 64, {4, 16}, torch::kLong);
    model.store().zero_grad();
    model.forward_loss(tokens, labels).backward();
    model.store().accumulate_grads();
    auto full = model.store().flat_grads().clone();
    model.store().zero_grad();
    for (int64_t half = 0; half < 2; ++half) {
      (model.forward_loss(tokens.narrow(0, 2 * half, 2), labels.narrow(0, 2 * half, 2)) / 2.0).backward();
      model.store().accumulate_grads();
    }
    const double scale = full.abs().max().item<double>();
    const double tol = dtype == torch::kFloat ? 1e-5 : 2e-2;
    EXPECT_LT((model.store().flat_grads() - full).abs().max().item<double>(), tol * scale) << c10::toString(dtype);
  }
}

}  // namespace
}  // namespace ctitan
