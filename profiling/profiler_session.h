// The [profiling] section at work in the train loop: TorchTitan's schedule,
// the tracers it switches on and off, and the files it writes.
//
// Schedule (TorchTitan's torch.profiler.schedule(wait = profile_freq -
// warmup - active, warmup, active), stepped once per training step): step t
// (1-based) is
//   recorded     when (t-1) % profile_freq >= profile_freq - active,
//   warm-up      when it falls in the `warmup` steps before those (Kineto is
//                prepared so that starting it costs little),
//   not profiled otherwise,
// and a trace is saved after the last recorded step of each cycle — i.e. at
// multiples of profile_freq — to <trace_folder>/iteration_<t>/rank<R>_trace.json
// (with the defaults 10/3/1: steps 10, 20, ...; TorchTitan's layout). A
// run that ends mid-window saves what it recorded, as torch.profiler does.
//
// Each saved trace is analysed (trace_analysis.h) right away; the per-step
// breakdowns go into the file's "ctitan" object and are kept for
// summary.json. Memory snapshots (enable_memory_snapshot): the allocation
// timeline runs for the whole job and a snapshot is written every
// profile_freq steps (memory_snapshot.h).
//
// Not thread-safe: the training thread drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "profiling/gpu_tracer.h"
#include "profiling/op_profiler.h"
#include "profiling/trace_analysis.h"

namespace ctitan {

enum class ProfileAction { kNone, kWarmup, kRecord, kRecordAndSave };
// TorchTitan's schedule for 1-based step `step`; needs warmup + active <= freq.
ProfileAction profile_action(int64_t step, int64_t freq, int64_t warmup, int64_t active);

// summary.json's compute_s / comm_s / exposed_comm_s / idle_s from the traces
// (docs/profiling.md): `all_ranks` is every rank's summary_breakdown(),
// rank-major; the keys are the mean over the ranks that traced a step. The
// flight recorder's comm_s and the wait-time exposed_comm_s, if present,
// move to comm_s_flight_recorder / exposed_comm_s_wait, so the four keys
// always come from one measurement; comm_source says which. No-op when no
// rank traced a step.
void add_trace_summary(nlohmann::json& summary, const std::vector<double>& all_ranks,
                       const std::vector<int64_t>& steps, const std::string& source = "trace");

struct ProfilerOptions {
  bool traces = false;            // [profiling] enable_profiling
  bool memory_snapshots = false;  // [profiling] enable_memory_snapshot
  std::string trace_folder;       // <dump_folder>/<save_traces_folder>
  std::string memory_folder;      // <dump_folder>/<save_memory_snapshot_folder>
  int64_t freq = 10, warmup = 3, active = 1;
  int rank = 0, world_size = 1;
  int64_t steady_after = 0;  // metrics.warmup_steps: earlier steps are left out of the overhead comparison
  OpProfiler::Source ops = OpProfiler::Source::kKineto;
  // On CUDA: the CUPTI tracer runs on every step, traces or not, and each
  // step's GPU compute / NCCL / exposed time (gpu_step_breakdown) is kept
  // for summary.json when no trace was analysed.
  bool gpu_every_step = false;
};

class ProfilerSession {
 public:
  explicit ProfilerSession(ProfilerOptions opts);
  ~ProfilerSession();

  bool enabled() const { return opts_.traces || opts_.memory_snapshots; }
  // Where summary_breakdown() comes from: "trace" (analysed traces),
  // "cupti" (every step's CUPTI records, no trace written) or "" (none).
  std::string breakdown_source() const;
  // Around each training step (before its timer starts / after its metrics
  // and checkpoint). step_time_s: the step's measured time.
  void step_begin(int64_t step);
  // Right after the step's timer stops: the "step" event (the measured
  // interval), and the step's GPU busy time when CUPTI runs.
  void record_step(int64_t step, int64_t begin_ns, int64_t end_ns);
  void step_end(int64_t step, double step_time_s);
  // The run ended after `last_step`: saves a partially recorded window.
  void finish(int64_t last_step);

  // Every analysed step of this rank so far.
  const std::vector<StepBreakdown>& breakdowns() const { return breakdowns_; }
  // One line for the console, or "" when nothing was traced.
  std::string overhead_line() const;
  const std::string& gpu_status() const { return gpu_status_; }  // "cupti" or "CUPTI unavailable: ..."
  // GPU busy seconds of the last recorded step (CUPTI; the union of kernels
  // and copies), negative without CUPTI: metrics.jsonl's gpu_busy_s.
  double last_gpu_busy_s() const { return last_gpu_busy_s_; }

  // Writes the out-of-memory snapshot for a failure in `step` (whether or
  // not snapshots are enabled) and returns the one-line report:
  // "rank R: out of memory in step N: <first line of what>; memory snapshot: <path>".
  std::string out_of_memory(int64_t step, const std::string& what) const;

  // This rank's breakdown for summary.json: the means over its analysed
  // steps after `warmup_steps` (all of them if none is later), as
  // {n, step_s, compute_s, comm_s, exposed_comm_s, idle_s}, and those steps.
  static constexpr int kSummaryFields = 6;
  std::vector<double> summary_breakdown(int64_t warmup_steps) const;
  std::vector<int64_t> summary_steps(int64_t warmup_steps) const;

 private:
  void save_trace(int64_t step);

  ProfilerOptions opts_;
  OpProfiler ops_;
  std::unique_ptr<GpuTracer> gpu_;
  std::string gpu_status_;
  std::vector<GpuActivity> gpu_window_;  // activities of the recorded steps
  bool recording_ = false;
  int64_t first_recorded_ = 0;
  double last_gpu_busy_s_ = -1;
  std::vector<StepBreakdown> breakdowns_;
  std::vector<StepBreakdown> gpu_steps_;  // gpu_every_step: every step's CUPTI breakdown
  std::vector<double> traced_step_s_, untraced_step_s_;
  double save_s_ = 0;
  int64_t traces_saved_ = 0;
};

}  // namespace ctitan
