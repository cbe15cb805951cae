// Placements before allocation: the ParamSpec plan, model parts, and FSDP
// allocating only its shards.
//
// Golden values here are independent of the code under test: box arithmetic
// is checked against hand-computed offsets, a model part against the whole
// model (the single-process definition), FSDP's allocation against the bytes
// of one full fp32 copy.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/errors.h"
#include "profiling/memory.h"
#include "trainer/models/llama3.h"
#include "trainer/model/transformer.h"
#include "trainer/model/param_spec.h"
#include "trainer/parallel/train_model.h"
#include "trainer/runtime.h"

namespace ctitan {
namespace {

using Shape = std::vector<int64_t>;

TEST(ParamSpec, RowShardsTileTheParameterWithPaddingAtTheEnd) {
  // 5 rows over 3 ranks: ceil(5/3) = 2 rows of storage each; boxes 2, 2, 1.
  const ParamSpec whole = whole_param("w", {5, 3});
  const Shape offsets[] = {{0, 0}, {2, 0}, {4, 0}}, boxes[] = {{2, 3}, {2, 3}, {1, 3}};
  for (int r = 0; r < 3; ++r) {
    const ParamSpec s = shard_rows(whole, "dp_shard", 3, r);
    EXPECT_EQ(s.global_shape, (Shape{5, 3}));
    EXPECT_EQ(s.shape, (Shape{2, 3})) << r;
    EXPECT_EQ(s.numel, 6) << r;
    EXPECT_EQ(s.box_offset, offsets[r]) << r;
    EXPECT_EQ(s.box_shape, boxes[r]) << r;
  }
  // 2 rows over 4 ranks: ranks 2 and 3 hold one padding row and no box.
  const ParamSpec empty = shard_rows(whole_param("b", {2}), "dp_shard", 4, 3);
  EXPECT_EQ(empty.shape, (Shape{1}));
  EXPECT_EQ(empty.box_shape, (Shape{0}));
  EXPECT_EQ(empty.box_numel(), 0);
}

TEST(ParamSpec, ShardsOfAShardStayInsideTheirBoxAndPlacementsPrint) {
  // Rows 4..7 of 10 (an outer shard), then 2 ranks over them: 4..5 and 6..7.
  ParamSpec outer = shard_rows(whole_param("w", {10, 2}), "tp", 3, 1);
  ASSERT_EQ(outer.box_offset, (Shape{4, 0}));
  ASSERT_EQ(outer.box_shape, (Shape{4, 2}));
  const ParamSpec inner = replicate(shard_rows(outer, "dp_shard", 2, 1), "dp_replicate", 2);
  EXPECT_EQ(inner.box_offset, (Shape{6, 0}));
  EXPECT_EQ(inner.box_shape, (Shape{2, 2}));
  EXPECT_EQ(inner.describe(), "w  global [10, 2]  local [2, 2]  Shard(0) over tp 3, Shard(0) over dp_shard 2, "
                              "Replicate() over dp_replicate 2");
  EXPECT_EQ(whole_param("n", {4}).describe(), "n  global [4]  local [4]  Replicate()");
  EXPECT_EQ(replicate(whole_param("n", {4}), "dp_replicate", 1).placements.size(), 0u);  // size-1 dims add nothing
}

// Three parts of the tiny model — the embedding, both blocks, the head — as
// three pipeline stages would hold them.
std::vector<ModelPart> three_parts() {
  return {{true, 0, 0, false}, {false, 0, 2, false}, {false, 0, 0, true}};
}

TEST(ModelPart, PartsHoldTheWholeModelsValuesUnderTheirGlobalNames) {
  const ModelArgs args = llama3_flavor("tiny");
  Transformer whole(args, torch::kFloat, 16);
  whole.init_weights(7);
  size_t seen = 0;
  for (const ModelPart& part : three_parts()) {
    Transformer m(args, torch::kFloat, 16, c10::Device(c10::kCPU), part);
    m.init_weights(7);
    for (const auto& s : m.slots()) {
      EXPECT_TRUE(torch::equal(m.store().param(s.name), whole.store().param(s.name))) << s.name;
      ++seen;
    }
  }
  EXPECT_EQ(seen, whole.slots().size());  // every parameter in exactly one part
  // A later stage alone: layer 1 keeps its global name and its depth-scaled init.
  Transformer late(args, torch::kFloat, 16, c10::Device(c10::kCPU), {false, 1, 1, true});
  late.init_weights(7);
  EXPECT_EQ(late.units().front().name, "layers.1");
  EXPECT_TRUE(torch::equal(late.store().param("layers.1.feed_forward.w2.weight"),
                           whole.store().param("layers.1.feed_forward.w2.weight")));
}

TEST(ModelPart, StagesChainedUnitByUnitGiveTheWholeModelsLossAndGradients) {
  const ModelArgs args = llama3_flavor("tiny");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor batch = at::randint(args.vocab_size, {2, 17}, gen, at::kLong);
  const at::Tensor tokens = batch.narrow(1, 0, 16).contiguous(), labels = batch.narrow(1, 1, 16).contiguous();
  Transformer whole(args, torch::kFloat, 16);
  whole.init_weights(5);
  const at::Tensor expected = whole.forward_loss(tokens, labels);
  expected.backward();

  std::vector<std::unique_ptr<Transformer>> stages;
  at::Tensor x = tokens;
  for (const ModelPart& part : three_parts()) {
    stages.push_back(std::make_unique<Transformer>(args, torch::kFloat, 16, c10::Device(c10::kCPU), part));
    stages.back()->init_weights(5);
    for (size_t u = 0; u < stages.back()->units().size(); ++u) x = stages.back()->run_unit(u, x, labels);
  }
  EXPECT_EQ(x.item<float>(), expected.item<float>());
  x.backward();
  for (const auto& st : stages)
    for (const auto& s : st->slots())
      EXPECT_TRUE(torch::allclose(st->store().grad(s.name), whole.store().grad(s.name), 1e-6, 1e-7)) << s.name;
}

TEST(ModelPart, RangesOutsideTheModelAreInputErrors) {
  const ModelArgs args = llama3_flavor("tiny");  // 2 layers
  EXPECT_THROW(ModelPart({false, 1, 2, false}).resolved(args), InputError);
  EXPECT_THROW(ModelPart({false, 0, 0, false}).resolved(args), InputError);
  EXPECT_EQ(ModelPart({false, 1, -1, true}).resolved(args).n_layers, 1);
  Transformer middle(args, torch::kFloat, 16, c10::Device(c10::kCPU), {false, 0, 1, false});
  EXPECT_THROW(middle.block(1, torch::zeros({1, 4, args.dim})), c10::Error);  // layer 1 lives elsewhere
  EXPECT_THROW(middle.forward_loss(torch::zeros({1, 4}, torch::kLong), torch::zeros({1, 4}, torch::kLong)),
               c10::Error);
}

// FSDP 4 on rank 1 of a fake mesh, on the CPU: the trainer's own build.
TEST(Fsdp, AllocatesOnlyItsShardsNeverTheWholeModel) {
  install_accounting_allocator();
  const MeshShape shape{1, 1, 4, 1, 1};
  Runtime rt;
  rt.env.world_size = 4;
  rt.env.rank = 1;
  rt.shape = shape;
  rt.fake = true;
  rt.mesh = DeviceMesh::fake(shape, 1);
  JobConfig cfg;
  cfg.model.flavor = "debugmodel";
  cfg.training.seq_len = 32;
  const ModelArgs args = llama3_flavor(cfg.model.flavor);
  const int64_t full_fp32 = count_params(args).total * 4;

  const int64_t before = cpu_memory_stats().current_bytes;
  reset_peak_cpu_memory();
  auto tm = parallelize_model(args, rt, cfg);
  const int64_t peak = cpu_memory_stats().peak_bytes - before;
  // Master + gradient shards (fp32) and the bf16 compute shard: 10 B per
  // parameter / 4 ranks. One full fp32 copy would be 4 B per parameter.
  EXPECT_LT(peak, full_fp32) << "FSDP built more than its shards: peak " << peak << " B";
  EXPECT_FALSE(tm->model().store().flat_params().defined());
  for (size_t u = 0; u < tm->model().units().size(); ++u)
    EXPECT_EQ(tm->model().store().unit_buffer(u).storage().nbytes(), 0u) << tm->model().units()[u].name;
  int64_t local = 0;
  for (const ParamSpec& s : tm->specs()) local += s.numel;
  EXPECT_EQ(tm->params().numel(), local);
  EXPECT_LE(local * 4, count_params(args).total * 101 / 100);  // a quarter, plus padding rows

  // Rank 1's boxes hold the single-process values at their coordinates.
  Transformer whole(args, torch::kFloat, 32);
  whole.init_weights(static_cast<uint64_t>(cfg.debug.seed));
  AdamW opt(tm->params(), tm->grads(), {});
  for (const auto& p : tm->checkpoint_pieces(opt, false)) {
    if (p.name.rfind("model.", 0) != 0) continue;
    const at::Tensor ref = whole.store().param(p.name.substr(6)).narrow(0, p.offsets[0], p.tensor.size(0));
    EXPECT_TRUE(torch::equal(p.tensor, ref)) << p.name;
  }
}

}  // namespace
}  // namespace ctitan
