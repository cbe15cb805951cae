// A GPU node measured for the planner (`ctitan plan --probe --hardware
// SPEC` on the node): what its GEMMs and its memory reach, so a spec's
// efficiencies are this node's and not a guess. The datasheet peaks stay
// the spec's (MFU's denominator); the probe sets how much of them a GEMM of
// each size and a copy reach (planner/hardware.h apply_gpu_probe).
//
// What it measures, on device 0, in a few seconds:
// - bf16 GEMMs at n³ for n = 512 … 8192 (kGpuGemmSizes): the rate by size
//   the planner's law `gemm · x / (x + gemm_half_size)` is fitted to;
// - an fp32 GEMM at 8192³ with TF32 off (the fp32 peak's share);
// - HBM bandwidth: a 1 GiB device-to-device copy (read + write).
// Each is the median of at least five timed calls after a warm-up, timed
// with CUDA events. NCCL between GPUs is not measured (the spec's links
// stand).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ctitan {

inline constexpr int kGpuGemmSizes[] = {512, 1024, 2048, 4096, 8192};

struct GpuProbe {
  std::string device_name;   // "NVIDIA H200"
  std::string measured_at;   // ISO 8601 UTC
  int devices = 0;           // CUDA devices on the node
  std::vector<std::pair<double, double>> gemm_bf16;  // (n, FLOP/s at n³)
  double gemm_fp32 = 0;      // FLOP/s at 8192³, TF32 off
  double hbm_bandwidth = 0;  // bytes/s, read + write of a copy
  double seconds = 0;        // how long measuring took

  // "GPU probe of 2026-12-01 10:00 UTC (NVIDIA H200, 1 of 1): GEMM bf16
  // 512³ 0.31 … 8192³ 0.78 PFLOP/s, fp32 8192³ 51 TFLOP/s; HBM 4.1 TB/s".
  std::string describe() const;
};

// Throws InputError (one line) when LibTorch sees no CUDA device here.
void require_cuda_device();
// Measures device 0 (require_cuda_device first).
GpuProbe measure_gpu();

}  // namespace ctitan
