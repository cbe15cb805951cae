#include "profiling/cupti/cupti_records.h"

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>

namespace ctitan {

// The library in the process may be a newer minor version than these headers
// (LibTorch's wheel ships CUPTI 13.2, the toolkit 13.0), whose kernel record
// is CUpti_ActivityKernel11: the same fields at the same offsets, 8 bytes
// appended. Records are walked with cuptiActivityGetNextRecord (the
// library's sizes), so reading this prefix stays right; these pins make a
// header change that moves a field fail the build instead of misreading.
static_assert(offsetof(CUpti_ActivityKernel10, start) == 16 && offsetof(CUpti_ActivityKernel10, end) == 24);
static_assert(offsetof(CUpti_ActivityKernel10, deviceId) == 40 && offsetof(CUpti_ActivityKernel10, streamId) == 48);
static_assert(offsetof(CUpti_ActivityKernel10, correlationId) == 92 && offsetof(CUpti_ActivityKernel10, name) == 104);

const char* memcpy_kind_name(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return "HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return "AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return "AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD: return "AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return "DtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    default: return "unknown";
  }
}

namespace {

const char* sync_name(CUpti_ActivitySynchronizationType t) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return "cudaEventSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: return "cudaStreamWaitEvent";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return "cudaStreamSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: return "cudaDeviceSynchronize";
    default: return "cudaSynchronize";
  }
}

// Memcpy and memset records share these fields.
template <class Record>
GpuActivity copy_activity(const Record& r, GpuActivity::Kind kind, std::string name) {
  GpuActivity a;
  a.kind = kind;
  a.name = std::move(name);
  a.start_ns = static_cast<int64_t>(r.start);
  a.end_ns = static_cast<int64_t>(r.end);
  a.device = r.deviceId;
  a.stream = r.streamId;
  a.correlation = r.correlationId;
  a.bytes = static_cast<int64_t>(r.bytes);
  return a;
}

// A kernel's demangled name and its class, once per distinct kernel: a step
// runs thousands of kernels but a few hundred distinct ones, and flush()
// may convert records on the training thread.
struct KernelName {
  std::string name;
  bool nccl = false;
};

const KernelName& kernel_name(const char* mangled) {
  static std::mutex mu;
  static std::unordered_map<std::string, KernelName> cache;
  const std::string key = mangled ? mangled : "kernel";
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, KernelName{demangle_kernel_name(key), is_nccl_kernel(key)}).first;
  return it->second;
}

}  // namespace

std::optional<GpuActivity> gpu_activity_from_cupti(const CUpti_Activity* record) {
  GpuActivity a;
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      a.kind = GpuActivity::Kind::kKernel;
      const KernelName& n = kernel_name(k->name);
      a.name = n.name;
      a.nccl = n.nccl;
      a.start_ns = static_cast<int64_t>(k->start);
      a.end_ns = static_cast<int64_t>(k->end);
      a.device = k->deviceId;
      a.stream = k->streamId;
      a.correlation = k->correlationId;
      return a;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      return copy_activity(*m, GpuActivity::Kind::kMemcpy, std::string("Memcpy ") + memcpy_kind_name(m->copyKind));
    }
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return copy_activity(*reinterpret_cast<const CUpti_ActivityMemset4*>(record), GpuActivity::Kind::kMemset,
                           "Memset");
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(record);
      a.kind = GpuActivity::Kind::kSync;
      a.name = sync_name(s->type);
      a.start_ns = static_cast<int64_t>(s->start);
      a.end_ns = static_cast<int64_t>(s->end);
      a.stream = s->streamId;
      a.correlation = s->correlationId;
      return a;
    }
    default:
      return std::nullopt;
  }
}

}  // namespace ctitan
