// A run's quality against a target loss: when its validation curve first
// reached the target, in tokens and in wall-clock seconds, and MLPerf
// Training's olympic mean over seeds. The trainer computes a run's crossing
// for summary.json; reports and the gate recompute it from the stored curve
// (the results database's validation rows) with the same function.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace ctitan {

// One validation pass: after `train_tokens` training tokens (the global
// batch's, summed over the steps so far) and `elapsed_s` seconds of the
// run's wall clock since its first step began (evaluations included,
// initialisation excluded: MLPerf's run_start to this evaluation's end).
struct EvalPoint {
  double train_tokens = 0;
  double elapsed_s = 0;
  double loss = 0;
};

struct TargetCrossing {
  bool reached = false;
  // Tokens to target: the first crossing of the target, linear in tokens
  // between the last evaluation above it and the first at or below it (the
  // first evaluation's own tokens when that one is already at or below).
  double tokens = 0;
  // Time to target: the wall clock at the end of the first evaluation at or
  // below the target, as MLPerf stops its clock when an evaluation meets the
  // quality (a run cannot know it crossed between evaluations).
  double seconds = 0;
  int evaluation = -1;  // index of that evaluation (0-based); -1 when not reached
};

// The first crossing of `target` by `curve` (evaluations in order; a NaN loss
// never counts as reaching it). Not reached within the curve: reached=false.
TargetCrossing first_crossing(const std::vector<EvalPoint>& curve, double target);

// MLPerf Training's olympic mean: the mean after dropping the single
// fastest and slowest result (the plain mean under three values); runs that
// did not reach the target are given to it as +infinity, so one of them is
// the slowest dropped and two make the mean infinite. nullopt when empty.
std::optional<double> olympic_mean(std::vector<double> values);

}  // namespace ctitan
