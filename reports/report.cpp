#include "reports/report.h"

#include "common/run_timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <set>
#include <sstream>

#include "common/build_identity.h"
#include "common/errors.h"
#include "ctitan/build_info.h"
#include "reports/aliases.h"
#include "reports/models.h"

namespace ctitan {
namespace {

constexpr const char* kStackMarker = "stack=";

// "a=1 b=2 stack=3:+Float8 x" → grid part "a=1 b=2", stack part "stack=3:+Float8 x".
std::pair<std::string, std::string> split_stack(const std::string& label) {
  size_t at = label.rfind(std::string(" ") + kStackMarker);
  if (label.rfind(kStackMarker, 0) == 0)
    at = 0;
  else if (at == std::string::npos)
    return {label, ""};
  else
    ++at;
  std::string grid = label.substr(0, at);
  while (!grid.empty() && grid.back() == ' ') grid.pop_back();
  return {grid, label.substr(at)};
}

std::vector<std::string> tokens(const std::string& grid) {
  std::vector<std::string> out;
  std::istringstream in(grid);
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

std::optional<double> median_of(const std::vector<double>& v) {
  if (v.empty()) return std::nullopt;
  return stats::median(v);
}

template <class F>
std::optional<double> median_over_runs(const std::vector<const RunData*>& runs, F field) {
  std::vector<double> v;
  for (const RunData* r : runs)
    if (r->summary)
      if (const std::optional<double> x = field(*r->summary)) v.push_back(*x);
  return median_of(v);
}

// Goodput, stragglers and the MFU's peak of a point's ok runs (schema v13).
void add_timing(PointStats& s, const std::vector<const RunData*>& ok) {
  std::map<std::string, std::vector<double>> parts;
  for (const RunData* r : ok)
    for (const auto& [name, seconds] : r->goodput) parts[name].push_back(seconds);
  for (const std::string& name : goodput_part_names())
    if (auto it = parts.find(name); it != parts.end()) s.goodput_parts.emplace_back(name, stats::median(it->second));
  s.wall_s = median_over_runs(ok, [](const SummaryRow& r) { return r.wall_s; });
  s.goodput = median_over_runs(ok, [](const SummaryRow& r) { return r.goodput; });
  s.steady_tokens = median_over_runs(ok, [](const SummaryRow& r) -> std::optional<double> {
    return r.steady_tokens ? std::optional<double>(static_cast<double>(*r.steady_tokens)) : std::nullopt;
  });
  s.mfu_by_dtype = median_over_runs(ok, [](const SummaryRow& r) { return r.mfu_by_dtype; });
  s.useful_mfu = median_over_runs(ok, [](const SummaryRow& r) { return r.useful_mfu; });
  const RunData* worst = nullptr;
  for (const RunData* r : ok) {
    if (!r->summary) continue;
    if (s.peak_source.empty() && r->summary->peak_flops_source) s.peak_source = *r->summary->peak_flops_source;
    if (r->summary->straggler_marked.value_or(false)) s.straggler_marked = true;
    if (r->summary->straggler_share &&
        (!worst || *r->summary->straggler_share > *worst->summary->straggler_share))
      worst = r;
  }
  if (!worst) return;
  const SummaryRow& w = *worst->summary;
  s.straggler_rank = w.straggler_rank;
  s.straggler_share = w.straggler_share;
  s.straggler_persistence = w.straggler_persistence;
  s.straggler_spread_s = w.straggler_spread_s;
  for (const RankStepRow& row : worst->rank_steps) {
    if (s.rank_busy_steps.empty() || s.rank_busy_steps.back() != row.step) {
      s.rank_busy_steps.push_back(row.step);
      s.rank_busy.emplace_back();
    }
    s.rank_busy.back().push_back(row.busy_s.value_or(std::nan("")));
  }
}

PointStats point_stats(const PointData& p) {
  PointStats s;
  s.sweep = p.sweep;
  s.label = p.label;
  s.point_key = p.point_key;
  s.world_size = p.world_size;
  s.repeats = p.runs.size();
  s.status = p.status();
  s.error = p.first_error();
  const auto [grid, stack] = split_stack(p.label);
  s.stack_group = grid;
  if (!stack.empty()) {
    const std::string body = stack.substr(std::string(kStackMarker).size());
    const auto colon = body.find(':');
    s.stack_index = std::atoi(body.substr(0, colon).c_str());
    s.stack_name = colon == std::string::npos ? body : body.substr(colon + 1);
  }
  const std::vector<const RunData*> ok = p.ok_runs();
  s.ok_runs = ok.size();
  std::vector<double> tps, tflops, mfu;
  std::map<int64_t, std::vector<double>> loss_by_step;
  for (const RunData* r : ok) {
    tps.insert(tps.end(), r->tps.begin(), r->tps.end());
    tflops.insert(tflops.end(), r->tflops.begin(), r->tflops.end());
    mfu.insert(mfu.end(), r->mfu.begin(), r->mfu.end());
    for (const auto& [step, loss] : r->loss) loss_by_step[step].push_back(loss);
  }
  s.tps = stats::describe(tps);
  s.tflops = median_of(tflops);
  s.mfu = median_of(mfu);
  for (const auto& [step, losses] : loss_by_step) s.loss_curve.emplace_back(step, stats::median(losses));
  s.mem_peak_bytes = median_over_runs(ok, [](const SummaryRow& r) -> std::optional<double> {
    return r.mem_peak_bytes ? std::optional<double>(static_cast<double>(*r.mem_peak_bytes)) : std::nullopt;
  });
  s.loss_final = median_over_runs(ok, [](const SummaryRow& r) { return r.loss_final; });
  s.compute_s = median_over_runs(ok, [](const SummaryRow& r) { return r.compute_s; });
  s.comm_s = median_over_runs(ok, [](const SummaryRow& r) { return r.comm_s; });
  s.exposed_comm_s = median_over_runs(ok, [](const SummaryRow& r) { return r.exposed_comm_s; });
  s.idle_s = median_over_runs(ok, [](const SummaryRow& r) { return r.idle_s; });
  add_timing(s, ok);
  for (const RunData& r : p.runs) {  // the newest run's prediction (repeat order)
    if (!r.prediction || r.prediction->hardware.empty()) continue;
    const PredictionRow& pr = *r.prediction;
    s.pred_tps = pr.tps;
    s.pred_tps_prior = pr.tps_prior;
    s.pred_tps_low = pr.tps_low;
    s.pred_tps_high = pr.tps_high;
    s.learned_from = pr.learned_from.value_or(0);
    s.pred_mem_peak_bytes =
        pr.mem_peak_bytes ? std::optional<double>(static_cast<double>(*pr.mem_peak_bytes)) : std::nullopt;
    // "uncalibrated: maker's figures" → "uncalibrated"; "calibrated from r.db (12 runs, ...)" → "calibrated from r.db"
    const std::string& c = pr.calibration;
    const std::string calibration = c.substr(0, std::min(c.find(':'), c.find(" (")));
    s.predicted_on = pr.hardware + (calibration.empty() ? "" : ", " + calibration);
  }
  return s;
}

std::pair<std::string, std::string> key_value(const std::string& token) {
  const auto eq = token.find('=');
  return eq == std::string::npos ? std::make_pair(token, std::string())
                                 : std::make_pair(token.substr(0, eq), token.substr(eq + 1));
}

// Settings every point shares say nothing about the difference between rows:
// they go to the section's header (SectionReport::common), and each point is
// named by what varies (reports/aliases.h): its layout where layouts differ,
// then the tokens of the other varying settings, then its stack row.
void set_display_labels(SectionReport& sec, const std::vector<std::string>& layouts) {
  std::vector<PointStats>& points = sec.points;
  std::map<std::string, size_t> count;
  for (const PointStats& p : points) {
    std::set<std::string> seen;
    for (const std::string& t : tokens(p.stack_group))
      if (seen.insert(t).second) ++count[t];
  }
  const auto varies = [&](const std::string& t) { return points.size() == 1 || count[t] < points.size(); };
  for (const PointStats& p : points)
    for (const std::string& t : tokens(p.stack_group)) {
      const std::string key = key_value(t).first;
      if (varies(t) && std::find(sec.varying_keys.begin(), sec.varying_keys.end(), key) == sec.varying_keys.end())
        sec.varying_keys.push_back(key);
    }
  // A layout is named where points of the same world size differ in it.
  const std::set<std::string> distinct_layouts(layouts.begin(), layouts.end());
  std::map<int64_t, std::set<std::string>> layouts_of_ws;
  for (size_t i = 0; i < points.size(); ++i)
    if (points[i].status != "infeasible") layouts_of_ws[points[i].world_size].insert(layouts[i]);
  const bool layout_varies = distinct_layouts.size() > 1;
  if (!points.empty()) {  // the section's header: what every point shares
    if (!layout_varies && !layouts.front().empty()) sec.common.push_back(layouts.front());
    for (const std::string& t : tokens(points.front().stack_group)) {
      if (varies(t)) continue;
      const auto [key, value] = key_value(t);
      if (alias::is_layout_key(key)) continue;
      const std::string a = alias::token(key, value);
      if (!a.empty()) sec.common.push_back(a);
    }
  }
  for (size_t i = 0; i < points.size(); ++i) {
    PointStats& p = points[i];
    p.layout = layouts[i];
    std::string out;
    for (const std::string& t : tokens(p.stack_group))
      if (varies(t)) out += (out.empty() ? "" : " ") + t;
    const std::string stack = split_stack(p.label).second;
    if (!stack.empty()) out += (out.empty() ? "" : " ") + stack;
    p.display_label = out.empty() ? "(base)" : out;

    p.settings.assign(sec.varying_keys.size(), "");
    for (const std::string& t : tokens(p.stack_group)) {
      const auto [key, value] = key_value(t);
      const auto at = std::find(sec.varying_keys.begin(), sec.varying_keys.end(), key);
      if (at != sec.varying_keys.end()) p.settings[static_cast<size_t>(at - sec.varying_keys.begin())] = value;
    }
    std::vector<std::string> name;
    if (layouts_of_ws[p.world_size].size() > 1 && !p.layout.empty()) name.push_back(p.layout);
    for (size_t k = 0; k < p.settings.size(); ++k) {
      if (p.settings[k].empty() || alias::is_layout_key(sec.varying_keys[k])) continue;
      const std::string a = alias::token(sec.varying_keys[k], p.settings[k]);
      if (!a.empty()) name.push_back(a);
    }
    if (name.empty())  // every varying setting at its off value: name them ("eager")
      for (size_t k = 0; k < p.settings.size(); ++k)
        if (!p.settings[k].empty() && !alias::is_layout_key(sec.varying_keys[k]))
          name.push_back(alias::value_name(sec.varying_keys[k], p.settings[k]));
    if (!p.stack_name.empty()) name.push_back(p.stack_name);
    std::string brief;
    for (const std::string& t : name) brief += (brief.empty() ? "" : " ") + t;
    p.short_label = brief.empty() ? (p.layout.empty() ? "(base)" : p.layout) : brief;
  }
}

// Does `wanted` name this point: the whole label, the display label, or a
// set of its key=value settings.
bool matches_label(const PointStats& p, const std::string& wanted) {
  if (wanted == p.label || wanted == p.display_label || wanted == p.short_label) return true;
  const std::vector<std::string> have = tokens(p.label), want = tokens(wanted);
  if (want.empty()) return false;
  return std::all_of(want.begin(), want.end(),
                     [&](const std::string& t) { return std::find(have.begin(), have.end(), t) != have.end(); });
}

// The baseline of each world size and model: the first measured point there
// (or the first `baseline` names); a model without one has no speedups.
void set_speedups(SectionReport& sec, const std::string& baseline) {
  std::map<std::pair<int64_t, std::string>, size_t> base_of_ws;
  for (size_t i = 0; i < sec.points.size(); ++i) {
    const PointStats& p = sec.points[i];
    if (p.tps.n == 0 || base_of_ws.count({p.world_size, p.model_key})) continue;
    if (baseline.empty() || matches_label(p, baseline)) base_of_ws[{p.world_size, p.model_key}] = i;
  }
  std::set<size_t> bases;
  for (auto& [ws, i] : base_of_ws) {
    sec.points[i].baseline = true;
    bases.insert(i);
    if (sec.baseline_label.empty()) sec.baseline_label = sec.points[i].short_label;
  }
  if (sec.several_models()) {  // every model's baseline, in point order: "e16 top2; deepseek_v3 debugmodel"
    std::vector<std::string> names;
    for (size_t i : bases)
      if (std::find(names.begin(), names.end(), sec.points[i].short_label) == names.end())
        names.push_back(sec.points[i].short_label);
    sec.baseline_label.clear();
    for (const std::string& n : names) sec.baseline_label += (sec.baseline_label.empty() ? "" : "; ") + n;
  }
  for (PointStats& p : sec.points) {
    auto it = base_of_ws.find({p.world_size, p.model_key});
    if (it == base_of_ws.end() || p.tps.n == 0) continue;
    const double base = sec.points[it->second].tps.median;
    if (base > 0) p.speedup = p.tps.median / base;
  }
}

// The quality rows of a section's points that have seeds' validation
// curves: each against the first such point of its model (or the first
// `baseline` names).
void set_quality(SectionReport& sec, const std::vector<PointData>& points, const std::string& baseline) {
  std::map<std::string, size_t> base_of_model;  // model key → index into sec.quality
  for (size_t i = 0; i < points.size(); ++i) {
    QualityRow row;
    row.point = i;
    row.seeds = seed_set(points[i]);
    if (row.seeds.seeds.empty()) continue;
    sec.quality.push_back(std::move(row));
  }
  for (size_t k = 0; k < sec.quality.size(); ++k) {
    const PointStats& p = sec.points[sec.quality[k].point];
    if (!base_of_model.count(p.model_key) && (baseline.empty() || matches_label(p, baseline)))
      base_of_model[p.model_key] = k;
  }
  for (size_t k = 0; k < sec.quality.size(); ++k) {
    QualityRow& row = sec.quality[k];
    const PointStats& p = sec.points[row.point];
    const auto b = base_of_model.find(p.model_key);
    if (b == base_of_model.end() || b->second == k) continue;
    const QualityRow& base = sec.quality[b->second];
    row.baseline = base.point;
    row.vs = compare_quality(base.seeds, row.seeds);
    const PointStats& bp = sec.points[base.point];
    // The whole job's tokens/s: time to target is the whole job's too.
    if (p.tps.n > 0 && bp.tps.n > 0 && bp.tps.median > 0)
      row.tps_ratio = p.tps.median * static_cast<double>(p.world_size) /
                      (bp.tps.median * static_cast<double>(bp.world_size));
  }
}

// A chain step's quality: its pairs' speedups at equal quality and the
// worst verdict of its `to` points against their `from` points.
void set_chain_quality(SectionReport& sec) {
  for (ChainStep& step : sec.chain) {
    std::vector<double> speedups;
    int worst = -1;
    for (const auto& [from, to] : step.effect.pairs) {
      const QualityRow* a = sec.quality_of(from);
      const QualityRow* b = sec.quality_of(to);
      if (!a || !b) continue;
      const QualityComparison q = compare_quality(a->seeds, b->seeds);
      if (q.speedup_at_quality) speedups.push_back(*q.speedup_at_quality);
      worst = std::max(worst, static_cast<int>(q.verdict));
    }
    if (!speedups.empty()) step.quality_speedup = stats::median(speedups);
    if (worst >= 0) step.quality = to_string(static_cast<QualityVerdict>(worst));
  }
}

void set_stacks_and_scaling(SectionReport& sec) {
  std::map<std::pair<std::string, int64_t>, size_t> stack_index;
  for (size_t i = 0; i < sec.points.size(); ++i) {
    const PointStats& p = sec.points[i];
    if (p.stack_index == 0) continue;
    auto [it, fresh] = stack_index.emplace(std::make_pair(p.stack_group, p.world_size), sec.stacks.size());
    if (fresh) sec.stacks.push_back({p.stack_group, p.world_size, {}});
    sec.stacks[it->second].rows.push_back(i);
  }
  for (StackTable& t : sec.stacks)
    std::stable_sort(t.rows.begin(), t.rows.end(),
                     [&](size_t a, size_t b) { return sec.points[a].stack_index < sec.points[b].stack_index; });

  std::map<std::string, size_t> series_index;
  for (size_t i = 0; i < sec.points.size(); ++i) {
    const PointStats& p = sec.points[i];
    if (p.tps.n == 0) continue;
    auto [it, fresh] = series_index.emplace(p.label, sec.scaling.size());
    if (fresh) sec.scaling.push_back({p.short_label, {}});
    sec.scaling[it->second].rows.push_back(i);
  }
  std::erase_if(sec.scaling, [&](const ScalingSeries& s) {
    std::set<int64_t> sizes;
    for (size_t i : s.rows) sizes.insert(sec.points[i].world_size);
    return sizes.size() < 2;
  });
  for (ScalingSeries& s : sec.scaling)
    std::stable_sort(s.rows.begin(), s.rows.end(),
                     [&](size_t a, size_t b) { return sec.points[a].world_size < sec.points[b].world_size; });
}

std::vector<std::string> environment_lines(const std::vector<PointData>& points) {
  std::vector<std::string> keys = hardware_env_keys();
  keys.insert(keys.end(), {"num_threads", "git_sha", "build_type"});
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    std::set<std::string> values;
    for (const PointData& p : points)
      for (const RunData& r : p.runs)
        if (auto it = r.env.find(k); it != r.env.end()) values.insert(it->second);
    if (values.empty()) continue;
    std::string line = k + ": ";
    bool first = true;
    for (const std::string& v : values) {
      line += (first ? "" : ", ") + v;
      first = false;
    }
    out.push_back(line);
  }
  return out;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// The build a point's runs were made by: "sha12" or "sha12+diffhash" for a
// dirty tree; "" when its runs recorded none (infeasible, older runs).
std::string build_of(const PointData& p) {
  for (const RunData& r : p.runs) {
    const auto sha = r.env.find("git_sha");
    if (sha == r.env.end() || sha->second.empty()) continue;
    const auto diff = r.env.find("git_diff_hash");
    return sha->second.substr(0, 12) + (diff == r.env.end() || diff->second.empty() ? "" : "+" + diff->second);
  }
  return "";
}

}  // namespace

std::optional<double> PointStats::time_to_tokens_s(double n) const {
  if (goodput_parts.empty() || !steady_tokens || *steady_tokens <= 0 || !wall_s) return std::nullopt;
  Goodput g;
  g.steady_tokens = static_cast<int64_t>(*steady_tokens);
  g.wall_s = *wall_s;
  for (const auto& [name, seconds] : goodput_parts) g.set_part(name, seconds);
  return g.time_to_tokens_s(n);
}

std::optional<double> PointStats::pred_tps_error() const {
  if (!pred_tps || tps.n == 0 || tps.median <= 0) return std::nullopt;
  return *pred_tps / tps.median - 1;
}

std::optional<double> PointStats::pred_mem_error() const {
  if (!pred_mem_peak_bytes || !mem_peak_bytes || *mem_peak_bytes <= 0) return std::nullopt;
  return *pred_mem_peak_bytes / *mem_peak_bytes - 1;
}

std::vector<size_t> pareto_front(const std::vector<std::pair<double, double>>& points) {
  std::vector<size_t> order(points.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // By cost ascending, value descending: a point is on the front when its
  // value beats every cheaper (or equally cheap, earlier) point's.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return points[a].first != points[b].first ? points[a].first < points[b].first : points[a].second > points[b].second;
  });
  std::vector<size_t> front;
  for (size_t i : order)
    if (front.empty() || points[i].second > points[front.back()].second) front.push_back(i);
  return front;
}

namespace {

// One summary per world size, and per model where the section has several
// (by world size, then the models in their order).
void set_summary(SectionReport& sec, const std::vector<double>& budgets) {
  std::map<std::pair<int64_t, size_t>, std::vector<size_t>> by_ws;
  for (size_t i = 0; i < sec.points.size(); ++i) {
    const PointStats& p = sec.points[i];
    const auto model = static_cast<size_t>(std::find(sec.models.begin(), sec.models.end(), p.model) - sec.models.begin());
    if (p.status == "ok" && p.tps.n > 0 && p.mem_peak_bytes) by_ws[{p.world_size, model}].push_back(i);
  }
  for (const auto& [ws_model, idx] : by_ws) {
    WorldSummary s;
    s.world_size = ws_model.first;
    if (sec.several_models()) s.model = sec.points[idx.front()].model;
    std::vector<std::pair<double, double>> xy;
    for (size_t i : idx) xy.emplace_back(*sec.points[i].mem_peak_bytes, sec.points[i].tps.median);
    for (size_t k : pareto_front(xy)) s.front.push_back(idx[k]);
    s.fastest = s.front.back();  // the front's last point is the fastest
    for (double b : budgets) {  // the front's fastest within the budget is the fastest of all that fit
      std::optional<size_t> best;
      for (size_t i : s.front)
        if (*sec.points[i].mem_peak_bytes <= b) best = i;
      s.budgets.emplace_back(b, best);
    }
    sec.summary.push_back(std::move(s));
  }
}

// The section's ok runs in the order they ran (run id), in groups of six;
// empty unless some prediction was refitted during the sweep.
std::vector<LearningGroup> learning_groups(const std::vector<PointData>& points) {
  std::vector<const RunData*> runs;
  bool learned = false;
  for (const PointData& p : points)
    for (const RunData& r : p.runs) {
      if (r.run.status != "ok" || !r.prediction || !r.prediction->tps || !r.summary || !r.summary->tps_median) continue;
      runs.push_back(&r);
      learned = learned || r.prediction->learned_from.value_or(0) > 0;
    }
  if (!learned) return {};
  std::sort(runs.begin(), runs.end(), [](const RunData* a, const RunData* b) { return a->run.id < b->run.id; });
  constexpr size_t kGroup = 6;
  std::vector<LearningGroup> groups;
  for (size_t at = 0; at < runs.size(); at += kGroup) {
    LearningGroup g;
    g.first = static_cast<int64_t>(at + 1);
    g.last = static_cast<int64_t>(std::min(at + kGroup, runs.size()));
    g.learned_from = -1;
    std::vector<double> prior, now;
    for (size_t i = at; i < static_cast<size_t>(g.last); ++i) {
      const PredictionRow& pr = *runs[i]->prediction;
      const double measured = *runs[i]->summary->tps_median;
      if (measured <= 0) continue;
      ++g.runs;
      now.push_back(std::fabs(*pr.tps / measured - 1));
      if (pr.tps_prior) prior.push_back(std::fabs(*pr.tps_prior / measured - 1));
      if (pr.tps_low && pr.tps_high) {
        ++g.with_interval;
        g.inside += *pr.tps_low <= measured && measured <= *pr.tps_high;
      }
      const int64_t from = pr.learned_from.value_or(0);
      g.learned_from = g.learned_from < 0 ? from : std::min(g.learned_from, from);
    }
    if (!prior.empty()) g.prior_error = stats::median(prior);
    if (!now.empty()) g.error = stats::median(now);
    g.learned_from = std::max<int64_t>(g.learned_from, 0);
    groups.push_back(g);
  }
  return groups;
}

}  // namespace

SectionReport build_section(const std::string& title, const std::vector<PointData>& points,
                            const std::string& baseline_label, const std::vector<double>& memory_budgets) {
  SectionReport sec;
  sec.title = title;
  int row = 0;
  for (const PointData& p : points) {
    sec.points.push_back(point_stats(p));
    if (sec.points.back().status != "infeasible") sec.points.back().row = ++row;
  }
  // A sweep resumed by another build holds two builds' points (point keys
  // include the build): "build" becomes one of the section's varying keys,
  // so the table tells them apart.
  std::vector<std::string> builds;
  for (const PointData& p : points) builds.push_back(build_of(p));
  std::set<std::string> distinct(builds.begin(), builds.end());
  distinct.erase("");
  if (distinct.size() > 1)
    for (size_t i = 0; i < points.size(); ++i)
      if (!builds[i].empty()) sec.points[i].stack_group += " build=" + builds[i];
  // Each point's layout from its first recorded run's resolved config; from
  // its label's settings where no run recorded one.
  std::vector<std::string> layouts;
  for (size_t i = 0; i < points.size(); ++i) {
    std::string l;
    for (const RunData& r : points[i].runs)
      if (!r.run.config_toml.empty() && !(l = alias::layout(r.run.config_toml, points[i].world_size)).empty()) break;
    if (l.empty()) {
      std::vector<std::pair<std::string, std::string>> settings;
      for (const std::string& t : tokens(sec.points[i].stack_group)) settings.push_back(key_value(t));
      l = alias::layout_from_settings(settings);
    }
    layouts.push_back(l);
  }
  set_display_labels(sec, layouts);
  set_models(sec, points);
  set_speedups(sec, baseline_label);
  set_stacks_and_scaling(sec);
  for (const PointStats& p : sec.points) sec.has_comm = sec.has_comm || p.comm_s.has_value();
  sec.environment = environment_lines(points);
  set_summary(sec, memory_budgets);
  sec.effects = knob_effects(sec);
  sec.learning = learning_groups(points);
  set_quality(sec, points, baseline_label);
  return sec;
}

const QualityRow* SectionReport::quality_of(size_t point) const {
  for (const QualityRow& q : quality)
    if (q.point == point) return &q;
  return nullptr;
}

double parse_memory_budget(const std::string& text) {
  const auto bad = [&]() {
    return InputError("--memory-budget '" + text + "' is not a memory size; write e.g. 80GiB, 512MiB or 24 (GiB)");
  };
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  std::string unit = text.substr(used);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  static const std::map<std::string, double> kUnits = {{"", 1024.0 * 1024 * 1024}, {"GiB", 1024.0 * 1024 * 1024},
                                                       {"MiB", 1024.0 * 1024}, {"KiB", 1024.0},
                                                       {"GB", 1e9}, {"MB", 1e6}, {"B", 1}};
  const auto it = kUnits.find(unit);
  if (it == kUnits.end() || !(v > 0) || !std::isfinite(v)) throw bad();
  return v * it->second;
}

std::vector<PairedSpeedup> paired_speedups(const std::vector<PointData>& base, const std::vector<PointData>& cand,
                                           const SectionReport& sec) {
  // (label, world size) → repeat → the run's tps/device.
  using Key = std::pair<std::string, int64_t>;
  auto by_repeat = [](const PointData& p) {
    std::map<int64_t, double> out;
    for (const RunData* r : p.ok_runs())
      if (!r->tps.empty()) out[r->run.repeat] = stats::median(r->tps);
    return out;
  };
  std::map<Key, std::map<int64_t, double>> baseline;
  for (const PointData& p : base) baseline[{p.label, p.world_size}] = by_repeat(p);
  std::vector<PairedSpeedup> out;
  for (const PointData& p : cand) {
    const auto b = baseline.find({p.label, p.world_size});
    if (b == baseline.end()) continue;
    std::vector<double> log_ratios;
    for (const auto& [repeat, tps] : by_repeat(p))
      if (auto it = b->second.find(repeat); it != b->second.end() && it->second > 0 && tps > 0)
        log_ratios.push_back(std::log(tps / it->second));
    if (log_ratios.empty()) continue;
    const stats::MedianInterval m = stats::median_interval(log_ratios);
    PairedSpeedup s;
    s.label = p.label;
    for (const PointStats& ps : sec.points)
      if (ps.label == p.label && ps.world_size == p.world_size) s.label = ps.display_label;
    s.world_size = p.world_size;
    s.pairs = m.n;
    s.speedup = std::exp(m.median);
    s.lo = std::exp(m.lo);
    s.hi = std::exp(m.hi);
    s.level = m.level;
    out.push_back(s);
  }
  return out;
}

Report build_report(const ResultsDb& db, const ReportOptions& opts) {
  Report r;
  r.db_path = db.path();
  r.generated_at = utc_now();
  r.ctitan_version = std::string(CTITAN_VERSION) + " (" + this_build().describe() + ")";
  // Each sweep's section (a name; "" for the runs outside any sweep), with
  // the baseline it was paired with.
  std::vector<std::pair<std::string, std::string>> sections;
  if (!opts.sweep.empty()) {
    const auto row = db.sweep(opts.sweep);
    sections.emplace_back(opts.sweep, row ? row->paired_with : "");
  } else {
    for (const SweepRow& s : db.sweeps()) sections.emplace_back(s.name, s.paired_with);
    sections.emplace_back("", "");
  }
  for (const auto& [sweep, paired_with] : sections) {
    const Selection sel{sweep.empty() ? Selection::Kind::outside_sweeps : Selection::Kind::sweep, sweep};
    std::vector<PointData> points = load_points(db, sel);
    if (points.empty()) continue;
    if (opts.exclude_marked) exclude_marked_runs(points);
    r.sections.push_back(build_section(sweep.empty() ? "runs outside any sweep" : sweep, points, opts.baseline,
                                       opts.memory_budgets));
    if (const auto row = sweep.empty() ? std::nullopt : db.sweep(sweep)) {
      SectionReport& sec = r.sections.back();
      const auto steps = report_stack_of(row->spec_toml);
      for (const auto& [key, to] : steps) sec.chain_keys.push_back(to.empty() ? key : key + "=" + to);
      try {
        if (!steps.empty()) sec.chain = stack_chain(sec, steps);
        set_chain_quality(sec);
      } catch (const InputError& e) {  // the points cannot form the chain (failed runs): say so, report the rest
        sec.chain_note = e.what();
      }
    }
    if (!paired_with.empty() && db.sweep(paired_with)) {
      SectionReport& sec = r.sections.back();
      sec.paired_with = paired_with;
      sec.paired = paired_speedups(load_points(db, {Selection::Kind::sweep, paired_with}), points, sec);
    }
  }
  if (r.sections.empty())
    throw InputError(db.path() + " has no runs" + (opts.sweep.empty() ? "" : " in sweep " + opts.sweep) +
                     "; run `ctitan sweep SPEC --db " + db.path() + "` first");
  if (!opts.baseline.empty()) {
    const bool found = std::any_of(r.sections.begin(), r.sections.end(), [&](const SectionReport& s) {
      return std::any_of(s.points.begin(), s.points.end(),
                         [&](const PointStats& p) { return p.tps.n > 0 && matches_label(p, opts.baseline); });
    });
    if (!found)
      throw InputError("--baseline '" + opts.baseline +
                       "' matches no measured point; give a label as `ctitan report` prints it, e.g. " +
                       r.sections.front().points.front().display_label);
  }
  return r;
}

}  // namespace ctitan
