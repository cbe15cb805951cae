// Memory accounting: what tensors really hold, plus what the process holds.
//
// install_accounting_allocator() replaces LibTorch's CPU allocator with one
// that forwards to the default allocator and counts live bytes (current and
// peak). Call it once, before the model is built; tensors allocated before
// it are simply not counted. Counters are atomics: any thread may allocate.
#pragma once

#include <cstdint>

namespace ctitan {

struct MemoryStats {
  int64_t current_bytes = 0;  // bytes held by live CPU tensors
  int64_t peak_bytes = 0;     // max of current_bytes since the last reset
  int64_t num_allocs = 0;     // allocations since install
};

void install_accounting_allocator();
bool accounting_allocator_installed();
MemoryStats cpu_memory_stats();
void reset_peak_cpu_memory();

int64_t process_rss_bytes();       // resident set size now (/proc/self/statm)
int64_t process_peak_rss_bytes();  // VmHWM
int64_t system_memory_bytes();     // physical memory of the machine

}  // namespace ctitan
