// Hardware specs: what the planner knows of a device, one TOML file each
// under recipes/hardware/ (h100_sxm.toml, a100_80gb.toml, cpu.toml, ...).
//
// The maker's figures (peak dense FLOP/s per dtype, memory size and
// bandwidth, the links) sit beside the efficiencies the planner applies to
// them. The efficiencies are the only tunable part: `ctitan plan
// --calibrate DB` fits them from measured runs and writes a new spec whose
// [calibration] table names its source. A spec says where every figure
// came from (`source`, `calibration.source`), and every printed prediction
// names the spec and its calibration.
//
// kind = "cpu" describes this machine's processes-as-ranks: a figure left at
// 0 (the GEMM peaks, memory bandwidth, the links) is this machine's probe
// (trainer/machine_probe.h), so the efficiencies are ratios to what the
// machine that plans measured, the ranks of one world share `cores`, and the
// links are loopback (Gloo over TCP).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/quantile.h"
#include "trainer/machine_probe.h"

namespace ctitan {

struct Link {
  std::string name;      // "NVLink 4", "InfiniBand NDR 400", "loopback (Gloo/TCP)"
  double bandwidth = 0;  // bytes/s per device, one direction
  double latency_s = 0;  // per message / per collective step

  bool operator==(const Link&) const = default;
};

// Fractions of the maker's peaks reached in practice, and fixed costs.
// Defaults are the uncalibrated starting point `--calibrate` fits from.
struct Efficiency {
  double gemm = 0.75;               // fraction of peak a large bf16/fp32 GEMM reaches
  double gemm_half_size = 256;      // GEMM efficiency is gemm * x / (x + half) with x = min(m, n, k)
  double fp8_gemm = 0.65;           // fraction of the fp8 peak a large fp8 GEMM reaches
  double attention = 0.55;          // fraction of peak of the attention kernel (flash when flash_attention)
  double memory = 0.80;             // fraction of memory bandwidth element-wise kernels reach
  double fused_traffic = 0.45;      // element-wise bytes left after compile's fusion (fraction)
  double kernel_overhead_s = 4e-6;  // per kernel launch the device does not hide
  double dispatch = 0;              // cpu: a kernel costs this many probed ATen dispatches (0: kernel_overhead_s)
  double comm = 0.75;               // fraction of link bandwidth a collective reaches
  double overlap = 0.9;             // fraction of overlappable communication that compute hides
  double step_overhead_s = 0.0;     // per step: optimizer launch, host sync, data loading
  double multi_thread = 1.0;        // cpu: a rank's compute rate with several threads, over single-thread ranks on as many cores
  double activation_factor = 1.0;   // saved activations over the structural count (temporaries, casts)
  double memory_overhead = 0.05;    // allocator slack over live tensor bytes (fraction)
  double memory_fixed_bytes = 0;    // per rank: CUDA context and workspaces, never freed

  bool operator==(const Efficiency&) const = default;
};

struct HardwareSpec {
  std::string name;    // the file's stem: "h100_sxm"
  std::string title;   // "NVIDIA H100 SXM5 80GB"
  std::string kind;    // "gpu" | "cpu"
  std::string source;  // where the maker's figures come from
  std::string path;    // the file it was read from ("" when built in code)

  double peak_bf16_flops = 0;   // dense, per device
  double peak_fp8_flops = 0;    // dense, per device; 0: no fp8 tensor cores
  double peak_fp32_flops = 0;   // cpu: 0 = measured at plan time
  double memory_bytes = 0;      // per device (cpu: the machine's RAM)
  double memory_bandwidth = 0;  // bytes/s per device
  bool flash_attention = true;  // attention keeps no S x S scores (false: ATen's math path on CPU)
  int devices_per_node = 8;     // GPUs per node (cpu: 1 machine, any world size)
  int cores = 0;                // cpu: cores the ranks share; 0 = this machine's
  // kind = "cpu" with memory 0 / cores 0 in the file: parse_hardware filled
  // memory_bytes from /proc/meminfo MemTotal / cores from
  // std::thread::hardware_concurrency(), and hardware_toml writes 0 back so
  // the spec stays "this machine" wherever it is read.
  bool memory_from_machine = false;
  bool cores_from_machine = false;
  Link intra_node;  // NVLink / xGMI / loopback
  Link inter_node;  // the network, per device
  // kind = "cpu": the figures the file left at 0, which this machine's probe
  // (trainer/machine_probe.h) stands for: "peak_bf16_flops",
  // "peak_fp32_flops", "memory_bandwidth", "intra_node.bandwidth",
  // "intra_node.latency", "inter_node.bandwidth", "inter_node.latency".
  // apply_probe fills them; hardware_toml writes 0 back for them.
  std::vector<std::string> probed;
  std::string probe;        // the applied probe's one-line description ("" until applied)
  double dispatch_s = 0;    // the applied probe's seconds per ATen op (Efficiency::dispatch)
  // cpu: with more ranks than cores a rank's collectives run at
  // (cores / ranks)^oversubscription of the link's rate: the applied probe's
  // exponent, else 1 (the ranks split the cores evenly).
  double oversubscription = 1;
  // cpu: the applied probe's GEMM rates by size (MachineProbe::gemm_sizes):
  // n, then FLOP/s in bf16 and fp32 on all `probe_threads` and on one.
  // Empty: no probe, or one from before it measured sizes (the spec's
  // gemm_half_size law applies).
  struct ProbedGemm {
    double n = 0, bf16 = 0, fp32 = 0, bf16_1t = 0, fp32_1t = 0;
    bool operator==(const ProbedGemm&) const = default;
  };
  std::vector<ProbedGemm> probed_gemms;
  int probe_threads = 0;

  Efficiency eff;
  std::string calibration;  // "uncalibrated: ..." or "calibrated from <db> (N runs, hold-out median error x %)"
  // log(measured / predicted tokens/s) over the calibration's held-out runs
  // ([calibration] tps_log_error_n/mean/sd; n = 0 where the spec has none):
  // every prediction's 80 % interval (common/quantile.h interval80).
  LogSpread tps_error;

  // The compute peak for `dtype` ("bfloat16"/"bf16", "float16", "float32",
  // "float8"); 0 where the spec has none (no fp8 tensor cores; a cpu's
  // figure to measure). Another dtype throws InputError.
  double peak_flops(const std::string& dtype) const;

  bool operator==(const HardwareSpec&) const = default;
};

// Fills `spec.probed` from `probe` (a machine's measured figures; the
// bf16 peak is the rate of ctitan's bf16 GEMM path there) and records it.
// Applying another machine's probe replaces the first one's figures.
void apply_probe(HardwareSpec& spec, const MachineProbe& probe);
// The spec a plan uses: `spec` with its probed figures filled (from
// `probe`, else this machine's, measured and cached on first use) and, on
// a cpu with Efficiency::dispatch, its per-kernel cost from the dispatch.
HardwareSpec resolved_for_plan(const HardwareSpec& spec, const MachineProbe* probe = nullptr);

// The law `rate = a · x / (x + half)` fitted to GEMM rates by size
// ((x, FLOP/s) pairs, at least two): the half size on a log grid from 1
// to 65,536, `a` in closed form for each (least squares on the relative
// error). Returns {a, half}.
std::pair<double, double> fit_gemm_saturation(const std::vector<std::pair<double, double>>& rates);

// A GPU spec's efficiencies from a probe of its node (profiling/gpu_probe.h):
// `gemm` and `gemm_half_size` from the bf16 rates by size over the bf16
// peak, `memory` from the copy's bandwidth over the spec's, each in its
// range (a node above its datasheet gets 1); the peaks, links and every
// other efficiency stay the spec's. Its source and calibration say so.
struct GpuProbe;
void apply_gpu_probe(HardwareSpec& spec, const GpuProbe& probe);

// The folder of hardware specs: $CTITAN_HARDWARE_DIR, else the source
// tree's recipes/hardware.
// The range a spec value may take, in SI units (bytes, seconds, FLOP/s,
// bytes/s, fractions): wide enough for any real machine and any fit, narrow
// enough that no prediction comes from an absurd one (a GEMM efficiency of
// 1e300 predicted 163 % MFU). `cpu`: a cpu spec (its peaks are measured at
// plan time, so its efficiencies relative to them may exceed 1).
struct SpecRange {
  double lo = 0, hi = 0;
  bool lo_open = false;  // lo itself excluded
  bool contains(double v) const;
  double clamp(double v) const;  // into the range (a fit's value)
};
SpecRange spec_range(const std::string& key, bool cpu);

std::string hardware_dir();
// The spec names found there, sorted.
std::vector<std::string> known_hardware();
// A name from known_hardware() or a path to a .toml file. Throws InputError
// (one line: the unknown name and the known ones; a bad file: file, key and
// what is wrong).
HardwareSpec load_hardware(const std::string& name_or_path);
// `where` is the file for messages and the default name (its stem); the
// format is documented at the top of hardware.cpp.
// Writes hardware_toml(spec) to `path` through a temporary file renamed into
// place, so a failed write leaves any earlier file whole. InputError (one
// line naming the file) when it cannot be written.
void save_hardware(const HardwareSpec& spec, const std::string& path);
HardwareSpec parse_hardware(const std::string& toml_text, const std::string& where);
// The TOML text of a spec (round-trips through parse_hardware).
std::string hardware_toml(const HardwareSpec& spec);

}  // namespace ctitan
