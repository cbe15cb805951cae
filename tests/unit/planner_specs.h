// A made-up GPU spec for the planner's unit tests (planner_test,
// calibrate_fit_test): round figures, so that a test's expected value can be
// worked out by hand from them.
#pragma once

#include "planner/hardware.h"

namespace ctitan::testing_specs {

inline HardwareSpec test_gpu_spec() {
  HardwareSpec h;
  h.name = "test_gpu";
  h.title = "test GPU";
  h.kind = "gpu";
  h.peak_bf16_flops = 1e15;
  h.peak_fp8_flops = 2e15;
  h.peak_fp32_flops = 5e14;
  h.memory_bytes = 80.0 * (1 << 30);
  h.memory_bandwidth = 3e12;
  h.devices_per_node = 8;
  h.intra_node = {"nvlink", 4e11, 3e-6};
  h.inter_node = {"ib", 5e10, 1e-5};
  h.calibration = "test values";
  return h;
}

}  // namespace ctitan::testing_specs
