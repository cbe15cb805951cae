// Checkpoint files: round trip, atomic layout, retention, and corruption
// detected by checksum (an InputError naming the tensor, never a crash);
// asynchronous saves (byte-identical to synchronous ones, writer errors at
// the next wait), load_only and initial_load_path.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common/errors.h"
#include "trainer/checkpoint/checkpoint.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("ckpt_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    cfg_.enable = true;
    cfg_.interval = 2;
    cfg_.keep_latest_k = 2;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  CheckpointSection cfg_;
};

TEST(Crc32, KnownValue) {
  const char* s = "123456789";  // the standard CRC-32 check value
  EXPECT_EQ(crc32(s, 9), 0xCBF43926u);
}

TEST_F(CheckpointTest, RoundTripRestoresEveryByteAndState) {
  Checkpointer c(cfg_, dir_.string());
  auto a = torch::randn({3, 4}), b = torch::arange(5, torch::kFloat);
  c.save(2, {{"model.a", a}, {"optimizer.b", b}}, {{"step", 2}, {"data_loader", {{"pos", 7}}}}, false);
  auto a2 = torch::zeros({3, 4}), b2 = torch::zeros({5});
  auto loaded = c.load({{"model.a", a2}, {"optimizer.b", b2}});
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->step, 2);
  EXPECT_EQ(loaded->train_state["data_loader"]["pos"], 7);
  EXPECT_TRUE(torch::equal(a, a2));
  EXPECT_TRUE(torch::equal(b, b2));
}

TEST_F(CheckpointTest, KeepsLatestKAndLeavesNoTemporaryFolders) {
  Checkpointer c(cfg_, dir_.string());
  auto t = torch::ones({2});
  for (int step : {2, 4, 6}) c.save(step, {{"model.t", t}}, {{"step", step}}, false);
  EXPECT_EQ(c.saved_steps(), (std::vector<int64_t>{4, 6}));
  for (const auto& e : fs::directory_iterator(c.folder()))
    EXPECT_EQ(e.path().filename().string().rfind(".step", 0), std::string::npos) << e.path();
}

TEST_F(CheckpointTest, NothingToLoadIsNotAnError) {
  Checkpointer c(cfg_, dir_.string());
  auto t = torch::ones({2});
  EXPECT_FALSE(c.load({{"model.t", t}}).has_value());
}

TEST_F(CheckpointTest, FlippedByteIsDetectedByChecksum) {
  Checkpointer c(cfg_, dir_.string());
  auto t = torch::randn({64});
  c.save(2, {{"model.t", t}}, {{"step", 2}}, false);
  const auto bin = fs::path(c.folder()) / "step-2" / "rank0.bin";
  {
    std::fstream f(bin, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(17);
    char x = 0x5A;
    f.write(&x, 1);
  }
  auto dst = torch::zeros({64});
  try {
    c.load({{"model.t", dst}});
    FAIL() << "corruption not detected";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.t"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointTest, TruncatedFileAndGarbledMetadataAreInputErrors) {
  Checkpointer c(cfg_, dir_.string());
  auto t = torch::randn({64});
  c.save(2, {{"model.t", t}}, {{"step", 2}}, false);
  const auto step_dir = fs::path(c.folder()) / "step-2";
  fs::resize_file(step_dir / "rank0.bin", 10);
  auto dst = torch::zeros({64});
  EXPECT_THROW(c.load({{"model.t", dst}}), InputError);
  { std::ofstream(step_dir / "metadata.json") << "{not json"; }
  EXPECT_THROW(c.load({{"model.t", dst}}), InputError);
}

TEST_F(CheckpointTest, ShapeMismatchNamesTheTensor) {
  Checkpointer c(cfg_, dir_.string());
  auto t = torch::randn({4});
  c.save(2, {{"model.t", t}}, {{"step", 2}}, false);
  auto wrong = torch::zeros({5});
  try {
    c.load({{"model.t", wrong}});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.t"), std::string::npos);
  }
}

TEST_F(CheckpointTest, MissingLoadStepIsInputError) {
  cfg_.load_step = 40;
  Checkpointer c(cfg_, dir_.string());
  auto t = torch::ones({2});
  EXPECT_THROW(c.load({{"model.t", t}}), InputError);
}

// Every file of a step folder, by name, as bytes.
std::map<std::string, std::string> files_of(const fs::path& step_dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(step_dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    out[e.path().filename().string()] = bytes.str();
  }
  return out;
}

NamedTensors state(int64_t seed) {
  torch::manual_seed(seed);
  return {{"model.w", torch::randn({16, 8})},
          {"model.b", torch::randn({8}).to(torch::kBFloat16)},
          {"optimizer.w.exp_avg", torch::randn({16, 8})}};
}

// checkpoint.async_mode, checkpoint.load_only, checkpoint.initial_load_path.
TEST_F(CheckpointTest, AsyncSaveWritesTheSameBytesAsSyncSave) {
  for (const std::string mode : {"async", "async_with_pinned_mem"}) {
    SCOPED_TRACE(mode);
    CheckpointSection sync_cfg = cfg_, async_cfg = cfg_;
    async_cfg.async_mode = mode;
    Checkpointer sync_ckpt(sync_cfg, (dir_ / "sync").string()), async_ckpt(async_cfg, (dir_ / mode).string());
    const nlohmann::json train_state = {{"step", 2}, {"data_loader", {{"pos", 11}}}};
    const nlohmann::json rank_state = {{"data_loader", {{"pos", 11}}}};
    for (bool model_only : {false, true}) {
      const int64_t step = model_only ? 4 : 2;
      NamedTensors s = state(step);
      sync_ckpt.save_sharded(step, whole_tensors(s), train_state, rank_state, model_only);
      async_ckpt.save_sharded(step, whole_tensors(s), train_state, rank_state, model_only);
      EXPECT_TRUE(async_ckpt.save_in_flight());
      for (auto& [name, t] : s) t.fill_(7);  // training goes on: the save holds its own copy
      async_ckpt.wait_for_save();
      EXPECT_FALSE(async_ckpt.save_in_flight());
      const std::string step_dir = "step-" + std::to_string(step);
      const auto a = files_of(fs::path(sync_ckpt.folder()) / step_dir);
      const auto b = files_of(fs::path(async_ckpt.folder()) / step_dir);
      EXPECT_EQ(a.size(), 3u);  // metadata.json, rank0.bin, rank0.json
      EXPECT_TRUE(a == b) << "step " << step << ": async files differ from sync files";
    }
    EXPECT_EQ(async_ckpt.saved_steps(), (std::vector<int64_t>{2, 4}));
  }
}

TEST_F(CheckpointTest, NextSaveWaitsForThePreviousAndLoadsBitExact) {
  cfg_.async_mode = "async";
  cfg_.keep_latest_k = 2;
  Checkpointer c(cfg_, dir_.string());
  NamedTensors last;
  for (int64_t step : {2, 4, 6}) {
    last = state(step);
    c.save(step, last, {{"step", step}}, false);  // waits for the previous one first
  }
  c.wait_for_save();
  EXPECT_EQ(c.saved_steps(), (std::vector<int64_t>{4, 6}));
  for (const auto& e : fs::directory_iterator(c.folder()))
    EXPECT_EQ(e.path().filename().string().rfind(".step", 0), std::string::npos) << e.path();
  NamedTensors back = state(0);
  auto loaded = c.load(back);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->step, 6);
  for (size_t i = 0; i < back.size(); ++i) EXPECT_TRUE(torch::equal(back[i].second, last[i].second)) << back[i].first;
}

// A file size limit makes the writer's write fail: the error comes back at
// the next wait as one line, and no step is put in place.
TEST_F(CheckpointTest, WriterErrorSurfacesAtTheNextWait) {
  cfg_.async_mode = "async";
  Checkpointer c(cfg_, dir_.string());
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  c.save(2, {{"model.big", torch::randn({1 << 14})}}, {{"step", 2}}, false);
  std::string error;
  try {
    c.wait_for_save();
  } catch (const std::exception& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(error.rfind("checkpoint: the asynchronous save of step 2 failed: checkpoint: writing ", 0), 0u) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_TRUE(c.saved_steps().empty());
  EXPECT_FALSE(c.save_in_flight());
}

TEST_F(CheckpointTest, LoadOnlyLoadsButNeverSaves) {
  Checkpointer writer(cfg_, dir_.string());
  NamedTensors saved = state(3);
  writer.save(2, saved, {{"step", 2}}, false);
  cfg_.load_only = true;
  Checkpointer c(cfg_, dir_.string());
  for (int64_t step : {1, 2, 4, 10}) EXPECT_FALSE(c.should_save(step, 10)) << step;
  NamedTensors back = state(0);
  auto loaded = c.load(back);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->step, 2);
  EXPECT_TRUE(torch::equal(back[0].second, saved[0].second));
}

// initial_load_path starts a run whose folder holds no checkpoint: weights
// only by default (initial_load_model_only), everything when asked.
TEST_F(CheckpointTest, InitialLoadPathStartsAnEmptyRun) {
  Checkpointer elsewhere(cfg_, (dir_ / "pretrained").string());
  NamedTensors saved = state(5);
  elsewhere.save(8, saved, {{"step", 8}}, false);
  cfg_.initial_load_path = (fs::path(elsewhere.folder()) / "step-8").string();
  {
    Checkpointer c(cfg_, (dir_ / "run").string());
    NamedTensors back = state(0);
    const at::Tensor opt_before = back[2].second.clone();
    auto loaded = c.load(back);
    ASSERT_TRUE(loaded.has_value());
    EXPECT_TRUE(loaded->model_only);
    EXPECT_TRUE(torch::equal(back[0].second, saved[0].second));
    EXPECT_TRUE(torch::equal(back[2].second, opt_before)) << "optimizer state loaded under initial_load_model_only";
  }
  cfg_.initial_load_model_only = false;
  {
    Checkpointer c(cfg_, (dir_ / "run").string());
    NamedTensors back = state(0);
    auto loaded = c.load(back);
    ASSERT_TRUE(loaded.has_value());
    EXPECT_FALSE(loaded->model_only);
    EXPECT_EQ(loaded->step, 8);
    EXPECT_TRUE(torch::equal(back[2].second, saved[2].second));
    // Once the run has its own checkpoint, that one is loaded.
    c.save(10, saved, {{"step", 10}}, false);
    EXPECT_EQ(c.load(back)->step, 10);
  }
  cfg_.initial_load_path = (dir_ / "nowhere").string();
  Checkpointer missing(cfg_, (dir_ / "run2").string());
  NamedTensors back = state(0);
  EXPECT_THROW(missing.load(back), InputError);
}

}  // namespace
}  // namespace ctitan
