// What a checkpoint records of its model (checkpoint_model.h) and the
// metrics.jsonl clean-up of a resume (metrics.h, drop_step_records_after):
// the description's first difference in one phrase, the tensor set every
// layout saves, and the records of steps a resumed run logs again.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "trainer/checkpoint/checkpoint_model.h"
#include "trainer/metrics.h"
#include "trainer/models/registry.h"
#include "trainer/parallel/train_model.h"
#include "trainer/runtime.h"
#include "tests/unit/meta_runtime.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

TEST(CheckpointModel, FirstDifferenceNamesTheKeyAndBothValues) {
  const ModelDescription two = describe_model(model_flavor("llama3", "tiny", 2), "tiny");
  const ModelDescription one = describe_model(model_flavor("llama3", "tiny", 1), "tiny");
  // Written and read back (metadata.json): equal, every real number included.
  EXPECT_EQ(first_model_difference(nlohmann::json::parse(to_json(two).dump(1)), two), "");
  EXPECT_EQ(first_model_difference(to_json(two), one), "model.n_layers = 2, this run's config has 1");
  FlavorOverrides top1;
  top1.moe_top_k = 1;
  const ModelArgs moe = model_flavor("qwen3", "tiny_moe");
  EXPECT_EQ(first_model_difference(to_json(describe_model(moe, "tiny_moe")),
                                   describe_model(model_flavor("qwen3", "tiny_moe", top1), "tiny_moe")),
            "model.moe_top_k = 2, this run's config has 1");
  EXPECT_EQ(first_model_difference(to_json(two), describe_model(moe, "tiny_moe")),
            "model.name = \"llama3\", this run's config has \"qwen3\"");
  // A key the flavor sets (a flavor redefined between versions).
  nlohmann::json wider = to_json(two);
  wider["dim"] = 128;
  EXPECT_EQ(first_model_difference(wider, two), "dim = 128, this run's model.flavor \"tiny\" has 32");
  // A key the saved description lacks is not a difference; no description is none.
  nlohmann::json older = to_json(two);
  older.erase("rope_theta");
  EXPECT_EQ(first_model_difference(older, two), "");
  EXPECT_EQ(first_model_difference(nlohmann::json(), one), "");
}

// checkpoint_tensor_shapes is the tensor set that the ranks of any layout
// save together (DataParallel::checkpoint_pieces): a resume's check of
// missing and extra names never refuses a checkpoint of the same model.
TEST(CheckpointModel, TensorSetIsWhatEveryLayoutSaves) {
  struct Case {
    const char* name;
    const char* family;
    const char* flavor;
    MeshShape shape;
  };
  std::vector<Case> cases;
  MeshShape single, fsdp, tp, pp, ep;
  fsdp.dp_shard = 2;
  tp.tp = 2;
  pp.pp = 2;
  ep.dp_shard = 2;
  ep.ep = 2;
  cases = {{"single", "llama3", "tiny", single}, {"fsdp2", "llama3", "tiny", fsdp}, {"tp2", "llama3", "tiny", tp},
           {"pp2", "llama3", "tiny", pp},       {"moe_single", "qwen3", "tiny_moe", single},
           {"moe_ep2", "qwen3", "tiny_moe", ep}, {"mla_fsdp2", "deepseek_v3", "debugmodel", fsdp}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    JobConfig cfg;
    cfg.model.name = c.family;
    cfg.model.flavor = c.flavor;
    cfg.training.seq_len = 32;
    cfg.training.local_batch_size = 2;
    cfg.parallelism.data_parallel_shard_degree = c.shape.dp_shard;
    cfg.parallelism.tensor_parallel_degree = c.shape.tp;
    cfg.parallelism.pipeline_parallel_degree = c.shape.pp;
    cfg.parallelism.expert_parallel_degree = c.shape.ep;
    const ModelArgs args = model_flavor(cfg.model);
    std::map<std::string, std::vector<int64_t>> saved;
    for (int rank = 0; rank < c.shape.world(); ++rank) {
      const Runtime rt = meta_runtime(c.shape, rank);
      auto tm = parallelize_model(args, rt, cfg);
      AdamW opt(tm->params(), tm->grads(), AdamWOptions{});
      for (const TensorPiece& p : tm->checkpoint_pieces(opt, true)) saved[p.name] = p.global_shape;
    }
    std::map<std::string, std::vector<int64_t>> expected;
    for (const auto& [name, shape] : checkpoint_tensor_shapes(args)) {
      EXPECT_TRUE(expected.emplace(name, shape).second) << "twice: " << name;
    }
    EXPECT_EQ(saved, expected);
  }
}

class DropStepRecords : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("drop_steps_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = dir_ / "metrics.jsonl";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string read() const {
    std::ifstream in(file_, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  fs::path dir_, file_;
};

TEST_F(DropStepRecords, KeepsStepsUpToTheResumedOneAndOtherLines) {
  std::ofstream(file_) << "{\"step\":1,\"loss\":5}\n{\"step\":2,\"loss\":4}\n{\"step\":2,\"validation_loss\":4.5}\n"
                          "{\"note\":\"no step\"}\n{\"step\":3,\"loss\":3}\n{\"step\":4,\"validation_loss\":3.5}\n"
                          "{\"step\":5,\"lo";
  drop_step_records_after(file_.string(), 2);
  EXPECT_EQ(read(), "{\"step\":1,\"loss\":5}\n{\"step\":2,\"loss\":4}\n{\"step\":2,\"validation_loss\":4.5}\n"
                    "{\"note\":\"no step\"}\n");
  // Nothing past the step: the file is not rewritten (same inode).
  const auto inode = [&] {
    struct stat st {};
    ::stat(file_.c_str(), &st);
    return st.st_ino;
  };
  const auto before = inode();
  drop_step_records_after(file_.string(), 2);
  EXPECT_EQ(inode(), before);
  // A fresh start (step 0) keeps no step record; a missing file stays missing.
  drop_step_records_after(file_.string(), 0);
  EXPECT_EQ(read(), "{\"note\":\"no step\"}\n");
  drop_step_records_after((dir_ / "none.jsonl").string(), 0);
  EXPECT_FALSE(fs::exists(dir_ / "none.jsonl"));
}

TEST_F(DropStepRecords, RewritesTheTargetOfASymbolicLink) {
  std::ofstream(file_) << "{\"step\":1}\n{\"step\":2}\n";
  fs::create_symlink(file_, dir_ / "link.jsonl");
  drop_step_records_after((dir_ / "link.jsonl").string(), 1);
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.jsonl"));
  EXPECT_EQ(read(), "{\"step\":1}\n");
}

}  // namespace
}  // namespace ctitan
