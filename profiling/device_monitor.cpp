#include "profiling/device_monitor.h"

#ifdef CTITAN_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace ctitan {

struct DeviceMonitor::StepEvents {
#ifdef CTITAN_WITH_CUDA
  at::cuda::CUDAEvent start{cudaEventDefault}, end{cudaEventDefault};  // timing enabled
#endif
};

DeviceMonitor::DeviceMonitor(c10::Device device) : device_(device) {
  if (device_.is_cuda()) events_ = std::make_shared<StepEvents>();
}

void DeviceMonitor::step_begin() {
#ifdef CTITAN_WITH_CUDA
  if (events_) events_->start.record(at::cuda::getCurrentCUDAStream(device_.index()));
#endif
}

double DeviceMonitor::step_end() {
#ifdef CTITAN_WITH_CUDA
  if (events_) {
    events_->end.record(at::cuda::getCurrentCUDAStream(device_.index()));
    events_->end.synchronize();
    return events_->start.elapsed_time(events_->end) / 1e3;
  }
#endif
  synchronize();
  return -1;
}

namespace {

std::string cuda_device_name(c10::Device d) {
#ifdef CTITAN_WITH_CUDA
  if (d.is_cuda()) return at::cuda::getDeviceProperties(d.index())->name;
#endif
  return "";
}

}  // namespace

std::string DeviceMonitor::name() const {
  if (device_.is_cuda()) return cuda_device_name(device_) + " (" + device_.str() + ")";
  return device_.str();
}

MemoryStats DeviceMonitor::memory() const {
  if (device_.is_cpu()) return cpu_memory_stats();
#ifdef CTITAN_WITH_CUDA
  if (device_.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
    constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    return {stats.active_bytes[kAll].current, stats.active_bytes[kAll].peak, stats.allocation[kAll].allocated,
            stats.reserved_bytes[kAll].peak,  stats.num_alloc_retries,          stats.num_ooms};
  }
#endif
  return {};
}

void DeviceMonitor::reset_peak() {
  if (device_.is_cpu()) reset_peak_cpu_memory();
#ifdef CTITAN_WITH_CUDA
  if (device_.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
#endif
}

int64_t DeviceMonitor::capacity_bytes() const {
  if (device_.is_cpu()) return system_memory_bytes();
#ifdef CTITAN_WITH_CUDA
  if (device_.is_cuda()) return static_cast<int64_t>(at::cuda::getDeviceProperties(device_.index())->totalGlobalMem);
#endif
  return 0;
}

void DeviceMonitor::synchronize() const {
#ifdef CTITAN_WITH_CUDA
  if (device_.is_cuda()) c10::cuda::device_synchronize();
#endif
}

PeakFlops DeviceMonitor::peak_flops(at::ScalarType dtype, double override_tflops) const {
  if (device_.is_cpu()) return resolve_cpu_peak_flops(dtype, override_tflops);
  if (device_.is_cuda()) return resolve_gpu_peak_flops(cuda_device_name(device_), override_tflops);
  return {override_tflops * 1e12, override_tflops > 0 ? "override" : "unknown", ""};
}

PeakFlops DeviceMonitor::fp8_peak_flops() const {
  if (device_.is_cuda()) return resolve_gpu_fp8_peak_flops(cuda_device_name(device_));
  return {0.0, "unknown", ""};
}

}  // namespace ctitan
