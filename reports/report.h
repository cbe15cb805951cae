// `ctitan report`: the tables and charts of one or more sweeps, built once
// as plain data and rendered as Markdown (a PR comment), self-contained
// HTML (inline SVG, no JavaScript, no network), CSV or JSON.
//
// Per point: tps per device as the median of the steady-state steps of every
// ok repeat, with p10–p90 and the quartiles; TFLOPs and MFU as the medians
// of the same steps; peak memory, final loss and the communication split
// (compute / comm / exposed comm / idle per step) as medians over repeats;
// speedup = tps / tps of the baseline row at the same world size (and of
// the same model: reports/models.h).
// Stack tables follow TorchTitan's "stacked optimizations": each row adds
// one technique, with incremental (vs the row above) and cumulative (vs the
// first row) speedup and memory change. Scaling tables give tps per device
// and its efficiency relative to the smallest world size of each recipe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reports/convergence.h"
#include "reports/points.h"
#include "reports/stats.h"

namespace ctitan {

struct PointStats {
  std::string sweep, label, point_key;
  std::string display_label;  // the label less the settings every point of the section shares
  // Its name (reports/aliases.h): the layout where layouts differ in the
  // section, then the short tokens of the other varying settings, then the
  // stack row: "fsdp2 compile f8 ac=full b2", "tp2 b2", "b2 +Float8".
  std::string short_label;
  std::string layout;  // "fsdp2 tp2", "single" ("" when unknown)
  // The model it trains (reports/models.h): its identity, and its name as
  // SectionReport::models spells it ("qwen3 debugmodel_moe e16 top2").
  std::string model_key, model;
  std::vector<std::string> settings;  // value of each SectionReport::varying_keys ("" when unset)
  std::string stack_group;            // the label without its "stack=K:NAME" part
  std::string stack_name;             // NAME of "stack=K:NAME" ("" outside stacks)
  int stack_index = 0;                // K
  int64_t world_size = 1;
  int row = 0;  // 1-based number in the points table and charts; 0 for an infeasible point (not listed)
  size_t repeats = 0, ok_runs = 0;
  std::string status;       // PointData::status()
  std::string error;        // first line of a failed run's error
  stats::Distribution tps;  // n == 0: no throughput measured
  std::optional<double> tflops, mfu, mem_peak_bytes, loss_final;
  std::optional<double> compute_s, comm_s, exposed_comm_s, idle_s;
  std::optional<double> speedup;  // vs the baseline row at this world size, of this model
  bool baseline = false;
  std::vector<std::pair<int64_t, double>> loss_curve;  // median over ok repeats, per step
  // The planner's prediction the sweep stored with the point's runs (its
  // newest run's; none for runs recorded before schema v6): tokens/s per
  // device and peak bytes per rank, on `predicted_on` ("h100_sxm,
  // uncalibrated"). Errors: predicted / measured − 1.
  std::optional<double> pred_tps, pred_mem_peak_bytes;
  // A sweep that learned as it ran (schema v11): the spec's prediction
  // before the sweep measured anything, the 80 % interval of pred_tps, and
  // how many measured points pred_tps was refitted on (0: the spec as written).
  std::optional<double> pred_tps_prior, pred_tps_low, pred_tps_high;
  int64_t learned_from = 0;
  std::string predicted_on;
  // Where the wall clock went (schema v13): each goodput part's median over
  // the ok runs (common/run_timing.h's order), the wall clock's, the
  // steady steps' share and the tokens of the steady steps.
  std::vector<std::pair<std::string, double>> goodput_parts;
  std::optional<double> wall_s, goodput, steady_tokens;
  // The wall clock `n` tokens would take at the point's rates
  // (Goodput::time_to_tokens_s over the median parts); none without goodput.
  std::optional<double> time_to_tokens_s(double n) const;
  // Multi-rank points with rank timing: the figures of the ok run whose
  // straggler share is largest (the worst), and that run's busy time per
  // steady step and rank (rank_busy[i][r] at step rank_busy_steps[i]).
  std::optional<int64_t> straggler_rank;
  std::optional<double> straggler_share, straggler_persistence, straggler_spread_s;
  bool straggler_marked = false;  // any ok run marked
  std::vector<std::vector<double>> rank_busy;
  std::vector<int64_t> rank_busy_steps;
  // MFU's peak: where it came from ("unknown": no MFU), and the MFUs that name theirs.
  std::string peak_source;
  std::optional<double> mfu_by_dtype, useful_mfu;
  std::optional<double> pred_tps_error() const;
  std::optional<double> pred_mem_error() const;
};

// How a learning sweep's predictions improved as it ran: its ok runs in
// the order they ran, in groups of six. Per group: the median |predicted /
// measured − 1| of the spec as written and of the prediction made just
// before each run, and how many measured values fell inside their 80 %
// interval (of those that had one).
struct LearningGroup {
  int64_t first = 0, last = 0;  // 1-based run numbers in run order
  size_t runs = 0;
  std::optional<double> prior_error, error;  // median absolute, as fractions
  size_t with_interval = 0, inside = 0;
  int64_t learned_from = 0;  // the fewest points a prediction of the group was refitted on
};

struct StackTable {
  std::string group;  // the grid point the rows stack on ("" without a grid)
  int64_t world_size = 1;
  std::vector<size_t> rows;  // indices into SectionReport::points, by stack index
};

struct ScalingSeries {
  std::string label;         // short label
  std::vector<size_t> rows;  // indices into SectionReport::points, by world size
};

// A point of a sweep run in pairs with a baseline sweep (`ctitan gate
// --run`): run r of the point ran back to back with the baseline's run r,
// so each pair's ratio of tps/device (each run's median over its
// steady-state steps) cancels the machine's drift. speedup is the median
// of the pairs' ratios, [lo, hi] its sign-test interval
// (stats::median_interval at 95 %, `level` its exact coverage).
struct PairedSpeedup {
  std::string label;  // display label, as in the points table
  int64_t world_size = 1;
  size_t pairs = 0;
  double speedup = 0, lo = 0, hi = 0, level = 0;
};

// The answer first, per world size: the fastest point (tokens/s per
// device) and the Pareto front of tokens/s per device against peak memory
// per rank — the points no other point beats on both; the fastest point
// within any memory budget is the front's fastest at or under it. A
// section of several models has one per world size and model: points of
// two models are never ranked against each other.
struct WorldSummary {
  int64_t world_size = 1;
  std::string model;           // the model of its points where the section has several ("" otherwise)
  size_t fastest = 0;          // index into SectionReport::points
  std::vector<size_t> front;   // indices, by peak memory ascending (tps ascending with it)
  // Each --memory-budget (bytes per rank) and the fastest point within it (none: nothing fits).
  std::vector<std::pair<double, std::optional<size_t>>> budgets;
};

// Indices of the points (x = cost to minimise, y = value to maximise) that no
// other point dominates (x' <= x and y' >= y, one strictly), by x
// ascending; of equal points the first. Empty input: empty.
std::vector<size_t> pareto_front(const std::vector<std::pair<double, double>>& points);

// A median paired ratio (to / from) with the sign test's distribution-free
// interval (stats::median_interval of the log-ratios at 95 %; `level` its
// exact coverage: fewer than 6 pairs cannot reach 95 %). n == 0: no pair.
struct PairedRatio {
  size_t n = 0;
  double median = 1, lo = 1, hi = 1, level = 0;
};
PairedRatio paired_ratio(const std::vector<double>& ratios);

// What one setting buys: every ok point with `to` matched with the point
// that differs from it in this setting alone (`from`; same world size, same
// stack row, every other setting equal, same model). Ratios of tokens/s per
// device and of peak memory per rank over the matched pairs. A section of
// several models has each model's effects on their own.
struct KnobEffect {
  std::string model;          // the model of its pairs where the section has several ("" otherwise)
  std::string key;            // "compile.enable"
  std::string from, to;       // the values as labels spell them ("false", "true")
  std::string label;          // reports/aliases.h: "compile", "ac=full", "ddp2"… (value_name of `to`)
  std::string versus;         // value_name of `from`: "eager", "ac=none"
  size_t candidates = 0;      // ok points with `to`: pairs + the ones with no match
  PairedRatio tps, mem;       // mem over the pairs where both measured memory
  std::vector<std::pair<size_t, size_t>> pairs;  // (from point, to point), indices into SectionReport::points
};

// One row of a stacked chain (`[report] stack = [...]` in the spec): the
// step from the row above, matched as a KnobEffect with the earlier steps'
// settings at their `to` values and the later ones' at their `from`.
struct ChainStep {
  KnobEffect effect;
  double cumulative_tps = 1, cumulative_mem = 1;  // product of the step medians so far
  // A quality sweep's chain: the step's speedup at equal quality (the
  // median over its pairs of the ratio of mean times to target, from / to)
  // and the worst quality verdict of its `to` points against their `from`
  // points; unset / "" where the points have no seeds or no target.
  std::optional<double> quality_speedup;
  std::string quality;
};

// A point of a quality sweep (`[quality] seeds`): its seeds' validation
// curves (reports/convergence.h), against its quality baseline — the first
// point with seeds of the same model in spec order, or the one `--baseline`
// names — unless it is that baseline.
struct QualityRow {
  size_t point = 0;                       // index into SectionReport::points
  std::optional<size_t> baseline;         // its baseline's index; unset for a baseline
  SeedSet seeds;
  std::optional<QualityComparison> vs;    // against the baseline
  std::optional<double> tps_ratio;        // the whole job's tokens/s (per device × world size), point / baseline
};

struct SectionReport;
// Every varying setting's effects: for each value other than the first the
// points show (spec order), against that first value; model by model where
// the section has several. Settings whose values never pair up are left
// out (a model key's never do: its two values are two models).
std::vector<KnobEffect> knob_effects(const SectionReport& sec);
// The chain of `steps` ((key, to) in order; `from` is each key's first
// value in the points), one chain per model where the section has several
// (ChainStep::effect.model; the cumulative ratios start again with each);
// InputError naming a key the section does not vary, a value no point has,
// or a key that changes the model (reports/models.h).
std::vector<ChainStep> stack_chain(const SectionReport& sec,
                                   const std::vector<std::pair<std::string, std::string>>& steps);
// `[report] stack` of a stored spec: ("compile.enable", "") or
// ("training.local_batch_size", "2"); empty when the spec has none.
std::vector<std::pair<std::string, std::string>> report_stack_of(const std::string& spec_toml);

struct SectionReport {
  std::string title;  // sweep name, or "runs outside any sweep"
  std::vector<PointStats> points;
  // The label keys whose values differ between points (grid axes), in label
  // order (alias::key_name gives their short names).
  std::vector<std::string> varying_keys;
  std::vector<std::string> common;  // the tokens every point shares ("fsdp2", "b2"): the section header
  std::vector<StackTable> stacks;
  std::vector<ScalingSeries> scaling;
  bool has_comm = false;                 // any point has the communication split
  std::string baseline_label;            // short label of the baseline rows
  std::vector<std::string> environment;  // "cpu_model: ...", one line per hardware key
  std::string paired_with;               // the baseline sweep of a paired sweep ("" otherwise)
  std::vector<PairedSpeedup> paired;     // its points with at least one ok pair
  // The distinct models of its points (PointStats::model), in order of
  // appearance. More than one: every comparison is made within one model.
  std::vector<std::string> models;
  bool several_models() const { return models.size() > 1; }
  std::vector<WorldSummary> summary;     // world sizes (x models) with an ok point that has throughput and memory
  std::vector<KnobEffect> effects;       // knob_effects()
  std::vector<ChainStep> chain;          // the spec's [report] stack (empty without one)
  std::vector<std::string> chain_keys;   // its entries as written
  std::string chain_note;                // why the chain could not be formed ("" when it was)
  std::vector<LearningGroup> learning;   // empty unless the sweep learned as it ran
  std::vector<QualityRow> quality;       // points with seeds' validation curves, in point order
  const QualityRow* quality_of(size_t point) const;  // nullptr when the point has none
};

struct Report {
  std::string db_path, generated_at, ctitan_version;
  std::vector<SectionReport> sections;
};

struct ReportOptions {
  std::string sweep;     // "": every sweep (one section each)
  std::string baseline;  // label of the baseline rows; "": the first point at each world size
  std::vector<double> memory_budgets;  // bytes per rank (--memory-budget): the fastest within each, per world size
  bool exclude_marked = false;         // --exclude-marked: runs with a marked straggler count as not ok
};

// "80GiB", "512 MiB", "1.5GB", "24" (GiB) → bytes; InputError naming the
// text otherwise.
double parse_memory_budget(const std::string& text);

// InputError for an unknown sweep, a baseline label no point has, or a
// database without runs.
Report build_report(const ResultsDb& db, const ReportOptions& opts);
// The section of one set of points (exposed for tests).
SectionReport build_section(const std::string& title, const std::vector<PointData>& points,
                            const std::string& baseline_label, const std::vector<double>& memory_budgets = {});
// The paired speedups of `cand`'s points over `base`'s, matched by label,
// world size and repeat; labels as `sec` displays them.
std::vector<PairedSpeedup> paired_speedups(const std::vector<PointData>& base, const std::vector<PointData>& cand,
                                           const SectionReport& sec);

std::string render_markdown(const Report& r);
std::string render_html(const Report& r);
std::string render_csv(const Report& r);
nlohmann::json render_json(const Report& r);

}  // namespace ctitan
