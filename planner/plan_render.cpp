// The prediction as a table a person reads and as JSON: every figure says
// it is predicted and names the hardware spec and its calibration.
#include <cstdio>

#include "planner/plan.h"

namespace ctitan {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string gib(double bytes) { return fmt("%8.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }
std::string ms(double s) { return fmt("%10.2f ms", s * 1e3); }

nlohmann::json unit_json(const UnitTimes& u) {
  return {{"gemm_f", u.gemm_f}, {"gemm_b", u.gemm_b}, {"attn_f", u.attn_f}, {"attn_b", u.attn_b},
          {"elem_f", u.elem_f}, {"elem_b", u.elem_b}, {"fixed_f", u.fixed_f}, {"fixed_b", u.fixed_b}};
}

}  // namespace

nlohmann::json to_json(const Prediction& p) {
  nlohmann::json comm = nlohmann::json::array();
  for (const CommDim& c : p.time.comm)
    comm.push_back({{"dim", c.dim}, {"what", c.what}, {"link", c.link}, {"bytes", c.bytes}, {"seconds", c.seconds},
                    {"exposed_s", c.exposed_s}});
  const MemoryBreakdown& m = p.memory;
  const TimeBreakdown& t = p.time;
  return {{"kind", "predicted"},
          {"hardware", p.hardware},
          {"hardware_title", p.hardware_title},
          {"machine_probe", p.machine_probe.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.machine_probe)},
          {"calibration", p.calibration},
          {"source", p.compute_source == "analytic" ? "analytic" : "measured"},
          {"compute_source", p.compute_source},
          {"model", p.model},
          {"layout", p.layout},
          {"world_size", p.world_size},
          {"nodes", p.nodes},
          {"devices_per_node", p.devices_per_node},
          {"memory_bytes",
           {{"parameters", m.parameters}, {"gradients", m.gradients}, {"optimizer", m.optimizer},
            {"activations", m.activations}, {"logits", m.logits}, {"communication", m.communication},
            {"overhead", m.overhead}, {"total", m.total}, {"layout_source", m.layout_source}}},
          {"fits", p.fits},
          {"time_s",
           {{"gemm", t.gemm}, {"attention", t.attention}, {"elementwise", t.elementwise},
            {"float8_casts", t.float8_casts}, {"kernel_overhead", t.kernel_overhead}, {"recompute", t.recompute},
            {"comm_exposed", t.comm_exposed}, {"bubble", t.bubble}, {"data", t.data},
            {"step_overhead", t.step_overhead}, {"step", t.step}}},
          {"communication", comm},
          {"unit_s",  // one rank, one micro-batch, by class (forward/backward)
           {{"block", unit_json(p.block)}, {"head", unit_json(p.head)}, {"embedding", unit_json(p.embedding)}}},
          {"tokens_per_step", p.tokens_per_step},
          {"tps_per_device", p.tps_per_device},
          // the 80 % interval: null where the spec's calibration kept no spread
          {"tps_low", p.tps_high > 0 ? nlohmann::json(p.tps_low) : nlohmann::json(nullptr)},
          {"tps_high", p.tps_high > 0 ? nlohmann::json(p.tps_high) : nlohmann::json(nullptr)},
          {"tflops_per_device", p.tflops_per_device},
          {"mfu_pct", p.mfu},
          {"notes", p.notes}};
}

std::string render_prediction(const Prediction& p) {
  std::string o;
  // The measured machine first: every figure below rests on it.
  if (!p.machine_probe.empty()) o += p.machine_probe + "\n";
  o += "predicted on " + p.hardware + " (" + p.hardware_title + "), " + std::to_string(p.world_size) + " rank" +
       (p.world_size == 1 ? "" : "s") + " on " + std::to_string(p.nodes) + " node" + (p.nodes == 1 ? "" : "s") + "; " +
       p.calibration + "\n";
  o += "model   " + p.model + "\n";
  o += "layout  " + p.layout + "\n\n";
  const MemoryBreakdown& m = p.memory;
  o += "predicted memory per rank (the largest rank; " + m.layout_source + ")\n";
  o += "  parameters     " + gib(m.parameters) + "   fp32 master + compute copy\n";
  o += "  gradients      " + gib(m.gradients) + "\n";
  o += "  optimizer      " + gib(m.optimizer) + "   AdamW moments\n";
  o += "  activations    " + gib(m.activations) + "\n";
  o += "  logits/loss    " + gib(m.logits) + "\n";
  o += "  communication  " + gib(m.communication) + "\n";
  o += "  overhead       " + gib(m.overhead) + "   allocator slack, fixed per rank\n";
  o += "  total          " + gib(m.total) + (p.fits ? "   fits\n" : "   DOES NOT FIT the device's memory\n");
  const TimeBreakdown& t = p.time;
  o += "\npredicted step time per rank\n";
  o += "  GEMMs          " + ms(t.gemm) + "\n";
  o += "  attention      " + ms(t.attention) + "\n";
  o += "  element-wise   " + ms(t.elementwise) + "   incl. optimizer\n";
  if (t.float8_casts > 0) o += "  float8 casts   " + ms(t.float8_casts) + "\n";
  o += "  kernel launch  " + ms(t.kernel_overhead) + "\n";
  if (t.recompute > 0) o += "  recompute      " + ms(t.recompute) + "   activation checkpointing (inside the above)\n";
  for (const CommDim& c : t.comm)
    o += "  comm " + c.dim + std::string(c.dim.size() < 10 ? 10 - c.dim.size() : 0, ' ') + ms(c.seconds) + "   " + c.what +
         " over " + c.link + ", exposed " + fmt("%.2f ms", c.exposed_s * 1e3) + "\n";
  if (t.bubble > 0) o += "  pipeline bubble" + ms(t.bubble) + "\n";
  if (t.step_overhead > 0) o += "  step overhead  " + ms(t.step_overhead) + "\n";
  o += "  step           " + ms(t.step) + "\n\n";
  o += "predicted throughput: " + fmt("%.0f", p.tps_per_device) + " tokens/s per device, " +
       fmt("%.1f", p.tflops_per_device) + " TFLOP/s, MFU " + fmt("%.1f", p.mfu) + " % (" + p.hardware + ")\n";
  if (p.tps_high > 0)
    o += "  80 % interval " + fmt("%.0f", p.tps_low) + "–" + fmt("%.0f", p.tps_high) +
         " tokens/s per device, from the calibration's held-out runs (on the machine they ran on)\n";
  for (const std::string& n : p.notes) o += "note: " + n + "\n";
  return o;
}

}  // namespace ctitan
