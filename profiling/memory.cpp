#include "profiling/memory.h"

#include <ATen/core/Tensor.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

namespace ctitan {
namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};      // reset by reset_peak_cpu_memory()
std::atomic<int64_t> g_run_peak{0};  // never reset: the peak the category breakdown belongs to
std::atomic<int64_t> g_allocs{0};
std::atomic<bool> g_installed{false};
std::array<std::atomic<int64_t>, kNumMemoryCategories> g_cat_current{};
std::array<std::atomic<int64_t>, kNumMemoryCategories> g_cat_max{};
std::array<std::atomic<int64_t>, kNumMemoryCategories> g_cat_at_peak{};
thread_local MemoryCategory t_category = MemoryCategory::kOther;

std::mutex g_failed_mu;
FailedAllocation g_failed;

// LibTorch's raw_allocate() requires a DataPtr whose context is its data
// pointer, so the size cannot live in a context object. Each block carries a
// header instead: [size (8 B) | category (1 B) | padding to kHeader][data...],
// with kHeader equal to the CPU allocator's 64-byte alignment so `data`
// stays aligned.
constexpr size_t kHeader = 64;
constexpr size_t kCategoryOffset = sizeof(int64_t);
c10::Allocator* g_base = nullptr;

void raise_max(std::atomic<int64_t>& max, int64_t value) {
  int64_t seen = max.load(std::memory_order_relaxed);
  while (value > seen && !max.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// --- timeline ring ------------------------------------------------------------
struct TimelineEntry {
  int64_t t_ns, bytes, live;
  uint8_t category;
};
std::atomic<bool> g_timeline_on{false};
std::mutex g_timeline_mu;
std::vector<TimelineEntry> g_ring;
size_t g_ring_capacity = 0, g_ring_next = 0, g_ring_count = 0;  // count: entries since the last take
int64_t g_ring_dropped = 0;

void timeline_push(int64_t bytes, uint8_t category, int64_t live) {
  const int64_t t = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now().time_since_epoch())
                        .count();
  std::lock_guard<std::mutex> lock(g_timeline_mu);
  if (g_ring_capacity == 0) return;
  g_ring[g_ring_next] = {t, bytes, live, category};
  g_ring_next = (g_ring_next + 1) % g_ring_capacity;
  if (g_ring_count == g_ring_capacity) {
    ++g_ring_dropped;
  } else {
    ++g_ring_count;
  }
}

void charge(uint8_t category, int64_t bytes) {
  const int64_t cat_now = g_cat_current[category].fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (bytes > 0) raise_max(g_cat_max[category], cat_now);
}

void release(void* data) {
  if (data == nullptr) return;
  auto* block = static_cast<char*>(data) - kHeader;
  int64_t bytes;
  std::memcpy(&bytes, block, sizeof(bytes));
  const auto category = static_cast<uint8_t>(block[kCategoryOffset]);
  charge(category, -bytes);
  const int64_t live = g_current.fetch_sub(bytes, std::memory_order_relaxed) - bytes;
  if (g_timeline_on.load(std::memory_order_relaxed)) timeline_push(-bytes, category, live);
  g_base->raw_deleter()(block);
}

class AccountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    const auto category = static_cast<uint8_t>(t_category);
    void* block = nullptr;
    try {
      block = g_base->raw_allocate(n + kHeader);
    } catch (const c10::Error& e) {
      {
        std::lock_guard<std::mutex> lock(g_failed_mu);
        g_failed.bytes = static_cast<int64_t>(n);
        g_failed.category = static_cast<MemoryCategory>(category);
        g_failed.live_bytes = g_current.load();
        for (size_t c = 0; c < kNumMemoryCategories; ++c) g_failed.live_by_category[c] = g_cat_current[c].load();
      }
      C10_THROW_ERROR(OutOfMemoryError, e.what_without_backtrace());
    }
    const auto bytes = static_cast<int64_t>(n);
    std::memcpy(block, &bytes, sizeof(bytes));
    static_cast<char*>(block)[kCategoryOffset] = static_cast<char>(category);
    void* data = static_cast<char*>(block) + kHeader;
    charge(category, bytes);
    const int64_t now = g_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    raise_max(g_peak, now);
    int64_t run_peak = g_run_peak.load(std::memory_order_relaxed);
    if (now > run_peak && g_run_peak.compare_exchange_strong(run_peak, now, std::memory_order_relaxed)) {
      // A new overall peak: remember what it was made of (racy across
      // threads by a block or two; exact for the single training thread).
      for (size_t c = 0; c < kNumMemoryCategories; ++c)
        g_cat_at_peak[c].store(g_cat_current[c].load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    g_allocs.fetch_add(1, std::memory_order_relaxed);
    if (g_timeline_on.load(std::memory_order_relaxed)) timeline_push(bytes, category, now);
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

int64_t read_status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t klen = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, klen, key) == 0) return std::stoll(line.substr(klen + 1)) * 1024;
  return 0;
}

}  // namespace

void install_accounting_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_base = c10::GetDefaultCPUAllocator();
    static AccountingAllocator allocator;
    c10::SetCPUAllocator(&allocator, /*priority=*/100);
    g_installed = true;
  });
}

bool accounting_allocator_installed() { return g_installed.load(); }

MemoryStats cpu_memory_stats() {
  return {g_current.load(), g_peak.load(), g_allocs.load()};
}

void reset_peak_cpu_memory() { g_peak.store(g_current.load()); }

const char* memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kOther: return "other";
    case MemoryCategory::kParameters: return "parameters";
    case MemoryCategory::kGradients: return "gradients";
    case MemoryCategory::kOptimizerState: return "optimizer_state";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kCommunication: return "communication";
    case MemoryCategory::kCount: break;
  }
  return "other";
}

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory c) : saved_(t_category) { t_category = c; }
MemoryCategoryScope::~MemoryCategoryScope() { t_category = saved_; }

bool tag_tensor_memory(const at::Tensor& t, MemoryCategory c) {
  if (!t.defined() || !t.has_storage()) return false;
  const c10::DataPtr& ptr = t.storage().data_ptr();
  if (ptr.get() == nullptr || ptr.get_deleter() != &release) return false;
  auto* block = static_cast<char*>(ptr.get()) - kHeader;
  int64_t bytes;
  std::memcpy(&bytes, block, sizeof(bytes));
  const auto from = static_cast<uint8_t>(block[kCategoryOffset]), to = static_cast<uint8_t>(c);
  if (from == to) return true;
  block[kCategoryOffset] = static_cast<char>(to);
  charge(from, -bytes);
  charge(to, bytes);
  return true;
}

std::array<CategoryStats, kNumMemoryCategories> memory_by_category() {
  std::array<CategoryStats, kNumMemoryCategories> out;
  for (size_t c = 0; c < kNumMemoryCategories; ++c)
    out[c] = {g_cat_current[c].load(), g_cat_max[c].load(), g_cat_at_peak[c].load()};
  return out;
}

void reset_memory_category_peaks() {
  g_run_peak.store(g_current.load());
  for (size_t c = 0; c < kNumMemoryCategories; ++c) {
    const int64_t now = g_cat_current[c].load();
    g_cat_max[c].store(now);
    g_cat_at_peak[c].store(now);
  }
}

nlohmann::json memory_by_category_json() {
  nlohmann::json j = nlohmann::json::object();
  const auto stats = memory_by_category();
  for (size_t c = 0; c < kNumMemoryCategories; ++c)
    j[memory_category_name(static_cast<MemoryCategory>(c))] = {{"current_bytes", stats[c].current_bytes},
                                                                 {"max_bytes", stats[c].max_bytes},
                                                                 {"at_peak_bytes", stats[c].at_peak_bytes}};
  return j;
}

void start_memory_timeline(size_t capacity) {
  std::lock_guard<std::mutex> lock(g_timeline_mu);
  g_ring.assign(capacity, TimelineEntry{});
  g_ring_capacity = capacity;
  g_ring_next = g_ring_count = 0;
  g_ring_dropped = 0;
  g_timeline_on = capacity > 0;
}

void stop_memory_timeline() { g_timeline_on = false; }

bool memory_timeline_recording() { return g_timeline_on.load(); }

nlohmann::json take_memory_timeline() {
  std::lock_guard<std::mutex> lock(g_timeline_mu);
  nlohmann::json entries = nlohmann::json::array();
  const size_t first = (g_ring_next + g_ring_capacity - g_ring_count) % std::max<size_t>(g_ring_capacity, 1);
  for (size_t i = 0; i < g_ring_count; ++i) {
    const TimelineEntry& e = g_ring[(first + i) % g_ring_capacity];
    entries.push_back({e.t_ns / 1e3, e.bytes, memory_category_name(static_cast<MemoryCategory>(e.category)), e.live});
  }
  nlohmann::json j = {{"columns", {"t_us", "bytes", "category", "live_bytes"}},
                      {"capacity", g_ring_capacity},
                      {"dropped", g_ring_dropped},
                      {"entries", std::move(entries)}};
  g_ring_count = 0;
  g_ring_dropped = 0;
  return j;
}

FailedAllocation last_failed_allocation() {
  std::lock_guard<std::mutex> lock(g_failed_mu);
  return g_failed;
}

int64_t process_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

int64_t process_peak_rss_bytes() { return read_status_kb("VmHWM:"); }

int64_t system_memory_bytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
}

}  // namespace ctitan
