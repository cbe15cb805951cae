// Activation checkpointing: gradients identical to the plain model (exactly,
// in fp32), less activation memory, and the policy's TorchTitan semantics.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/errors.h"
#include "profiling/memory.h"
#include "trainer/models/llama3.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/transformer.h"

namespace ctitan {
namespace {

at::Tensor grads_with(const std::string& mode, const std::string& option, at::ScalarType dtype,
                      const std::string& flavor = "tiny") {
  const auto args = llama3_flavor(flavor);
  ModelTechniques techniques;
  techniques.activation_checkpointing = ActivationCheckpointPolicy::parse(mode, option);
  Transformer model(args, dtype, 16, c10::Device(c10::kCPU), ModelPart{}, ParamStore::Storage::kFlat, {}, techniques);
  model.init_weights(21);
  torch::manual_seed(4);
  auto tokens = torch::randint(0, args.vocab_size, {3, 16}, torch::kLong);
  auto labels = torch::randint(0, args.vocab_size, {3, 16}, torch::kLong);
  model.store().zero_grad();
  model.forward_loss(tokens, labels).backward();
  model.store().accumulate_grads();
  return model.store().flat_grads().clone();
}

TEST(ActivationCheckpoint, GradientsAreBitIdenticalInFp32) {
  const auto plain = grads_with("none", "2", torch::kFloat);
  EXPECT_TRUE(torch::equal(plain, grads_with("full", "2", torch::kFloat)));
  EXPECT_TRUE(torch::equal(plain, grads_with("selective", "1", torch::kFloat)));
  EXPECT_TRUE(torch::equal(plain, grads_with("selective", "2", torch::kFloat)));
  EXPECT_TRUE(torch::equal(plain, grads_with("selective", "op", torch::kFloat)));
  EXPECT_GT(plain.abs().sum().item<double>(), 0.0);
}

// debugmodel has as many KV heads as query heads, so "op" also keeps the
// flash-attention output (tiny, with GQA, recomputes attention).
TEST(ActivationCheckpoint, SelectiveOpKeepsAttentionAndStaysBitIdentical) {
  EXPECT_TRUE(torch::equal(grads_with("none", "2", torch::kFloat, "debugmodel"),
                           grads_with("selective", "op", torch::kFloat, "debugmodel")));
}

TEST(ActivationCheckpoint, GradientsAreBitIdenticalInBf16) {
  const auto plain = grads_with("none", "2", torch::kBFloat16);
  EXPECT_TRUE(torch::equal(plain, grads_with("full", "2", torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(plain, grads_with("selective", "op", torch::kBFloat16)));
}

TEST(ActivationCheckpoint, FullCheckpointingLowersPeakMemory) {
  install_accounting_allocator();
  auto peak_of = [](const std::string& mode) {
    ModelTechniques techniques;
    techniques.activation_checkpointing =
        ActivationCheckpointPolicy::parse(mode == "op" ? "selective" : mode, mode == "op" ? "op" : "1");
    Transformer model(llama3_flavor("debugmodel"), torch::kBFloat16, 128, c10::Device(c10::kCPU), ModelPart{},
                      ParamStore::Storage::kFlat, {}, techniques);
    model.init_weights(0);
    auto tokens = torch::randint(0, 2048, {4, 128}, torch::kLong);
    const int64_t before = cpu_memory_stats().current_bytes;
    reset_peak_cpu_memory();
    model.forward_loss(tokens, tokens).backward();
    model.store().accumulate_grads();
    return cpu_memory_stats().peak_bytes - before;
  };
  const int64_t plain = peak_of("none"), full = peak_of("full"), op = peak_of("op");
  // Six blocks' activations become six block inputs plus one block's worth;
  // "op" keeps some GEMM and attention outputs, so it lands in between.
  EXPECT_LT(full, plain * 7 / 10) << "plain " << plain << " full " << full;
  EXPECT_LT(op, plain) << "plain " << plain << " op " << op;
  EXPECT_GT(op, full) << "full " << full << " op " << op;
}

TEST(ActivationCheckpoint, PolicyFollowsTorchTitan) {
  auto every2 = ActivationCheckpointPolicy::parse("selective", "2");
  EXPECT_FALSE(every2.checkpoints_layer(0));
  EXPECT_TRUE(every2.checkpoints_layer(1));
  EXPECT_TRUE(every2.checkpoints_layer(5));
  EXPECT_TRUE(ActivationCheckpointPolicy::parse("full", "op").checkpoints_layer(0));
  EXPECT_FALSE(ActivationCheckpointPolicy::parse("none", "op").checkpoints_layer(3));
}

TEST(ActivationCheckpoint, BadOptionsAreInputErrors) {
  EXPECT_THROW(ActivationCheckpointPolicy::parse("selective", "0"), InputError);
  EXPECT_THROW(ActivationCheckpointPolicy::parse("selective", "2x"), InputError);
  EXPECT_THROW(ActivationCheckpointPolicy::parse("partial", "2"), InputError);
}

TEST(ActivationCheckpoint, RecomputationSeesTheForwardRngState) {
  // fn draws random numbers: the recomputed forward must draw the same ones,
  // or the gradient would not match the forward that produced the loss.
  auto x = torch::ones({8}, torch::requires_grad());
  auto fn = [](const std::vector<at::Tensor>& in) { return in[0] * torch::rand({8}); };
  torch::manual_seed(9);
  auto y = checkpoint(fn, {x});
  torch::manual_seed(9);
  auto expected = torch::rand({8});
  torch::rand({100});  // move the generator on before backward
  y.sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), expected));
}

}  // namespace
}  // namespace ctitan
