// GPU activity in a form that does not depend on CUPTI's headers: what the
// CUPTI tracer (profiling/cupti/) converts its records into, and what the
// trace and the analysis consume. Kernels whose own name starts with "nccl"
// are NCCL's collectives: GPU-side communication (trace category gpu_nccl),
// everything else the GPU runs is computation. CUPTI reports kernel names
// mangled ("_Z32ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernel..."):
// they are demangled for the trace and classified in either form.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "profiling/trace.h"

namespace ctitan {

struct GpuActivity {
  enum class Kind { kKernel, kMemcpy, kMemset, kSync };
  Kind kind = Kind::kKernel;
  std::string name;              // kernel name, "Memcpy HtoD", "Memset", "cudaStreamSynchronize"
  int64_t start_ns = 0, end_ns = 0;  // the tracer's clock (CUPTI is given CLOCK_MONOTONIC)
  uint32_t device = 0, stream = 0, correlation = 0;
  int64_t bytes = 0;             // memcpy / memset
  bool nccl = false;             // an NCCL kernel
};

// True for NCCL's kernels, mangled or not: the kernel's identifier (not a
// template argument or parameter type) starts with "nccl".
bool is_nccl_kernel(std::string_view name);

// The readable signature of a mangled ("_Z...") name; any other name, or one
// the demangler refuses, unchanged.
std::string demangle_kernel_name(std::string_view name);

// One 'X' event per activity on track kGpuTrackBase + 1000·device + stream
// ("GPU d stream s"); names of the tracks are added to `track_names`.
std::vector<TraceEvent> gpu_activity_events(const std::vector<GpuActivity>& acts,
                                            std::unordered_map<int64_t, std::string>& track_names);

// Seconds in [begin_ns, end_ns) during which the GPU ran a kernel, memcpy or
// memset (the union over streams): the per-step GPU busy time.
double gpu_busy_seconds(const std::vector<GpuActivity>& acts, int64_t begin_ns, int64_t end_ns);

// One step of GPU time from CUPTI's records alone, clipped to [begin_ns,
// end_ns): step_s the window, compute_s the union of non-NCCL kernels and
// copies, comm_s the union of NCCL kernels, exposed_comm_s the NCCL time no
// compute overlaps (comm − compute), idle_s the window less both. What a
// GPU's exposed communication is, as the trace analysis computes it, for
// every measured step without writing a trace.
struct StepBreakdown;
StepBreakdown gpu_step_breakdown(const std::vector<GpuActivity>& acts, int64_t begin_ns, int64_t end_ns);

}  // namespace ctitan
