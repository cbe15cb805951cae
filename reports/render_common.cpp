#include "reports/render_common.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "reports/format.h"

namespace ctitan::render {
namespace {

std::string tflops(double v) { return fmt::fixed(v, v < 1 ? 4 : 2); }
std::string loss(double v) { return fmt::fixed(v, 4); }

std::optional<double> mem_change(const PointStats& now, const PointStats& before) {
  if (!now.mem_peak_bytes || !before.mem_peak_bytes || *before.mem_peak_bytes <= 0) return std::nullopt;
  return *now.mem_peak_bytes / *before.mem_peak_bytes - 1;
}

std::optional<double> tps_ratio(const PointStats& now, const PointStats& before) {
  if (now.tps.n == 0 || before.tps.n == 0 || before.tps.median <= 0) return std::nullopt;
  return now.tps.median / before.tps.median;
}

std::string pct(double v) { return fmt::signed_percent(v); }

}  // namespace

std::string status_cell(const PointStats& p) {
  if (p.status == "ok" || p.repeats == 0) return p.status;
  if (p.ok_runs == 0) return p.status;
  return "ok " + std::to_string(p.ok_runs) + "/" + std::to_string(p.repeats) + " (" + p.status + ")";
}

std::string tps_cell(const PointStats& p) {
  if (p.tps.n == 0) return "-";
  if (p.tps.n == 1) return fmt::grouped(p.tps.median);
  return fmt::grouped(p.tps.median) + " (" + fmt::grouped(p.tps.p10) + "\u2013" + fmt::grouped(p.tps.p90) + ")";
}

Table paired_table(const SectionReport& sec) {
  Table t;
  t.header = {"recipe", "ws", "pairs", "speedup", "interval", "coverage"};
  t.right = {false, true, true, true, true, true};
  for (const PairedSpeedup& s : sec.paired)
    t.rows.push_back({s.label.empty() ? "(base)" : s.label, std::to_string(s.world_size), std::to_string(s.pairs),
                      fmt::ratio(s.speedup), fmt::ratio(s.lo) + "\u2013" + fmt::ratio(s.hi),
                      fmt::fixed(100 * s.level, 1) + "%"});
  return t;
}

std::string ratio_interval(const PairedRatio& r) {
  return r.n > 1 ? fmt::ratio(r.lo) + "\u2013" + fmt::ratio(r.hi) : "-";
}

namespace {

std::string pairs_cell(const KnobEffect& e) {
  return e.candidates > e.pairs.size() ? std::to_string(e.pairs.size()) + " of " + std::to_string(e.candidates)
                                       : std::to_string(e.pairs.size());
}

std::string coverage_cell(const PairedRatio& r) { return r.n > 1 ? fmt::fixed(100 * r.level, 1) + "%" : "-"; }

}  // namespace

std::string common_line(const SectionReport& sec) {
  std::string out;
  for (const std::string& c : sec.common) out += (out.empty() ? "" : " \u00b7 ") + c;
  return out;
}

namespace {

// A table of a section of several models starts with the model column.
void add_model_column(Table& t, const SectionReport& sec, size_t at = 0) {
  if (!sec.several_models()) return;
  t.header.insert(t.header.begin() + static_cast<std::ptrdiff_t>(at), "model");
  t.right.insert(t.right.begin() + static_cast<std::ptrdiff_t>(at), false);
}

}  // namespace

Table effects_table(const SectionReport& sec) {
  Table t;
  t.header = {"setting", "vs", "pairs", "tokens/s", "interval", "peak mem", "interval", "coverage"};
  t.right = {false, false, true, true, true, true, true, true};
  add_model_column(t, sec);
  for (const KnobEffect& e : sec.effects) {
    t.rows.push_back({e.label, e.versus, pairs_cell(e), fmt::ratio(e.tps.median), ratio_interval(e.tps),
                      e.mem.n ? fmt::ratio(e.mem.median) : "-", ratio_interval(e.mem), coverage_cell(e.tps)});
    if (sec.several_models()) t.rows.back().insert(t.rows.back().begin(), e.model);
  }
  return t;
}

std::string models_note(const SectionReport& sec) {
  if (!sec.several_models()) return "";
  std::string names;
  for (const std::string& m : sec.models) names += (names.empty() ? "" : "; ") + m;
  return "These points train " + std::to_string(sec.models.size()) + " models (" + names +
         "), and tokens/s of two models is not a comparison: each model has its own summary and its own effects, "
         "and a point's speedup is against the baseline row of its own model at its world size; MFU (in the "
         "points table) is the one figure that puts different models on one scale.";
}

std::string effects_note() {
  return "Each setting against the first value the sweep gave it, with everything else held equal: every point "
         "with the setting is matched with the point that differs from it in that setting alone (same world size, "
         "same other settings). The ratio is the median over the matched pairs of tokens/s per device (and of peak "
         "memory per rank); the interval is the sign test's distribution-free interval for that median, at 95% "
         "where the pairs allow it (coverage: its exact level; fewer than 6 pairs cannot reach 95%). "
         "\"14 of 16\": 2 points with the setting had no partner.";
}

Table chain_table(const SectionReport& sec) {
  Table t;
  t.header = {"row", "technique", "pairs", "tokens/s step", "interval", "cumulative", "peak mem step", "cumulative"};
  t.right = {true, false, true, true, true, true, true, true};
  const bool quality = !sec.quality.empty();
  if (quality) {
    t.header.insert(t.header.end(), {"speedup at equal quality", "quality"});
    t.right.insert(t.right.end(), {true, false});
  }
  add_model_column(t, sec);
  int row = 0;
  for (size_t i = 0; i < sec.chain.size(); ++i) {
    const ChainStep& s = sec.chain[i];
    const KnobEffect& e = s.effect;
    if (i > 0 && sec.chain[i - 1].effect.model != e.model) row = 0;  // each model's chain starts again
    t.rows.push_back({std::to_string(++row), "+" + e.label + " (from " + e.versus + ")", pairs_cell(e),
                      e.tps.n ? fmt::ratio(e.tps.median) : "-", ratio_interval(e.tps), fmt::ratio(s.cumulative_tps),
                      e.mem.n ? fmt::ratio(e.mem.median) : "-", fmt::ratio(s.cumulative_mem)});
    if (quality)
      t.rows.back().insert(t.rows.back().end(),
                           {fmt::or_dash(s.quality_speedup, fmt::ratio), s.quality.empty() ? "-" : s.quality});
    if (sec.several_models()) t.rows.back().insert(t.rows.back().begin(), e.model);
  }
  return t;
}

std::string chain_title(const SectionReport& sec) {
  std::string steps;
  for (const ChainStep& s : sec.chain)  // the steps once (each model's chain has them all)
    if (s.effect.model == sec.chain.front().effect.model)
      steps += (steps.empty() ? "" : " \u2192 ") + s.effect.label;
  return "Stacked: " + steps + " (the spec's [report] stack)";
}

std::string paired_title(const SectionReport& sec) { return "Paired speedup vs sweep " + sec.paired_with; }

std::string paired_note() {
  return "Each run of this sweep ran back to back with the baseline sweep's run of the same point and repeat "
         "(ctitan gate --run), so both saw the same machine. Speedup: the median of the pairs' tps/device ratios "
         "(each run's median over its steady-state steps); interval: the sign test's distribution-free interval "
         "for that median, at 95% where the pairs allow it (coverage: its exact level; fewer than 6 pairs "
         "cannot reach 95%).";
}

std::string stack_title(const StackTable& t) {
  return "world size " + std::to_string(t.world_size) + (t.group.empty() ? "" : ", " + t.group);
}

Table points_table(const SectionReport& sec) {
  Table t;
  t.header = {"#", "point"};
  t.right = {true, false};
  add_model_column(t, sec, 2);
  // The planner's predictions beside the measured numbers, where the sweep stored some.
  const bool predicted = has_predictions(sec);
  std::vector<const char*> measured = {"ws", "tps/device (p10\u2013p90)", "n", "TFLOPs", "MFU", "peak mem/rank",
                                       "final loss"};
  if (predicted) {
    measured.insert(measured.begin() + 6, {"pred. mem", "err"});
    measured.insert(measured.begin() + 3, {"pred. tps", "err"});
  }
  for (const char* h : measured) {
    t.header.push_back(h);
    t.right.push_back(true);
  }
  // The communication split, column by column: only what some point measured.
  using Field = std::optional<double> PointStats::*;
  const std::pair<const char*, Field> comm[] = {{"compute/step", &PointStats::compute_s},
                                                {"comm/step", &PointStats::comm_s},
                                                {"exposed comm/step", &PointStats::exposed_comm_s},
                                                {"idle/step", &PointStats::idle_s}};
  std::vector<Field> shown;
  for (const auto& [title, field] : comm) {
    if (std::none_of(sec.points.begin(), sec.points.end(), [&](const PointStats& p) { return (p.*field).has_value(); }))
      continue;
    shown.push_back(field);
    t.header.push_back(title);
    t.right.push_back(true);
  }
  // MFU at each dtype's peak, and over the visible attention pairs, where a point differs from TorchTitan's.
  const bool dtype_mfu = std::any_of(sec.points.begin(), sec.points.end(), [](const PointStats& p) {
    return p.mfu_by_dtype && (!p.mfu || std::abs(*p.mfu_by_dtype - *p.mfu) > 0.01 * *p.mfu);
  });
  const bool useful_mfu = std::any_of(sec.points.begin(), sec.points.end(),
                                      [](const PointStats& p) { return p.useful_mfu.has_value(); });
  if (dtype_mfu) t.header.push_back("MFU by dtype");
  if (useful_mfu) t.header.push_back("useful MFU");
  t.right.resize(t.header.size(), true);
  t.header.insert(t.header.end(), {"status", "speedup"});
  t.right.insert(t.right.end(), {false, true});
  // What a laptop screen shows by default: the name, ws, throughput, MFU,
  // memory, loss, status and speedup; the rest behind "all columns".
  static const std::set<std::string> kShown = {"#",   "point",         "model",      "ws",
                                               "tps/device (p10\u2013p90)", "MFU", "peak mem/rank", "final loss",
                                               "status", "speedup"};
  for (const std::string& h : t.header) t.optional.push_back(!kShown.count(h));
  for (size_t i = 0; i < sec.points.size(); ++i) {
    const PointStats& p = sec.points[i];
    if (p.row == 0) continue;
    std::vector<std::string> row = {std::to_string(p.row), p.short_label};
    if (sec.several_models()) row.push_back(p.model);
    row.insert(row.end(), {std::to_string(p.world_size), tps_cell(p), std::to_string(p.tps.n)});
    if (predicted)
      row.insert(row.end(), {fmt::or_dash(p.pred_tps, fmt::grouped), fmt::or_dash(p.pred_tps_error(), pct)});
    // No peak, no MFU: said so, rather than a dash that could mean "not measured".
    const std::string mfu = !p.mfu && p.peak_source == "unknown" ? "unknown peak" : fmt::or_dash(p.mfu, fmt::mfu_percent);
    row.insert(row.end(), {fmt::or_dash(p.tflops, tflops), mfu, fmt::or_dash(p.mem_peak_bytes, fmt::bytes)});
    if (predicted)
      row.insert(row.end(), {fmt::or_dash(p.pred_mem_peak_bytes, fmt::bytes), fmt::or_dash(p.pred_mem_error(), pct)});
    row.push_back(fmt::or_dash(p.loss_final, loss));
    for (Field f : shown) row.push_back(fmt::or_dash(p.*f, fmt::seconds));
    if (dtype_mfu) row.push_back(fmt::or_dash(p.mfu_by_dtype, fmt::mfu_percent));
    if (useful_mfu) row.push_back(fmt::or_dash(p.useful_mfu, fmt::mfu_percent));
    row.push_back(status_cell(p));
    row.push_back(p.baseline ? "1.00\u00d7 (baseline)" : fmt::or_dash(p.speedup, fmt::ratio));
    t.rows.push_back(std::move(row));
    t.points.push_back(i);
  }
  return t;
}

namespace {

std::string mean_cell(const stats::MeanInterval& m, size_t reached, size_t seeds, std::string (*f)(double)) {
  if (reached == 0) return "not reached";
  std::string out = f(m.mean);
  if (m.n >= 2) out += " [" + f(m.lo) + ", " + f(m.hi) + "]";
  if (reached < seeds) out += " (" + std::to_string(reached) + "/" + std::to_string(seeds) + " reached)";
  return out;
}

std::string olympic_cell(const std::optional<double>& v, std::string (*f)(double)) {
  if (!v) return "–";
  return std::isfinite(*v) ? f(*v) : "not reached";
}

std::string tokens_text(double v) { return fmt::grouped(v); }
std::string seconds_text(double v) { return fmt::fixed(v, 1) + " s"; }
std::string loss_text(double v) { return fmt::fixed(v, 4); }

}  // namespace

const std::vector<std::pair<std::string, std::string>>& goodput_columns() {
  static const std::vector<std::pair<std::string, std::string>> cols = {
      {"init_s", "init"},          {"checkpoint_load_s", "ckpt load"}, {"warmup_steps_s", "warm-up"},
      {"steady_steps_s", "steady"}, {"data_s", "data"},               {"validation_s", "validation"},
      {"checkpoint_save_sync_s", "ckpt save"}, {"checkpoint_save_async_s", "ckpt async"},
      {"logging_s", "logging"},    {"teardown_s", "teardown"}};
  return cols;
}

bool has_goodput(const SectionReport& sec) {
  return std::any_of(sec.points.begin(), sec.points.end(),
                     [](const PointStats& p) { return p.row > 0 && !p.goodput_parts.empty() && p.wall_s; });
}

Table goodput_table(const SectionReport& sec) {
  Table t;
  t.header = {"#", "point", "wall clock", "goodput"};
  // Only the parts some point spent time in (a run without checkpoints has no save column).
  std::vector<std::pair<std::string, std::string>> shown;
  for (const auto& [part, name] : goodput_columns()) {
    const bool any = std::any_of(sec.points.begin(), sec.points.end(), [&](const PointStats& p) {
      for (const auto& [n, s] : p.goodput_parts)
        if (n == part && p.wall_s && s > 0.001 * *p.wall_s) return true;
      return false;
    });
    if (!any) continue;
    shown.emplace_back(part, name);
    t.header.push_back(name);
  }
  t.header.push_back("time to 1B tokens");
  t.right.assign(t.header.size(), true);
  t.right[1] = false;
  for (size_t i = 0; i < sec.points.size(); ++i) {
    const PointStats& p = sec.points[i];
    if (p.row == 0 || p.goodput_parts.empty() || !p.wall_s || *p.wall_s <= 0) continue;
    std::vector<std::string> row = {std::to_string(p.row), p.short_label, fmt::seconds(*p.wall_s),
                                    fmt::or_dash(p.goodput, [](double g) { return fmt::fixed(100 * g, 1) + "%"; })};
    for (const auto& [part, name] : shown) {
      double v = 0;
      for (const auto& [n, s] : p.goodput_parts)
        if (n == part) v = s;
      row.push_back(fmt::fixed(100 * v / *p.wall_s, 1) + "%");
    }
    row.push_back(fmt::or_dash(p.time_to_tokens_s(kGoodputTokens), [](double s) {
      return s >= 3600 ? fmt::fixed(s / 3600, 1) + " h" : fmt::seconds(s);
    }));
    t.rows.push_back(std::move(row));
    t.points.push_back(i);
  }
  return t;
}

std::string goodput_note() {
  return "Each run's wall clock from its process's start to summary.json, split into parts each timed on its own "
         "(summary.json's goodput; medians over ok repeats); goodput = the steady steps' share. Steps are less "
         "their data loading (the data column). Time to 1B tokens: the fixed parts (init, checkpoint load, warm-up, "
         "teardown) plus the others per token, at the point's rates.";
}

bool has_rank_timing(const SectionReport& sec) {
  return std::any_of(sec.points.begin(), sec.points.end(),
                     [](const PointStats& p) { return p.row > 0 && p.straggler_share.has_value(); });
}

Table ranks_table(const SectionReport& sec) {
  Table t;
  t.header = {"#", "point", "ws", "slowest rank", "slowest in", "others wait", "busy spread", "marked"};
  t.right = {true, false, true, true, true, true, true, false};
  for (size_t i = 0; i < sec.points.size(); ++i) {
    const PointStats& p = sec.points[i];
    if (p.row == 0 || !p.straggler_share) continue;
    t.rows.push_back({std::to_string(p.row), p.short_label, std::to_string(p.world_size),
                      p.straggler_rank ? std::to_string(*p.straggler_rank) : "\u2013",
                      fmt::or_dash(p.straggler_persistence, [](double v) { return fmt::fixed(100 * v, 0) + "% of steps"; }),
                      fmt::fixed(100 * *p.straggler_share, 1) + "% of a step",
                      fmt::or_dash(p.straggler_spread_s, fmt::seconds), p.straggler_marked ? "yes" : ""});
    t.points.push_back(i);
  }
  return t;
}

std::string ranks_note() {
  return "Per rank and steady step, the busy time is the step less the time the rank was blocked in collectives "
         "(the fast ranks wait for the slow one there). Slowest rank: the most busy in the most steps; others wait: "
         "the median of (max \u2212 median busy) / step; busy spread: the median max \u2212 min. Marked: one rank "
         "slowest in \u2265 75% of steps (beyond chance: binomial, 5%) and the others waiting \u2265 10% of a step "
         "\u2014 the point's figures "
         "are that rank's; exclude or rerun it. The run with the largest share of each point is shown.";
}

std::vector<std::string> straggler_flags(const SectionReport& sec) {
  std::vector<std::string> out;
  for (const PointStats& p : sec.points) {
    if (p.row == 0 || !p.straggler_marked || !p.straggler_rank || !p.straggler_share) continue;
    out.push_back("#" + std::to_string(p.row) + " " + p.short_label + ": rank " + std::to_string(*p.straggler_rank) +
                  " was the slowest in " + fmt::fixed(100 * p.straggler_persistence.value_or(0), 0) +
                  "% of the steps and the others waited " + fmt::fixed(100 * *p.straggler_share, 0) +
                  "% of a step for it: its tokens/s are that rank's, not the recipe's (exclude or rerun the point)");
  }
  return out;
}

Table quality_table(const SectionReport& sec) {
  Table t;
  if (sec.quality.empty()) return t;
  t.header = {"#",           "point",         "seeds",         "tokens to target", "olympic",
              "time to target", "olympic",    "final loss",    "vs baseline",      "speedup at equal quality",
              "tokens/s ratio", "loss Δ at equal tokens, by seed"};
  t.right = {true, false, true, true, true, true, true, true, false, true, true, true};
  for (const QualityRow& q : sec.quality) {
    const PointStats& p = sec.points[q.point];
    const SeedSet& s = q.seeds;
    std::string verdict = q.vs ? to_string(q.vs->verdict) : "baseline";
    if (q.vs && q.vs->final_worse && q.vs->verdict != QualityVerdict::outside) verdict += ", worse final loss";
    std::string diff = "–";
    if (q.vs && q.vs->final_diff.n >= 2)
      diff = fmt::fixed(q.vs->final_diff.mean, 4) + " [" + fmt::fixed(q.vs->final_diff.lo, 4) + ", " +
             fmt::fixed(q.vs->final_diff.hi, 4) + "]";
    t.rows.push_back({std::to_string(p.row), p.short_label.empty() ? p.display_label : p.short_label,
                      std::to_string(s.seeds.size()),
                      s.target ? mean_cell(s.tokens, s.reached, s.seeds.size(), tokens_text) : "–",
                      olympic_cell(s.tokens_olympic, tokens_text),
                      s.target ? mean_cell(s.seconds, s.reached, s.seeds.size(), seconds_text) : "–",
                      olympic_cell(s.seconds_olympic, seconds_text), fmt::or_dash(s.final_loss, loss_text), verdict,
                      q.vs ? fmt::or_dash(q.vs->speedup_at_quality, fmt::ratio) : "–",
                      fmt::or_dash(q.tps_ratio, fmt::ratio), diff});
  }
  return t;
}

std::string quality_title(const SectionReport& sec) {
  for (const QualityRow& q : sec.quality)
    if (q.seeds.target) return "Quality: time to validation loss " + fmt::fixed(*q.seeds.target, 2);
  return "Quality: validation loss over seeds";
}

std::string quality_note(const SectionReport& sec) {
  std::string base;
  for (const QualityRow& q : sec.quality)
    if (!q.baseline) base += (base.empty() ? "" : "; ") + sec.points[q.point].short_label;
  return "Each point ran once per seed (the spec's [quality] seeds: model initialisation and data order). Tokens and "
         "time to target: the first crossing of the target by the validation loss (tokens interpolated between "
         "evaluations, time at the end of the evaluation that met it, from the first step: MLPerf's clock), mean "
         "over the seeds that reached it with its 95% t interval, and MLPerf's olympic mean (fastest and slowest "
         "dropped; a seed that missed counts as the slowest). Against the baseline (" +
         base +
         "): inside = every evaluation of every seed inside the band the baseline's seeds allow (t prediction "
         "interval, Bonferroni over the evaluations) and tokens to target not significantly different (Welch, "
         "2.5% each way); suspiciously fast = below the band only, or significantly fewer tokens to target, which a faster kernel cannot "
         "give. Speedup at equal quality = baseline's time to target / the point's; the tokens/s ratio beside it: "
         "the whole job's tokens/s (per device × world size) against the baseline's, what the throughput tables say. "
         "Loss Δ: the point's validation loss at its last evaluation the baseline's range holds minus the baseline's "
         "at the same training tokens, seed by seed (same initialisation and data), mean [95% t interval].";
}

std::vector<std::string> quality_flags(const SectionReport& sec) {
  std::vector<std::string> out;
  for (const QualityRow& q : sec.quality) {
    if (!q.vs || (q.vs->verdict == QualityVerdict::inside && !q.vs->final_worse)) continue;
    out.push_back(sec.points[q.point].short_label + ": " + to_string(q.vs->verdict) + " — " + q.vs->reason);
  }
  return out;
}

Table learning_table(const SectionReport& sec) {
  Table t;
  if (sec.learning.empty()) return t;
  t.header = {"runs", "spec as written: err", "before each run: err", "refitted on", "inside 80 % interval"};
  t.right = {false, true, true, true, true};
  std::string (*abs_pct)(double) = [](double v) { return fmt::fixed(100 * v, 1) + "%"; };
  for (const LearningGroup& g : sec.learning) {
    const std::string runs = std::to_string(g.first) + "–" + std::to_string(g.last);
    const std::string inside = g.with_interval == 0 ? "–"
                                                    : std::to_string(g.inside) + " of " + std::to_string(g.with_interval);
    t.rows.push_back({runs, fmt::or_dash(g.prior_error, abs_pct), fmt::or_dash(g.error, abs_pct),
                      "≥ " + std::to_string(g.learned_from) + " points", inside});
  }
  return t;
}

std::string learning_note() {
  return "The sweep refitted the planner after each point it measured and predicted the points still to run again "
         "(harness/sweep_learn.h). Runs in the order they ran, six at a time; err = median |predicted / measured "
         "− 1| of tokens/s per device: the spec as written, and the prediction stored just before each run "
         "(out of sample). An 80 % interval comes from the earlier out-of-sample errors once there are three.";
}

bool has_predictions(const SectionReport& sec) {
  return std::any_of(sec.points.begin(), sec.points.end(),
                     [](const PointStats& p) { return p.row > 0 && !p.predicted_on.empty(); });
}

std::string prediction_note(const SectionReport& sec) {
  if (!has_predictions(sec)) return "";
  std::vector<std::string> specs;
  for (const PointStats& p : sec.points)
    if (p.row > 0 && !p.predicted_on.empty() && std::find(specs.begin(), specs.end(), p.predicted_on) == specs.end())
      specs.push_back(p.predicted_on);
  std::string on;
  for (const std::string& s : specs) on += (on.empty() ? "" : "; ") + s;
  std::string note = "pred. tps, pred. mem: predicted (";  // appended piecewise: GCC 12 warns on "lit" + string
  note += on;
  note += ") by ctitan's planner when the sweep planned the point: tokens/s per device and peak memory per rank; "
          "err = predicted / measured \u2212 1.";
  return note;
}

Table stack_table(const SectionReport& sec, const StackTable& st) {
  Table t;
  t.header = {"row",
              "technique",
              "tps/device",
              "incremental",
              "cumulative",
              "peak mem/rank",
              "\u0394 mem incremental",
              "\u0394 mem cumulative"};
  t.right = {true, false, true, true, true, true, true, true};
  const PointStats* first = nullptr;
  const PointStats* prev = nullptr;
  for (size_t i : st.rows) {
    const PointStats& p = sec.points[i];
    if (!first) first = &p;
    const bool is_first = &p == first;
    t.rows.push_back({std::to_string(p.stack_index), p.stack_name, tps_cell(p),
                      is_first ? "\u2013" : fmt::or_dash(tps_ratio(p, *prev), fmt::ratio),
                      is_first ? "1.00\u00d7" : fmt::or_dash(tps_ratio(p, *first), fmt::ratio),
                      fmt::or_dash(p.mem_peak_bytes, fmt::bytes),
                      is_first ? "\u2013" : fmt::or_dash(mem_change(p, *prev), pct),
                      is_first ? "\u2013" : fmt::or_dash(mem_change(p, *first), pct)});
    prev = &p;
  }
  return t;
}

Table scaling_table(const SectionReport& sec) {
  Table t;
  t.header = {"recipe", "ws", "tps/device", "scaling efficiency"};
  t.right = {false, true, true, true};
  for (const ScalingSeries& s : sec.scaling) {
    const PointStats& base = sec.points[s.rows.front()];
    for (size_t i : s.rows) {
      const PointStats& p = sec.points[i];
      const std::optional<double> eff = tps_ratio(p, base);
      t.rows.push_back(
          {s.label, std::to_string(p.world_size), tps_cell(p), eff ? fmt::fixed(100.0 * *eff, 1) + "%" : "-"});
    }
  }
  return t;
}

Table summary_table(const SectionReport& sec, const WorldSummary& s) {
  Table t;
  t.header = {"#", "point", "tps/device", "peak mem/rank", "vs fastest", "answers"};
  t.right = {true, false, true, true, true, false};
  const PointStats& fastest = sec.points[s.fastest];
  for (size_t k = s.front.size(); k-- > 0;) {
    const PointStats& p = sec.points[s.front[k]];
    // The next point of the front needs more memory than this one: this is
    // the fastest under any budget from its memory up to that point's.
    const std::string answers =
        s.front[k] == s.fastest ? "fastest" : "fastest under " + fmt::bytes(*sec.points[s.front[k + 1]].mem_peak_bytes);
    t.rows.push_back({std::to_string(p.row), p.short_label.empty() ? p.display_label : p.short_label, tps_cell(p),
                      fmt::bytes(*p.mem_peak_bytes), fmt::ratio(p.tps.median / fastest.tps.median), answers});
    t.points.push_back(s.front[k]);
  }
  for (const auto& [budget, best] : s.budgets) {  // --memory-budget
    const std::string answers = "fastest within " + fmt::bytes(budget) + " (--memory-budget)";
    if (!best) {
      t.rows.push_back({"-", "nothing fits", "-", "-", "-", answers});
      continue;
    }
    const PointStats& p = sec.points[*best];
    t.rows.push_back({std::to_string(p.row), p.short_label, tps_cell(p), fmt::bytes(*p.mem_peak_bytes),
                      fmt::ratio(p.tps.median / fastest.tps.median), answers});
    t.points.push_back(*best);
  }
  return t;
}

std::string summary_title(const WorldSummary& s) {
  return "Summary — world size " + std::to_string(s.world_size) + (s.model.empty() ? "" : ", " + s.model) +
         ": the fastest point, and the fastest under each memory budget";
}

std::string summary_note() {
  return "The Pareto front of tokens/s per device against peak memory per rank: no other point at this world size "
         "is both faster and lighter. Each row is the fastest point whose peak memory fits the budget in its last "
         "column.";
}

std::vector<std::string> failure_lines(const SectionReport& sec) {
  std::vector<std::string> out;
  for (const PointStats& p : sec.points) {
    if (p.status == "ok" || p.status == "infeasible") continue;
    out.push_back(p.display_label + " (ws " + std::to_string(p.world_size) + "): " + p.status +
                  (p.error.empty() ? "" : " \u2014 " + p.error));
  }
  return out;
}

std::vector<std::string> infeasible_lines(const SectionReport& sec) {
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // reason → points, in order
  for (const PointStats& p : sec.points) {
    if (p.status != "infeasible") continue;
    const std::string reason = p.error.empty() ? "no reason recorded" : p.error;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == reason; });
    if (it == groups.end()) it = groups.insert(groups.end(), {reason, {}});
    it->second.push_back(p.short_label + " (ws " + std::to_string(p.world_size) + ")");
  }
  std::vector<std::string> out;
  for (const auto& [reason, names] : groups) {
    std::string line =
        reason + " \u2014 " + std::to_string(names.size()) + (names.size() == 1 ? " point: " : " points: ");
    for (size_t i = 0; i < names.size() && i < 3; ++i) line += (i ? "; " : "") + names[i];
    if (names.size() > 3) line += "; \u2026";
    out.push_back(line);
  }
  return out;
}

void write_markdown_table(std::ostringstream& out, const Table& t) {
  out << "|";
  for (const std::string& h : t.header) out << " " << fmt::md_escape(h) << " |";
  out << "\n|";
  for (bool r : t.right) out << (r ? "---:|" : "---|");
  out << "\n";
  for (const auto& row : t.rows) {
    out << "|";
    for (const std::string& c : row) out << " " << fmt::md_escape(c) << " |";
    out << "\n";
  }
  out << "\n";
}

void write_html_table(std::ostringstream& out, const Table& t, const std::vector<std::string>& row_classes) {
  out << "<div class=\"wide\"><table><thead><tr>";
  for (const std::string& h : t.header) out << "<th>" << fmt::html_escape(h) << "</th>";
  out << "</tr></thead><tbody>";
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const std::string cls = i < row_classes.size() ? row_classes[i] : "";
    out << (cls.empty() ? "<tr>" : "<tr class=\"" + cls + "\">");
    for (size_t c = 0; c < t.rows[i].size(); ++c)
      out << (t.right[c] ? "<td class=\"r\">" : "<td>") << fmt::html_escape(t.rows[i][c]) << "</td>";
    out << "</tr>";
  }
  out << "</tbody></table></div>\n";
}

void write_html_sortable_table(std::ostringstream& out, const Table& t, const std::string& id,
                               const std::vector<std::string>& row_classes) {
  const auto cls = [&](size_t c) {
    std::string k = t.right[c] ? "r" : "";
    if (c < t.optional.size() && t.optional[c]) k += k.empty() ? "opt" : " opt";
    return k.empty() ? std::string() : " class=\"" + k + "\"";
  };
  out << "<table id=\"" << id << "\" class=\"sortable compact\"><thead><tr>";
  for (size_t c = 0; c < t.header.size(); ++c)
    out << "<th" << cls(c) << " title=\"sort by " << fmt::html_escape(t.header[c]) << "\">" << fmt::html_escape(t.header[c])
        << "</th>";
  out << "</tr></thead><tbody>";
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const std::string rc = i < row_classes.size() ? row_classes[i] : "";
    out << (rc.empty() ? "<tr>" : "<tr class=\"" + rc + "\">");
    for (size_t c = 0; c < t.rows[i].size(); ++c) out << "<td" << cls(c) << ">" << fmt::html_escape(t.rows[i][c]) << "</td>";
    out << "</tr>";
  }
  out << "</tbody></table>\n";
}

}  // namespace ctitan::render
