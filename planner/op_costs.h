// Op-level cost laws fitted to one measured run's trace (`ctitan plan
// --profile RUN_DIR`): the first step of a planner that times the kernels
// of the software it predicts instead of assuming an efficiency curve.
//
// The op profiler (profiling/op_profiler.h) records every LibTorch op the
// training thread ran, with its input shapes (and dtypes); the tracer
// records every collective with its bytes. Each op is put in a class and
// given its work:
//   gemm        aten::mm / addmm / bmm / baddbmm / _scaled_mm   2·M·N·K (·batch) FLOPs
//   attention   ops and autograd nodes named "*attention*" with [B,H,S,D] inputs   4·B·H·Sq·Sk·D FLOPs
//   elementwise every other leaf aten op (no op nested inside it)   bytes of its inputs
//   view        leaf ops that move no data (view, t, as_strided, empty, ...)   none: the dispatch cost
//   collective  each collective (issue → completion)                bytes moved
// and per class (GEMMs also per dtype, attention per direction,
// element-wise per op) a law
// t = fixed + per_unit · work is
// fitted by least squares on the relative error (weights 1/t²), both terms
// kept ≥ 0. The laws say what an op of a given size costs on this machine
// and this build — launch and dispatch overhead (fixed) and throughput
// (1 / per_unit) — measured, not guessed.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/hardware.h"
#include "planner/plan.h"
#include "trainer/config/job_config.h"

namespace ctitan {

enum class OpClass { gemm, attention, elementwise, view, collective };
const char* op_class_name(OpClass c);

struct OpSample {
  std::string name;
  OpClass cls = OpClass::elementwise;
  // gemm: its first input's dtype ("float", "c10::BFloat16"; "" when not
  // recorded); attention: "forward" or "backward"; collective: its op and
  // group ("all_gather dp_shard").
  std::string dtype;
  double work = 0;    // FLOPs (gemm, attention) or bytes (elementwise, collective)
  double seconds = 0;
  double min_dim = 0;  // gemm: min(M, N, K); attention: the head dim
  double ts_us = 0;    // when it began (the trace's clock)
};

// A span the trainer names in its trace: "forward layers.3", "backward
// norm+output", "accumulate_grads", "clip_grad_norm", "optimizer", "data".
struct TraceScope {
  std::string name;
  double ts_us = 0, dur_us = 0;
};

// t = fixed_s + per_unit_s · work, fitted to n samples; median_abs_err is
// the median of |predicted / measured − 1| over them.
struct LinearLaw {
  size_t n = 0;
  double fixed_s = 0, per_unit_s = 0, median_abs_err = 0;
  double predict(double work) const { return fixed_s + per_unit_s * work; }
};
LinearLaw fit_linear_law(const std::vector<std::pair<double, double>>& work_seconds);

// The class and work of one op from its name and "Input Dims" / "Input type"
// (Kineto's args); false for an op no class takes (a non-leaf, an op
// without shapes).
bool classify_op(const std::string& name, const nlohmann::json& args, OpSample& out);

// The samples of one Chrome trace written by ctitan's profiler (rank 0's
// file): leaf cpu_op events and collectives. `steps`: the traced steps' count.
struct TraceSamples {
  std::vector<OpSample> ops;
  int64_t steps = 0;
  double step_seconds = 0;  // the traced steps' total time
  double gap_seconds = 0;   // of that, time no classified op accounts for (the framework's own host work)
  std::string op_source;    // "kineto", "record_function"
  std::vector<TraceScope> scopes;  // the trainer's compute, data and optimizer spans
  std::vector<TraceScope> step_spans;  // each traced step ("step N")
};
TraceSamples trace_samples(const nlohmann::json& trace);

struct OpClassFit {
  OpClass cls;
  std::string dtype;  // gemm: the dtype; attention: the direction; elementwise: the op; collective: op and group
  LinearLaw law;
  double seconds_per_step = 0;  // the class's measured time per traced step
};
struct OpCostModel {
  std::string run_dir;
  std::vector<std::string> traces;  // files read
  int64_t steps = 0;
  double step_seconds = 0;  // per step, measured
  std::vector<OpClassFit> fits;
};

// Fits every group (a class; gemm per dtype, attention per direction,
// elementwise per op) with at least 2 samples.
OpCostModel fit_op_costs(const TraceSamples& samples);
// The samples of RUN_DIR's rank-0 traces (the files read into `files_read`);
// the same InputErrors as op_costs_from_run.
TraceSamples run_trace_samples(const std::string& run_dir, std::vector<std::string>* files_read = nullptr);
// Reads RUN_DIR's rank-0 traces (<profiling.save_traces_folder>/iteration_N/rank0_trace.json,
// any folder name) and fits them. InputError (one line) for a folder that
// is not a run directory or has no trace: the line says how to record one.
OpCostModel op_costs_from_run(const std::string& run_dir);

// The planner's efficiencies as these measurements imply them, on a spec
// whose peaks are `peak_flops` (a rank's GEMM FLOP/s in the compute dtype)
// and `bandwidth` (bytes/s), in the planner's own laws (planner/plan.cpp):
//   gemm, gemm_half_size  t = 2MNK / (peak · gemm · x/(x + half)), x = min(M, N, K):
//                         half on a log grid (0.5 … 1e5), gemm in closed form for each,
//                         least squares on the relative error
//   attention             the forward ops: causal work (half the pairs) over peak · time,
//                         divided by the head-dim saturation the planner applies
//   memory                element-wise bytes over their time (less each op's fixed cost), over bandwidth
//   kernel_overhead_s     the median fixed cost of an op (views: dispatch only)
// Each is set only where the run measured its class; `measured` names them.
struct DerivedEfficiency {
  Efficiency eff;
  std::vector<std::string> measured;  // "gemm", "gemm_half_size", "attention", "memory", "kernel_overhead_s"
};
DerivedEfficiency efficiency_from_samples(const TraceSamples& samples, const Efficiency& start, double peak_flops,
                                          double bandwidth);

// A spec whose efficiencies come from a measured run where it measured them:
// GEMM (and its size curve) and per-op dispatch from efficiency_from_samples;
// then the run's own config is planned with it and attention, element-wise
// bandwidth and kernel launch are scaled so that the plan's time for each
// equals the time the trace measured for that class, and the per-step
// overhead is the step time no classified op accounts for. The trace is
// first scaled to `untraced_step_s` (the run's median untraced step; 0:
// unknown), which removes the profiler's own slowdown. The calibration text
// names what was measured.
HardwareSpec spec_from_run(const HardwareSpec& start, const TraceSamples& samples, const JobConfig& run_cfg,
                           int64_t run_world_size, const std::string& run_dir, double untraced_step_s = 0);

// The profiled run's compute unit by unit: per TransformerBlock (the mean
// over layers), embedding and head, forward and backward, each class's
// time (GEMM, attention, element-wise: each op less its dispatch cost, the
// median time of an op that moves no data) and the fixed rest of the span
// (dispatch, the autograd engine); the parameter work (gradient
// accumulation, clipping, AdamW) split the same way; and the step's time
// outside every unit (data, the loop). `slowdown` scales every time (the
// untraced over the traced step). Zeros where the trace has no such span.
// With three or more traced steps, each figure is the median over the steps
// (a step the OS or the other ranks disturbed does not move it); with fewer,
// the mean.
MeasuredUnits measure_units(const TraceSamples& samples, double slowdown = 1.0);

// measure_units of a single-process run plus the denominators: the
// planner's analytic unit costs of that run's own config on `hw`, at the
// rate of one rank among cores / `threads` (the threads it ran with).
MeasuredUnits measured_units_from_run(const HardwareSpec& hw, const TraceSamples& samples, const JobConfig& run_cfg,
                                      int64_t threads, const std::string& run_dir, double untraced_step_s = 0);

// How much slower a rank's TransformerBlocks ran in a multi-rank run
// (`side_by_side`, measure_units of its rank 0) than in the single
// process (`alone`): forward and backward time per block, the ratio. Both
// runs must be of one model and batch: a ratio outside [0.5, 4] is refused
// (InputError naming `run_dir`) as runs that are not comparable.
double corun_factor(const MeasuredUnits& alone, const MeasuredUnits& side_by_side, const std::string& run_dir);

// A multi-rank run as the planner sees it: the request that plans its
// resolved config at its world size (with `units`, the measured compute),
// and its measured untraced step time (summary.json). False where the
// folder has no summary, no step time or no config, or ran one rank.
struct ProfiledRun {
  std::string run_dir;
  PlanRequest request;
  double step_s = 0;
};
bool profiled_run(const std::string& run_dir, std::shared_ptr<const MeasuredUnits> units, ProfiledRun& out);

// The spec's link (both link classes; the communication efficiency folded
// in, comm = 1) whose plans of `runs` come closest to their measured step
// times: least squares on the log error, latency 10 us - 100 ms and
// bandwidth 10 MB/s - 10 GB/s on a log grid of 0.1 decade, then refined
// twice around the best (0.005, 0.0005 decade). One run fits the latency alone (the spec's
// effective bandwidth kept). The spec's calibration text names the fit.
// On a CPU the collectives' copies and sockets share the cores with compute
// and wait for ranks out of step: what they cost inside a step is measured
// there (Gloo's latency at 2 ranks here: ~0.3 ms idle, ~2 ms in a step).
struct LinkFit {
  HardwareSpec spec;
  double latency_s = 0, bandwidth = 0;  // bytes/s
  double rms_log_error = 0;
};
LinkFit fit_link_to_runs(const HardwareSpec& hw, const std::vector<ProfiledRun>& runs);

// Everything `ctitan plan RECIPE --profile DIR [--profile DIR ...]` (and a
// sweep's [sweep] plan_profile) plans with: the spec with the efficiencies
// the first run's traced ops imply (spec_from_run); where that run is a
// single process, its units (measured_units_from_run); with the ranks'
// side-by-side slowdown (the least of the multi-rank runs' corun_factor:
// a run whose blocks hold collectives, TP's, shows more than the cores'
// sharing) and the link fitted to the multi-rank runs' step times
// (fit_link_to_runs). InputError (one line) for a folder that is not a
// profiled run, multi-rank runs after a first run that is not a single
// process, or a further run that is not a finished multi-rank run.
struct MeasuredPlanning {
  HardwareSpec spec;
  std::shared_ptr<const MeasuredUnits> units;  // null: the first run was not a single process
};
MeasuredPlanning measured_planning(const HardwareSpec& hw, const std::vector<std::string>& run_dirs);

std::string render_op_costs(const OpCostModel& m);
nlohmann::json op_costs_json(const OpCostModel& m);

}  // namespace ctitan
