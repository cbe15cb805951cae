// Sharded checkpoints: ranks (threads here, sharing a std::barrier) save
// their boxes of each tensor; any other layout loads them back bit for bit.
// A layout is a grid: dim 1 split into `cols` blocks (tensor parallelism's
// row-parallel weights) and dim 0 into `rows` blocks inside each (FSDP's
// dim-0 sharding; FSDP inside a TP shard when both are > 1). A block is
// [i*c, min(n, (i+1)*c)), c = ceil(n / parts), padding dropped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <barrier>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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

struct Layout {
  int rows = 1, cols = 1;
  int world() const { return rows * cols; }
};

// Block i of `parts` of an extent n: [lo, hi).
std::pair<int64_t, int64_t> block(int64_t n, int parts, int i) {
  const int64_t c = (n + parts - 1) / parts, lo = std::min(n, i * c);
  return {lo, std::min(n, lo + c)};
}

// Zeroed pieces of `whole`'s tensors for rank r of `layout` (the scalar on every rank).
TensorPieces pieces_for(const NamedTensors& whole, int r, Layout layout) {
  TensorPieces out;
  for (const auto& [name, t] : whole) {
    if (t.dim() == 0) {
      out.push_back({name, torch::zeros_like(t), {}, {}});
      continue;
    }
    auto shape = t.sizes().vec();
    std::vector<int64_t> offsets(shape.size(), 0);
    const auto [r_lo, r_hi] = block(t.size(0), layout.rows, r / layout.cols);
    offsets[0] = r_lo;
    shape[0] = r_hi - r_lo;
    if (t.dim() >= 2) {
      const auto [c_lo, c_hi] = block(t.size(1), layout.cols, r % layout.cols);
      offsets[1] = c_lo;
      shape[1] = c_hi - c_lo;
    }
    if (shape[0] == 0 || (t.dim() >= 2 && shape[1] == 0)) continue;
    out.push_back({name, torch::zeros(shape), t.sizes().vec(), offsets});
  }
  return out;
}

// The box of `t` a piece covers.
at::Tensor box_of(at::Tensor t, const TensorPiece& p) {
  for (int64_t d = 0; d < t.dim(); ++d) t = t.narrow(d, p.offsets[d], p.tensor.size(d));
  return t;
}

void fill_from(TensorPieces& pieces, const NamedTensors& whole) {
  for (auto& p : pieces)
    for (const auto& [name, t] : whole)
      if (name == p.name) p.tensor.copy_(box_of(t, p));
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

  // `layout.world()` threads save their pieces of `whole` at `step`; scalars only from rank 0.
  void save_as(Layout layout, const NamedTensors& whole, int64_t step) {
    const int world = layout.world();
    std::barrier sync(world);
    std::vector<std::thread> ranks;
    for (int r = 0; r < world; ++r)
      ranks.emplace_back([&, r] {
        Checkpointer c(cfg_, dir_.string());
        TensorPieces mine = pieces_for(whole, r, layout);
        fill_from(mine, whole);
        // A scalar is replicated on every rank, a vector on every column
        // block: only one rank writes each.
        if (r != 0) std::erase_if(mine, [](const TensorPiece& p) { return p.global_shape.empty(); });
        if (r % layout.cols != 0) std::erase_if(mine, [](const TensorPiece& p) { return p.global_shape.size() < 2; });
        c.save_sharded(step, mine, {{"step", step}}, {{"me", r}}, false,
                       SaveGroup{r, world, [&] { sync.arrive_and_wait(); }});
      });
    for (auto& t : ranks) t.join();
  }

  // Loads into `layout`'s ranks' pieces and reassembles the whole tensors.
  NamedTensors load_as(Layout layout, const NamedTensors& like) {
    NamedTensors out;
    for (const auto& [name, t] : like) out.emplace_back(name, torch::full_like(t, -1.0));
    for (int r = 0; r < layout.world(); ++r) {
      Checkpointer c(cfg_, dir_.string());
      TensorPieces mine = pieces_for(like, r, layout);
      auto loaded = c.load_sharded(mine, r);
      EXPECT_TRUE(loaded.has_value());
      for (const auto& p : mine)
        for (auto& [name, t] : out)
          if (name == p.name) box_of(t, p).copy_(p.tensor);
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
  save_as({4, 1}, whole, 5);
  EXPECT_TRUE(fs::exists(dir_ / "checkpoint" / "step-5" / "rank3.bin"));
  expect_identical(load_as({2, 1}, whole), whole);
  expect_identical(load_as({1, 1}, whole), whole);
  expect_identical(load_as({3, 1}, whole), whole);
  // And back: 2 ranks save what they loaded, 4 ranks read it.
  save_as({2, 1}, load_as({2, 1}, whole), 6);
  expect_identical(load_as({4, 1}, whole), whole);
}

// Column blocks (TP's row-parallel weights) and rows inside column blocks
// (FSDP inside a TP shard) load into row shards, one process and other
// grids, and back.
TEST_F(ReshardTest, ColumnBlocksAndGridsReshardInEveryDimension) {
  const NamedTensors whole = whole_state();
  save_as({1, 2}, whole, 1);
  for (Layout l : {Layout{1, 1}, Layout{3, 1}, Layout{2, 2}, Layout{1, 3}}) {
    SCOPED_TRACE(std::to_string(l.rows) + "x" + std::to_string(l.cols));
    expect_identical(load_as(l, whole), whole);
  }
  save_as({2, 2}, whole, 2);
  for (Layout l : {Layout{4, 1}, Layout{1, 1}, Layout{1, 2}, Layout{3, 2}}) {
    SCOPED_TRACE(std::to_string(l.rows) + "x" + std::to_string(l.cols));
    expect_identical(load_as(l, whole), whole);
  }
}

// Two ranks that both wrote the whole tensors: a box covered twice is an
// error, not a silent pick.
TEST_F(ReshardTest, OverlappingSavedPiecesAreAnInputError) {
  const NamedTensors whole = whole_state();
  std::barrier sync(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      Checkpointer c(cfg_, dir_.string());
      c.save_sharded(1, whole_tensors(whole), {{"step", 1}}, {}, false, SaveGroup{r, 2, [&] { sync.arrive_and_wait(); }});
    });
  for (auto& t : ranks) t.join();
  try {
    load_as({1, 1}, whole);
    FAIL() << "overlapping pieces must not load";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("covered twice"), std::string::npos) << e.what();
  }
}

// A checkpoint written by the v2 format (dim-0 row ranges; FSDP 2, tiny
// model, fp32, step 2; see tests/golden/checkpoint_v2_fsdp2/README.md)
// loads into one process, row shards and column blocks, and every tensor
// equals what an independent numpy decoder (tests/peer/decode_checkpoint.py)
// assembled from the same files: same CRC-32 of the whole tensor's bytes.
TEST_F(ReshardTest, Version2CheckpointFromTheRepositoryLoadsIntoAnyLayout) {
  const char* src = std::getenv("CTITAN_SOURCE_DIR");
  const fs::path fixture = fs::path(src ? src : ".") / "tests" / "golden" / "checkpoint_v2_fsdp2";
  if (!fs::exists(fixture / "expected.json")) GTEST_SKIP() << "no " << fixture << " (run from the source tree)";
  std::ifstream in(fixture / "expected.json");
  const auto expected = nlohmann::json::parse(in);
  fs::create_directories(dir_ / "checkpoint");
  fs::copy(fixture / "step-2", dir_ / "checkpoint" / "step-2", fs::copy_options::recursive);
  NamedTensors like;
  for (const auto& [name, e] : expected["tensors"].items())
    like.emplace_back(name, torch::zeros(e["global_shape"].get<std::vector<int64_t>>()));
  ASSERT_EQ(like.size(), 64u);
  for (Layout l : {Layout{1, 1}, Layout{3, 1}, Layout{1, 2}, Layout{2, 2}}) {
    SCOPED_TRACE(std::to_string(l.rows) + "x" + std::to_string(l.cols));
    for (const auto& [name, t] : load_as(l, like)) {
      const at::Tensor c = t.contiguous();
      EXPECT_EQ(crc32(c.data_ptr(), c.nbytes()), expected["tensors"][name]["crc32"].get<uint32_t>()) << name;
    }
  }
}

TEST_F(ReshardTest, EachRankGetsItsOwnStateBack) {
  const NamedTensors whole = whole_state();
  save_as({3, 1}, whole, 2);
  for (int r = 0; r < 3; ++r) {
    Checkpointer c(cfg_, dir_.string());
    TensorPieces mine = pieces_for(whole, r, {3, 1});
    auto loaded = c.load_sharded(mine, r);
    ASSERT_TRUE(loaded.has_value());
    EXPECT_EQ(loaded->world_size, 3);
    EXPECT_EQ(loaded->rank_state.value("me", -1), r);
  }
}

TEST_F(ReshardTest, MissingOrTruncatedShardNamesTheFile) {
  const NamedTensors whole = whole_state();
  save_as({4, 1}, whole, 3);
  const fs::path step = dir_ / "checkpoint" / "step-3";
  fs::resize_file(step / "rank2.bin", 4);
  try {
    load_as({1, 1}, whole);
    FAIL() << "a truncated shard must not load";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("rank2.bin is truncated"), std::string::npos) << e.what();
  }
  fs::remove(step / "rank2.bin");
  try {
    load_as({2, 1}, whole);
    FAIL() << "a missing shard must not load";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("rank2.bin is missing"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ctitan
