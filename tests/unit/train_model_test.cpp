// The restructured core without processes: TrainModel built by
// parallelize_model against a fake mesh (comm.mode = "fake_backend") on the
// meta device, for every data-parallel layout. Device audit: no parameter,
// gradient, optimizer state or checkpointed tensor may land on another
// device. The fake mesh's flattened groups follow TorchTitan.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "trainer/models/llama3.h"
#include "trainer/dry_run.h"
#include "trainer/parallel/train_model.h"
#include "trainer/runtime.h"
#include "tests/unit/meta_runtime.h"

namespace ctitan {
namespace {

struct Layout {
  const char* name;
  MeshShape shape;
};

JobConfig debug_config() {
  JobConfig cfg;
  cfg.model.flavor = "debugmodel";
  cfg.training.seq_len = 32;
  cfg.training.local_batch_size = 2;
  return cfg;
}

void expect_all_meta(TrainModel& tm, AdamW& opt, const std::string& layout) {
  auto on_meta = [&](const at::Tensor& t, const std::string& what) {
    EXPECT_TRUE(t.defined() && t.is_meta()) << layout << ": " << what << " is on " << (t.defined() ? t.device().str() : "(undefined)");
  };
  on_meta(tm.params(), "params");
  on_meta(tm.grads(), "grads");
  on_meta(opt.exp_avg(), "exp_avg");
  on_meta(opt.exp_avg_sq(), "exp_avg_sq");
  on_meta(opt.step_tensor(), "optimizer step");
  for (const auto& p : tm.checkpoint_pieces(opt, false)) on_meta(p.tensor, p.name);
}

class MetaLayouts : public ::testing::TestWithParam<Layout> {};

TEST_P(MetaLayouts, EveryTensorStaysOnTheMetaDevice) {
  const Layout& l = GetParam();
  JobConfig cfg = debug_config();
  for (const char* ac : {"none", "full"}) {
    cfg.activation_checkpoint.mode = ac;
    cfg.compile.enable = std::string(ac) == "full";
    const Runtime rt = meta_runtime(l.shape, 0);
    auto tm = parallelize_model(llama3_flavor(cfg.model.flavor), rt, cfg);
    AdamW opt(tm->params(), tm->grads(), AdamWOptions{});
    expect_all_meta(*tm, opt, l.name);
    tm->begin_step();  // the compute copy (FSDP: of the shard)
    expect_all_meta(*tm, opt, std::string(l.name) + " after begin_step");
    // One forward and backward on meta, as the dry run does: every op has
    // a C++ meta kernel (else NotImplementedError), every shape fits, and
    // the loss and the gradients stay on meta.
    const auto ids = torch::TensorOptions().device(c10::kMeta).dtype(torch::kLong);
    const at::Tensor tokens = torch::zeros({cfg.training.local_batch_size, cfg.training.seq_len}, ids);
    const at::Tensor loss = tm->forward_backward(tokens, tokens, 1.0, true, true);
    EXPECT_TRUE(loss.is_meta()) << l.name;
    EXPECT_EQ(loss.dim(), 0) << l.name;
    expect_all_meta(*tm, opt, std::string(l.name) + " after forward_backward");
  }
}

MeshShape shape(int64_t replicate, int64_t shard);

// Float8 with FSDP's float8 all-gather on meta: the codec that packs the
// shards (ctitan's CPU loops on the CPU) runs as ATen ops on other devices,
// and the scales stay on the device (no host read).
TEST(MetaLayouts, Float8AllGatherRunsOnMeta) {
  JobConfig cfg = debug_config();
  cfg.model.converters = {"quantize.linear.float8"};
  cfg.float8.enable_fsdp_float8_all_gather = true;
  MeshShape s;
  s.dp_shard = 4;
  const Runtime rt = meta_runtime(s, 1);
  auto tm = parallelize_model(llama3_flavor(cfg.model.flavor), rt, cfg);
  AdamW opt(tm->params(), tm->grads(), AdamWOptions{});
  tm->begin_step();
  const auto ids = torch::TensorOptions().device(c10::kMeta).dtype(torch::kLong);
  const at::Tensor tokens = torch::zeros({cfg.training.local_batch_size, cfg.training.seq_len}, ids);
  EXPECT_TRUE(tm->forward_backward(tokens, tokens, 1.0, true, true).is_meta());
  expect_all_meta(*tm, opt, "fsdp4 float8 all-gather");
}

MeshShape shape(int64_t replicate, int64_t shard) {
  MeshShape s;
  s.dp_replicate = replicate;
  s.dp_shard = shard;
  return s;
}

INSTANTIATE_TEST_SUITE_P(Layouts, MetaLayouts,
                         ::testing::Values(Layout{"Single", shape(1, 1)}, Layout{"Fsdp4", shape(1, 4)},
                                           Layout{"Ddp2", shape(2, 1)}, Layout{"Hsdp2x2", shape(2, 2)}),
                         [](const auto& info) { return info.param.name; });

// A CPU allocation that forgets the device shows up: the same build on the
// CPU device holds CPU tensors, so the check above is not vacuous.
TEST(MetaLayouts, CpuBuildIsSeenAsNotMeta) {
  JobConfig cfg = debug_config();
  Runtime rt;
  rt.mesh = DeviceMesh::single();
  auto tm = parallelize_model(llama3_flavor("debugmodel"), rt, cfg);
  EXPECT_TRUE(tm->params().device().is_cpu());
}

TEST(FakeMesh, FlattenedGroupsFollowTorchTitan) {
  MeshShape s;
  s.pp = 2;
  s.dp_replicate = 2;
  s.dp_shard = 2;
  s.cp = 2;
  s.tp = 2;  // 32 ranks
  // rank = ((((pp*R + dr)*S + ds)*C + cp)*T + tp): pick pp 1, dr 1, ds 0, cp 1, tp 0
  const int rank = static_cast<int>((((1 * 2 + 1) * 2 + 0) * 2 + 1) * 2 + 0);
  auto mesh = DeviceMesh::fake(s, rank);
  EXPECT_EQ(mesh->group("world").size(), 32);
  EXPECT_EQ(mesh->group("dp").size(), 4);
  EXPECT_EQ(mesh->group("fsdp").size(), 4);   // dp_shard x cp
  EXPECT_EQ(mesh->group("loss").size(), 8);   // dp_replicate x dp_shard x cp
  EXPECT_EQ(mesh->group("batch").size(), 4);  // TorchTitan's batch: dp_replicate x dp_shard
  EXPECT_EQ(mesh->coord("dp"), 1 * 2 + 0);
  EXPECT_EQ(mesh->coord("fsdp"), 0 * 2 + 1);
  EXPECT_EQ(mesh->coord("loss"), (1 * 2 + 0) * 2 + 1);
  EXPECT_EQ(mesh->group("fsdp").rank(), mesh->coord("fsdp"));
  EXPECT_EQ(mesh->group("loss").rank(), mesh->coord("loss"));
  // One wide dimension: the flattened group is that dimension's group.
  auto fsdp_only = DeviceMesh::fake(shape(1, 4), 3);
  EXPECT_EQ(&fsdp_only->group("fsdp"), &fsdp_only->group("dp_shard"));
  EXPECT_EQ(&fsdp_only->group("loss"), &fsdp_only->group("dp_shard"));
}

TEST(FakeMesh, CollectivesCheckSizesAndMoveNothing) {
  auto mesh = DeviceMesh::fake(shape(1, 4), 1);
  at::Tensor in = torch::ones({3});
  at::Tensor out = torch::zeros({12});
  mesh->group("dp_shard").all_gather(out, in)->wait();
  EXPECT_EQ(out.sum().item<float>(), 0.0f);
  at::Tensor wrong = torch::zeros({10});
  EXPECT_THROW(mesh->group("dp_shard").all_gather(wrong, in), CommError);
}

TEST(ActivationEstimate, FullCheckpointingKeepsOnlyBlockInputs) {
  const ModelArgs a = llama3_flavor("debugmodel");
  const auto none = ActivationCheckpointPolicy::parse("none", "2");
  const auto full = ActivationCheckpointPolicy::parse("full", "2");
  const int64_t B = 2, S = 64, bytes = 2;
  const int64_t logits = B * S * a.vocab_size * bytes;
  const int64_t input = B * S * a.dim * bytes;
  const int64_t e_none = activation_bytes_estimate(a, B, S, bytes, none);
  const int64_t e_full = activation_bytes_estimate(a, B, S, bytes, full);
  // Full: every block keeps its input, plus one block recomputed at a time.
  EXPECT_EQ(e_full, a.n_layers * input + (e_none - logits) / a.n_layers + logits);
  EXPECT_LT(e_full, e_none);
}

}  // namespace
}  // namespace ctitan
