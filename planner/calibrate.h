// `ctitan plan --calibrate DB`: fits a hardware spec's efficiencies to the
// measured runs of a results database and says how well the fitted model
// predicts runs it did not see.
//
// The ok runs (median step time of the steady steps on rank 0, peak memory)
// are split by run id: two of every three fit, the third is held out; or
// (--holdout largest) the largest models and world sizes are held out, so
// the error says how far the fit extrapolates. The step-time efficiencies
// (GEMM, attention, memory bandwidth, kernel overhead, communication
// bandwidth and latency, overlap, per-step overhead) are fitted by
// Nelder-Mead on the squared log error of the predicted step time; the
// memory terms (activation factor, allocator slack) on the squared relative
// error of the peak. Every constant stays inside its physical range
// (fit_bound) and is pulled towards the spec's prior. The fitted spec is
// written (after each round, atomically, so a killed calibration leaves
// one) with a [calibration] source naming the database, the run counts and
// both errors, so every later prediction says where it came from.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "planner/hardware.h"
#include "planner/model_desc.h"
#include "trainer/config/job_config.h"

namespace ctitan {

// Which runs calibrate() holds out: every third (by run id), or the
// largest: the models with the most parameters and the largest world sizes
// (the upper half of the distinct values of each, at least the largest one),
// fitting on the smaller ones only. every_third on 6 to kThreeFoldMaxRuns
// runs is 3-fold: each third is held out in turn and predicted by a fit of
// the other two (every run's error is out of sample), and the spec is then
// fitted on all; a larger database keeps one split (four fits would cost
// more than a single third's errors are worth there).
enum class Holdout { every_third, largest };
inline constexpr size_t kThreeFoldMaxRuns = 160;
// Whether every_third runs 3-fold for `runs` runs.
bool three_fold(size_t runs);
// How `holdout` splits `runs` runs, as the output says it.
std::string holdout_rule(Holdout holdout, size_t runs);
// "every-third" | "largest"; throws InputError (one line) for anything else.
Holdout parse_holdout(const std::string& text);

struct CalibrationOptions {
  std::string db_path;
  std::string hardware = "cpu";  // the spec to start from
  std::string out_path;          // "" : <db>.<spec>.toml
  bool json = false;
  Holdout holdout = Holdout::every_third;
  bool progress = true;  // a line on stderr every few seconds
};

struct MeasuredRun {
  int64_t run_id = 0;
  std::string label;   // "ws=2 FSDP 2 ac=full bs=2"
  JobConfig cfg;
  int world_size = 1;
  double step_time_s = 0;     // median of the steady steps, rank 0
  double mem_peak_bytes = 0;  // the run's peak (summaries); 0: not measured
  // Whether the run's machine widened bf16 GEMMs (its env's aten_cpu_capability
  // is not AVX512); -1: not recorded (runs before that key), the spec's.
  int bf16_gemm_widened = -1;
  // The run's machine as probed there (its env's machine_probe.* keys); unset:
  // not recorded (runs before the probe), predicted with this machine's.
  std::optional<MachineProbe> machine;
  std::string framework = "ctitan";  // PlanRequest::framework
  std::optional<ModelDesc> model;     // a published row's own model (else cfg.model's)
};

// The ok runs of a results database with a step time and a peak. Throws
// InputError for a missing/unreadable database or one without such runs.
std::vector<MeasuredRun> measured_runs(const std::string& db_path);

struct CalibrationResult {
  HardwareSpec spec;  // fitted
  std::vector<MeasuredRun> fit, holdout;
  std::vector<std::string> holdout_why;  // per held-out run: why it was held out
  std::string rule;                      // how the runs were split, for the output
  std::vector<double> fit_time_err, holdout_time_err;  // relative, signed (pred/meas - 1)
  std::vector<double> fit_mem_err, holdout_mem_err;
  double holdout_time_median_abs = 0, holdout_mem_median_abs = 0;
  double fit_time_median_abs = 0, fit_mem_median_abs = 0;
};

struct FitOptions {
  const HardwareSpec* prior = nullptr;  // pulled towards (default: start)
  int rounds = 3;                       // restarts of Nelder-Mead
  bool progress = false;                // a line on stderr every few seconds
  std::string label;                    // in those lines ("fold 2/5")
  // After each round: the spec so far (the caller writes it, so a killed
  // calibration leaves the last one) and what was fitted.
  std::function<void(const HardwareSpec&, const std::string&)> on_round;
};

// The split (Holdout), the fit and the errors of both sets.
CalibrationResult calibrate(const HardwareSpec& start, const std::vector<MeasuredRun>& runs, const std::string& source,
                            Holdout holdout = Holdout::every_third, const FitOptions& fit = {});

// The physical range a fitted constant is kept in (fit_spec); keys as in
// spec_range. GPU efficiencies in (0, 1]; a cpu spec's (ratios to a peak
// measured where it plans) in [0.01, 8]; kernel overhead 0-20 us on a GPU,
// 0-50 us on a CPU.
struct FitBound {
  double lo = 0, hi = 1;
};
FitBound fit_bound(const std::string& key, bool cpu);
// The constants fit_spec fits, by fit_bound key, with their values in `h`.
std::vector<std::pair<std::string, double>> fitted_constants(const HardwareSpec& h);

// The spec with its efficiencies fitted to `fit`, starting from `start` and
// pulled towards `prior` (default: start) inside their fit_bound ranges.
// Above 160 rows the rounds fit an evenly spread subsample of 160 and one
// more polishes on all rows. Its calibration text is unchanged.
HardwareSpec fit_spec(const HardwareSpec& start, const std::vector<MeasuredRun>& fit, const FitOptions& o);
HardwareSpec fit_spec(const HardwareSpec& start, const std::vector<MeasuredRun>& fit, const HardwareSpec* prior = nullptr,
                      int rounds = 3);

// Relative errors (predicted / measured - 1) of one run under a spec; mem is
// NaN when the run has no measured peak.
struct RunErrors {
  double step = 0, mem = 0;
};
RunErrors run_errors(const HardwareSpec& spec, const MeasuredRun& r);

// k-fold cross-validation: fold f fits `start` (with `fit`, its label set
// to "fold f/k") to the runs i with i % folds != f and predicts the runs it
// left out. The errors of every run from the fit that did not see it, in
// run order; `on_fold(f)` after each fold (progress lines, partial writes).
// folds = runs.size() is leave-one-out.
std::vector<RunErrors> cross_validate(const HardwareSpec& start, const std::vector<MeasuredRun>& runs, size_t folds,
                                      FitOptions fit, const std::function<void(size_t)>& on_fold = {});
double median_abs_error(const std::vector<double>& errors);  // NaNs left out

// Runs the whole command: prints the per-run table (fit / held out), the
// medians and where the spec was written. Returns the exit code.
int calibrate_command(const CalibrationOptions& o, std::ostream& out);

}  // namespace ctitan
