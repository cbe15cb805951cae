// The accounting allocator counts what tensors hold, by category; its
// timeline and out-of-memory report feed the memory snapshots.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "profiling/memory.h"
#include "profiling/memory_snapshot.h"

namespace ctitan {
namespace {

TEST(MemoryAccounting, CountsLiveTensorBytesAndPeak) {
  install_accounting_allocator();
  ASSERT_TRUE(accounting_allocator_installed());
  const auto before = cpu_memory_stats();
  reset_peak_cpu_memory();
  {
    auto t = torch::empty({1 << 20}, torch::kFloat);  // 4 MiB
    const auto during = cpu_memory_stats();
    EXPECT_GE(during.current_bytes - before.current_bytes, 4 << 20);
    EXPECT_GE(during.peak_bytes, during.current_bytes);
  }
  const auto after = cpu_memory_stats();
  EXPECT_LT(after.current_bytes - before.current_bytes, 4 << 20);
  EXPECT_GE(after.peak_bytes - before.current_bytes, 4 << 20);
}

TEST(MemoryAccounting, ProcessNumbersArePlausible) {
  EXPECT_GT(process_rss_bytes(), 1 << 20);
  EXPECT_GE(process_peak_rss_bytes(), process_rss_bytes() / 2);
  EXPECT_GT(system_memory_bytes(), int64_t{1} << 30);
}

int64_t category_bytes(MemoryCategory c) { return memory_by_category()[static_cast<size_t>(c)].current_bytes; }

TEST(MemoryAccounting, ChargesTheCallersCategoryAndCreditsItBackOnFree) {
  install_accounting_allocator();
  const int64_t act0 = category_bytes(MemoryCategory::kActivations);
  const int64_t comm0 = category_bytes(MemoryCategory::kCommunication);
  {
    at::Tensor a, c;
    {
      MemoryCategoryScope outer(MemoryCategory::kActivations);
      a = torch::empty({1 << 18}, torch::kFloat);  // 1 MiB
      {
        MemoryCategoryScope inner(MemoryCategory::kCommunication);
        c = torch::empty({1 << 17}, torch::kFloat);  // 512 KiB
      }
    }
    EXPECT_EQ(category_bytes(MemoryCategory::kActivations) - act0, 1 << 20);
    EXPECT_EQ(category_bytes(MemoryCategory::kCommunication) - comm0, 1 << 19);
    EXPECT_GE(memory_by_category()[static_cast<size_t>(MemoryCategory::kActivations)].max_bytes, act0 + (1 << 20));
  }
  EXPECT_EQ(category_bytes(MemoryCategory::kActivations), act0);
  EXPECT_EQ(category_bytes(MemoryCategory::kCommunication), comm0);
}

TEST(MemoryAccounting, TaggingMovesALongLivedBufferToItsCategory) {
  install_accounting_allocator();
  const int64_t other0 = category_bytes(MemoryCategory::kOther);
  const int64_t opt0 = category_bytes(MemoryCategory::kOptimizerState);
  at::Tensor moments = torch::zeros({1 << 16}, torch::kFloat);  // 256 KiB, allocated as "other"
  EXPECT_EQ(category_bytes(MemoryCategory::kOther) - other0, 1 << 18);
  EXPECT_TRUE(tag_tensor_memory(moments.narrow(0, 10, 5), MemoryCategory::kOptimizerState)) << "a view tags its block";
  EXPECT_EQ(category_bytes(MemoryCategory::kOther), other0);
  EXPECT_EQ(category_bytes(MemoryCategory::kOptimizerState) - opt0, 1 << 18);
  moments = at::Tensor();
  EXPECT_EQ(category_bytes(MemoryCategory::kOptimizerState), opt0) << "freed from the category it was moved to";
  float outside[4] = {0, 0, 0, 0};
  EXPECT_FALSE(tag_tensor_memory(torch::from_blob(outside, {4}), MemoryCategory::kParameters));
  EXPECT_EQ(memory_category_name(MemoryCategory::kOptimizerState), std::string("optimizer_state"));
}

TEST(MemoryAccounting, TimelineRecordsAllocationsAndFreesWithTheirCategory) {
  install_accounting_allocator();
  start_memory_timeline(8);
  {
    MemoryCategoryScope g(MemoryCategory::kGradients);
    auto t = torch::empty({1000}, torch::kByte);
  }
  const nlohmann::json tl = take_memory_timeline();
  stop_memory_timeline();
  EXPECT_EQ(tl["columns"][1], "bytes");
  bool alloc = false, freed = false;
  for (const auto& e : tl["entries"]) {
    if (e[1] == 1000 && e[2] == "gradients") alloc = true;
    if (e[1] == -1000 && e[2] == "gradients") freed = true;
  }
  EXPECT_TRUE(alloc && freed) << tl.dump();
  // The ring keeps the newest entries and counts the rest.
  start_memory_timeline(2);
  for (int i = 0; i < 5; ++i) auto t = torch::empty({16}, torch::kByte);
  const nlohmann::json ring = take_memory_timeline();
  stop_memory_timeline();
  EXPECT_EQ(ring["entries"].size(), 2u);
  EXPECT_GE(ring["dropped"].get<int64_t>(), 8);
  EXPECT_TRUE(take_memory_timeline()["entries"].empty()) << "a take empties it";
}

TEST(MemoryAccounting, AFailedAllocationIsAnOutOfMemoryErrorAndShowsInTheSnapshot) {
  install_accounting_allocator();
  const int64_t huge = int64_t{1} << 50;  // 1 PiB: more than any machine's memory and swap
  {
    MemoryCategoryScope a(MemoryCategory::kActivations);
    EXPECT_THROW(torch::empty({huge}, torch::kByte), c10::OutOfMemoryError);
  }
  const FailedAllocation f = last_failed_allocation();
  EXPECT_EQ(f.bytes, huge);
  EXPECT_EQ(f.category, MemoryCategory::kActivations);
  const nlohmann::json snap = memory_snapshot("out_of_memory", 7, 0, "boom");
  EXPECT_EQ(snap["reason"], "out_of_memory");
  EXPECT_EQ(snap["step"], 7);
  EXPECT_EQ(snap["failed_allocation"]["bytes"], huge);
  EXPECT_EQ(snap["failed_allocation"]["category"], "activations");
  EXPECT_TRUE(snap["by_category"].contains("parameters"));
  EXPECT_EQ(snap.contains("cuda"), torch::cuda::is_available()) << "caching-allocator statistics where a GPU is";
}

}  // namespace
}  // namespace ctitan
