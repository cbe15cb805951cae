// CUPTI activity records -> GpuActivity: the one place that knows CUPTI's
// record layouts (the versions of the cupti_activity.h this build compiles
// against: CUpti_ActivityKernel10, Memcpy6, Memset4, Synchronization2).
// Pure functions of the record, so the tests feed them hand-built records.
#pragma once

#include <cupti_activity.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "profiling/gpu_activity.h"

namespace ctitan {

// nullopt for kinds ctitan does not trace.
std::optional<GpuActivity> gpu_activity_from_cupti(const CUpti_Activity* record);

const char* memcpy_kind_name(uint8_t copy_kind);  // "HtoD", "DtoH", "DtoD", ...

}  // namespace ctitan
