// This machine, measured: the figures a `kind = "cpu"` hardware spec leaves
// at zero (planner/hardware.h), taken where ctitan runs and cached.
//
// What it measures, each in well under a second:
// - the GEMM rate of the paths ctitan's linears take (trainer/model/gemm.h):
//   fp32, and bf16 as ctitan multiplies it here (natively with AVX-512/AMX,
//   widened to fp32 without), at n³ for n from 64 to 2048, on all threads
//   and on one (a rank of a world as large as the cores has one);
// - memory bandwidth: c = a + b over 64 MiB fp32 tensors (three streams),
//   the median call;
// - dispatch: one ATen op on a one-element tensor, what every kernel of a
//   small model pays on a CPU;
// - what else ran: the share of the cores other processes used meanwhile;
// - Gloo over TCP on loopback between two ranks (threads of this process,
//   the transport ctitan's process ranks use): an all-reduce of one float
//   (latency, the median of 100) and of 16 MiB (bandwidth, the median of 15),
//   in the ring law the planner charges
//   (t = bytes / bandwidth + 2 · latency for two ranks); and the same ring
//   with as many thread ranks as cores and with twice as many, whose ratio
//   says how a rank's collective bandwidth falls once ranks outnumber the
//   cores (the exponent g of (cores / ranks)^g; 1, unmeasured, above 16 cores).
//
// Cached once per machine in $XDG_CACHE_HOME/ctitan/machine_probe.json
// (~/.cache when unset) under machine_fingerprint(): the CPU model, ATen's
// vector ISA, the bf16/AMX flags, the cores and the LibTorch version. The
// trainer never measures: it copies the cached probe into env.json (so a
// results database knows the machine each run ran on), and the planner
// measures when the cache has none (`ctitan plan --probe` re-measures).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ctitan {

struct MachineProbe {
  int version = 0;           // kProbeVersion when measured; 0: a probe before versions
  std::string fingerprint;   // machine_fingerprint() where it was measured
  std::string measured_at;   // ISO 8601 UTC, "2026-11-29T21:50:00Z"
  double seconds = 0;        // how long measuring took
  std::string cpu_model;     // /proc/cpuinfo "model name"
  std::string isa;           // ATen's CPU capability: "AVX2", "AVX512"
  std::string bf16_path;     // "native" (oneDNN multiplies bf16) | "widened" (fp32 copies)
  int cores = 0;             // std::thread::hardware_concurrency()
  int threads = 0;           // ATen threads the GEMMs and copies ran on
  double gemm_fp32_flops = 0;        // 2048³, best of several
  double gemm_bf16_flops = 0;        // 2048³ on ctitan's bf16 path
  // The GEMM rate at n³ for n in kGemmProbeSizes, per dtype, on all
  // `threads` and on one: a small model's GEMMs (256 tokens × 256 features)
  // run at the rate of their size, which is 19 % of the 2048³ rate on one
  // CPU (AMX) and all of it on another (AVX-512 without AMX). Empty: a probe
  // from before it measured sizes.
  struct GemmAt {
    double n = 0, bf16 = 0, fp32 = 0, bf16_1t = 0, fp32_1t = 0;
    bool operator==(const GemmAt&) const = default;
  };
  std::vector<GemmAt> gemm_sizes = {};
  double memory_bandwidth = 0;       // bytes/s
  double dispatch_s = 0;             // per ATen op
  double link_bandwidth = 0;         // bytes/s, Gloo loopback, one direction per rank
  double link_latency_s = 0;         // per ring step
  // g in [0, 1]: with more ranks than cores a rank's collective bandwidth is
  // link_bandwidth · (cores / ranks)^g. -1: not measured (an older probe).
  double link_oversubscription = -1;
  // The share of the machine's cores that other processes (and the
  // hypervisor's steal) used while it measured, from /proc/stat less this
  // process's own CPU time: a probe taken beside a build measures the
  // build's leftovers. -1: not measured (an older probe).
  double busy_others = -1;
  // Other processes held more than kProbeBusyLimit of the cores: its rates
  // are too low to plan with. this_machine() measures again rather than use
  // such a cached probe, and says so when it has nothing better.
  bool contended() const;

  // GEMM rate of the dtype a run multiplies in ("float32" or a 16-bit type).
  double gemm_flops(bool float32) const { return float32 ? gemm_fp32_flops : gemm_bf16_flops; }
  // One line: "machine probe of 2026-11-29 21:50 UTC (Intel Xeon, AVX512, 2 cores): GEMM bf16 2.9 TFLOP/s
  // (native), fp32 0.43 TFLOP/s; memory 9.1 GB/s; dispatch 2.1 us; Gloo loopback 1.4 GB/s, 31 us".
  std::string describe() const;
  nlohmann::json to_json() const;
  // From to_json()'s object, or from env.json's keys flattened into a
  // results database ("machine_probe.gemm_fp32_flops"): nullopt when a
  // figure is missing or not positive.
  static std::optional<MachineProbe> from_json(const nlohmann::json& j);

  bool operator==(const MachineProbe&) const = default;
};

inline constexpr double kProbeBusyLimit = 0.2;
// What the probe measures and how: a cached probe of an older version is
// measured again. 1: GEMM rates by size; medians of the link and memory.
inline constexpr int kProbeVersion = 1;
// The sizes n of the n³ GEMMs whose rates the probe measures (MachineProbe::gemm_sizes).
inline constexpr int kGemmProbeSizes[] = {64, 128, 256, 512, 1024, 2048};

// "Intel(R) Xeon(R) Processor|AVX512|amx_bf16 avx512_bf16|2 cores|torch 2.11.0".
std::string machine_fingerprint();

// Measures now (a few seconds; uses two threads for the Gloo ranks).
MachineProbe measure_machine();

// The probe of this machine: this process's, else the cache's for this
// fingerprint (unless it was contended), else measured and cached.
// `refresh` measures again and replaces the cached one. `measured`
// (optional) says whether it was measured in this call. A contended probe
// is still returned and cached (the next call measures again), with one
// line on stderr.
const MachineProbe& this_machine(bool refresh = false, bool* measured = nullptr);

// The cached probe of this machine, without measuring (the trainer's env.json).
std::optional<MachineProbe> cached_machine_probe();

}  // namespace ctitan
