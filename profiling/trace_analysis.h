// Where a step's time went, read off a Chrome trace in ctitan's categories
// (trace.h): busy computation, communication, communication that nothing
// hid, and idle time. Works on one rank's file and on a merged file alike
// (each pid is a rank).
//
// For each "step" event W of a rank, with every interval clipped to W:
//   compute  CPU traces: the union over threads of each thread's "compute"
//            and "data_parallel" ranges minus that thread's "wait" ranges (a thread
//            blocked in Work::wait() computes nothing). GPU traces (any
//            gpu_* event on the rank): the union of GPU kernels, memcpy and
//            memset that are not NCCL's.
//   comm     the union of "collective" events (issue -> completion) — or,
//            on GPU traces, of NCCL kernels.
//   exposed  comm minus compute: communication with no computation beside it.
//   idle     |W| minus |compute ∪ comm| (data loading, host overhead, ...).
// So compute + exposed + idle = step time exactly, and comm - exposed is the
// communication that overlapped computation.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace ctitan {

// Half-open intervals in any one unit; a set of them is kept sorted and disjoint.
struct Interval {
  double begin = 0, end = 0;
};
using Intervals = std::vector<Interval>;

Intervals interval_union(Intervals v);                             // sorted, merged, empty ones dropped
Intervals interval_subtract(const Intervals& a, const Intervals& b);  // a, b already unions
Intervals interval_intersect(const Intervals& a, const Intervals& b);
Intervals interval_clip(const Intervals& a, Interval window);
double interval_length(const Intervals& v);

struct StepBreakdown {
  int64_t rank = 0, step = 0;
  double step_s = 0, compute_s = 0, comm_s = 0, exposed_comm_s = 0, idle_s = 0, data_s = 0;
  bool gpu = false;  // computed from GPU activity
};

// Every (rank, step) of a trace, ordered by rank then step. Throws
// std::runtime_error when the JSON is not a trace-event file.
std::vector<StepBreakdown> analyze_trace(const nlohmann::json& trace);

// Means per step over `steps` (seconds); n = how many steps went in.
struct BreakdownMean {
  int64_t n = 0;
  double step_s = 0, compute_s = 0, comm_s = 0, exposed_comm_s = 0, idle_s = 0;
};
BreakdownMean mean_breakdown(const std::vector<StepBreakdown>& steps);

nlohmann::json to_json(const StepBreakdown& s);
nlohmann::json to_json(const BreakdownMean& m);
std::string format_breakdown_table(const std::vector<StepBreakdown>& steps);  // for `ctitan trace`

}  // namespace ctitan
