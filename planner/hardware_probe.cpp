// A cpu spec's zeros filled from a machine probe (planner/hardware.h):
// kept apart from hardware.cpp, which the parser fuzzers build without
// LibTorch or the trainer.
#include "planner/hardware.h"

#include <algorithm>

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
