// GPU activity for every measured step: ctitan's CUPTI activity tracer
// (profiling/cupti/), built when CMake finds CUPTI (CTITAN_HAVE_CUPTI).
//
// It records kernels, memcpy/memset and synchronisation with CUPTI's
// asynchronous activity API, timestamps on CLOCK_MONOTONIC (the CPU
// tracer's clock), so the records are cheap enough to leave on for every
// step: the per-step GPU busy time feeds MFU, and during profiled steps the
// records also become trace events. NCCL kernels count as communication.
//
// create() returns null when it cannot run, with the reason: no CUPTI in
// this build, no CUDA device, or CUPTI's error. The caller prints it once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "profiling/gpu_activity.h"

namespace ctitan {

class GpuTracer {
 public:
  static std::unique_ptr<GpuTracer> create(std::string* unavailable_reason);
  virtual ~GpuTracer() = default;
  // Activities CUPTI has completed since the last call (flushes its buffers).
  virtual std::vector<GpuActivity> flush() = 0;
};

}  // namespace ctitan
