// `ctitan plan --calibrate DB`: fits a hardware spec's efficiencies to the
// measured runs of a results database and says how well the fitted model
// predicts runs it did not see.
//
// The ok runs (median step time of the steady steps on rank 0, peak memory)
// are split by run id: two of every three fit, the third is held out. The
// step-time efficiencies (GEMM, attention, memory bandwidth, kernel
// overhead, communication bandwidth and latency, overlap, per-step
// overhead) are fitted by Nelder-Mead on the squared log error of the
// predicted step time; the memory terms (activation factor, allocator
// slack) on the squared relative error of the peak. The fitted spec is
// written with a [calibration] source naming the database, the run counts
// and both errors, so every later prediction says where it came from.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "planner/hardware.h"
#include "planner/model_desc.h"
#include "trainer/config/job_config.h"

namespace ctitan {

struct CalibrationOptions {
  std::string db_path;
  std::string hardware = "cpu";  // the spec to start from
  std::string out_path;          // "" : <db>.<spec>.toml
  bool json = false;
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
  std::string framework = "ctitan";  // PlanRequest::framework
  std::optional<ModelDesc> model;     // a published row's own model (else cfg.model's)
};

// The ok runs of a results database with a step time and a peak. Throws
// InputError for a missing/unreadable database or one without such runs.
std::vector<MeasuredRun> measured_runs(const std::string& db_path);

struct CalibrationResult {
  HardwareSpec spec;  // fitted
  std::vector<MeasuredRun> fit, holdout;
  std::vector<double> fit_time_err, holdout_time_err;  // relative, signed (pred/meas - 1)
  std::vector<double> fit_mem_err, holdout_mem_err;
  double holdout_time_median_abs = 0, holdout_mem_median_abs = 0;
  double fit_time_median_abs = 0, fit_mem_median_abs = 0;
};

// Two of every three runs fit, every third is held out.
CalibrationResult calibrate(const HardwareSpec& start, const std::vector<MeasuredRun>& runs, const std::string& source);

// The spec with its efficiencies fitted to `fit`, starting from `start` and
// weakly pulled towards `prior` (default: start); `rounds` restarts of
// Nelder-Mead. Its calibration text is unchanged.
HardwareSpec fit_spec(const HardwareSpec& start, const std::vector<MeasuredRun>& fit, const HardwareSpec* prior = nullptr,
                      int rounds = 3);

// Relative errors (predicted / measured - 1) of one run under a spec; mem is
// NaN when the run has no measured peak.
struct RunErrors {
  double step = 0, mem = 0;
};
RunErrors run_errors(const HardwareSpec& spec, const MeasuredRun& r);
double median_abs_error(const std::vector<double>& errors);  // NaNs left out

// Runs the whole command: prints the per-run table (fit / held out), the
// medians and where the spec was written. Returns the exit code.
int calibrate_command(const CalibrationOptions& o, std::ostream& out);

}  // namespace ctitan
