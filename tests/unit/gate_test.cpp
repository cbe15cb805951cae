// The regression gate on synthetic sample sets whose answer is known.
//
// Samples are "ideal" draws: value_i = mean · (1 + noise · z_i) with z_i the
// normal quantile at (i + 0.5) / n, shuffled by a fixed permutation — the
// shape of n noisy measurements without a random seed deciding the verdict.
//
// The 20 %-noise case: a true 10 % slowdown measured 5 times a side with
// 20 % noise (the sample medians differ by exactly 10 %, beyond the 5 %
// threshold) is INCONCLUSIVE: the size criterion is met, but the U test
// cannot reject equality (p ≈ 0.55, far above 0.05), so the data neither
// show a regression nor rule one out — exit 3, "add repeats". It is not a
// pass, because the observed change is above the threshold. With 200
// samples a side the same effect is significant and the gate fails it.
#include "reports/gate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/errors.h"
#include "reports/stats.h"

using namespace ctitan;

namespace {

// Φ⁻¹(p) by bisection on the survival function: slow, exact enough, obvious.
double normal_quantile(double p) {
  double lo = -10, hi = 10;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (1 - stats::normal_sf(mid) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

std::vector<double> ideal_samples(size_t n, double mean, double noise) {
  std::vector<double> v;
  for (size_t i = 0; i < n; ++i) v.push_back(mean * (1 + noise * normal_quantile((i + 0.5) / n)));
  // A fixed interleaving, so the order says nothing.
  std::vector<double> shuffled;
  for (size_t step = 0; step < 3; ++step)
    for (size_t i = step; i < n; i += 3) shuffled.push_back(v[i]);
  return shuffled;
}

const GateMetric& metric(const std::string& name) { return *find_gate_metric(name); }

MetricCheck judge(const std::string& m, const std::vector<double>& base, const std::vector<double>& cand) {
  GateOptions opts;
  return judge_metric(metric(m), base, cand, metric(m).default_threshold, opts);
}

// A point whose ok runs carry `tps` (split into `runs` runs) and a memory and loss per run.
GatePoint point(const std::string& label, const std::vector<double>& tps, size_t runs = 2, double mem = 1e9,
                double loss = 3.0, const std::string& status = "ok") {
  GatePoint p;
  p.label = label;
  p.world_size = 1;
  p.status = status;
  p.runs = runs;
  if (tps.empty()) return p;
  for (size_t r = 0; r < runs; ++r) {
    std::vector<double> steps;
    for (size_t i = r; i < tps.size(); i += runs) steps.push_back(tps[i]);
    p.samples["tps"].push_back(steps);
    std::vector<double> times;
    for (double t : steps) times.push_back(2048 / t);
    p.samples["step_time"].push_back(times);
    p.samples["mem"].push_back({mem});
    p.samples["loss"].push_back({loss});
  }
  return p;
}

GateSide side(std::vector<GatePoint> points, const std::string& cpu = "Test CPU") {
  GateSide s;
  s.description = "synthetic";
  s.points = std::move(points);
  s.env["cpu_model"] = {cpu};
  s.env["libtorch_version"] = {"2.9.0"};
  return s;
}

const PointCheck& check_of(const GateResult& r, const std::string& label) {
  for (const PointCheck& p : r.points)
    if (p.label == label) return p;
  throw std::runtime_error("no point " + label);
}

TEST(Gate, TenPercentSlowdownWithLowNoiseIsARegression) {
  const auto base = ideal_samples(10, 1000, 0.01), cand = ideal_samples(10, 900, 0.01);
  const MetricCheck c = judge("tps", base, cand);
  EXPECT_EQ(c.verdict, Verdict::regression) << c.reason;
  EXPECT_NEAR(c.change, -0.10, 1e-9);
  EXPECT_EQ(c.test, "U normal");  // 10 vs 10: both above 8
  EXPECT_LT(c.p_value, 0.001);

  const GateResult r = run_gate(side({point("a", base)}), side({point("a", cand)}), {});
  EXPECT_EQ(r.exit_code, kGateExitRegression);
  EXPECT_EQ(r.verdict, "regression");
  EXPECT_NE(gate_markdown(r).find("`a ws=1`"), std::string::npos);
}

TEST(Gate, TenPercentSlowdownInTwentyPercentNoiseIsInconclusive) {
  const auto base = ideal_samples(5, 1000, 0.20), cand = ideal_samples(5, 900, 0.20);
  const MetricCheck c = judge("tps", base, cand);
  EXPECT_EQ(c.verdict, Verdict::inconclusive) << c.reason;
  EXPECT_NEAR(c.change, -0.10, 1e-9);  // the size criterion is met ...
  EXPECT_EQ(c.test, "U exact");
  EXPECT_GT(c.p_value, 0.3);  // ... the significance one is not
  EXPECT_NE(c.reason.find("add repeats"), std::string::npos);
  const GateResult r = run_gate(side({point("a", base, 1)}), side({point("a", cand, 1)}), {});
  EXPECT_EQ(r.exit_code, kGateExitNeedsAction);

  // The same effect with enough samples is found.
  EXPECT_EQ(judge("tps", ideal_samples(200, 1000, 0.20), ideal_samples(200, 900, 0.20)).verdict, Verdict::regression);
}

TEST(Gate, IdenticalDistributionsPass) {
  const auto v = ideal_samples(12, 1000, 0.05);
  EXPECT_EQ(judge("tps", v, v).verdict, Verdict::pass);
  // Two different draws of one distribution (a different interleaving and
  // a sub-percent offset) pass too.
  std::vector<double> other = v;
  std::reverse(other.begin(), other.end());
  for (double& x : other) x *= 1.004;
  EXPECT_EQ(judge("tps", v, other).verdict, Verdict::pass);
  const GateResult r = run_gate(side({point("a", v), point("b", v)}), side({point("a", v), point("b", other)}), {});
  EXPECT_EQ(r.exit_code, kGateExitPass) << gate_markdown(r);
  EXPECT_EQ(r.verdict, "pass");
}

TEST(Gate, OkToOomIsARegressionNamingThePoint) {
  const auto v = ideal_samples(10, 1000, 0.02);
  GatePoint oom = point("big-batch", {}, 1, 0, 0, "oom");
  oom.error = "out of memory: tried to allocate 2.0 GiB";
  const GateResult r = run_gate(side({point("small", v), point("big-batch", v)}), side({point("small", v), oom}), {});
  EXPECT_EQ(r.exit_code, kGateExitRegression);
  const PointCheck& p = check_of(r, "big-batch");
  EXPECT_EQ(p.verdict, Verdict::regression);
  EXPECT_NE(p.reason.find("ok \u2192 oom"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("out of memory"), std::string::npos);
  EXPECT_EQ(check_of(r, "small").verdict, Verdict::pass);
  const std::string md = gate_markdown(r);
  EXPECT_NE(md.find("`big-batch ws=1`"), std::string::npos);
  EXPECT_NE(md.find("regression"), std::string::npos);
  EXPECT_EQ(gate_json(r)["verdict"], "regression");
}

TEST(Gate, TimeoutAndFailureAreRegressionsToo) {
  const auto v = ideal_samples(6, 1000, 0.02);
  for (const char* status : {"failed", "timeout"}) {
    const GateResult r = run_gate(side({point("a", v)}), side({point("a", {}, 1, 0, 0, status)}), {});
    EXPECT_EQ(r.exit_code, kGateExitRegression) << status;
  }
  // A point the candidate could not plan (infeasible) or that was cancelled has no data: needs action.
  const GateResult r = run_gate(side({point("a", v)}), side({point("a", {}, 1, 0, 0, "cancelled")}), {});
  EXPECT_EQ(r.exit_code, kGateExitNeedsAction);
}

TEST(Gate, MissingPointsAreReportedAndNeedAction) {
  const auto v = ideal_samples(6, 1000, 0.02);
  const GateResult r = run_gate(side({point("a", v), point("gone", v)}), side({point("a", v), point("new", v)}), {});
  EXPECT_EQ(r.exit_code, kGateExitNeedsAction);
  EXPECT_EQ(check_of(r, "gone").verdict, Verdict::missing);
  EXPECT_NE(check_of(r, "gone").reason.find("only in the baseline"), std::string::npos);
  EXPECT_EQ(check_of(r, "new").verdict, Verdict::missing);
  EXPECT_NE(check_of(r, "new").reason.find("only in the candidate"), std::string::npos);
}

TEST(Gate, TooFewSamplesBeyondTheThresholdIsInconclusiveNotPass) {
  const MetricCheck c = judge("tps", {1000, 1001}, {900, 901});
  EXPECT_EQ(c.verdict, Verdict::inconclusive);
  EXPECT_NE(c.reason.find("too few samples"), std::string::npos);
  // Within the threshold there is nothing to decide: a pass even with one value a side.
  EXPECT_EQ(judge("tps", {1000}, {990}).verdict, Verdict::pass);
}

TEST(Gate, ThreeRunsASideFallBackToTheBootstrap) {
  // Peak memory is nearly deterministic: 3 runs a side, +20 %. The exact U
  // test cannot go below p = 0.1 with 3 vs 3; the bootstrap CI decides.
  const MetricCheck c = judge("mem", {1.00e9, 1.00e9, 1.001e9}, {1.2e9, 1.2e9, 1.2e9});
  EXPECT_EQ(c.test, "bootstrap");
  EXPECT_EQ(c.verdict, Verdict::regression) << c.reason;
  EXPECT_GT(c.ci_lo, 0.19);
  // Memory going down is not a regression.
  EXPECT_EQ(judge("mem", {1.2e9, 1.2e9, 1.2e9}, {1e9, 1e9, 1e9}).verdict, Verdict::improved);
}

TEST(Gate, LowerIsBetterMetricsAndImprovements) {
  const auto base = ideal_samples(10, 1000, 0.01), faster = ideal_samples(10, 1200, 0.01);
  EXPECT_EQ(judge("tps", base, faster).verdict, Verdict::improved);
  EXPECT_EQ(judge("step_time", ideal_samples(10, 1.0, 0.01), ideal_samples(10, 1.1, 0.01)).verdict,
            Verdict::regression);
  EXPECT_EQ(judge("loss", {3.0, 3.0, 3.0, 3.0}, {3.03, 3.03, 3.03, 3.03}).verdict, Verdict::pass);  // 1 % < 2 %
  EXPECT_EQ(judge("loss", {3.0, 3.01, 2.99, 3.0}, {3.3, 3.31, 3.29, 3.3}).verdict, Verdict::regression);
}

TEST(Gate, RunsBecomeTheUnitWithFourRepeatsASide) {
  const auto base = ideal_samples(16, 1000, 0.01), cand = ideal_samples(16, 900, 0.01);
  GateOptions opts;
  const GateResult steps = run_gate(side({point("a", base, 2)}), side({point("a", cand, 2)}), opts);
  EXPECT_EQ(steps.points[0].metrics[0].unit, "steps");
  EXPECT_EQ(steps.points[0].metrics[0].n_base, 16u);
  const GateResult runs = run_gate(side({point("a", base, 4)}), side({point("a", cand, 4)}), opts);
  EXPECT_EQ(runs.points[0].metrics[0].unit, "runs");
  EXPECT_EQ(runs.points[0].metrics[0].n_base, 4u);
  EXPECT_EQ(runs.points[0].metrics[0].verdict, Verdict::regression);  // 4 vs 4 separated: p = 2/70
}

TEST(Gate, ThresholdsPerMetricAndPerPointPattern) {
  const ThresholdRule a = parse_threshold_rule("tps=10%");
  EXPECT_EQ(a.metric, "tps");
  EXPECT_TRUE(a.point_glob.empty());
  EXPECT_DOUBLE_EQ(a.threshold, 0.10);
  const ThresholdRule b = parse_threshold_rule("*stack=2:+compile*:memory=0.2");
  EXPECT_EQ(b.point_glob, "*stack=2:+compile*");
  EXPECT_EQ(b.metric, "mem");
  EXPECT_DOUBLE_EQ(b.threshold, 0.2);
  EXPECT_THROW(parse_threshold_rule("tpz=5%"), InputError);
  EXPECT_THROW(parse_threshold_rule("tps=five"), InputError);
  EXPECT_THROW(parse_threshold_rule("tps"), InputError);
  EXPECT_THROW(parse_threshold_rule("tps=50"), InputError);  // 5000 %: surely meant 50%

  const auto base = ideal_samples(10, 1000, 0.01), cand = ideal_samples(10, 920, 0.01);  // −8 %
  GateOptions opts;
  opts.metrics = {"tps"};  // step time moves with tps here; its own 5 % would fail both points
  opts.thresholds = {parse_threshold_rule("noisy*:tps=10%")};
  const GateResult r = run_gate(side({point("noisy-recipe", base), point("steady", base)}),
                                side({point("noisy-recipe", cand), point("steady", cand)}), opts);
  EXPECT_EQ(check_of(r, "noisy-recipe").verdict, Verdict::pass);
  EXPECT_EQ(check_of(r, "steady").verdict, Verdict::regression);
  // A later rule wins.
  opts.thresholds.push_back(parse_threshold_rule("tps=20%"));
  EXPECT_EQ(run_gate(side({point("steady", base)}), side({point("steady", cand)}), opts).exit_code, kGateExitPass);
}

TEST(Gate, DifferentHardwareNeedsActionEvenWithARegression) {
  const auto base = ideal_samples(10, 1000, 0.01), cand = ideal_samples(10, 800, 0.01);
  const GateResult r = run_gate(side({point("a", base)}), side({point("a", cand)}, "Other CPU"), {});
  EXPECT_EQ(r.exit_code, kGateExitNeedsAction);
  ASSERT_EQ(r.env.size(), 1u);
  EXPECT_EQ(r.env[0].key, "cpu_model");
  EXPECT_NE(gate_markdown(r).find("Environments differ"), std::string::npos);
  GateOptions allow;
  allow.allow_env_mismatch = true;
  EXPECT_EQ(run_gate(side({point("a", base)}), side({point("a", cand)}, "Other CPU"), allow).exit_code,
            kGateExitRegression);
}

TEST(Gate, LabelsPairByWorldSize) {
  const auto base = ideal_samples(10, 1000, 0.01);
  GateOptions opts;
  opts.match_by_world_size = true;
  const GateResult r = run_gate(side({point("compile.enable=false", base)}),
                                side({point("compile.enable=true", ideal_samples(10, 1500, 0.01))}), opts);
  ASSERT_EQ(r.points.size(), 1u);
  EXPECT_EQ(r.points[0].metrics[0].verdict, Verdict::improved);
  EXPECT_EQ(r.exit_code, kGateExitImproved);  // two recipes: the candidate is the faster one
}

// Two-sided: significantly better than the threshold is its own verdict and
// exit code (refresh the baseline), never a plain pass; within the
// threshold, or better without significance, stays a pass; any regression
// elsewhere outranks it.
TEST(Gate, ImprovementBeyondTheThresholdAsksToRefreshTheBaseline) {
  const auto base = ideal_samples(10, 1000, 0.01);
  const GateResult faster = run_gate(side({point("a", base), point("b", base)}),
                                     side({point("a", ideal_samples(10, 1200, 0.01)), point("b", base)}), {});
  EXPECT_EQ(faster.verdict, "improved");
  EXPECT_EQ(faster.exit_code, kGateExitImproved);
  EXPECT_NE(gate_markdown(faster).find("improved: refresh the baseline"), std::string::npos) << gate_markdown(faster);
  const GateResult slightly = run_gate(side({point("a", base)}), side({point("a", ideal_samples(10, 1030, 0.01))}), {});
  EXPECT_EQ(slightly.exit_code, kGateExitPass);
  const GateResult mixed = run_gate(side({point("a", base), point("b", base)}),
                                    side({point("a", ideal_samples(10, 1200, 0.01)), point("b", ideal_samples(10, 800, 0.01))}),
                                    {});
  EXPECT_EQ(mixed.exit_code, kGateExitRegression);
}

TEST(Gate, BaselineFileRoundTrip) {
  const auto base = ideal_samples(10, 1000, 0.01), cand = ideal_samples(10, 900, 0.01);
  const GateSide written = side({point("a", base), point("b", base)});
  const auto path = std::filesystem::path(::testing::TempDir()) / ("ctitan_gate_" + std::to_string(getpid()) + ".json");
  std::ofstream(path) << baseline_file_json(written).dump(1);
  const GateSide read = read_baseline_file(path.string());
  ASSERT_EQ(read.points.size(), 2u);
  EXPECT_EQ(read.points[0].samples.at("tps"), written.points[0].samples.at("tps"));
  EXPECT_EQ(read.env, written.env);
  const GateResult r = run_gate(read, side({point("a", cand), point("b", base)}), {});
  EXPECT_EQ(r.exit_code, kGateExitRegression);
  EXPECT_EQ(check_of(r, "a").verdict, Verdict::regression);
  EXPECT_EQ(check_of(r, "b").verdict, Verdict::pass);

  std::ofstream(path) << "{\"points\": []}";
  EXPECT_THROW(read_baseline_file(path.string()), InputError);
  EXPECT_THROW(read_baseline_file(path.string() + ".missing"), InputError);
  std::filesystem::remove(path);
}

TEST(Gate, JsonVerdictCarriesEveryCheck) {
  const auto base = ideal_samples(10, 1000, 0.01);
  const GateResult r = run_gate(side({point("a", base)}), side({point("a", ideal_samples(10, 900, 0.01))}), {});
  const nlohmann::json j = gate_json(r);
  EXPECT_EQ(j["format"], "ctitan-gate-verdict-v1");
  EXPECT_EQ(j["exit_code"], 1);
  ASSERT_EQ(j["points"].size(), 1u);
  const auto& tps = j["points"][0]["metrics"][0];
  EXPECT_EQ(tps["metric"], "tps");
  EXPECT_EQ(tps["verdict"], "regression");
  EXPECT_NEAR(tps["change"].get<double>(), -0.1, 1e-9);
  EXPECT_TRUE(tps["p_value"].is_number());
}

}  // namespace

// Paired runs: a machine that drifts by ±20 % between pairs hides a 10 %
// slowdown from the unpaired U test, but every pair shows it.
TEST(GatePaired, PairsSeeThroughDriftThatHidesASlowdownFromTheUTest) {
  const GateMetric& tps = *find_gate_metric("tps");
  const std::vector<double> base = {1000, 1300, 900, 1200, 1100, 950};
  std::vector<double> cand;
  for (double b : base) cand.push_back(b * 0.9);
  GateOptions opts;
  const MetricCheck paired = judge_paired_metric(tps, base, cand, 0.05, opts);
  EXPECT_EQ(paired.verdict, Verdict::regression) << paired.reason;
  EXPECT_EQ(paired.test, "Wilcoxon");
  EXPECT_DOUBLE_EQ(paired.p_value, 2.0 / 64);
  EXPECT_NEAR(paired.change, -0.10, 1e-12);
  const MetricCheck unpaired = judge_metric(tps, base, cand, 0.05, opts);
  EXPECT_EQ(unpaired.verdict, Verdict::inconclusive) << unpaired.reason;
}

TEST(GatePaired, AaPairsPassAndFivePairsSayHowManyAreNeeded) {
  const GateMetric& tps = *find_gate_metric("tps");
  const std::vector<double> base = {1000, 1300, 900, 1200, 1100, 950};
  const std::vector<double> same = {1004, 1296, 903, 1195, 1102, 948};  // A/A: ±0.5 %
  EXPECT_EQ(judge_paired_metric(tps, base, same, 0.05, {}).verdict, Verdict::pass);
  const std::vector<double> b5(base.begin(), base.begin() + 5);
  std::vector<double> c5;
  for (double b : b5) c5.push_back(b * 0.8);
  const MetricCheck five = judge_paired_metric(tps, b5, c5, 0.05, {});
  EXPECT_EQ(five.verdict, Verdict::inconclusive);
  EXPECT_NE(five.reason.find("5 pairs can never reach alpha 0.05: at least 6 needed"), std::string::npos) << five.reason;
  EXPECT_EQ(judge_paired_metric(tps, base, {1, 2}, 0.05, {}).verdict, Verdict::missing);
}

// Calibration: an A/A gate of n pairs stays within the recommended
// threshold 95 % of the time. No noise: the floor of 1 %. Pairs that swing
// by ±10 %: the median of 6 sign-flipped draws stays within 10 % (every
// draw is ±10 %, so |median| ≤ 10 %), and is often 10 % itself.
TEST(GateCalibrate, RecommendationsFollowTheObservedNoise) {
  EXPECT_DOUBLE_EQ(recommend_threshold({0, 0, 0, 0, 0, 0}, 6, 0.05), 0.01);
  const double ten = std::log(1.10);
  const double t = recommend_threshold({ten, -ten, ten, -ten, ten, -ten}, 6, 0.05);
  EXPECT_DOUBLE_EQ(t, 0.10);
  // More noise, a larger threshold; more gate pairs, a smaller one.
  const std::vector<double> noisy = {0.02, -0.15, 0.08, -0.04, 0.12, -0.09, 0.01, 0.05, -0.11, 0.03};
  EXPECT_GT(recommend_threshold(noisy, 6, 0.05), recommend_threshold(noisy, 24, 0.05));
  EXPECT_TRUE(std::isnan(recommend_threshold({}, 6, 0.05)));
}

TEST(GatePaired, StatesTheSmallestChangeItCouldDetect) {
  const GateMetric& tps = *find_gate_metric("tps");
  const std::vector<double> base = {1000, 1000, 1000, 1000, 1000, 1000};
  const std::vector<double> cand = {1010, 990, 1020, 980, 1005, 995};  // ±2 % around no change
  const MetricCheck c = judge_paired_metric(tps, base, cand, 0.05, {});
  EXPECT_EQ(c.verdict, Verdict::pass);
  // Shifted by δ, all six ratios must be one way: δ just over the largest
  // downward swing (2 %).
  EXPECT_NEAR(c.detectable, 0.021, 0.0015);
  EXPECT_NE(c.reason.find("pairs detect changes of"), std::string::npos) << c.reason;
  EXPECT_TRUE(std::isnan(judge_paired_metric(tps, {1, 2, 3}, {1, 2, 3}, 0.05, {}).detectable));  // 3 pairs: never
}
