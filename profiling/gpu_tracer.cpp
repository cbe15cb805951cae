// The GpuTracer of a build without CUPTI; with CUPTI, profiling/cupti/
// defines GpuTracer::create().
#include "profiling/gpu_tracer.h"

#ifndef CTITAN_HAVE_CUPTI
namespace ctitan {

std::unique_ptr<GpuTracer> GpuTracer::create(std::string* unavailable_reason) {
  if (unavailable_reason)
    *unavailable_reason = "this ctitan was built without CUPTI (CMake found no cupti.h / libcupti)";
  return nullptr;
}

}  // namespace ctitan
#endif
