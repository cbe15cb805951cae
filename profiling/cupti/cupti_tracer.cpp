// GpuTracer over CUPTI's activity API (compiled when CMake finds CUPTI;
// untested here: this machine has no GPU).
//
// CUPTI hands filled buffers to a C callback on its own thread; records are
// converted there (cupti_records.h) and queued until flush(). Its clock is
// replaced by CLOCK_MONOTONIC (cuptiActivityRegisterTimestampCallback) so
// GPU and CPU events share one timeline. CUPTI allows one activity
// subscriber per process: ctitan runs Kineto with CPU activity only.
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <cupti.h>

#include <cstdlib>
#include <ctime>
#include <mutex>

#include "profiling/cupti/cupti_records.h"
#include "profiling/gpu_tracer.h"

namespace ctitan {
namespace {

constexpr size_t kBufferBytes = 8 << 20;
constexpr size_t kAlign = 8;

std::mutex g_mu;
std::vector<GpuActivity> g_done;  // converted, not yet flushed
uint64_t g_dropped = 0;

uint64_t CUPTIAPI monotonic_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(t.tv_nsec);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size, size_t valid) {
  std::vector<GpuActivity> got;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS)
    if (auto a = gpu_activity_from_cupti(record)) got.push_back(std::move(*a));
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  g_dropped += dropped;
  for (auto& a : got) g_done.push_back(std::move(a));
}

std::string cupti_error(const char* call, CUptiResult r) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  std::string out = std::string(call) + ": " + (s ? s : "error " + std::to_string(static_cast<int>(r)));
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    out += " (another profiler holds CUPTI: Nsight Systems, DCGM profiling, or Kineto with CUDA activities)";
  else if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
    out += " (profiling is restricted to admin users: NVreg_RestrictProfilingToAdminUsers=0 allows it)";
  return out;
}

class CuptiTracer final : public GpuTracer {
 public:
  ~CuptiTracer() override {
    for (CUpti_ActivityKind k : kinds()) cuptiActivityDisable(k);
    cuptiActivityFlushAll(1);
  }

  static const std::vector<CUpti_ActivityKind>& kinds() {
    static const std::vector<CUpti_ActivityKind> k{CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                   CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION};
    return k;
  }

  std::vector<GpuActivity> flush() override {
    cuptiActivityFlushAll(0);
    std::lock_guard<std::mutex> lock(g_mu);
    std::vector<GpuActivity> out;
    out.swap(g_done);
    return out;
  }
};

}  // namespace

std::unique_ptr<GpuTracer> GpuTracer::create(std::string* unavailable_reason) {
  auto fail = [&](std::string why) -> std::unique_ptr<GpuTracer> {
    if (unavailable_reason) *unavailable_reason = std::move(why);
    return nullptr;
  };
  if (!at::hasCUDA() || at::detail::getCUDAHooks().deviceCount() == 0)
    return fail("no CUDA device (LibTorch sees none)");
  uint32_t version = 0;
  CUptiResult r = cuptiGetVersion(&version);
  if (r != CUPTI_SUCCESS) return fail(cupti_error("cuptiGetVersion", r));
  if (version / 10000 != CUPTI_API_VERSION / 10000)
    return fail("the process loaded CUPTI " + std::to_string(version) + " but ctitan was compiled against " +
                std::to_string(CUPTI_API_VERSION) + " (another major version: record layouts differ)");
  r = cuptiActivityRegisterTimestampCallback(&monotonic_ns);
  if (r != CUPTI_SUCCESS) return fail(cupti_error("cuptiActivityRegisterTimestampCallback", r));
  r = cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed);
  if (r != CUPTI_SUCCESS) return fail(cupti_error("cuptiActivityRegisterCallbacks", r));
  for (size_t i = 0; i < CuptiTracer::kinds().size(); ++i) {
    r = cuptiActivityEnable(CuptiTracer::kinds()[i]);
    if (r != CUPTI_SUCCESS) {
      // Leave CUPTI as found: the run goes on without GPU activity.
      for (size_t j = 0; j < i; ++j) cuptiActivityDisable(CuptiTracer::kinds()[j]);
      return fail(cupti_error("cuptiActivityEnable", r));
    }
  }
  return std::make_unique<CuptiTracer>();
}

}  // namespace ctitan
