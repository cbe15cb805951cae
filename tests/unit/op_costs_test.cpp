// Op-level cost laws (planner/op_costs.h): each class's work from an op's
// shapes, the law fitted back from synthetic timings with a known law and
// noise, the leaf rule on a nested trace, and the refusal of a run without
// traces.
#include "planner/op_costs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>

#include "common/errors.h"
#include "planner/model_desc.h"
#include "tests/unit/input_error.h"
#include "planner/plan.h"
#include "profiling/peak_flops.h"
#include "trainer/config/config_loader.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;

TEST(OpCosts, LinearLawRecoveredFromNoisyTimings) {
  // t = 8 us + work / (40 GFLOP/s), 3 % multiplicative noise, work over four decades.
  std::mt19937_64 rng(11);
  std::normal_distribution<double> noise(0.0, 0.03);
  const double fixed = 8e-6, per = 1 / 40e9;
  std::vector<std::pair<double, double>> xy;
  for (int i = 0; i < 400; ++i) {
    const double work = std::pow(10.0, 4 + 4.0 * i / 400);
    xy.emplace_back(work, (fixed + per * work) * std::exp(noise(rng)));
  }
  const LinearLaw law = fit_linear_law(xy);
  EXPECT_EQ(law.n, 400u);
  EXPECT_NEAR(law.fixed_s / fixed, 1.0, 0.05);
  EXPECT_NEAR(law.per_unit_s / per, 1.0, 0.03);
  EXPECT_LT(law.median_abs_err, 0.04);
  // Exact data: exact law; no fixed part, or no throughput part, when the data has none.
  EXPECT_NEAR(fit_linear_law({{1, 3}, {2, 5}, {4, 9}}).fixed_s, 1.0, 1e-12);
  EXPECT_NEAR(fit_linear_law({{1, 3}, {2, 5}, {4, 9}}).per_unit_s, 2.0, 1e-12);
  EXPECT_EQ(fit_linear_law({{1, 2}, {2, 4}, {3, 6}}).fixed_s, 0.0);
  EXPECT_NEAR(fit_linear_law({{1, 5}, {2, 5}, {8, 5}}).per_unit_s, 0.0, 1e-15);
  EXPECT_NEAR(fit_linear_law({{1, 5}, {2, 5}, {8, 5}}).fixed_s, 5.0, 1e-12);
  // One size only: no slope to fit. The median time is throughput (work > 0) or dispatch (no work).
  const LinearLaw one_size = fit_linear_law({{100, 2}, {100, 3}, {100, 9}});
  EXPECT_EQ(one_size.fixed_s, 0.0);
  EXPECT_DOUBLE_EQ(one_size.per_unit_s, 0.03);
  const LinearLaw views = fit_linear_law({{0, 1e-6}, {0, 2e-6}, {0, 5e-6}});
  EXPECT_DOUBLE_EQ(views.fixed_s, 2e-6);
  EXPECT_EQ(views.per_unit_s, 0.0);
}

TEST(OpCosts, WorkOfEachClassFromTheOpsShapes) {
  OpSample s;
  ASSERT_TRUE(classify_op("aten::mm", {{"Input Dims", {{64, 128}, {128, 32}}}, {"Input type", {"float", "float"}}}, s));
  EXPECT_EQ(s.cls, OpClass::gemm);
  EXPECT_DOUBLE_EQ(s.work, 2.0 * 64 * 128 * 32);
  EXPECT_EQ(s.dtype, "float");
  ASSERT_TRUE(classify_op("aten::addmm", {{"Input Dims", {{32}, {64, 128}, {128, 32}, {}, {}}},
                                          {"Input type", {"c10::BFloat16", "c10::BFloat16", "c10::BFloat16"}}},
                          s));
  EXPECT_DOUBLE_EQ(s.work, 2.0 * 64 * 128 * 32);  // the bias is not a matrix
  EXPECT_EQ(s.dtype, "c10::BFloat16");
  ASSERT_TRUE(classify_op("aten::bmm", {{"Input Dims", {{8, 16, 32}, {8, 32, 4}}}}, s));
  EXPECT_DOUBLE_EQ(s.work, 2.0 * 8 * 16 * 32 * 4);
  ASSERT_TRUE(classify_op("aten::_scaled_dot_product_flash_attention_for_cpu",
                          {{"Input Dims", {{2, 4, 128, 16}, {2, 2, 256, 16}, {2, 2, 256, 16}}}}, s));
  EXPECT_EQ(s.cls, OpClass::attention);
  EXPECT_DOUBLE_EQ(s.work, 4.0 * 2 * 4 * 128 * 256 * 16);
  ASSERT_TRUE(classify_op("aten::add", {{"Input Dims", {{4, 256}, {4, 256}, {}}},
                                        {"Input type", {"c10::BFloat16", "float", "Scalar"}}},
                          s));
  EXPECT_EQ(s.cls, OpClass::elementwise);
  EXPECT_DOUBLE_EQ(s.work, 4 * 256 * 2 + 4 * 256 * 4);
  EXPECT_FALSE(classify_op("forward layers.0", nlohmann::json::object(), s));  // ctitan's ranges are no ops
  EXPECT_FALSE(classify_op("aten::mm", {{"Input Dims", {{64, 128}}}}, s));     // one matrix: no GEMM
}

nlohmann::json op(const std::string& name, double ts, double dur, nlohmann::json dims) {
  return {{"name", name}, {"cat", "cpu_op"}, {"ph", "X"}, {"ts", ts}, {"dur", dur}, {"pid", 0}, {"tid", 7},
          {"args", {{"Input Dims", dims}}}};
}

TEST(OpCosts, LeavesCountAndGemmsCountWhole) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "step 2"}, {"cat", "step"}, {"ph", "X"}, {"ts", 0}, {"dur", 1000}, {"pid", 0}, {"tid", 1}});
  events.push_back(op("aten::linear", 10, 100, {{4, 64}, {32, 64}, {32}}));         // parent: through its children
  events.push_back(op("aten::t", 12, 2, {{32, 64}}));                               // leaf: element-wise
  events.push_back(op("aten::addmm", 20, 80, {{32}, {4, 64}, {64, 32}, {}, {}}));    // the GEMM, whole
  events.push_back(op("aten::copy_", 30, 10, {{4, 32}, {4, 32}, {}}));              // inside the GEMM: not counted
  events.push_back(op("aten::mul", 200, 5, {{4, 32}, {}}));                         // leaf
  events.push_back({{"name", "all_reduce dp"}, {"cat", "collective"}, {"ph", "X"}, {"ts", 300}, {"dur", 50},
                    {"pid", 0}, {"tid", 99}, {"args", {{"bytes", 4096}, {"op", "all_reduce"}, {"group", "dp"}}}});
  const TraceSamples s = trace_samples({{"traceEvents", events}, {"ctitan", {{"op_source", "kineto"}}}});
  EXPECT_EQ(s.steps, 1);
  EXPECT_DOUBLE_EQ(s.step_seconds, 1e-3);
  EXPECT_EQ(s.op_source, "kineto");
  std::vector<std::string> names;
  for (const OpSample& o : s.ops) names.push_back(o.name);
  EXPECT_EQ(names, (std::vector<std::string>{"all_reduce dp", "aten::t", "aten::addmm", "aten::mul"}));
  EXPECT_DOUBLE_EQ(s.ops[2].seconds, 80e-6);
  EXPECT_DOUBLE_EQ(s.ops[2].work, 2.0 * 4 * 64 * 32);
  EXPECT_EQ(s.ops[0].cls, OpClass::collective);
  EXPECT_DOUBLE_EQ(s.ops[0].work, 4096);
  EXPECT_EQ(s.ops[0].dtype, "all_reduce dp");
}

TEST(OpCosts, EachClassLawRecoveredFromASyntheticTrace) {
  // GEMMs at 5 us + 20 GFLOP/s, element-wise at 1 us + 2 GB/s: the fit finds both, each in its class.
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int> size(16, 512);
  nlohmann::json events = nlohmann::json::array();
  double ts = 0;
  for (int i = 0; i < 200; ++i) {
    const int m = size(rng), n = size(rng), k = size(rng);
    const double gemm_s = 5e-6 + 2.0 * m * n * k / 20e9;
    events.push_back(op("aten::mm", ts, gemm_s * 1e6, {{m, k}, {k, n}}));
    ts += gemm_s * 1e6 + 1;
    const double bytes = 4.0 * m * n;
    const double ew_s = 1e-6 + bytes / 2e9;
    events.push_back(op("aten::silu", ts, ew_s * 1e6, {{m, n}}));
    ts += ew_s * 1e6 + 1;
  }
  events.push_back({{"name", "step 1"}, {"cat", "step"}, {"ph", "X"}, {"ts", 0}, {"dur", ts}, {"pid", 0}, {"tid", 1}});
  const OpCostModel m = fit_op_costs(trace_samples({{"traceEvents", events}}));
  ASSERT_EQ(m.fits.size(), 2u);
  for (const OpClassFit& f : m.fits) {
    const bool gemm = f.cls == OpClass::gemm;
    EXPECT_NEAR(f.law.fixed_s, gemm ? 5e-6 : 1e-6, 1e-9) << op_class_name(f.cls);
    EXPECT_NEAR(f.law.per_unit_s * (gemm ? 20e9 : 2e9), 1.0, 1e-6) << op_class_name(f.cls);
    EXPECT_EQ(f.law.n, 200u);
  }
  EXPECT_NE(render_op_costs(m).find("20 GFLOP/s"), std::string::npos) << render_op_costs(m);
  EXPECT_NE(render_op_costs(m).find("2 GB/s"), std::string::npos) << render_op_costs(m);
}

TEST(OpCosts, TheRunsOwnPlanMatchesWhatItsTraceMeasured) {
  // A trace whose attention and element-wise ops took 70 % and 60 % of what
  // the shipped cpu spec plans for debugmodel: the spec spec_from_run makes
  // plans that run's attention, element-wise and overhead time as measured,
  // and names what it measured.
  const JobConfig cfg = parse_job_config({"--job.config_file", "recipes/llama3_debugmodel.toml"});
  PlanRequest q;
  q.cfg = cfg;
  q.model = model_from_config(cfg.model);
  q.world_size = 1;
  const HardwareSpec start = load_hardware("cpu");
  const TimeBreakdown planned = predict(q, start).time;
  ASSERT_GT(planned.attention, 0);
  ASSERT_GT(planned.elementwise, 0);
  TraceSamples t;
  t.steps = 2;
  for (int i = 0; i < 12; ++i) {
    t.ops.push_back({"aten::_scaled_dot_product_flash_attention_for_cpu", OpClass::attention, "forward",
                     4.0 * 8 * 16 * 2048 * 2048 * 16, 0.7 * planned.attention / 6, 16});
    t.ops.push_back({"aten::add", OpClass::elementwise, "aten::add", 1e6, 0.6 * planned.elementwise / 6, 0});
  }
  t.ops.push_back({"aten::view", OpClass::view, "", 0, 1e-6, 0});
  t.step_seconds = 2 * (0.7 * planned.attention + 0.6 * planned.elementwise + 0.004);
  t.gap_seconds = 2 * 0.004;
  const HardwareSpec hw = spec_from_run(start, t, cfg, 1, "run");
  const TimeBreakdown time = predict(q, hw).time;
  EXPECT_NEAR(time.attention / (0.7 * planned.attention), 1.0, 1e-9);
  // Element-wise: the scores traffic of the cpu spec's non-flash attention does not scale with
  // the bandwidth efficiency, so the plan comes as close as that term lets it: the measured time,
  // or that term's own at the highest memory efficiency a cpu spec allows, whichever is more.
  HardwareSpec fastest = start;
  fastest.eff.memory = spec_range("memory", true).hi;
  const double floor = predict(q, fastest).time.elementwise;
  ASSERT_LT(floor, 0.85 * planned.elementwise);
  EXPECT_NEAR(time.elementwise / std::max(0.6 * planned.elementwise, floor), 1.0, 0.05)
      << "planned " << planned.elementwise << ", measured " << 0.6 * planned.elementwise << ", floor " << floor;
  EXPECT_NEAR(time.step_overhead, 0.004, 1e-12);
  EXPECT_NE(hw.calibration.find("measured from the traced ops of run (kernel_overhead_s, attention, memory, "
                                "step_overhead_s)"),
            std::string::npos)
      << hw.calibration;
  // The profiler's slowdown comes off: the same trace against an untraced step 80 % as long.
  const HardwareSpec faster = spec_from_run(start, t, cfg, 1, "run", 0.8 * t.step_seconds / 2);
  EXPECT_NEAR(predict(q, faster).time.attention / (0.8 * 0.7 * planned.attention), 1.0, 1e-9);
}

nlohmann::json span(const std::string& cat, const std::string& name, double ts, double dur) {
  return {{"name", name}, {"cat", cat}, {"ph", "X"}, {"ts", ts}, {"dur", dur}, {"pid", 0}, {"tid", 1}};
}

TEST(OpCosts, UnitsSplitByClassFromTheTrainersSpans) {
  // Two blocks forward (100 us each) and backward (200 us each), the
  // embedding, the head, the optimizer and data, in a 1000 us step. Inside
  // each forward block: a GEMM of 30 us, attention of 20 us (a nested op
  // inside it counts with it), an element-wise op of 10 us and four views of
  // 1 us, the dispatch cost every op pays.
  nlohmann::json ev = nlohmann::json::array();
  ev.push_back(span("step", "step 3", 0, 1000));
  ev.push_back(span("data", "data", 0, 10));
  ev.push_back(span("compute", "forward tok_embeddings", 10, 20));
  ev.push_back(op("aten::embedding", 12, 5, {{4, 8}}));
  for (int l = 0; l < 2; ++l) {
    const double t0 = 30 + 100 * l;
    ev.push_back(span("compute", "forward layers." + std::to_string(l), t0, 100));
    ev.push_back(op("aten::mm", t0 + 1, 30, {{64, 32}, {32, 32}}));
    ev.push_back(op("aten::_scaled_dot_product_flash_attention_for_cpu", t0 + 40, 20, {{1, 2, 16, 8}, {1, 2, 16, 8}}));
    ev.push_back(op("aten::empty", t0 + 41, 2, {{1}}));  // inside attention: counted with it
    ev.push_back(op("aten::silu", t0 + 70, 10, {{64, 32}}));
    for (int v = 0; v < 4; ++v) ev.push_back(op("aten::view", t0 + 85 + 2 * v, 1, {{64, 32}}));
  }
  ev.push_back(span("compute", "forward norm+output", 230, 50));
  ev.push_back(op("aten::mm", 231, 41, {{64, 32}, {32, 100}}));
  ev.push_back(span("compute", "backward norm+output", 280, 60));
  for (int l = 1; l >= 0; --l) {
    const double t0 = 340 + 200 * (1 - l);
    ev.push_back(span("compute", "backward layers." + std::to_string(l), t0, 200));
    ev.push_back(op("aten::mm", t0 + 1, 61, {{64, 32}, {32, 32}}));
    ev.push_back(op("aten::mul", t0 + 100, 21, {{64, 32}, {64, 32}}));
  }
  ev.push_back(span("compute", "backward tok_embeddings", 740, 10));
  ev.push_back(span("compute", "optimizer", 750, 100));
  ev.push_back(op("aten::_foreach_mul_", 760, 41, {{1000}}));
  const TraceSamples t = trace_samples({{"traceEvents", ev}});
  ASSERT_EQ(t.scopes.size(), 10u);
  const MeasuredUnits mu = measure_units(t);
  // Each op less the 1 us dispatch; the rest of the span is fixed.
  EXPECT_NEAR(mu.block.gemm_f, 29e-6, 1e-12);
  EXPECT_NEAR(mu.block.attn_f, 19e-6, 1e-12);
  EXPECT_NEAR(mu.block.elem_f, 9e-6, 1e-12);
  EXPECT_NEAR(mu.block.fixed_f, 100e-6 - 29e-6 - 19e-6 - 9e-6, 1e-12);  // the views are all dispatch
  EXPECT_NEAR(mu.block.gemm_b, 60e-6, 1e-12);
  EXPECT_NEAR(mu.block.elem_b, 20e-6, 1e-12);
  EXPECT_NEAR(mu.block.fixed_b, 120e-6, 1e-12);
  EXPECT_NEAR(mu.head.gemm_f, 40e-6, 1e-12);
  EXPECT_NEAR(mu.head.fixed_f, 10e-6, 1e-12);
  EXPECT_NEAR(mu.head.fixed_b, 60e-6, 1e-12);
  EXPECT_NEAR(mu.embedding.elem_f, 4e-6, 1e-12);
  EXPECT_NEAR(mu.param_s, 40e-6, 1e-12);
  EXPECT_NEAR(mu.param_fixed_s, 60e-6, 1e-12);
  // Outside every unit: data (10 us) and the 150 us after the optimizer.
  EXPECT_NEAR(mu.step_fixed_s, 160e-6, 1e-12);
  // The profiler's slowdown comes off every figure.
  EXPECT_NEAR(measure_units(t, 0.5).block.fixed_b, 60e-6, 1e-12);
}

TEST(OpCosts, GemmSizeCurveFittedOnlyWhereTheRunsGemmsSpanSizes) {
  // GEMMs timed by the planner's law t = a · 2MNK · (1 + h/x), x = min(M, N, K),
  // h = 100: spanning x = 32 … 512 they give h back; all of one size they
  // cannot, and the spec's half size stays (the efficiency alone is fitted).
  const double peak = 1e11, a = 1 / (0.5 * peak), h = 100;
  const auto samples = [&](std::vector<double> xs) {
    TraceSamples t;
    for (double x : xs) {
      OpSample g;
      g.cls = OpClass::gemm;
      g.min_dim = x;
      g.work = 2 * 1024 * 1024 * x;
      g.seconds = a * g.work * (1 + h / x);
      t.ops.push_back(g);
    }
    return t;
  };
  Efficiency start;
  start.gemm_half_size = 777;
  const DerivedEfficiency spread = efficiency_from_samples(samples({32, 64, 128, 256, 512}), start, peak, 1e10);
  EXPECT_NEAR(spread.eff.gemm_half_size / h, 1.0, 0.03);
  EXPECT_NEAR(spread.eff.gemm, 0.5, 0.02);
  EXPECT_NE(std::find(spread.measured.begin(), spread.measured.end(), "gemm_half_size"), spread.measured.end());
  const DerivedEfficiency one = efficiency_from_samples(samples({256, 256, 256, 300}), start, peak, 1e10);
  EXPECT_DOUBLE_EQ(one.eff.gemm_half_size, 777);
  EXPECT_EQ(std::find(one.measured.begin(), one.measured.end(), "gemm_half_size"), one.measured.end());
  EXPECT_NE(std::find(one.measured.begin(), one.measured.end(), "gemm"), one.measured.end());
  // This CPU's own curve, measured once per process.
  const double probed = measure_cpu_gemm_half_size(at::kFloat);
  EXPECT_GE(probed, 0.5);
  EXPECT_LE(probed, 1e5);
  EXPECT_EQ(measure_cpu_gemm_half_size(at::kFloat), probed);
}

TEST(OpCosts, EachFigureIsTheMedianOverTheTracedSteps) {
  // Three traced steps of one block: a GEMM of 30 us in a 50 us span, but
  // the second step was disturbed (everything 4x as long). The median step's
  // figures stand; the mean would be 2x off.
  nlohmann::json ev = nlohmann::json::array();
  for (int st = 0; st < 3; ++st) {
    const double t0 = 1000.0 * st, k = st == 1 ? 4 : 1;
    ev.push_back(span("step", "step " + std::to_string(st + 1), t0, 100 * k));
    ev.push_back(span("compute", "forward layers.0", t0, 50 * k));
    ev.push_back(op("aten::mm", t0 + 1, 31 * k, {{64, 32}, {32, 32}}));
    ev.push_back(op("aten::view", t0 + 40 * k, 1, {{64, 32}}));
  }
  const TraceSamples t = trace_samples({{"traceEvents", ev}});
  ASSERT_EQ(t.step_spans.size(), 3u);
  const MeasuredUnits mu = measure_units(t);
  EXPECT_NEAR(mu.block.gemm_f, 30e-6, 1e-12);
  EXPECT_NEAR(mu.block.fixed_f, 20e-6, 1e-12);
  EXPECT_NEAR(mu.step_fixed_s, 50e-6, 1e-12);
}

TEST(OpCosts, SizeCurveInterpolatesTheMeasuredRatioBetweenTwoBatchSizes) {
  // The debugmodel measured at batch 4 at 0.5x what the analytic model
  // plans for its GEMMs, and at batch 1 at 2x: batch 2 (halfway in log
  // working set) gets the geometric mean, 1x; batch 8 and the 125M model's
  // wider blocks at batch 4 get batch 4's ratio (the nearest); the head
  // keeps one ratio where only one run planned it.
  const JobConfig cfg = parse_job_config({"--job.config_file", "recipes/llama3_debugmodel.toml"});
  const HardwareSpec hw = load_hardware("cpu");
  const auto plan = [&](int64_t batch, const std::string& flavor, std::shared_ptr<const MeasuredUnits> mu) {
    PlanRequest q;
    q.cfg = cfg;
    q.cfg.training.local_batch_size = batch;
    q.cfg.model.flavor = flavor;
    q.model = model_from_config(q.cfg.model);
    q.world_size = 1;
    q.measured = std::move(mu);
    return predict(q, hw);
  };
  const Prediction b4 = plan(4, "debugmodel", nullptr), b1 = plan(1, "debugmodel", nullptr);
  auto mu = std::make_shared<MeasuredUnits>();
  mu->run_dir = "calib_b4";
  mu->tokens = 4.0 * static_cast<double>(cfg.training.seq_len);
  mu->dim = static_cast<double>(model_from_config(cfg.model).dim);
  mu->vocab = static_cast<double>(model_from_config(cfg.model).vocab_size);
  mu->planned_block = b4.block, mu->planned_head = b4.head, mu->planned_embedding = b4.embedding;
  mu->block = b4.block, mu->head = b4.head, mu->embedding = b4.embedding;
  mu->block.gemm_f *= 0.5;
  mu->head.gemm_f *= 3;
  MeasuredShape small{"calib_b1", static_cast<double>(cfg.training.seq_len), b1.block, b1.head, b1.embedding,
                      b1.block, b1.head, b1.embedding};
  small.block.gemm_f *= 2;
  small.head.gemm_f = 0;  // not planned there: out of its curve
  small.planned_head.gemm_f = 0;
  mu->shapes.push_back(small);
  for (const auto& [batch, flavor, ratio] :
       {std::tuple{int64_t{2}, "debugmodel", 1.0}, {int64_t{1}, "debugmodel", 2.0}, {int64_t{8}, "debugmodel", 0.5},
        {int64_t{4}, "debugmodel", 0.5}, {int64_t{4}, "125M", 0.5}}) {
    const Prediction analytic = plan(batch, flavor, nullptr), measured = plan(batch, flavor, mu);
    EXPECT_NEAR(measured.block.gemm_f / analytic.block.gemm_f, ratio, 1e-9) << "batch " << batch << " " << flavor;
    EXPECT_NEAR(measured.head.gemm_f / analytic.head.gemm_f, 3.0, 1e-9) << "batch " << batch << " " << flavor;
    EXPECT_NEAR(measured.block.attn_f / analytic.block.attn_f, 1.0, 1e-9) << "batch " << batch << " " << flavor;
  }
}

TEST(OpCosts, MeasuredUnitsScaleByTheAnalyticModelsRatios) {
  // A debugmodel run measured at known multiples of what the cpu spec plans
  // for it: planned with its own measurement, the run's step is the sum of
  // what was measured; another recipe's classes are the measurement times
  // the analytic model's ratio between the two recipes (computed here from
  // two plain analytic plans).
  const JobConfig cfg = parse_job_config({"--job.config_file", "recipes/llama3_debugmodel.toml"});
  const HardwareSpec hw = load_hardware("cpu");
  PlanRequest q;
  q.cfg = cfg;
  q.model = model_from_config(cfg.model);
  q.world_size = 1;
  const Prediction base = predict(q, hw);
  auto mu = std::make_shared<MeasuredUnits>();
  mu->run_dir = "calib";
  const auto times = [](const UnitTimes& u, double g, double a, double e, double f) {
    return UnitTimes{g * u.gemm_f, g * u.gemm_b, a * u.attn_f, a * u.attn_b, e * u.elem_f, e * u.elem_b, f * u.fixed_f, f * u.fixed_b};
  };
  mu->block = times(base.block, 0.5, 2.0, 1.5, 3.0);
  mu->head = times(base.head, 0.7, 1.0, 1.2, 2.0);
  mu->embedding = times(base.embedding, 1.0, 1.0, 0.9, 4.0);
  mu->param_s = 0.003, mu->param_fixed_s = 0.002, mu->step_fixed_s = 0.001;
  mu->planned_block = base.block, mu->planned_head = base.head, mu->planned_embedding = base.embedding;
  mu->planned_param_elems = base.rank_param_elems, mu->planned_units = base.rank_units;
  mu->planned_overhead_mult = base.overhead_mult, mu->planned_bandwidth = base.bandwidth;
  mu->corun = 1.25;
  q.measured = mu;
  const Prediction own = predict(q, hw);
  const auto sum = [](const UnitTimes& u) {
    return u.gemm_f + u.gemm_b + u.attn_f + u.attn_b + u.elem_f + u.elem_b + u.fixed_f + u.fixed_b;
  };
  const double layers = static_cast<double>(q.model.n_layers);
  const double measured = layers * sum(mu->block) + sum(mu->head) + sum(mu->embedding) + 0.006;
  EXPECT_NEAR(own.time.step / measured, 1.0, 1e-9);
  EXPECT_EQ(own.compute_source, "measured (calib)");
  EXPECT_NEAR(own.time.step_overhead, 0.001, 1e-15);

  // Twice the batch, TP 2 at world size 2: each class is the measurement
  // times the analytic ratio, and the ranks' side-by-side slowdown applies.
  PlanRequest other = q;
  other.measured = nullptr;
  other.cfg.training.local_batch_size *= 2;
  other.cfg.parallelism.tensor_parallel_degree = 2;
  other.world_size = 2;
  const Prediction analytic = predict(other, hw);
  other.measured = mu;
  const Prediction scaled = predict(other, hw);
  EXPECT_NEAR(scaled.block.gemm_f, 1.25 * 0.5 * base.block.gemm_f * analytic.block.gemm_f / base.block.gemm_f, 1e-15);
  EXPECT_NEAR(scaled.block.attn_b / (1.25 * 2.0 * analytic.block.attn_b), 1.0, 1e-9);
  EXPECT_NEAR(scaled.block.fixed_f / (1.25 * 3.0 * analytic.block.fixed_f), 1.0, 1e-9);
  EXPECT_NEAR(scaled.head.elem_b / (1.25 * 1.2 * analytic.head.elem_b), 1.0, 1e-9);
  // Communication is the analytic model's in both.
  ASSERT_FALSE(scaled.time.comm.empty());
  EXPECT_DOUBLE_EQ(scaled.time.comm.front().seconds, analytic.time.comm.front().seconds);
}

TEST(OpCosts, SideBySideSlowdownFromTwoRunsOfOneRecipe) {
  MeasuredUnits alone, two;
  alone.block = {1, 2, 1, 2, 1, 2, 1, 2};
  two.block = {1.1, 2.2, 1.1, 2.2, 1.1, 2.2, 1.1, 2.2};
  EXPECT_NEAR(corun_factor(alone, two, "fsdp2"), 1.1, 1e-12);
  // Not the same recipe: a block five times as long is refused in one line.
  two.block = {5, 10, 5, 10, 5, 10, 5, 10};
  try {
    corun_factor(alone, two, "other_run");
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("other_run"), std::string::npos) << what;
    EXPECT_NE(what.find("5.00x"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_THROW(corun_factor(alone, MeasuredUnits{}, "empty"), InputError);
}

TEST(OpCosts, LinkFittedToMultiRankRunsRecoversItsLatencyAndBandwidth) {
  // Three 2-rank debugmodel runs (FSDP, TP, DDP) "measured" as the planner
  // plans them on a link of 1.5 ms and 0.3 GB/s: fitted from the cpu spec's
  // link, both come back; one run alone fits the latency (the spec's
  // bandwidth being the truth there).
  HardwareSpec hw = resolved_for_plan(load_hardware("cpu"));  // this machine's probe, the link's start
  const auto with_link = [&](double lat, double bw) {
    HardwareSpec h = hw;
    h.eff.comm = 1;
    for (Link* l : {&h.intra_node, &h.inter_node}) l->latency_s = lat, l->bandwidth = bw;
    return h;
  };
  const JobConfig base = parse_job_config({"--job.config_file", "recipes/llama3_debugmodel.toml"});
  std::vector<ProfiledRun> runs;
  for (const char* layout : {"fsdp", "tp", "ddp"}) {
    ProfiledRun r;
    r.run_dir = layout;
    r.request.cfg = base;
    if (std::string(layout) == "tp") r.request.cfg.parallelism.tensor_parallel_degree = 2;
    if (std::string(layout) == "ddp") r.request.cfg.parallelism.data_parallel_replicate_degree = 2;
    r.request.model = model_from_config(base.model);
    r.request.world_size = 2;
    r.step_s = predict(r.request, with_link(1.5e-3, 0.3e9)).time.step;
    runs.push_back(r);
  }
  const LinkFit fit = fit_link_to_runs(hw, runs);
  EXPECT_NEAR(fit.latency_s / 1.5e-3, 1.0, 0.02);
  EXPECT_NEAR(fit.bandwidth / 0.3e9, 1.0, 0.03);
  EXPECT_LT(fit.rms_log_error, 0.01);
  EXPECT_NE(fit.spec.calibration.find("the link fitted to the step times of 3 multi-rank runs"), std::string::npos)
      << fit.spec.calibration;
  EXPECT_NE(fit.spec.calibration.find("fsdp, tp, ddp"), std::string::npos) << fit.spec.calibration;
  const double spec_bw = hw.intra_node.bandwidth * hw.eff.comm;
  runs.resize(1);
  runs[0].request.cfg.parallelism.tensor_parallel_degree = 2;
  runs[0].step_s = predict(runs[0].request, with_link(0.8e-3, spec_bw)).time.step;
  const LinkFit one = fit_link_to_runs(hw, runs);
  EXPECT_NEAR(one.latency_s / 0.8e-3, 1.0, 0.02);
  EXPECT_DOUBLE_EQ(one.bandwidth, spec_bw);
  // No run: the spec unchanged.
  EXPECT_EQ(fit_link_to_runs(hw, {}).spec.calibration, hw.calibration);
}

TEST(OpCosts, ARunWithoutTracesIsRefusedInOneLine) {
  const fs::path dir = fs::path(::testing::TempDir()) / "op_costs_no_traces";
  fs::remove_all(dir);
  fs::create_directories(dir / "checkpoint");
  std::ofstream(dir / "metrics.jsonl") << "{}\n";
  try {
    op_costs_from_run(dir.string());
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("has no trace"), std::string::npos) << what;
    EXPECT_NE(what.find("--profiling.enable_profiling"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_THROW(op_costs_from_run((dir / "missing").string()), InputError);
  fs::create_directories(dir / "profile_traces" / "iteration_2");
  std::ofstream(dir / "profile_traces" / "iteration_2" / "rank0_trace.json") << "{\"traceEvents\": [";
  EXPECT_THROW(op_costs_from_run(dir.string()), InputError);  // a damaged trace: one line too
  fs::remove_all(dir);
}

TEST(OpCosts, ImpossibleEventsAndLawsFasterThanThePeakAreRefused) {
  // Issue 55: a negative, zero, infinite or day-long duration, a negative or
  // 2^62 size is no real run's; each is one line naming the event.
  const auto trace = [](nlohmann::json e) {
    nlohmann::json events = nlohmann::json::array();
    events.push_back(span("step", "step 1", 0, 1000));
    events.push_back(std::move(e));
    return nlohmann::json{{"traceEvents", events}};
  };
  const auto refusal = [&](nlohmann::json e) { return error_of([&] { trace_samples(trace(std::move(e))); }); };
  EXPECT_EQ(refusal(op("aten::mm", 10, -5, {{64, 32}, {32, 32}})),
            "event 1 ('aten::mm') has \"dur\" = -5: a duration is a positive number of microseconds, under a day");
  EXPECT_NE(refusal(op("aten::mm", 10, 0, {{64, 32}, {32, 32}})).find("\"dur\" = 0: "), std::string::npos);
  EXPECT_NE(refusal(op("aten::mm", 10, 1e11, {{64, 32}, {32, 32}})).find("\"dur\" = 1e+11: "), std::string::npos);
  EXPECT_NE(refusal(op("aten::mm", 10, INFINITY, {{64, 32}, {32, 32}})).find("\"dur\" = inf: "), std::string::npos);
  EXPECT_NE(refusal(op("aten::mm", -1, 5, {{64, 32}, {32, 32}})).find("\"ts\" = -1: a time is"), std::string::npos);
  EXPECT_NE(refusal(span("compute", "forward layers.0", 10, -3)).find("('forward layers.0') has \"dur\" = -3"),
            std::string::npos);
  EXPECT_EQ(refusal(op("aten::mm", 10, 5, {{int64_t{1} << 62, 32}, {32, 32}})),
            "event 1 ('aten::mm') has input 0 of shape [4611686018427387904,32]; a size is a whole number from 0 to "
            "2^48");
  EXPECT_NE(refusal(op("aten::add", 10, 5, {{4, -1}})).find("input 0 of shape [4,-1]"), std::string::npos);
  EXPECT_NE(refusal(op("aten::add", 10, 5, {{1 << 20, 1 << 20, 1 << 20}})).find("no tensor holds more than 2^48"),
            std::string::npos);
  nlohmann::json named = op("aten::add", 10, 5, {{4}});
  named["dur"] = "5";
  EXPECT_NE(refusal(named).find("has no number \"dur\""), std::string::npos);
  EXPECT_NO_THROW(trace_samples(trace(op("aten::add", 10, 5, {{0, 4}, {}}))));  // an empty tensor is real

  // A run directory: GEMMs at 1 us + 1 GFLOP/s, its summary's peak 10 GFLOP/s.
  const fs::path dir = fs::path(::testing::TempDir()) / "op_costs_peak";
  fs::remove_all(dir);
  fs::create_directories(dir / "profile_traces" / "iteration_1");
  const auto write = [&](double scale) {
    nlohmann::json events = nlohmann::json::array();
    double ts = 0;
    for (int m : {16, 32, 64, 128, 256}) {
      const double us = 1 + 2.0 * m * 64 * 64 / 1e9 * 1e6;
      events.push_back(op("aten::mm", ts, us, {{static_cast<int64_t>(m * scale), 64}, {64, 64}}));
      ts += us + 1;
    }
    events.push_back(span("step", "step 1", 0, ts));
    std::ofstream(dir / "profile_traces" / "iteration_1" / "rank0_trace.json") << nlohmann::json{{"traceEvents", events}};
  };
  std::ofstream(dir / "summary.json") << R"({"device": "cpu", "peak_flops": 1e10, "peak_flops_source": "measured"})";
  write(1);
  EXPECT_EQ(run_trace_samples(dir.string()).ops.size(), 5u);
  write(64);  // the same times for 64x the FLOPs: about 64 GFLOP/s by the law
  const std::string why = error_of([&] { run_trace_samples(dir.string()); });
  EXPECT_NE(why.find(dir.string() + ": the traced gemm ops (-, 5, the largest aten::mm of "), std::string::npos) << why;
  EXPECT_NE(why.find("more than the peak of the hardware they ran on (1e+10 FLOP/s, summary.json peak_flops, measured)"),
            std::string::npos)
      << why;
  EXPECT_EQ(why.find('\n'), std::string::npos);
  // A GPU run's cpu_op times are launches, not kernels: no peak to hold them to.
  std::ofstream(dir / "summary.json") << R"J({"device": "NVIDIA H100 (cuda:0)", "peak_flops": 1e10})J";
  EXPECT_EQ(run_trace_samples(dir.string()).ops.size(), 5u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ctitan
