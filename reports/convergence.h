// The quality half of a recipe comparison: does a recipe still train as
// well as the baseline, and how long does it take to reach the target?
//
// A point's seeds (its runs: `[quality] seeds` in a sweep spec) are one
// draw each of the recipe's validation-loss curve. From a point's seeds:
//   the band          per evaluation, the median, min and max over seeds
//                     (what a report draws), and the tolerance band: the
//                     t prediction interval of one more seed's loss
//                     (stats::prediction_interval) — Megatron-LM derives its
//                     golden values' tolerances from repeated runs the same
//                     way, from the spread it measured;
//   to target         tokens and time to the target loss per seed
//                     (common/quality.h), their mean with its t interval and
//                     MLPerf's olympic mean.
// A candidate against a baseline:
//   inside the band   each candidate seed's loss at each of its evaluations
//                     against the baseline's tolerance band at the same
//                     training tokens (linear between the baseline's
//                     evaluations; evaluations beyond the baseline's range are
//                     not judged). The band's level is Bonferroni-corrected
//                     over every (seed, evaluation) judged, so an A/A
//                     comparison leaves it with probability ≤ alpha. Above
//                     the band is "outside" (worse); below it only is
//                     "suspiciously fast" (better than the seeds allow);
//   tokens to target  Welch's t test, one-sided each way at alpha/2 (two
//                     one-sided tests: alpha in all): significantly more
//                     tokens is "slower to target"; significantly fewer is
//                     "suspiciously fast" — MLPerf's reference convergence
//                     points reject a submission that converges in fewer
//                     samples than the reference distribution allows, since
//                     a faster kernel changes time, never tokens;
//   final loss        worse than the baseline's band at the last evaluation
//                     the two share, with the paired difference by seed (the
//                     same seed: the same initialisation and data order) and
//                     its t interval;
//   speedup at equal quality = baseline time to target / candidate time to
//                     target (means over seeds), the number a recipe
//                     comparison is for.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/quality.h"
#include "reports/points.h"
#include "reports/stats.h"

namespace ctitan {

// One seed of a point: its validation curve and, where the run recorded
// them, its seed and target.
struct SeedCurve {
  int64_t seed = 0;
  std::vector<EvalPoint> curve;
  TargetCrossing crossing;
};

// The loss over seeds at one evaluation.
struct BandRow {
  double train_tokens = 0;
  size_t n = 0;
  double median = 0, min = 0, max = 0;
  double lo = 0, hi = 0;  // the tolerance band (prediction interval) at the level it was asked for
};

// A point's seeds, summarised.
struct SeedSet {
  std::vector<SeedCurve> seeds;          // by seed
  std::optional<double> target;          // the runs' target loss (the first run's)
  std::vector<BandRow> band;             // per evaluation of the seed with the most
  size_t reached = 0;                    // seeds that reached the target
  stats::MeanInterval tokens, seconds;   // over the seeds that reached it
  std::optional<double> tokens_olympic, seconds_olympic;  // not reached counts as +inf
  std::optional<double> final_loss;      // median of the seeds' last evaluation
};

// The ok runs of a point that carry a validation curve; the target from
// their summaries (unset when none recorded one). Band level 1 − alpha.
SeedSet seed_set(const PointData& point, double alpha = 0.05);
// The same from curves (tests; `target` unset: no crossings).
SeedSet seed_set(std::vector<SeedCurve> seeds, std::optional<double> target, double alpha = 0.05);

// The tolerance band of `base` at `train_tokens` (linear between its
// evaluations; nullopt outside their range), at level 1 − alpha.
std::optional<stats::Interval> band_at(const SeedSet& base, double train_tokens, double alpha);

struct BandExcursion {
  int64_t seed = 0;
  double train_tokens = 0, loss = 0, lo = 0, hi = 0;
};

// In order of severity (a chain step shows its points' worst).
enum class QualityVerdict { inside, too_few, missing, suspicious, slower, outside };
std::string to_string(QualityVerdict v);

struct QualityComparison {
  QualityVerdict verdict = QualityVerdict::inside;
  std::string reason;  // one line
  double alpha = 0.05;
  double band_level = 0.95;  // the per-check level after Bonferroni
  size_t checked = 0;        // (seed, evaluation) pairs judged
  std::vector<BandExcursion> outside;  // of those, the ones outside the band
  // Tokens to target: Welch's one-sided p-values and the interval of
  // candidate − baseline (means over the seeds that reached).
  double slower_p = std::numeric_limits<double>::quiet_NaN();
  double faster_p = std::numeric_limits<double>::quiet_NaN();
  std::optional<stats::Interval> tokens_diff;  // 95 %; JSON tokens_to_target_difference
  size_t cand_missed = 0;  // candidate seeds that never reached the target the baseline's all reached
  // Final loss: the candidate's median above the baseline's band at their
  // last shared evaluation; the paired difference (candidate − baseline,
  // by seed) with its t interval.
  bool final_worse = false;
  std::optional<double> final_band_hi;
  stats::MeanInterval final_diff;  // n == 0: no seed in common
  // Baseline time to target / candidate's (means); and tokens/s likewise.
  std::optional<double> speedup_at_quality;
};

// A candidate's seeds against the baseline's at significance alpha.
// too_few: fewer than 3 baseline seeds (no band can be drawn) or no
// evaluation in common.
QualityComparison compare_quality(const SeedSet& base, const SeedSet& cand, double alpha = 0.05);

// For JSON outputs (the band gate's and the report's).
nlohmann::json seed_set_json(const SeedSet& s);
nlohmann::json quality_comparison_json(const QualityComparison& q);

// `ctitan gate --losses --bands`: per point (matched as the loss parity
// matches them), the candidate's seeds against the baseline's bands.
struct BandGatePoint {
  std::string name;
  SeedSet base, cand;
  QualityComparison q;
};
struct BandGateResult {
  std::string baseline, candidate;
  std::vector<BandGatePoint> points;
  std::string verdict;  // "pass", "regression", "needs action"
  int exit_code = 0;    // 0 inside, 1 outside or slower to target, 3 missing, too few seeds or suspicious
};
BandGateResult band_gate(const std::vector<PointData>& base, const std::vector<PointData>& cand,
                         const std::string& base_desc, const std::string& cand_desc, bool match_by_world_size,
                         double alpha);
std::string band_gate_markdown(const BandGateResult& r);
nlohmann::json band_gate_json(const BandGateResult& r);

}  // namespace ctitan
