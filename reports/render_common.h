// Cells and rows the Markdown and HTML renderers share, so both print the
// same table: the same columns, the same numbers, the same status text.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "reports/report.h"

namespace ctitan::render {

struct Table {
  std::vector<std::string> header;
  std::vector<bool> right;  // right-aligned (numeric) columns
  std::vector<std::vector<std::string>> rows;
  std::vector<size_t> points;  // points_table: the point of each row
  std::vector<bool> optional;  // columns the HTML table hides until "all columns" is ticked (empty: none)
};

// One row per point that was not pruned as infeasible: #, its name
// (PointStats::short_label), [its model where the section has several,]
// ws, tps/device (p10–p90), n, TFLOPs,
// MFU, peak mem/rank, final loss (with the predicted columns when
// has_predictions()), [compute, comm, exposed comm, idle — those
// some point measured,] status, speedup.
Table points_table(const SectionReport& sec);
Table stack_table(const SectionReport& sec, const StackTable& t);
Table scaling_table(const SectionReport& sec);
// The summary of one world size: its Pareto front, fastest first — #, the
// point's short label, tps/device, peak mem/rank, tps vs the fastest, and
// the budget each row answers ("fastest", "fastest under 1.25 GiB").
Table summary_table(const SectionReport& sec, const WorldSummary& s);
// "world size 2: fastest, and the fastest under each memory budget";
// "world size 2, deepseek_v3 debugmodel: ..." in a section of several models.
std::string summary_title(const WorldSummary& s);
std::string summary_note();                         // what the front is
// A section of several models: that each is compared with itself only, and
// the models ("" for a section of one).
std::string models_note(const SectionReport& sec);
// Each setting's effect (SectionReport::effects): [model where the section
// has several,] setting, versus, pairs
// ("16", or "14 of 16" where some points had no match), tokens/s ratio and
// interval, memory ratio and interval, coverage.
Table effects_table(const SectionReport& sec);
std::string effects_note();
// The spec's stacked chain: [model,] row, technique, pairs, step and
// cumulative ratios of tokens/s and memory.
Table chain_table(const SectionReport& sec);
std::string chain_title(const SectionReport& sec);  // "Stacked: compile → Float8 (the spec's [report] stack)"
std::string ratio_interval(const PairedRatio& r);    // "1.41–1.55"
std::string common_line(const SectionReport& sec);   // what every point shares: "fsdp2 · b2"

// A paired sweep's speedups over its baseline sweep: recipe, ws, pairs,
// speedup, interval, its coverage.
Table paired_table(const SectionReport& sec);
std::string paired_title(const SectionReport& sec);  // "Paired speedup vs sweep X"
std::string paired_note();                            // how the numbers were made

// Whether a listed point has the planner's prediction (then points_table
// has "pred. tps", "err" beside tps/device and "pred. mem", "err" beside
// peak mem/rank), and the note naming the spec(s) it was predicted on
// ("" without predictions).
bool has_predictions(const SectionReport& sec);
// A learning sweep's groups of runs (SectionReport::learning): runs, the
// spec's error, the error of the predictions made before each run, the
// points they were refitted on, and interval coverage. Empty table
// without learning.
// The quality section of a [quality] sweep: per point its seeds, tokens and
// time to target (mean [95 % t interval], olympic mean), final loss, and
// against the quality baseline the verdict, the speedup at equal quality
// beside the tokens/s ratio, and the final loss's paired difference by seed.
Table quality_table(const SectionReport& sec);
std::string quality_title(const SectionReport& sec);  // "Quality: validation loss 4.00 as the target"
std::string quality_note(const SectionReport& sec);
// The points outside the band, slower or suspiciously fast: one line each.
std::vector<std::string> quality_flags(const SectionReport& sec);
// Where the wall clock went (schema v13): one row per ok point with goodput:
// wall clock, goodput (the steady steps' share), each part's share, the
// projected wall clock to kGoodputTokens tokens.
inline constexpr double kGoodputTokens = 1e9;
bool has_goodput(const SectionReport& sec);
Table goodput_table(const SectionReport& sec);
std::string goodput_note();
// The parts a goodput bar shows, in order, with their short names ("init", "warm-up", ...).
const std::vector<std::pair<std::string, std::string>>& goodput_columns();
// Multi-rank points with rank timing: slowest rank, how often, the share of
// a step the others waited, the busy-time spread, marked or not.
bool has_rank_timing(const SectionReport& sec);
Table ranks_table(const SectionReport& sec);
std::string ranks_note();
// One line per marked point: which rank, how often, how long the others waited.
std::vector<std::string> straggler_flags(const SectionReport& sec);
Table learning_table(const SectionReport& sec);
std::string learning_note();
std::string prediction_note(const SectionReport& sec);

std::string status_cell(const PointStats& p);  // "ok", "oom", "ok 2/3 (1 timeout)"
std::string tps_cell(const PointStats& p);     // "12,345 (11,900–12,700)"
std::string stack_title(const StackTable& t);  // "world size 2, compile.enable=false"

// Points that ran and are not ok, with the first line of their error.
std::vector<std::string> failure_lines(const SectionReport& sec);
// Infeasible points grouped by reason: "REASON — N points: a; b; c; …".
std::vector<std::string> infeasible_lines(const SectionReport& sec);

// A table as Markdown (escaped cells, right-aligned numeric columns), and as
// an HTML <table> in the report's "wide" div (a class per row, optional).
void write_markdown_table(std::ostringstream& out, const Table& t);
void write_html_table(std::ostringstream& out, const Table& t, const std::vector<std::string>& row_classes = {});
// The same as an interactive table (the HTML report's script sorts it by a
// header click and filters it): id, class "sortable", optional columns
// marked "opt", no scrolling wrapper so its header can stick to the top.
void write_html_sortable_table(std::ostringstream& out, const Table& t, const std::string& id,
                               const std::vector<std::string>& row_classes = {});

}  // namespace ctitan::render
