// The regression gate: a candidate against a baseline, per point and metric.
//
// A regression needs size AND significance:
//   size          the median moved the wrong way by more than the metric's
//                 threshold (default 5 % for throughput, step time, MFU and
//                 memory, 2 % for final loss; per metric and point pattern);
//   significance  a two-sided Mann–Whitney U test over the samples rejects
//                 equality at alpha (default 0.05) — or, when the sample
//                 sizes are too small for the U test ever to reach alpha
//                 (3 vs 3: its smallest p is 0.1), a fixed-seed bootstrap
//                 CI of the relative median change excludes 0.
// A change within the threshold passes (it is not a regression whatever
// its p-value). A change beyond it that cannot be shown significant is
// INCONCLUSIVE, never a pass: fewer than min_samples (default 3) values on
// a side, or a test that does not reject. Those, a point missing on one
// side, and environments whose hardware or LibTorch differ, are "needs
// action" (exit 3). A point ok in the baseline that failed, timed out or
// ran out of memory in the candidate is a regression (exit 1).
//
// Samples: per-step metrics (tps, step time, MFU) use one value per run
// (the run's median) when both sides have at least run_unit_min ok runs —
// the run is the honest unit of replication; otherwise the steady-state
// steps of every ok run are pooled (steps of one run are not independent,
// which the threshold and the note "unit: steps" make visible). Per-run
// metrics (peak memory, final loss) have one value per run.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "reports/points.h"

namespace ctitan {

constexpr int kGateExitPass = 0;
constexpr int kGateExitRegression = 1;
constexpr int kGateExitNeedsAction = 3;
// Nothing worse, and something better than its threshold with significance:
// Megatron-LM's practice — the baseline is stale, refresh it.
constexpr int kGateExitImproved = 4;

struct GateMetric {
  std::string name;   // tps, step_time, mfu, mem, loss
  std::string title;  // for tables
  bool higher_is_better = true;
  double default_threshold = 0.05;
  bool per_step = true;  // samples from steps (else one per run)
  std::string (*format)(double) = nullptr;
};
const std::vector<GateMetric>& gate_metrics();
// nullptr when unknown; accepts a few aliases (memory, final_loss, step_time_s).
const GateMetric* find_gate_metric(const std::string& name);

struct ThresholdRule {
  std::string point_glob;  // "" = every point; else fnmatch against "LABEL ws=N"
  std::string metric;
  double threshold = 0.05;  // fraction
};
// "[GLOB:]METRIC=5%" or "[GLOB:]METRIC=0.05"; InputError naming the problem.
ThresholdRule parse_threshold_rule(const std::string& text);

struct GateOptions {
  double alpha = 0.05;
  size_t min_samples = 3;                 // per side, to decide anything beyond the threshold
  size_t run_unit_min = 4;                // ok runs per side for one sample per run
  std::vector<ThresholdRule> thresholds;  // later rules win
  std::vector<std::string> metrics;       // empty: every metric
  bool match_by_world_size = false;       // two labels: pair points by world size alone
  bool allow_env_mismatch = false;        // report hardware differences without exit 3
  // The sides were run as pairs (ctitan gate --run): run i of the baseline
  // and run i of the candidate ran back to back. Each metric is then judged
  // on the paired ratios (Wilcoxon signed-rank), the run as the unit.
  bool paired = false;
  double threshold(const GateMetric& metric, const std::string& point_name) const;
};

// One side of one point, as the gate needs it (from a database or a baseline file).
struct GatePoint {
  std::string label;
  int64_t world_size = 1;
  std::string status;  // PointData::status()
  size_t runs = 0;
  std::string error;
  // metric → one vector per ok run: its steady-state steps, or its one value.
  std::map<std::string, std::vector<std::vector<double>>> samples;
  // metric → the repeat index of each run in samples (pairs match on it);
  // empty for a baseline file.
  std::map<std::string, std::vector<int64_t>> repeats;
  std::string name() const;  // "LABEL ws=N" ("(base)" for an empty label)
};

struct GateSide {
  std::string description;
  std::vector<GatePoint> points;
  std::map<std::string, std::set<std::string>> env;  // hardware_env_keys() → values seen
};

GateSide gate_side(const std::vector<PointData>& points, const std::string& description);
// The baseline file kept in a repo: format, env and every sample.
nlohmann::json baseline_file_json(const GateSide& side);
GateSide read_baseline_file(const std::string& path);  // InputError when unreadable or not one

enum class Verdict { pass, improved, skipped, inconclusive, missing, regression };
std::string to_string(Verdict v);

struct MetricCheck {
  std::string metric;
  Verdict verdict = Verdict::pass;
  std::string unit;  // "steps" or "runs"
  size_t n_base = 0, n_cand = 0;
  double base_median = std::numeric_limits<double>::quiet_NaN();
  double cand_median = std::numeric_limits<double>::quiet_NaN();
  double change = std::numeric_limits<double>::quiet_NaN();  // cand / base − 1
  double threshold = 0;
  std::string test;  // "U exact", "U normal", "bootstrap", ""
  double p_value = std::numeric_limits<double>::quiet_NaN();
  double ci_lo = std::numeric_limits<double>::quiet_NaN(), ci_hi = std::numeric_limits<double>::quiet_NaN();
  // Paired: the smallest change (a fraction) the test could have called
  // significant with these pairs' noise (their log-ratios re-centred and
  // shifted); NaN when too few pairs can ever reach alpha.
  double detectable = std::numeric_limits<double>::quiet_NaN();
  std::string reason;  // one line
};

// The decision for one metric of one point (see the header comment).
MetricCheck judge_metric(const GateMetric& m, const std::vector<double>& base, const std::vector<double>& cand,
                         double threshold, const GateOptions& opts);

// The same decision for paired runs: base[i] and cand[i] ran back to back
// (one value per run). The change is the median of the paired ratios
// cand[i] / base[i], minus 1; significance is Wilcoxon's signed-rank test
// on their logarithms (exact, so 6 pairs all one way give p = 0.031). Too
// few pairs for the test ever to reach alpha says how many it needs.
MetricCheck judge_paired_metric(const GateMetric& m, const std::vector<double>& base,
                                const std::vector<double>& cand, double threshold, const GateOptions& opts);

// `ctitan gate --calibrate`: from A/A pairs (one build against itself),
// the threshold an A/A comparison of `gate_pairs` pairs stays within with
// probability 1 − alpha: the (1 − alpha) quantile of |median paired change|
// over sign-flipped resamples of the observed log-ratios (an A/A log-ratio
// is as likely negative as positive), rounded up to a whole percent, at
// least 1 %. Megatron-LM's --recommend-tolerances, for this machine.
double recommend_threshold(const std::vector<double>& aa_log_ratios, size_t gate_pairs, double alpha,
                           uint64_t seed = 0x63616c6962ULL);
// The paired log-ratios log(cand / base) of one metric of one point, by
// repeat (the runs of both sides of a paired run).
std::vector<double> paired_log_ratios(const GatePoint& base, const GatePoint& cand, const std::string& metric);

struct PointCheck {
  std::string name;  // the candidate's point name
  std::string label;
  int64_t world_size = 1;
  Verdict verdict = Verdict::pass;         // the worst of status_verdict and the metrics'
  Verdict status_verdict = Verdict::pass;  // from statuses and presence alone
  std::string base_status, cand_status;    // "" when the point is absent on that side
  std::string reason;                      // why status_verdict (empty: nothing to say)
  std::vector<MetricCheck> metrics;
};

struct EnvDifference {
  std::string key, base, cand;
};

struct GateResult {
  std::string baseline, candidate;
  GateOptions options;
  std::vector<PointCheck> points;
  std::vector<EnvDifference> env;
  std::string verdict;  // "pass", "improved", "regression", "needs action"
  int exit_code = kGateExitPass;
};

GateResult run_gate(const GateSide& base, const GateSide& cand, const GateOptions& opts);

std::string gate_markdown(const GateResult& r);  // for the PR comment
nlohmann::json gate_json(const GateResult& r);   // for machines

}  // namespace ctitan
