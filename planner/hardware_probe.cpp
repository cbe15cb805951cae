// A cpu spec's zeros filled from a machine probe (planner/hardware.h):
// kept apart from hardware.cpp, which the parser fuzzers build without
// LibTorch or the trainer.
#include "planner/hardware.h"

#include "profiling/gpu_probe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ctitan {

void apply_probe(HardwareSpec& s, const MachineProbe& p) {
  // A figure still 0, or one an earlier probe filled; a value set since
  // (a fit's link, a test's fixed peak) stays.
  const bool replacing = !s.probe.empty();
  const auto fill = [replacing](double& figure, double v) {
    if (figure == 0 || replacing) figure = v;
  };
  for (const std::string& key : s.probed) {
    if (key == "peak_bf16_flops") fill(s.peak_bf16_flops, p.gemm_bf16_flops);
    if (key == "peak_fp32_flops") fill(s.peak_fp32_flops, p.gemm_fp32_flops);
    if (key == "memory_bandwidth") fill(s.memory_bandwidth, p.memory_bandwidth);
    if (key == "intra_node.bandwidth") fill(s.intra_node.bandwidth, p.link_bandwidth);
    if (key == "intra_node.latency") fill(s.intra_node.latency_s, p.link_latency_s);
    if (key == "inter_node.bandwidth") fill(s.inter_node.bandwidth, p.link_bandwidth);
    if (key == "inter_node.latency") fill(s.inter_node.latency_s, p.link_latency_s);
  }
  s.dispatch_s = p.dispatch_s;
  s.oversubscription = p.link_oversubscription >= 0 ? p.link_oversubscription : 1.0;
  // The rates by size stand in for the peaks only where the peaks are the
  // probe's: not a value a caller set since (a test's fixed peak), and a
  // file that wrote its peaks in keeps its own [gemm_by_size].
  const auto probed = [&s](const char* key) { return std::find(s.probed.begin(), s.probed.end(), key) != s.probed.end(); };
  if (probed("peak_bf16_flops") && probed("peak_fp32_flops")) {
    s.probed_gemms.clear();
    if (s.peak_bf16_flops == p.gemm_bf16_flops && s.peak_fp32_flops == p.gemm_fp32_flops) {
      for (const MachineProbe::GemmAt& g : p.gemm_sizes) s.probed_gemms.push_back({g.n, g.bf16, g.fp32, g.bf16_1t, g.fp32_1t});
      s.probe_threads = p.threads;
    }
  }
  s.probe = p.describe();
}

std::pair<double, double> fit_gemm_saturation(const std::vector<std::pair<double, double>>& rates) {
  double best_err = INFINITY, best_a = 0, best_h = 0;
  for (double h = 1; h <= 65536; h *= 1.01) {
    // rate_i ≈ a · u_i with u_i = x / (x + h): minimise Σ (a u_i / r_i − 1)².
    double num = 0, den = 0;
    for (const auto& [x, r] : rates) {
      const double u = x / (x + h);
      num += u / r, den += u * u / (r * r);
    }
    const double a = num / den;
    double err = 0;
    for (const auto& [x, r] : rates) {
      const double e = a * x / (x + h) / r - 1;
      err += e * e;
    }
    if (err < best_err) best_err = err, best_a = a, best_h = h;
  }
  return {best_a, best_h};
}

void apply_gpu_probe(HardwareSpec& s, const GpuProbe& p) {
  const auto [a, half] = fit_gemm_saturation(p.gemm_bf16);
  const SpecRange gemm = spec_range("gemm", false), memory = spec_range("memory", false),
                  half_size = spec_range("gemm_half_size", false);
  s.eff.gemm = gemm.clamp(a / s.peak_bf16_flops);
  s.eff.gemm_half_size = half_size.clamp(half);
  s.eff.memory = memory.clamp(p.hbm_bandwidth / s.memory_bandwidth);
  char what[160];
  std::snprintf(what, sizeof what, "gemm %.3f, gemm_half_size %.0f, memory %.3f measured by `ctitan plan --probe` on %s",
                s.eff.gemm, s.eff.gemm_half_size, s.eff.memory, p.device_name.c_str());
  s.calibration = std::string(what) + " (" + p.measured_at + "); the rest: " + s.calibration;
  s.source = "peaks: " + s.source + "; efficiencies probed on the node (" + p.describe() + ")";
}

HardwareSpec resolved_for_plan(const HardwareSpec& spec, const MachineProbe* probe) {
  HardwareSpec s = spec;
  if (s.kind != "cpu") return s;
  if (probe)
    apply_probe(s, *probe);
  else if (s.probe.empty() && (!s.probed.empty() || s.eff.dispatch > 0))
    apply_probe(s, this_machine());
  if (s.eff.dispatch > 0 && s.dispatch_s > 0) s.eff.kernel_overhead_s = s.eff.dispatch * s.dispatch_s;
  return s;
}

}  // namespace ctitan
