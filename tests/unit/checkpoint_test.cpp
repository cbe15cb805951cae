// Checkpoint files: round trip, atomic layout, retention, and corruption
// detected by checksum (an InputError naming the tensor, never a crash).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

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

}  // namespace
}  // namespace ctitan
