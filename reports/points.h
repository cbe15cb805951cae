// Points and their runs, read from a results database: what reports and the
// gate compare. A point is (config, world size), identified by its point
// key; its repeats are runs.
//
// Which rows count:
//   - per (sweep, repeat) only the newest row: a retried repeat replaces the
//     failed attempt it followed;
//   - one measurement once: rows that point at the same run directory (a
//     sweep reusing another sweep's ok run records a row of its own) are
//     the same samples and are kept once;
//   - steady state: step rows after metrics.warmup_steps (read from the
//     run's stored config), as summary.json's statistics do. A run without
//     step rows falls back to its summary's median.
// Reading never writes to the database.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/quality.h"
#include "results/results_db.h"

namespace ctitan {

// Which runs: "sweep:NAME" (or a bare NAME), "sha:GITSHA" (prefix of the
// git sha in the runs' env.json, either way round), "build:BUILD_ID" (the
// same for the build id: one commit built clean and dirty are two builds),
// "label:LABEL" (that label in any sweep), "all", or the runs recorded
// outside any sweep.
struct Selection {
  enum class Kind { all, sweep, sha, build, label, outside_sweeps };
  Kind kind = Kind::all;
  std::string value;
  std::string describe() const;  // "sweep debug", "git sha 1a2b3c", ...
};
// InputError for an empty value or an unknown prefix.
Selection parse_selection(const std::string& text);

struct RunData {
  RunRow run;
  std::optional<SummaryRow> summary;
  int64_t warmup_steps = 0;
  // Steady-state step values (rank 0; one per logged step after warmup).
  std::vector<double> tps, step_time_s, tflops, mfu;
  std::vector<std::pair<int64_t, double>> loss;  // (step, loss) of every logged step
  std::map<std::string, std::string> env;        // env.json, flattened
  std::optional<PredictionRow> prediction;       // the planner's, stored by the sweep (schema v6)
  // Its validation passes (schema v12: with training tokens and wall clock), in step order.
  std::vector<EvalPoint> validation;
  // Schema v13: its wall clock's parts (common/run_timing.h order) and, for
  // a multi-rank run, every rank's times per steady step.
  std::vector<std::pair<std::string, double>> goodput;
  std::vector<RankStepRow> rank_steps;
};

struct PointData {
  std::string sweep;  // name of the sweep of its first run ("" outside sweeps)
  std::string label;
  int64_t world_size = 1;
  std::string point_key;
  std::vector<RunData> runs;  // in run order

  // "ok" when every run is ok; otherwise the most severe status among its
  // runs (oom > timeout > failed > cancelled > running > pending > infeasible).
  std::string status() const;
  std::vector<const RunData*> ok_runs() const;
  // The first line of the first non-ok run's error ("" when none).
  std::string first_error() const;
};

// Points of the selection in their sweep's spec order (the plan_index the
// sweep stored with its runs' predictions; sweeps run the fastest predicted
// points first), sweeps in the order they were first recorded; points
// without a plan index (runs before schema v6) after a sweep's others, in
// the order their first run was recorded. InputError when the selection
// names a sweep that is not in the database (the message lists the ones
// that are).
std::vector<PointData> load_points(const ResultsDb& db, const Selection& sel);

// `--exclude-marked`: every ok run whose straggler figures were marked
// (summaries.straggler_marked: one rank slowest in most steps, the others
// waiting a tenth of a step) becomes status "straggler" — left out of every
// statistic as a failed run is, its error naming the rank. Returns how many.
size_t exclude_marked_runs(std::vector<PointData>& points);

// A point's name in gate and parity tables: "LABEL ws=N" ("(base)" for an
// empty label).
std::string point_name(const PointData& p);

// The candidate's points paired with the baseline's: by name, or by world
// size alone (two label selections); two sides of one point each are paired
// whatever their names (two recipes compared as such, e.g. FSDP 2 against
// one process at the same global batch). Candidate order, then the points only
// the baseline has; a side's pointer is null where the point is only on
// the other side.
struct MatchedPoint {
  std::string name;  // the candidate's (the baseline's where only it has the point)
  const PointData* base = nullptr;
  const PointData* cand = nullptr;
};
std::vector<MatchedPoint> match_points(const std::vector<PointData>& base, const std::vector<PointData>& cand,
                                       bool match_by_world_size);

// metrics.warmup_steps of a stored config (the trainer's default when unset
// or unreadable).
int64_t warmup_steps_of(const std::string& config_toml);

// Keys of env.json that describe the machine and the library a number was
// measured with: a difference in any makes two sides incomparable.
const std::vector<std::string>& hardware_env_keys();

}  // namespace ctitan
