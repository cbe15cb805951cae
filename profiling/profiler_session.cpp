#include "profiling/profiler_session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "profiling/memory.h"
#include "profiling/memory_snapshot.h"
#include "profiling/trace.h"

namespace ctitan {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string iteration_dir(int64_t step) { return "iteration_" + std::to_string(step); }

}  // namespace

ProfileAction profile_action(int64_t step, int64_t freq, int64_t warmup, int64_t active) {
  const int64_t wait = freq - warmup - active;
  const int64_t mod = (step - 1) % freq;  // torch.profiler's step_num is step - 1 during step `step`
  if (mod < wait) return ProfileAction::kNone;
  if (mod < wait + warmup) return ProfileAction::kWarmup;
  return mod == freq - 1 ? ProfileAction::kRecordAndSave : ProfileAction::kRecord;
}

ProfilerSession::ProfilerSession(ProfilerOptions opts) : opts_(std::move(opts)), ops_(opts_.ops) {
  if (opts_.traces) Tracer::get().name_thread("training");
  if (opts_.traces || opts_.gpu_every_step) {
    std::string why;
    gpu_ = GpuTracer::create(&why);
    gpu_status_ = gpu_ ? "cupti" : "CUPTI unavailable: " + why;
    if (gpu_)
      ops_.avoid_kineto("ctitan's CUPTI tracer runs: Kineto on a CUDA host would take CUPTI's activity callbacks");
  }
  if (opts_.memory_snapshots) start_memory_timeline();
}

ProfilerSession::~ProfilerSession() {
  if (recording_) Tracer::get().stop();
  if (opts_.memory_snapshots) stop_memory_timeline();
}

void ProfilerSession::step_begin(int64_t step) {
  if (!opts_.traces) return;
  const ProfileAction a = profile_action(step, opts_.freq, opts_.warmup, opts_.active);
  if (a == ProfileAction::kWarmup) ops_.prepare();
  if ((a == ProfileAction::kRecord || a == ProfileAction::kRecordAndSave) && !recording_) {
    Tracer::get().start();
    ops_.start();
    recording_ = true;
    first_recorded_ = step;
    gpu_window_.clear();
  }
}

void ProfilerSession::record_step(int64_t step, int64_t begin_ns, int64_t end_ns) {
  if (recording_)
    Tracer::get().complete("step " + std::to_string(step), trace_cat::kStep, begin_ns, end_ns, {{"step", step}});
  if (gpu_) {
    std::vector<GpuActivity> acts = gpu_->flush();
    last_gpu_busy_s_ = gpu_busy_seconds(acts, begin_ns, end_ns);
    if (opts_.gpu_every_step) {
      StepBreakdown b = gpu_step_breakdown(acts, begin_ns, end_ns);
      b.rank = opts_.rank;
      b.step = step;
      gpu_steps_.push_back(b);
    }
    if (recording_) std::move(acts.begin(), acts.end(), std::back_inserter(gpu_window_));
  }
}

void ProfilerSession::step_end(int64_t step, double step_time_s) {
  if (opts_.traces && step > opts_.steady_after) (recording_ ? traced_step_s_ : untraced_step_s_).push_back(step_time_s);
  if (recording_ && profile_action(step, opts_.freq, opts_.warmup, opts_.active) == ProfileAction::kRecordAndSave)
    save_trace(step);
  if (opts_.memory_snapshots && step % opts_.freq == 0)
    write_memory_snapshot(opts_.memory_folder, iteration_dir(step), opts_.rank,
                          memory_snapshot("periodic", step, opts_.rank));
}

void ProfilerSession::finish(int64_t last_step) {
  if (recording_) save_trace(last_step);
}

void ProfilerSession::save_trace(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  Tracer& tracer = Tracer::get();
  std::vector<TraceEvent> events = tracer.stop();
  std::vector<TraceEvent> ops = ops_.stop(tracer.torch_thread_ids());
  std::move(ops.begin(), ops.end(), std::back_inserter(events));
  auto names = tracer.thread_names();
  for (const TraceEvent& e : events) {
    if (e.tid < kOpTrackBase || names.count(e.tid)) continue;
    const auto thread = names.find(e.tid - kOpTrackBase);
    names[e.tid] = (thread != names.end() ? thread->second : "thread " + std::to_string(e.tid - kOpTrackBase)) +
                   " (LibTorch ops)";
  }
  std::vector<TraceEvent> gpu = gpu_activity_events(gpu_window_, names);
  std::move(gpu.begin(), gpu.end(), std::back_inserter(events));
  gpu_window_.clear();
  recording_ = false;

  TraceFileInfo info;
  info.rank = opts_.rank;
  info.world_size = opts_.world_size;
  info.first_step = first_recorded_;
  info.last_step = step;
  info.op_source = OpProfiler::name(ops_.source());
  info.gpu_source = gpu_status_;
  if (!ops_.fallback_reason().empty()) info.extra["op_source_note"] = ops_.fallback_reason();
  nlohmann::json trace = chrome_trace(events, info, names);
  const std::vector<StepBreakdown> steps = analyze_trace(trace);
  nlohmann::json analysis = nlohmann::json::array();
  for (const StepBreakdown& s : steps) analysis.push_back(to_json(s));
  trace["ctitan"]["analysis"] = std::move(analysis);
  breakdowns_.insert(breakdowns_.end(), steps.begin(), steps.end());
  const auto path = std::filesystem::path(opts_.trace_folder) / iteration_dir(step) /
                    ("rank" + std::to_string(opts_.rank) + "_trace.json");
  write_json_file(path.string(), trace);
  ++traces_saved_;
  save_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string ProfilerSession::overhead_line() const {
  if (traced_step_s_.empty()) return "";
  const double traced = median(traced_step_s_), plain = median(untraced_step_s_);
  char buf[320];
  if (std::isnan(plain)) {
    std::snprintf(buf, sizeof(buf),
                  "profiling: %zu traced steps, median %.1f ms (no untraced step to compare with); "
                  "%lld trace files written in %.2f s",
                  traced_step_s_.size(), traced * 1e3, static_cast<long long>(traces_saved_), save_s_);
  } else {
    std::snprintf(buf, sizeof(buf),
                  "profiling overhead: traced steps took %.1f ms (median of %zu) vs %.1f ms untraced (median of %zu): "
                  "%+.1f%%; %lld trace files written in %.2f s (outside the steps)",
                  traced * 1e3, traced_step_s_.size(), plain * 1e3, untraced_step_s_.size(),
                  100.0 * (traced / plain - 1.0), static_cast<long long>(traces_saved_), save_s_);
  }
  return buf;
}

std::string ProfilerSession::out_of_memory(int64_t step, const std::string& what) const {
  const std::string first_line = what.substr(0, what.find('\n'));
  std::string where;
  try {
    // TorchTitan's name for it: iteration_<step - 1>_exit.
    where = "; memory snapshot: " + write_memory_snapshot(opts_.memory_folder, iteration_dir(step - 1) + "_exit",
                                                          opts_.rank,
                                                          memory_snapshot("out_of_memory", step, opts_.rank, first_line));
  } catch (const std::exception& e) {
    where = "; the memory snapshot could not be written: " + std::string(e.what());
  }
  return "rank " + std::to_string(opts_.rank) + ": out of memory in step " + std::to_string(step) + ": " + first_line +
         where;
}

namespace {

std::vector<StepBreakdown> steady_breakdowns(const std::vector<StepBreakdown>& all, int64_t warmup_steps) {
  std::vector<StepBreakdown> steady;
  for (const auto& b : all)
    if (b.step > warmup_steps) steady.push_back(b);
  return steady.empty() ? all : steady;
}

}  // namespace

std::string ProfilerSession::breakdown_source() const {
  return !breakdowns_.empty() ? "trace" : !gpu_steps_.empty() ? "cupti" : "";
}

std::vector<double> ProfilerSession::summary_breakdown(int64_t warmup_steps) const {
  const auto& from = breakdowns_.empty() ? gpu_steps_ : breakdowns_;
  const BreakdownMean m = mean_breakdown(steady_breakdowns(from, warmup_steps));
  return {static_cast<double>(m.n), m.step_s, m.compute_s, m.comm_s, m.exposed_comm_s, m.idle_s};
}

std::vector<int64_t> ProfilerSession::summary_steps(int64_t warmup_steps) const {
  std::vector<int64_t> steps;
  for (const auto& b : steady_breakdowns(breakdowns_.empty() ? gpu_steps_ : breakdowns_, warmup_steps))
    steps.push_back(b.step);
  return steps;
}

void add_trace_summary(nlohmann::json& summary, const std::vector<double>& all_ranks,
                       const std::vector<int64_t>& steps, const std::string& source) {
  constexpr int kF = ProfilerSession::kSummaryFields;
  const char* keys[kF] = {"steps", "step_s", "compute_s", "comm_s", "exposed_comm_s", "idle_s"};
  nlohmann::json ranks = nlohmann::json::array();
  double sums[kF] = {0, 0, 0, 0, 0, 0};
  int counted = 0;
  for (size_t r = 0; r * kF < all_ranks.size(); ++r) {
    const double* v = &all_ranks[r * kF];
    if (v[0] == 0) continue;
    ++counted;
    nlohmann::json row = {{"rank", r}};
    for (int k = 0; k < kF; ++k) {
      sums[k] += v[k];
      row[keys[k]] = k == 0 ? nlohmann::json(static_cast<int64_t>(v[0])) : nlohmann::json(v[k]);
    }
    ranks.push_back(std::move(row));
  }
  if (counted == 0) return;
  if (summary.contains("comm_s")) {
    summary["comm_s_flight_recorder"] = summary["comm_s"];
    summary["exposed_comm_s_wait"] = summary["exposed_comm_s"];
  }
  summary["comm_source"] = source;
  summary["step_s_traced"] = sums[1] / counted;
  for (int k = 2; k < kF; ++k) summary[keys[k]] = sums[k] / counted;
  summary["trace_breakdown"] = {{"steps", steps}, {"ranks", std::move(ranks)}};
}

}  // namespace ctitan
