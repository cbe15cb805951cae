#include "profiling/memory.h"

#include <c10/core/CPUAllocator.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

namespace ctitan {
namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_allocs{0};
std::atomic<bool> g_installed{false};

// LibTorch's raw_allocate() requires a DataPtr whose context is its data
// pointer, so the size cannot live in a context object. Each block carries a
// header instead: [size | padding to kHeader][data...], with kHeader equal
// to the CPU allocator's 64-byte alignment so `data` stays aligned.
constexpr size_t kHeader = 64;
c10::Allocator* g_base = nullptr;

void release(void* data) {
  if (data == nullptr) return;
  auto* block = static_cast<char*>(data) - kHeader;
  int64_t bytes;
  std::memcpy(&bytes, block, sizeof(bytes));
  g_current.fetch_sub(bytes, std::memory_order_relaxed);
  g_base->raw_deleter()(block);
}

class AccountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* block = g_base->raw_allocate(n + kHeader);
    const auto bytes = static_cast<int64_t>(n);
    std::memcpy(block, &bytes, sizeof(bytes));
    void* data = static_cast<char*>(block) + kHeader;
    const int64_t now = g_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t peak = g_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    g_allocs.fetch_add(1, std::memory_order_relaxed);
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
