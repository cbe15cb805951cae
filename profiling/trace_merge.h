// One timeline from every rank's trace file (`ctitan trace merge RUN_DIR`).
//
// Clocks: each rank file stamps events with its host's CLOCK_MONOTONIC and
// records a (monotonic, realtime) anchor read at one instant, with the
// host's boot id. Ranks that share a boot id share the monotonic clock, so
// their events line up as they are. Otherwise (several hosts) every rank is
// moved onto CLOCK_REALTIME through its own anchor: as good as the hosts'
// NTP/PTP sync, which the merged file states. The merged timeline starts at
// 0 (its first event); pid stays the rank.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

namespace ctitan {

// rank_traces: parsed rank files (any order). Throws std::runtime_error when
// one is not a ctitan trace (no "ctitan" object with a clock anchor) or two
// claim the same rank.
nlohmann::json merge_traces(const std::vector<nlohmann::json>& rank_traces);

// iteration number -> its rank*_trace.json files, for every iteration_N
// folder at most two levels below run_dir (TorchTitan's layout:
// <dump_folder>/<save_traces_folder>/iteration_N/rank{R}_trace.json).
std::map<int64_t, std::vector<std::filesystem::path>> find_rank_traces(const std::filesystem::path& run_dir);

}  // namespace ctitan
