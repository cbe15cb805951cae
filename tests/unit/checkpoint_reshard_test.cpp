// Sharded checkpoints: ranks (threads here, sharing a std::barrier) save
// their row ranges of each tensor; any other layout loads them back bit for
// bit. The layouts are those of FSDP's dim-0 sharding: rank r holds rows
// [r*c, min(rows, (r+1)*c)), c = ceil(rows / world), padding dropped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <barrier>
#include <filesystem>
#include <thread>

#include "common/errors.h"
#include "trainer/checkpoint/checkpoint.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

// The whole state: a matrix whose rows do not divide by 3 or 4, a vector,
// a matrix with fewer rows than ranks, and a scalar.
NamedTensors whole_state() {
  torch::manual_seed(7);
  return {{"model.w", torch::randn({10, 3})},
          {"model.norm", torch::randn({7})},
          {"optimizer.exp_avg.w", torch::randn({2, 5})},
          {"optimizer.step", torch::tensor(12.0)}};
}

// Zeroed pieces of `whole`'s tensors for rank r of `world` (the scalar on every rank).
TensorPieces pieces_for(const NamedTensors& whole, int r, int world) {
  TensorPieces out;
  for (const auto& [name, t] : whole) {
    if (t.dim() == 0) {
      out.push_back({name, torch::zeros_like(t), {}, 0});
      continue;
    }
    const int64_t rows = t.size(0), chunk = (rows + world - 1) / world;
    const int64_t lo = std::min(rows, r * chunk), hi = std::min(rows, lo + chunk);
    if (hi == lo) continue;
    auto shape = t.sizes().vec();
    shape[0] = hi - lo;
    out.push_back({name, torch::zeros(shape), t.sizes().vec(), lo});
  }
  return out;
}

void fill_from(TensorPieces& pieces, const NamedTensors& whole) {
  for (auto& p : pieces)
    for (const auto& [name, t] : whole)
      if (name == p.name) p.tensor.copy_(t.dim() == 0 ? t : t.narrow(0, p.row_offset, p.tensor.size(0)));
}

class ReshardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("reshard_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    cfg_.enable = true;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `world` threads save their pieces of `whole` at `step`; scalars only from rank 0.
  void save_as(int world, const NamedTensors& whole, int64_t step) {
    std::barrier sync(world);
    std::vector<std::thread> ranks;
    for (int r = 0; r < world; ++r)
      ranks.emplace_back([&, r] {
        Checkpointer c(cfg_, dir_.string());
        TensorPieces mine = pieces_for(whole, r, world);
        fill_from(mine, whole);
        if (r != 0) std::erase_if(mine, [](const TensorPiece& p) { return p.global_shape.empty(); });
        c.save_sharded(step, mine, {{"step", step}}, {{"me", r}}, false,
                       SaveGroup{r, world, [&] { sync.arrive_and_wait(); }});
      });
    for (auto& t : ranks) t.join();
  }

  // Loads into `world` ranks' pieces and reassembles the whole tensors.
  NamedTensors load_as(int world, const NamedTensors& like) {
    NamedTensors out;
    for (const auto& [name, t] : like) out.emplace_back(name, torch::full_like(t, -1.0));
    for (int r = 0; r < world; ++r) {
      Checkpointer c(cfg_, dir_.string());
      TensorPieces mine = pieces_for(like, r, world);
      auto loaded = c.load_sharded(mine, r);
      EXPECT_TRUE(loaded.has_value());
      for (const auto& p : mine)
        for (auto& [name, t] : out)
          if (name == p.name) (t.dim() == 0 ? t : t.narrow(0, p.row_offset, p.tensor.size(0))).copy_(p.tensor);
    }
    return out;
  }

  fs::path dir_;
  CheckpointSection cfg_;
};

void expect_identical(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
}

TEST_F(ReshardTest, FourRanksLoadIntoTwoOneAndThreeBitForBit) {
  const NamedTensors whole = whole_state();
  save_as(4, whole, 5);
  EXPECT_TRUE(fs::exists(dir_ / "checkpoint" / "step-5" / "rank3.bin"));
  expect_identical(load_as(2, whole), whole);
  expect_identical(load_as(1, whole), whole);
  expect_identical(load_as(3, whole), whole);
  // And back: 2 ranks save what they loaded, 4 ranks read it.
  save_as(2, load_as(2, whole), 6);
  expect_identical(load_as(4, whole), whole);
}

TEST_F(ReshardTest, EachRankGetsItsOwnStateBack) {
  const NamedTensors whole = whole_state();
  save_as(3, whole, 2);
  for (int r = 0; r < 3; ++r) {
    Checkpointer c(cfg_, dir_.string());
    TensorPieces mine = pieces_for(whole, r, 3);
    auto loaded = c.load_sharded(mine, r);
    ASSERT_TRUE(loaded.has_value());
    EXPECT_EQ(loaded->world_size, 3);
    EXPECT_EQ(loaded->rank_state.value("me", -1), r);
  }
}

TEST_F(ReshardTest, MissingOrTruncatedShardNamesTheFile) {
  const NamedTensors whole = whole_state();
  save_as(4, whole, 3);
  const fs::path step = dir_ / "checkpoint" / "step-3";
  fs::resize_file(step / "rank2.bin", 4);
  try {
    load_as(1, whole);
    FAIL() << "a truncated shard must not load";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("rank2.bin is truncated"), std::string::npos) << e.what();
  }
  fs::remove(step / "rank2.bin");
  try {
    load_as(2, whole);
    FAIL() << "a missing shard must not load";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("rank2.bin is missing"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ctitan
