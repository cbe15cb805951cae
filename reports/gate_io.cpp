// The gate's inputs and outputs: a side from database points or a baseline
// file, the baseline file itself, the Markdown summary for the PR comment
// and the JSON verdict for machines.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "common/errors.h"
#include "reports/format.h"
#include "reports/gate.h"
#include "reports/stats.h"

namespace ctitan {
namespace {

constexpr const char* kBaselineFormat = "ctitan-gate-baseline-v1";

// The samples of one ok run, metric by metric.
void add_run_samples(const RunData& r, GatePoint& g) {
  const auto put = [&](const char* metric, std::vector<double> v) {
    if (v.empty()) return;
    g.samples[metric].push_back(std::move(v));
    g.repeats[metric].push_back(r.run.repeat);
  };
  put("tps", r.tps);
  put("step_time", r.step_time_s);
  put("mfu", r.mfu);
  if (r.summary && r.summary->mem_peak_bytes) put("mem", {static_cast<double>(*r.summary->mem_peak_bytes)});
  if (r.summary && r.summary->loss_final) put("loss", {*r.summary->loss_final});
}

std::string verdict_mark(Verdict v) {
  switch (v) {
    case Verdict::regression: return "\u274c regression";
    case Verdict::inconclusive: return "\u26a0\ufe0f inconclusive";
    case Verdict::missing: return "\u26a0\ufe0f missing";
    case Verdict::improved: return "\u2705 improved";
    case Verdict::skipped: return "\u2796 skipped";
    case Verdict::pass: return "\u2705 pass";
  }
  return "";
}

std::string value_cell(const GateMetric& m, double median, size_t n, const std::string& unit) {
  if (n == 0 || !std::isfinite(median)) return "-";
  const std::string noun = n == 1 && unit.ends_with('s') ? unit.substr(0, unit.size() - 1) : unit;
  return m.format(median) + " (n=" + std::to_string(n) + " " + noun + ")";
}

std::string test_cell(const MetricCheck& c) {
  if (c.test == "bootstrap")
    return "bootstrap CI " + fmt::signed_percent(c.ci_lo) + "\u2026" + fmt::signed_percent(c.ci_hi);
  if (!c.test.empty()) {
    const std::string p = fmt::p_value(c.p_value);
    return c.test + (p.front() == '<' ? " p" : " p=") + p;
  }
  return "-";
}

// Rows of the Markdown table: a status/presence row for a point without
// metrics, else one row per metric.
void write_rows(std::ostringstream& out, const PointCheck& p, bool only_problems) {
  std::string point = "`";  // appended, not "`" + ...: GCC 12 -O3 warns falsely on that form here
  point += fmt::md_escape(p.name);
  point += '`';
  const bool status_row = p.metrics.empty() || !p.reason.empty();
  if (status_row && (!only_problems || p.status_verdict >= Verdict::inconclusive))
    out << "| " << point << " | status | " << (p.base_status.empty() ? "-" : p.base_status) << " | "
        << (p.cand_status.empty() ? "-" : p.cand_status) << " | | | | " << verdict_mark(p.status_verdict)
        << (p.reason.empty() ? "" : ": ") << fmt::md_escape(p.reason) << " |\n";
  for (const MetricCheck& c : p.metrics) {
    if (only_problems && c.verdict < Verdict::inconclusive) continue;
    const GateMetric& m = *find_gate_metric(c.metric);
    out << "| " << point << " | " << m.title << " | " << value_cell(m, c.base_median, c.n_base, c.unit) << " | "
        << value_cell(m, c.cand_median, c.n_cand, c.unit) << " | " << fmt::signed_percent(c.change) << " | "
        << (m.higher_is_better ? "\u2212" : "+") << fmt::fixed(100 * c.threshold, 1) << "% | " << test_cell(c) << " | "
        << verdict_mark(c.verdict);
    if (c.verdict == Verdict::inconclusive || c.verdict == Verdict::missing) out << ": " << fmt::md_escape(c.reason);
    out << " |\n";
  }
}

constexpr const char* kTableHead =
    "| point | check | baseline | candidate | change | threshold | test | verdict |\n"
    "|---|---|---:|---:|---:|---:|---|---|\n";

nlohmann::json nan_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

GateSide gate_side(const std::vector<PointData>& points, const std::string& description) {
  GateSide side;
  side.description = description;
  for (const PointData& p : points) {
    GatePoint g;
    g.label = p.label;
    g.world_size = p.world_size;
    g.status = p.status();
    g.runs = p.runs.size();
    g.error = p.first_error();
    for (const RunData* r : p.ok_runs()) add_run_samples(*r, g);
    for (const RunData& r : p.runs)
      for (const std::string& k : hardware_env_keys())
        if (auto it = r.env.find(k); it != r.env.end()) side.env[k].insert(it->second);
    side.points.push_back(std::move(g));
  }
  return side;
}

nlohmann::json baseline_file_json(const GateSide& side) {
  nlohmann::json points = nlohmann::json::array();
  for (const GatePoint& p : side.points)
    points.push_back({{"label", p.label},
                      {"world_size", p.world_size},
                      {"status", p.status},
                      {"runs", p.runs},
                      {"error", p.error},
                      {"samples", p.samples}});
  return {{"format", kBaselineFormat}, {"source", side.description}, {"env", side.env}, {"points", points}};
}

GateSide read_baseline_file(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw InputError("baseline file " + path + " cannot be read; write one with `ctitan gate --write-baseline-file`");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != kBaselineFormat)
    throw InputError(path + " is not a ctitan gate baseline file (no \"format\": \"" + kBaselineFormat +
                     "\"); write one with `ctitan gate --write-baseline-file`");
  GateSide side;
  try {
    side.description = "baseline file " + path + " (" + j.value("source", std::string("?")) + ")";
    side.env = j.value("env", std::map<std::string, std::set<std::string>>{});
    for (const nlohmann::json& p : j.at("points")) {
      GatePoint g;
      g.label = p.at("label").get<std::string>();
      g.world_size = p.at("world_size").get<int64_t>();
      g.status = p.at("status").get<std::string>();
      g.runs = p.value("runs", size_t{0});
      g.error = p.value("error", std::string());
      g.samples = p.at("samples").get<std::map<std::string, std::vector<std::vector<double>>>>();
      side.points.push_back(std::move(g));
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path + ": malformed baseline file (" + std::string(e.what()) + ")");
  }
  return side;
}

std::string gate_markdown(const GateResult& r) {
  size_t counts[6] = {0, 0, 0, 0, 0, 0};
  for (const PointCheck& p : r.points) ++counts[static_cast<int>(p.verdict)];
  const char* mark = r.exit_code == kGateExitPass         ? "\u2705"
                     : r.exit_code == kGateExitImproved   ? "\u2b06\ufe0f"
                     : r.exit_code == kGateExitRegression ? "\u274c"
                                                          : "\u26a0\ufe0f";
  std::ostringstream out;
  out << "### ctitan gate: " << mark << " " << r.verdict
      << (r.exit_code == kGateExitImproved ? ": refresh the baseline" : "") << "\n\n"
      << "**Baseline** " << fmt::md_escape(r.baseline) << " \u00b7 **candidate** " << fmt::md_escape(r.candidate)
      << "<br>\n"
      << r.points.size() << " points: " << counts[static_cast<int>(Verdict::regression)] << " regression, "
      << counts[static_cast<int>(Verdict::inconclusive)] << " inconclusive, "
      << counts[static_cast<int>(Verdict::missing)] << " missing, "
      << counts[static_cast<int>(Verdict::pass)] + counts[static_cast<int>(Verdict::improved)] +
             counts[static_cast<int>(Verdict::skipped)]
      << " pass \u00b7 \u03b1 = " << fmt::fixed(r.options.alpha, 2) << ", at least " << r.options.min_samples
      << " samples per side\n\n";
  if (!r.env.empty()) {
    out << "**Environments differ** \u2014 the numbers are not comparable"
        << (r.options.allow_env_mismatch ? " (allowed by --allow-env-mismatch)" : "") << ":\n\n";
    for (const EnvDifference& d : r.env)
      out << "- `" << d.key << "`: " << fmt::md_escape(d.base) << " \u2192 " << fmt::md_escape(d.cand) << "\n";
    out << "\n";
  }
  const bool problems = std::any_of(r.points.begin(), r.points.end(),
                                    [](const PointCheck& p) { return p.verdict >= Verdict::inconclusive; });
  if (problems) {
    out << kTableHead;
    for (const PointCheck& p : r.points)
      if (p.verdict >= Verdict::inconclusive) write_rows(out, p, true);
    out << "\n";
  }
  out << "<details><summary>All checks</summary>\n\n" << kTableHead;
  for (const PointCheck& p : r.points) write_rows(out, p, false);
  if (r.options.paired) {
    out << "\nPaired runs: each pair's baseline and candidate ran back to back. A regression needs both size (the "
           "median paired ratio beyond the threshold) and significance (Wilcoxon's signed-rank test on the paired "
           "log-ratios at \u03b1). n counts pairs.\n\n</details>\n";
  } else {
    out << "\nA regression needs both size (the change beyond the threshold) and significance (two-sided "
           "Mann\u2013Whitney U at \u03b1, or a bootstrap CI excluding 0 where the U test cannot reach \u03b1). "
           "n counts steady-state steps pooled over repeats (\"steps\") or one median per run (\"runs\").\n\n"
           "</details>\n";
  }
  return out.str();
}

nlohmann::json gate_json(const GateResult& r) {
  nlohmann::json points = nlohmann::json::array();
  for (const PointCheck& p : r.points) {
    nlohmann::json metrics = nlohmann::json::array();
    for (const MetricCheck& c : p.metrics)
      metrics.push_back({{"metric", c.metric},
                         {"verdict", to_string(c.verdict)},
                         {"unit", c.unit},
                         {"n_baseline", c.n_base},
                         {"n_candidate", c.n_cand},
                         {"baseline_median", nan_null(c.base_median)},
                         {"candidate_median", nan_null(c.cand_median)},
                         {"change", nan_null(c.change)},
                         {"threshold", c.threshold},
                         {"test", c.test},
                         {"p_value", nan_null(c.p_value)},
                         {"ci", {nan_null(c.ci_lo), nan_null(c.ci_hi)}},
                         {"detectable", nan_null(c.detectable)},
                         {"reason", c.reason}});
    points.push_back({{"point", p.name},
                      {"label", p.label},
                      {"world_size", p.world_size},
                      {"verdict", to_string(p.verdict)},
                      {"baseline_status", p.base_status},
                      {"candidate_status", p.cand_status},
                      {"status_verdict", to_string(p.status_verdict)},
                      {"reason", p.reason},
                      {"metrics", metrics}});
  }
  nlohmann::json env = nlohmann::json::array();
  for (const EnvDifference& d : r.env) env.push_back({{"key", d.key}, {"baseline", d.base}, {"candidate", d.cand}});
  return {{"format", "ctitan-gate-verdict-v1"},
          {"verdict", r.verdict},
          {"exit_code", r.exit_code},
          {"baseline", r.baseline},
          {"candidate", r.candidate},
          {"alpha", r.options.alpha},
          {"min_samples", r.options.min_samples},
          {"env_differences", env},
          {"points", points}};
}

}  // namespace ctitan
