// `ctitan gate --run SPEC`: paired, interleaved A/B runs of a sweep spec by
// two builds (--baseline-bin, --candidate-bin) or two recipes of one build
// (--candidate-override KEY=VALUE), recorded as two sweeps, then gated on
// the pairs (GateOptions::paired).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/build_identity.h"

namespace ctitan {

struct GateRunArgs {
  std::string spec, db;
  std::string baseline_bin, candidate_bin;  // empty: this binary
  std::vector<std::string> candidate_overrides;  // "key=value"
  std::string baseline_sweep, candidate_sweep;   // default: <spec name>-baseline / -candidate
  int pairs = 6;
  uint64_t seed = 0;
};

// The identity of the ctitan binary at `path` (`path version --json`).
// InputError naming `flag` when it is missing, not executable, or does not
// answer (a ctitan from before build identities).
BuildIdentity binary_identity(const std::string& path, const std::string& flag);

// Plans both sides and runs the pairs; returns run_paired's exit code (the
// gate decides afterwards). Prints a warning line when the two binaries
// have different LibTorch versions.
int run_gate_pairs(const GateRunArgs& a);

}  // namespace ctitan
