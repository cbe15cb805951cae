// `ctitan trace`: the profiler's files after a run.
//   ctitan trace merge RUN_DIR [--iteration N] [--out FILE]
//       every rank's iteration_N/rank<R>_trace.json -> one timeline,
//       iteration_N/merged_trace.json (docs/profiling.md: clock alignment),
//       and the per-rank, per-step breakdown of the merged trace
//   ctitan trace analyze FILE...
//       the breakdown (compute, communication, exposed communication, idle)
//       of trace files, one row per rank and step
// Bad input (no traces, unreadable JSON, not a trace) throws InputError.
#pragma once

#include <string>
#include <vector>

namespace ctitan {

int run_trace_command(const std::vector<std::string>& args);

}  // namespace ctitan
