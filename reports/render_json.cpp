// JSON: the report's data model as it is, for scripts and dashboards.
// Absent values are null; stack and scaling rows refer to points by index.
#include "reports/report.h"

namespace ctitan {
namespace {

nlohmann::json opt(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

nlohmann::json point_json(const PointStats& p) {
  nlohmann::json loss = nlohmann::json::array();
  for (const auto& [step, l] : p.loss_curve) loss.push_back({step, l});
  nlohmann::json tps = nullptr;
  if (p.tps.n > 0)
    tps = {{"n", p.tps.n},   {"median", p.tps.median}, {"p10", p.tps.p10}, {"p90", p.tps.p90},
           {"q1", p.tps.q1}, {"q3", p.tps.q3},         {"min", p.tps.min}, {"max", p.tps.max}};
  // Where the wall clock went (schema v13): the median parts, goodput, the projection to 1B tokens.
  nlohmann::json wall = nullptr;
  if (p.wall_s) {
    nlohmann::json parts = nlohmann::json::object();
    for (const auto& [name, seconds] : p.goodput_parts) parts[name] = seconds;
    wall = {{"wall_s", *p.wall_s}, {"goodput", opt(p.goodput)}, {"steady_tokens", opt(p.steady_tokens)}, {"parts", parts},
            {"time_to_1b_tokens_s", opt(p.time_to_tokens_s(1e9))}};
  }
  // Multi-rank points with rank timing: the worst run's figures and busy time per rank and step.
  nlohmann::json stragglers = nullptr;
  if (p.straggler_share) {
    nlohmann::json steps = nlohmann::json::array();
    for (size_t i = 0; i < p.rank_busy.size(); ++i)
      steps.push_back({{"step", p.rank_busy_steps[i]}, {"busy_s", p.rank_busy[i]}});
    stragglers = {{"slowest_rank", p.straggler_rank ? nlohmann::json(*p.straggler_rank) : nlohmann::json(nullptr)},
                  {"persistence", opt(p.straggler_persistence)},
                  {"share", opt(p.straggler_share)},
                  {"spread_s", opt(p.straggler_spread_s)},
                  {"marked", p.straggler_marked},
                  {"by_step", steps}};
  }
  nlohmann::json predicted = nullptr;  // the planner's, stored by the sweep; errors: predicted / measured - 1
  if (!p.predicted_on.empty())
    predicted = {{"on", p.predicted_on},
                 {"tps", opt(p.pred_tps)},
                 {"tps_error", opt(p.pred_tps_error())},
                 {"mem_peak_bytes", opt(p.pred_mem_peak_bytes)},
                 {"mem_peak_error", opt(p.pred_mem_error())}};
  return {{"label", p.label},
          {"recipe", p.display_label},
          {"name", p.short_label},
          {"layout", p.layout},
          {"model", p.model},
          {"point_key", p.point_key},
          {"world_size", p.world_size},
          {"repeats", p.repeats},
          {"ok_runs", p.ok_runs},
          {"status", p.status},
          {"error", p.error},
          {"tps", tps},
          {"tflops", opt(p.tflops)},
          {"mfu_pct", opt(p.mfu)},
          {"mem_peak_bytes", opt(p.mem_peak_bytes)},
          {"loss_final", opt(p.loss_final)},
          {"compute_s", opt(p.compute_s)},
          {"comm_s", opt(p.comm_s)},
          {"exposed_comm_s", opt(p.exposed_comm_s)},
          {"idle_s", opt(p.idle_s)},
          {"speedup", opt(p.speedup)},
          {"baseline", p.baseline},
          {"stack_index", p.stack_index},
          {"stack_name", p.stack_name},
          {"loss_curve", loss},
          {"predicted", predicted},
          {"mfu_by_dtype_pct", opt(p.mfu_by_dtype)},
          {"useful_mfu_pct", opt(p.useful_mfu)},
          {"peak_flops_source", p.peak_source.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.peak_source)},
          {"wall_clock", wall},
          {"stragglers", stragglers}};
}

nlohmann::json ratio_json(const PairedRatio& r) {
  if (r.n == 0) return nullptr;
  return {{"pairs", r.n}, {"median", r.median}, {"lo", r.lo}, {"hi", r.hi}, {"level", r.level}};
}

nlohmann::json effect_json(const KnobEffect& e) {
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& [a, b] : e.pairs) pairs.push_back({a, b});
  return {{"model", e.model}, {"key", e.key},   {"from", e.from},      {"to", e.to},   {"setting", e.label},
          {"versus", e.versus}, {"candidates", e.candidates}, {"pairs", pairs}, {"tps", ratio_json(e.tps)},
          {"mem", ratio_json(e.mem)}};
}

}  // namespace

nlohmann::json render_json(const Report& r) {
  nlohmann::json sections = nlohmann::json::array();
  for (const SectionReport& sec : r.sections) {
    nlohmann::json points = nlohmann::json::array();
    for (const PointStats& p : sec.points) points.push_back(point_json(p));
    nlohmann::json stacks = nlohmann::json::array();
    for (const StackTable& t : sec.stacks)
      stacks.push_back({{"group", t.group}, {"world_size", t.world_size}, {"points", t.rows}});
    nlohmann::json scaling = nlohmann::json::array();
    for (const ScalingSeries& s : sec.scaling) scaling.push_back({{"recipe", s.label}, {"points", s.rows}});
    nlohmann::json paired = nlohmann::json::array();
    for (const PairedSpeedup& s : sec.paired)
      paired.push_back({{"recipe", s.label}, {"world_size", s.world_size}, {"pairs", s.pairs}, {"speedup", s.speedup},
                        {"lo", s.lo}, {"hi", s.hi}, {"level", s.level}});
    // The summary per world size (and model, where the section has several):
    // the fastest point, the Pareto front (by memory ascending) and each
    // --memory-budget's fastest; points by index.
    nlohmann::json summary = nlohmann::json::array();
    for (const WorldSummary& s : sec.summary) {
      nlohmann::json budgets = nlohmann::json::array();
      for (const auto& [bytes, best] : s.budgets)
        budgets.push_back({{"bytes", bytes}, {"point", best ? nlohmann::json(*best) : nlohmann::json(nullptr)}});
      summary.push_back({{"world_size", s.world_size},
                         {"model", s.model},
                         {"fastest", s.fastest},
                         {"front", s.front},
                         {"budgets", budgets}});
    }
    nlohmann::json effects = nlohmann::json::array();
    for (const KnobEffect& e : sec.effects) effects.push_back(effect_json(e));
    nlohmann::json chain = nlohmann::json::array();
    for (const ChainStep& c : sec.chain) {
      nlohmann::json step = effect_json(c.effect);
      step["cumulative_tps"] = c.cumulative_tps;
      step["cumulative_mem"] = c.cumulative_mem;
      step["quality_speedup"] = opt(c.quality_speedup);
      step["quality"] = c.quality;
      chain.push_back(step);
    }
    nlohmann::json quality = nlohmann::json::array();
    for (const QualityRow& q : sec.quality) {
      nlohmann::json row = {{"point", q.point}, {"seeds", seed_set_json(q.seeds)}};
      row["baseline"] = q.baseline ? nlohmann::json(*q.baseline) : nlohmann::json(nullptr);
      row["vs_baseline"] = q.vs ? quality_comparison_json(*q.vs) : nlohmann::json(nullptr);
      row["tps_ratio"] = opt(q.tps_ratio);
      quality.push_back(std::move(row));
    }
    sections.push_back({{"title", sec.title},
                        {"quality", quality},
                        {"common", sec.common},
                        {"models", sec.models},
                        {"summary", summary},
                        {"effects", effects},
                        {"chain", chain},
                        {"chain_note", sec.chain_note},
                        {"paired_with", sec.paired_with},
                        {"paired", paired},
                        {"baseline", sec.baseline_label},
                        {"environment", sec.environment},
                        {"points", points},
                        {"stacks", stacks},
                        {"scaling", scaling}});
  }
  return {{"format", "ctitan-report-v1"},
          {"db", r.db_path},
          {"generated_at", r.generated_at},
          {"ctitan", r.ctitan_version},
          {"sections", sections}};
}

}  // namespace ctitan
