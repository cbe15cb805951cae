// Memory accounting: what tensors really hold, plus what the process holds.
//
// install_accounting_allocator() replaces LibTorch's CPU allocator with one
// that forwards to the default allocator and counts live bytes (current and
// peak). Call it once, before the model is built; tensors allocated before
// it are simply not counted. Counters are atomics: any thread may allocate.
//
// Categories: every block is charged to the calling thread's category when
// it is allocated (MemoryCategoryScope sets it; kOther by default), and a
// long-lived buffer can be moved to its category afterwards
// (tag_tensor_memory: the model's flat parameter/gradient buffers and the
// optimizer state, which are allocated before their role is known). Bytes
// are credited back to the block's category when it is freed. The peak
// breakdown is the categories' bytes at the moment of the overall peak.
//
// Timeline: while recording (start_memory_timeline), every allocation and
// free is appended to a ring of the last N events (time, ±bytes, category,
// total live bytes): what enable_memory_snapshot dumps, and what an
// out-of-memory snapshot shows of the moments before the failure.
//
// Out of memory: LibTorch's CPU allocator reports a failed allocation as a
// plain c10::Error; the accounting allocator rethrows it as
// c10::OutOfMemoryError (what CUDA's allocator throws) and remembers the
// failed request for the snapshot.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace at {
class Tensor;
}

namespace ctitan {

struct MemoryStats {
  int64_t current_bytes = 0;  // bytes held by live tensors (CUDA: the caching allocator's active bytes)
  int64_t peak_bytes = 0;     // max of current_bytes since the last reset (TorchTitan's max_active)
  int64_t num_allocs = 0;     // allocations since install
  // CUDA's caching allocator only (−1 elsewhere): the peak of the memory it
  // reserved from the driver (TorchTitan's max_reserved), and since the
  // process started, the allocations it retried after freeing its cache
  // and the out-of-memory errors it raised.
  int64_t reserved_peak_bytes = -1;
  int64_t alloc_retries = 0, ooms = 0;
};

void install_accounting_allocator();
bool accounting_allocator_installed();
MemoryStats cpu_memory_stats();
void reset_peak_cpu_memory();

enum class MemoryCategory : uint8_t {
  kOther = 0,
  kParameters,      // master weights, their compute copy, gathered FSDP units
  kGradients,       // the fp32 gradient buffer (shard)
  kOptimizerState,  // AdamW's moments
  kActivations,     // forward activations and backward temporaries
  kCommunication,   // collective buffers: all-gather outputs, reduce-scatter inputs/outputs
  kCount
};
constexpr size_t kNumMemoryCategories = static_cast<size_t>(MemoryCategory::kCount);
const char* memory_category_name(MemoryCategory c);  // "parameters", "optimizer_state", ...

// Sets the calling thread's category for its lifetime (scopes nest).
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory c);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory saved_;
};

// Moves the block behind t's storage to category c. False when the storage
// was not allocated by the accounting allocator (nothing changes).
bool tag_tensor_memory(const at::Tensor& t, MemoryCategory c);

struct CategoryStats {
  int64_t current_bytes = 0, max_bytes = 0, at_peak_bytes = 0;
};
std::array<CategoryStats, kNumMemoryCategories> memory_by_category();
// Starts the categories' maxima and the peak breakdown afresh from what is
// live now: the trainer calls it once set-up is done (tagging moves bytes
// between categories, so maxima from before it do not mean much).
void reset_memory_category_peaks();
nlohmann::json memory_by_category_json();  // {"parameters": {"current_bytes":..,"max_bytes":..,"at_peak_bytes":..}, ...}

// Timeline of allocations (see above). capacity: events kept (the newest).
void start_memory_timeline(size_t capacity = 100000);
void stop_memory_timeline();
bool memory_timeline_recording();
// {"columns": ["t_us","bytes","category","live_bytes"], "entries": [[...]...], "dropped": n}
// — the events since the last take (or start); t_us is CLOCK_MONOTONIC like the traces.
nlohmann::json take_memory_timeline();

// The allocation that failed last (0 bytes if none), and what was live at
// that moment (the snapshot is taken after the step unwound): for the OOM snapshot.
struct FailedAllocation {
  int64_t bytes = 0;
  MemoryCategory category = MemoryCategory::kOther;
  int64_t live_bytes = 0;
  std::array<int64_t, kNumMemoryCategories> live_by_category{};
};
FailedAllocation last_failed_allocation();

int64_t process_rss_bytes();       // resident set size now (/proc/self/statm)
int64_t process_peak_rss_bytes();  // VmHWM
int64_t system_memory_bytes();     // physical memory of the machine

}  // namespace ctitan
