// What the train loop asks of the device it runs on, in one place: memory
// statistics, the device's capacity and name, peak FLOPs, and the point at
// which its queued work is done. The loop never asks the CPU allocator, the
// CUDA caching allocator or a clock directly, so the same loop measures a
// CPU, a GPU or a dry run on the meta device.
//
//   cpu   memory of live tensors from the accounting allocator
//         (install_accounting_allocator), capacity = physical memory, peak
//         FLOPs measured once per host (or the override);
//   cuda  the caching allocator's active bytes (and the reserved peak,
//         allocation retries and OOMs) on the device, capacity =
//         the device's memory, peak FLOPs from the GPU table (or override);
//         synchronize() waits for the device's queued kernels, so a step's
//         wall time covers its GPU work;
//   meta  nothing is allocated: zeros, no peak.
//
// Thread-safe to read; reset_peak() from the training thread.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <string>

#include "profiling/memory.h"
#include "profiling/peak_flops.h"

namespace ctitan {

class DeviceMonitor {
 public:
  explicit DeviceMonitor(c10::Device device = c10::Device(c10::kCPU));

  c10::Device device() const { return device_; }
  std::string name() const;            // "cpu", "NVIDIA H200 (cuda:0)", "meta"
  MemoryStats memory() const;          // live tensor bytes and the peak since reset_peak()
  void reset_peak();
  int64_t capacity_bytes() const;      // what memory % is relative to (0: unknown)
  void synchronize() const;            // the device's queued work has finished
  // Step boundaries. step_end() waits for the step's queued work and returns
  // its time from CUDA events recorded on the current stream at both
  // boundaries (no synchronisation inside the step), or −1 elsewhere (the
  // host clock around step_begin/step_end is then the measure).
  void step_begin();
  double step_end();
  PeakFlops peak_flops(at::ScalarType dtype, double override_tflops) const;
  // The dense fp8 peak: a GPU's from the table; none elsewhere (a CPU has
  // no fp8 units: Float8 is emulated in the compute dtype there).
  PeakFlops fp8_peak_flops() const;

 private:
  c10::Device device_;
  struct StepEvents;
  std::shared_ptr<StepEvents> events_;  // CUDA only; shared by copies of the monitor
};

}  // namespace ctitan
