// Memory snapshots ([profiling] enable_memory_snapshot), in TorchTitan's
// places: <dump_folder>/<save_memory_snapshot_folder>/iteration_N/
// rank{R}_memory_snapshot.json every profile_freq steps, and
// iteration_{N-1}_exit/ when step N ran out of memory (TorchTitan dumps a
// pickle of CUDA's allocator history; ctitan writes JSON of its own
// accounting allocator).
//
// Content: live and peak bytes overall and by category (memory.h), the
// allocation timeline since the previous snapshot, process RSS, and — on
// CUDA builds with a device — the caching allocator's statistics
// (allocated/reserved current and peak, OOM count; compiled, untested here).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace ctitan {

// reason: "periodic" or "out_of_memory"; error: the exception's message (OOM).
nlohmann::json memory_snapshot(const std::string& reason, int64_t step, int rank, const std::string& error = "");

// <folder>/<iteration_dir>/rank{R}_memory_snapshot.json, atomically; returns the path.
std::string write_memory_snapshot(const std::string& folder, const std::string& iteration_dir, int rank,
                                  const nlohmann::json& snapshot);

// The CUDA caching allocator's statistics of the current device; null
// without CUDA (a CPU-only build, or no device).
nlohmann::json cuda_memory_stats();

}  // namespace ctitan
