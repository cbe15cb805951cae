// Peak FLOP/s per device, the denominator of MFU and HFU.
//
// Order: --metrics.peak_tflops override > for a GPU, TorchTitan's table of
// dense bf16 peaks by device name (torchtitan/tools/utils.py
// get_peak_flops) > for the CPU, a GEMM micro-benchmark for the dtype in
// use, measured once per host fingerprint and cached in
// $XDG_CACHE_HOME/ctitan/peak_flops.json (~/.cache when unset).
//
// An unknown GPU is never given another GPU's peak (TorchTitan falls back to
// the A100's): the peak is then 0, MFU/HFU are not reported, and `warning`
// tells the user to pass --metrics.peak_tflops.
//
// The results database has a `hardware(host_fingerprint, dtype, peak_flops)`
// table; the trainer does not touch the database (DESIGN.md), so the cache
// stays a file and the harness may copy the measured value from summary.json.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

namespace ctitan {

struct PeakFlops {
  double flops = 0.0;   // per device, FLOP/s; 0 = unknown (MFU not reported)
  std::string source;   // "override", "table:<entry>", "measured", "cached", "unknown"
  std::string warning;  // set when flops is 0 for a reason the user can fix
};

// Best sustained FLOP/s of an n×n×n matmul in `dtype` on the current threads.
double measure_cpu_gemm_flops(at::ScalarType dtype, int64_t n = 2048, double min_seconds = 0.4);

// The size curve of this CPU's GEMMs, in the planner's law: the time of an
// M×N×K GEMM is a · 2MNK · (1 + half / min(M, N, K)). Measured on one
// thread in `dtype` with GEMMs of 2048×2048×k, k = 16 … 1024 (each timed
// best of several, ~0.3 s in all), and `half` fitted on a log grid (least
// squares on the relative error). Once per process.
double measure_cpu_gemm_half_size(at::ScalarType dtype);

struct GpuPeak {
  std::string entry;  // the table entry that matched ("H100 PCIe")
  double flops = 0;
  double fp8_flops = 0;  // dense fp8; 0: no fp8 tensor cores, or no figure kept
};
// Dense bf16 peak of a GPU by its device name ("NVIDIA H100 80GB HBM3");
// nullopt if the name matches no entry. Case-insensitive.
std::optional<GpuPeak> gpu_table_peak_flops(const std::string& device_name);

// Resolves the peak for this process's CPU.
PeakFlops resolve_cpu_peak_flops(at::ScalarType dtype, double override_tflops);
// Resolves the peak of a GPU by name (override, else the table, else unknown with a warning).
PeakFlops resolve_gpu_peak_flops(const std::string& device_name, double override_tflops);
// The dense fp8 peak of a GPU by its name (the table's fp8 column); 0 and
// source "unknown" where the table has none.
PeakFlops resolve_gpu_fp8_peak_flops(const std::string& device_name);

std::string host_fingerprint();  // hostname|cpu model|threads|torch version

}  // namespace ctitan
