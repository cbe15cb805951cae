#include "reports/points.h"

#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "common/errors.h"
#include "common/metrics_defaults.h"

namespace ctitan {
namespace {

bool has_prefix(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Either sha is a prefix of the other: `--candidate sha:1a2b3c` matches the
// 12-digit sha a build records, and a full 40-digit one matches it too.
bool same_sha(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  return has_prefix(a, b) || has_prefix(b, a);
}

int severity(const std::string& status) {
  static const std::array<const char*, 9> kOrder = {"ok",      "infeasible", "straggler", "pending", "running",
                                                    "cancelled", "failed",   "timeout",   "oom"};
  for (size_t i = 0; i < kOrder.size(); ++i)
    if (status == kOrder[i]) return static_cast<int>(i);
  return static_cast<int>(kOrder.size());
}

std::optional<double> number(const nlohmann::json& row, const char* key) {
  auto it = row.find(key);
  if (it == row.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

RunData read_run(const ResultsDb& db, const RunRow& row) {
  RunData d;
  d.run = row;
  d.summary = db.summary(row.id);
  d.warmup_steps = warmup_steps_of(row.config_toml);
  for (const auto& [k, v] : db.env(row.id)) d.env[k] = v;
  d.prediction = db.prediction(row.id);
  d.goodput = db.goodput(row.id);
  d.rank_steps = db.rank_steps(row.id);
  for (const nlohmann::json& s : db.steps(row.id)) {
    if (s.value("rank", 0) != 0) continue;
    const int64_t step = s.value("step", int64_t{0});
    if (const auto loss = number(s, "loss")) d.loss.emplace_back(step, *loss);
    if (step <= d.warmup_steps) continue;
    if (const auto v = number(s, "tps")) d.tps.push_back(*v);
    if (const auto v = number(s, "step_time_s")) d.step_time_s.push_back(*v);
    if (const auto v = number(s, "tflops")) d.tflops.push_back(*v);
    if (const auto v = number(s, "mfu")) d.mfu.push_back(*v);
  }
  // No step rows (or none past warmup): the summary's median stands in.
  for (const nlohmann::json& v : db.validation(row.id)) {
    const auto loss = number(v, "loss"), tokens = number(v, "train_tokens"), elapsed = number(v, "elapsed_s");
    // Schema v12 rows; a NaN loss is stored as NULL and stays NaN (never reaches a target).
    if (tokens && elapsed) d.validation.push_back({*tokens, *elapsed, loss.value_or(std::nan(""))});
  }
  if (d.tps.empty() && d.summary && d.summary->tps_median) d.tps.push_back(*d.summary->tps_median);
  if (d.tflops.empty() && d.summary && d.summary->tflops) d.tflops.push_back(*d.summary->tflops);
  if (d.mfu.empty() && d.summary && d.summary->mfu) d.mfu.push_back(*d.summary->mfu);
  return d;
}

bool selected(const RunRow& r, const Selection& sel, int64_t sweep_id,
              const std::function<std::string(const RunRow&, const std::string&)>& env_of) {
  switch (sel.kind) {
    case Selection::Kind::all: return true;
    case Selection::Kind::sweep: return r.sweep_id == sweep_id;
    case Selection::Kind::outside_sweeps: return r.sweep_id == 0;
    case Selection::Kind::label: return r.label == sel.value;
    case Selection::Kind::sha: return same_sha(env_of(r, "git_sha"), sel.value);
    case Selection::Kind::build: return same_sha(env_of(r, "build_id"), sel.value);
  }
  return false;
}

}  // namespace

std::string Selection::describe() const {
  switch (kind) {
    case Kind::all: return "every run";
    case Kind::sweep: return "sweep " + value;
    case Kind::sha: return "git sha " + value;
    case Kind::build: return "build " + value;
    case Kind::label: return "label '" + value + "'";
    case Kind::outside_sweeps: return "runs outside any sweep";
  }
  return value;
}

Selection parse_selection(const std::string& text) {
  const auto colon = text.find(':');
  const std::string kind = colon == std::string::npos ? "" : text.substr(0, colon);
  const std::string value = colon == std::string::npos ? text : text.substr(colon + 1);
  Selection s;
  if (text == "all") return s;
  if (kind == "sweep" || kind.empty()) {
    s.kind = Selection::Kind::sweep;
  } else if (kind == "sha" || kind == "git") {
    s.kind = Selection::Kind::sha;
  } else if (kind == "label") {
    s.kind = Selection::Kind::label;
  } else if (kind == "build") {
    s.kind = Selection::Kind::build;
  } else {
    // A bare sweep name may itself contain a colon.
    s.kind = Selection::Kind::sweep;
    s.value = text;
    return s;
  }
  if (value.empty() && s.kind != Selection::Kind::label)
    throw InputError("selection '" + text + "' names nothing; use sweep:NAME, sha:GITSHA, build:BUILD_ID or label:LABEL");
  s.value = value;
  return s;
}

int64_t warmup_steps_of(const std::string& config_toml) {
  const int64_t fallback = kDefaultMetricsWarmupSteps;
  try {
    const toml::table t = toml::parse(config_toml);
    return t["metrics"]["warmup_steps"].value_or(fallback);
  } catch (const toml::parse_error&) {
    return fallback;
  }
}

const std::vector<std::string>& hardware_env_keys() {
  static const std::vector<std::string> kKeys = {"cpu_model", "cpu_cores", "gpu_count",
                                                 "gpu_name",  "gpu_model", "libtorch_version"};
  return kKeys;
}

std::string PointData::status() const {
  std::string worst = "ok";
  for (const RunData& r : runs)
    if (severity(r.run.status) > severity(worst)) worst = r.run.status;
  return runs.empty() ? "missing" : worst;
}

std::vector<const RunData*> PointData::ok_runs() const {
  std::vector<const RunData*> out;
  for (const RunData& r : runs)
    if (r.run.status == "ok") out.push_back(&r);
  return out;
}

std::string PointData::first_error() const {
  for (const RunData& r : runs)
    if (r.run.status != "ok" && !r.run.error.empty()) return r.run.error.substr(0, r.run.error.find('\n'));
  return "";
}

size_t exclude_marked_runs(std::vector<PointData>& points) {
  size_t n = 0;
  for (PointData& p : points)
    for (RunData& r : p.runs) {
      if (r.run.status != "ok" || !r.summary || !r.summary->straggler_marked.value_or(false)) continue;
      const SummaryRow& s = *r.summary;
      r.run.status = "straggler";
      r.run.error = "excluded (--exclude-marked): rank " + std::to_string(s.straggler_rank.value_or(-1)) +
                    " was the slowest in " + std::to_string(std::lround(100 * s.straggler_persistence.value_or(0))) +
                    "% of the steps and the others waited " +
                    std::to_string(std::lround(100 * s.straggler_share.value_or(0))) + "% of a step for it";
      ++n;
    }
  return n;
}

std::vector<PointData> load_points(const ResultsDb& db, const Selection& sel) {
  std::map<int64_t, std::string> sweep_names;
  for (const SweepRow& s : db.sweeps()) sweep_names[s.id] = s.name;
  int64_t sweep_id = -1;
  if (sel.kind == Selection::Kind::sweep) {
    const auto s = db.sweep(sel.value);
    if (!s) {
      std::string known;
      for (const auto& [id, name] : sweep_names) known += (known.empty() ? "" : ", ") + name;
      throw InputError("no sweep named '" + sel.value + "' in " + db.path() +
                       (known.empty() ? " (it has no sweeps)" : " (sweeps: " + known + ")"));
    }
    sweep_id = s->id;
  }
  std::map<int64_t, std::map<std::string, std::string>> env_cache;
  const auto env_of = [&](const RunRow& r, const std::string& key) -> std::string {
    auto it = env_cache.find(r.id);
    if (it == env_cache.end()) {
      it = env_cache.emplace(r.id, std::map<std::string, std::string>{}).first;
      for (const auto& [k, v] : db.env(r.id)) it->second[k] = v;
    }
    const auto v = it->second.find(key);
    return v == it->second.end() ? "" : v->second;
  };

  // Newest row per (point, sweep, repeat); then one row per run directory.
  const std::vector<RunRow> rows = db.runs(sel.kind == Selection::Kind::sweep ? sweep_id : -1);
  std::map<std::tuple<std::string, int64_t, int64_t>, RunRow> newest;
  for (const RunRow& r : rows) {
    if (!selected(r, sel, sweep_id, env_of)) continue;
    auto& slot = newest[{r.point_key, r.sweep_id, r.repeat}];
    if (r.id >= slot.id) slot = r;
  }
  std::vector<RunRow> kept;
  std::set<std::string> dirs;
  std::vector<RunRow> ordered;
  for (const auto& [key, r] : newest) ordered.push_back(r);
  std::sort(ordered.begin(), ordered.end(), [](const RunRow& a, const RunRow& b) { return a.id < b.id; });
  for (const RunRow& r : ordered)
    if (r.run_dir.empty() || dirs.insert(r.run_dir).second) kept.push_back(r);

  std::vector<PointData> points;
  std::map<std::string, size_t> index;
  for (const RunRow& r : kept) {
    auto [it, fresh] = index.emplace(r.point_key, points.size());
    if (fresh) {
      PointData p;
      p.sweep = r.sweep_id ? sweep_names[r.sweep_id] : "";
      p.label = r.label;
      p.world_size = r.world_size;
      p.point_key = r.point_key;
      points.push_back(std::move(p));
    }
    points[it->second].runs.push_back(read_run(db, r));
  }
  for (PointData& p : points)
    std::stable_sort(p.runs.begin(), p.runs.end(),
                     [](const RunData& a, const RunData& b) { return a.run.repeat < b.run.repeat; });
  // Spec order within a sweep: (the sweep's first appearance, has no plan index, plan index).
  std::map<std::string, size_t> sweep_rank;
  std::vector<std::tuple<size_t, bool, int64_t>> order;
  for (const PointData& p : points) {
    std::optional<int64_t> plan_index;
    for (const RunData& r : p.runs)
      if (r.prediction && r.prediction->plan_index) plan_index = r.prediction->plan_index;
    const size_t sweep = sweep_rank.emplace(p.sweep, sweep_rank.size()).first->second;
    order.emplace_back(sweep, !plan_index, plan_index.value_or(0));
  }
  std::vector<size_t> idx(points.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return order[a] < order[b]; });
  std::vector<PointData> sorted;
  sorted.reserve(points.size());
  for (size_t i : idx) sorted.push_back(std::move(points[i]));
  return sorted;
}

std::string point_name(const PointData& p) {
  return (p.label.empty() ? std::string("(base)") : p.label) + " ws=" + std::to_string(p.world_size);
}

std::vector<MatchedPoint> match_points(const std::vector<PointData>& base, const std::vector<PointData>& cand,
                                       bool match_by_world_size) {
  if (base.size() == 1 && cand.size() == 1) return {{point_name(cand.front()), &base.front(), &cand.front()}};
  auto key = [&](const PointData& p) { return match_by_world_size ? std::to_string(p.world_size) : point_name(p); };
  std::map<std::string, const PointData*> by_key;
  for (const PointData& p : base) by_key.emplace(key(p), &p);
  std::vector<MatchedPoint> out;
  for (const PointData& c : cand) {
    MatchedPoint m{point_name(c), nullptr, &c};
    if (const auto it = by_key.find(key(c)); it != by_key.end()) {
      m.base = it->second;
      by_key.erase(it);
    }
    out.push_back(m);
  }
  for (const auto& [k, p] : by_key) out.push_back({point_name(*p), p, nullptr});
  return out;
}

}  // namespace ctitan
