#include "profiling/memory_snapshot.h"

#include <ATen/Context.h>

#include <filesystem>

#include "profiling/memory.h"
#include "profiling/trace.h"

#ifdef CTITAN_WITH_CUDA
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace ctitan {

nlohmann::json cuda_memory_stats() {
#ifdef CTITAN_WITH_CUDA
  if (!at::hasCUDA() || at::detail::getCUDAHooks().deviceCount() == 0) return nullptr;
  const c10::DeviceIndex device = c10::cuda::current_device();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return {{"device", device},
          {"allocated_bytes", stats.allocated_bytes[kAll].current},
          {"allocated_peak_bytes", stats.allocated_bytes[kAll].peak},
          {"reserved_bytes", stats.reserved_bytes[kAll].current},
          {"reserved_peak_bytes", stats.reserved_bytes[kAll].peak},
          {"active_bytes", stats.active_bytes[kAll].current},
          {"num_alloc_retries", stats.num_alloc_retries},
          {"num_ooms", stats.num_ooms}};
#else
  return nullptr;
#endif
}

nlohmann::json memory_snapshot(const std::string& reason, int64_t step, int rank, const std::string& error) {
  const MemoryStats mem = cpu_memory_stats();
  const auto by_category = memory_by_category();
  int64_t run_peak = 0;
  for (const CategoryStats& c : by_category) run_peak += c.at_peak_bytes;
  nlohmann::json j = {{"version", 1},
                      {"rank", rank},
                      {"step", step},
                      {"reason", reason},
                      {"clock", "CLOCK_MONOTONIC"},
                      {"taken_at_us", trace_now_ns() / 1e3},
                      {"accounting_allocator", accounting_allocator_installed()},
                      {"current_bytes", mem.current_bytes},
                      {"peak_bytes_since_last_log", mem.peak_bytes},
                      {"run_peak_bytes", run_peak},
                      {"num_allocs", mem.num_allocs},
                      {"by_category", memory_by_category_json()},
                      {"rss_bytes", process_rss_bytes()},
                      {"rss_peak_bytes", process_peak_rss_bytes()},
                      {"system_bytes", system_memory_bytes()}};
  if (!error.empty()) j["error"] = error;
  const FailedAllocation failed = last_failed_allocation();
  if (failed.bytes > 0) {
    nlohmann::json live = nlohmann::json::object();
    for (size_t c = 0; c < kNumMemoryCategories; ++c)
      live[memory_category_name(static_cast<MemoryCategory>(c))] = failed.live_by_category[c];
    j["failed_allocation"] = {{"bytes", failed.bytes},
                              {"category", memory_category_name(failed.category)},
                              {"live_bytes", failed.live_bytes},
                              {"live_by_category", std::move(live)}};
  }
  j["timeline"] = memory_timeline_recording() ? take_memory_timeline() : nlohmann::json(nullptr);
  if (auto cuda = cuda_memory_stats(); !cuda.is_null()) j["cuda"] = std::move(cuda);
  return j;
}

std::string write_memory_snapshot(const std::string& folder, const std::string& iteration_dir, int rank,
                                  const nlohmann::json& snapshot) {
  const auto path = std::filesystem::path(folder) / iteration_dir / ("rank" + std::to_string(rank) + "_memory_snapshot.json");
  write_json_file(path.string(), snapshot);
  return path.string();
}

}  // namespace ctitan
