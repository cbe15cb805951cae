// The accounting allocator counts what tensors hold.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "profiling/memory.h"

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

}  // namespace
}  // namespace ctitan
