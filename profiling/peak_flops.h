// Peak FLOP/s per device, the denominator of MFU.
//
// Order: --metrics.peak_tflops override > GPU table (CUDA devices, by name,
// values as TorchTitan lists them) > a GEMM micro-benchmark on the CPU for
// the dtype in use, measured once per host fingerprint and cached in
// $XDG_CACHE_HOME/ctitan/peak_flops.json (~/.cache when unset).
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

namespace ctitan {

struct PeakFlops {
  double flops = 0.0;   // per device, FLOP/s; 0 = unknown (MFU not reported)
  std::string source;   // "override", "table:<gpu>", "measured", "cached"
};

// Best sustained FLOP/s of an n×n×n matmul in `dtype` on the current threads.
double measure_cpu_gemm_flops(at::ScalarType dtype, int64_t n = 2048, double min_seconds = 0.4);

// Dense bf16 peak of a GPU by its device name ("NVIDIA H100 80GB HBM3"); nullopt if unknown.
std::optional<double> gpu_table_peak_flops(const std::string& device_name);

// Resolves the peak for this process's CPU (GPUs: issue of the profiler).
PeakFlops resolve_cpu_peak_flops(at::ScalarType dtype, double override_tflops);

std::string host_fingerprint();  // hostname|cpu model|threads|torch version

}  // namespace ctitan
