// The profiler's pieces, each against numbers worked out by hand: the range
// tracer and its collective tracks, the Chrome-trace writer and validator,
// the step breakdown (interval arithmetic), merging ranks, TorchTitan's
// schedule, LibTorch op capture, the peak-FLOPs table and HFU.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <tuple>

#include "profiling/op_profiler.h"
#include "profiling/peak_flops.h"
#include "profiling/profiler_session.h"
#include "profiling/trace.h"
#include "profiling/trace_analysis.h"
#include "profiling/trace_merge.h"
#include "profiling/trace_validate.h"
#include "trainer/models/llama3.h"
#include "trainer/metrics.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/model_args.h"

namespace ctitan {
namespace {

using TimePoint = CollectiveObserver::TimePoint;
TimePoint at_ns(int64_t ns) { return TimePoint(std::chrono::nanoseconds(ns)); }

const TraceEvent* find(const std::vector<TraceEvent>& events, const std::string& name) {
  for (const auto& e : events)
    if (e.name == name) return &e;
  return nullptr;
}

TEST(Tracer, RangesAreRecordedOnlyWhileRecordingAndNest) {
  { TraceRange ignored(trace_cat::kCompute, "before"); }
  Tracer& t = Tracer::get();
  t.start();
  {
    TraceRange outer(trace_cat::kStep, "outer");
    TraceRange inner(trace_cat::kCompute, "forward", "layers.0");
    inner.set_arg("unit", 1);
  }
  const auto events = t.stop();
  { TraceRange ignored(trace_cat::kCompute, "after"); }
  EXPECT_EQ(find(events, "before"), nullptr);
  EXPECT_EQ(find(events, "after"), nullptr);
  const TraceEvent* outer = find(events, "outer");
  const TraceEvent* inner = find(events, "forward layers.0");
  ASSERT_TRUE(outer && inner);
  EXPECT_EQ(inner->cat, "compute");
  EXPECT_EQ(inner->tid, current_thread_tid());
  EXPECT_EQ(inner->args.at("unit"), 1);
  EXPECT_LE(outer->ts_ns, inner->ts_ns);
  EXPECT_GE(outer->ts_ns + outer->dur_ns, inner->ts_ns + inner->dur_ns);
}

TEST(Tracer, CollectivesGetLanesGroupBytesAndWaits) {
  Tracer& t = Tracer::get();
  EXPECT_EQ(t.issued("all_gather", "dp_shard", 64, "bf16"), 0u) << "not recording: not traced";
  t.start();
  // Two all-gathers overlap on dp_shard (a prefetch), one all-reduce on world.
  const uint64_t a = t.issued("all_gather", "dp_shard", 1024, "bf16");
  const uint64_t b = t.issued("all_gather", "dp_shard", 2048, "bf16");
  const uint64_t c = t.issued("all_reduce", "world", 8, "fp32");
  ASSERT_NE(a, 0u);
  const int64_t t0 = trace_now_ns();  // after the three issues
  t.wait_returned(a, at_ns(t0 + 1'000'000), at_ns(t0 + 1'500'000));  // blocked 0.5 ms
  t.settled(a, at_ns(t0 + 1'400'000), true);
  t.settled(b, at_ns(t0 + 9'000'000'000), true);  // 9 s later: still holds its lane when a starts
  t.settled(c, at_ns(1), true);                    // "before" its issue: clamped to zero length
  const auto events = t.stop();
  std::vector<const TraceEvent*> gathers;
  const TraceEvent* reduce = nullptr;
  const TraceEvent* wait = nullptr;
  for (const auto& e : events) {
    if (e.cat == "collective" && e.args.at("op") == "all_gather") gathers.push_back(&e);
    if (e.cat == "collective" && e.args.at("op") == "all_reduce") reduce = &e;
    if (e.cat == "wait") wait = &e;
  }
  ASSERT_EQ(gathers.size(), 2u);
  ASSERT_TRUE(reduce && wait);
  EXPECT_NE(gathers[0]->tid, gathers[1]->tid) << "overlapping collectives of one group share no track";
  EXPECT_GE(gathers[0]->tid, kCommTrackBase);
  EXPECT_EQ(reduce->dur_ns, 0);
  const TraceEvent* first = gathers[0]->args.at("bytes") == 1024 ? gathers[0] : gathers[1];
  EXPECT_EQ(first->args.at("group"), "dp_shard");
  EXPECT_EQ(first->args.at("dtype"), "bf16");
  EXPECT_EQ(first->args.at("waited"), true);
  EXPECT_DOUBLE_EQ(first->args.at("blocked_us").get<double>(), 500.0);
  EXPECT_EQ(reduce->args.at("waited"), false);
  EXPECT_EQ(wait->name, "wait all_gather dp_shard");
  EXPECT_EQ(wait->ts_ns, t0 + 1'000'000);
  EXPECT_EQ(wait->dur_ns, 500'000);
  EXPECT_EQ(wait->tid, current_thread_tid());
  const auto names = t.thread_names();
  EXPECT_EQ(names.at(gathers[0]->tid).rfind("comm dp_shard #", 0), 0u);
  // A token of an earlier session is ignored.
  t.start();
  t.settled(a, at_ns(5), true);
  EXPECT_TRUE(t.stop().empty());
}

TEST(ChromeTrace, WriterOutputIsAValidTraceEventFile) {
  std::vector<TraceEvent> events = {
      {"step 3", "step", 'X', 1'000'000, 9'000'000, 7, {{"step", 3}}},
      {"forward layers.0", "compute", 'X', 2'000'000, 1'000'000, 7, nullptr},
      {"live tensor bytes", "memory", 'C', 3'000'000, 0, 7, {{"parameters", 10}, {"activations", 20}}},
      {"all_gather dp_shard", "collective", 'X', 1'500'000, 600'000, kCommTrackBase, {{"bytes", 4}}},
  };
  TraceFileInfo info;
  info.rank = 1;
  info.world_size = 2;
  info.op_source = "none";
  const nlohmann::json j = chrome_trace(events, info, {{7, "training"}});
  EXPECT_TRUE(validate_chrome_trace(j).empty());
  EXPECT_EQ(j["ctitan"]["rank"], 1);
  EXPECT_TRUE(j["ctitan"]["clock_anchor"].contains("boot_id"));
  bool named = false;
  for (const auto& e : j["traceEvents"]) {
    EXPECT_EQ(e["pid"], 1);
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == 7) named = e["args"]["name"] == "training";
    if (e["name"] == "forward layers.0") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 2000.0);  // microseconds
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1000.0);
    }
  }
  EXPECT_TRUE(named);
}

TEST(ChromeTrace, ValidatorNamesEachProblem) {
  auto problems = [](const nlohmann::json& events) { return validate_chrome_trace({{"traceEvents", events}}); };
  auto ev = [](const char* ph, double ts, double dur, int64_t tid = 1) {
    nlohmann::json e = {{"name", "x"}, {"ph", ph}, {"ts", ts}, {"pid", 0}, {"tid", tid}};
    if (dur >= 0) e["dur"] = dur;
    return e;
  };
  EXPECT_FALSE(validate_chrome_trace(nlohmann::json::object()).empty());
  EXPECT_TRUE(problems({ev("X", 0, 10), ev("X", 2, 3), ev("X", 10, 5)}).empty()) << "nested and adjacent";
  EXPECT_FALSE(problems({ev("X", 0, 10), ev("X", 5, 10)}).empty()) << "overlap without nesting";
  EXPECT_TRUE(problems({ev("X", 0, 10, 1), ev("X", 5, 10, 2)}).empty()) << "different threads may overlap";
  EXPECT_FALSE(problems({ev("X", 0, -1)}).empty()) << "X without dur";
  EXPECT_FALSE(problems({ev("Q", 0, 1)}).empty()) << "unknown phase";
  EXPECT_FALSE(problems({ev("X", -5, 1)}).empty()) << "negative ts";
  EXPECT_TRUE(problems({ev("B", 0, -1), ev("B", 1, -1), ev("E", 2, -1), ev("E", 3, -1)}).empty());
  EXPECT_FALSE(problems({ev("B", 0, -1)}).empty()) << "unbalanced B";
  EXPECT_FALSE(problems({ev("E", 0, -1)}).empty()) << "E without B";
  nlohmann::json no_pid = ev("X", 0, 1);
  no_pid.erase("pid");
  EXPECT_FALSE(problems({no_pid}).empty());
  nlohmann::json counter = ev("C", 0, -1);
  counter["args"] = {{"bytes", "many"}};
  EXPECT_FALSE(problems({counter}).empty()) << "counter values must be numbers";
}

TEST(IntervalArithmetic, UnionSubtractIntersect) {
  const Intervals u = interval_union({{5, 7}, {0, 2}, {1, 3}, {7, 8}, {10, 10}});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].begin, 0);
  EXPECT_EQ(u[0].end, 3);
  EXPECT_EQ(u[1].begin, 5);
  EXPECT_EQ(u[1].end, 8);
  const Intervals d = interval_subtract({{0, 10}, {20, 30}}, {{2, 3}, {5, 22}, {29, 40}});
  ASSERT_EQ(d.size(), 3u);  // [0,2) [3,5) [22,29)
  EXPECT_EQ(interval_length(d), 2 + 2 + 7);
  EXPECT_EQ(interval_length(interval_intersect({{0, 10}, {20, 30}}, {{5, 25}})), 5 + 5);
  EXPECT_EQ(interval_length(interval_clip({{0, 10}}, {4, 6})), 2);
}

// One rank, one step of 100 µs:
//   compute [0,40) with a wait [10,30) inside, compute [50,80)
//   collectives [5,35) and [70,90)
//   => compute = [0,10)+[30,40)+[50,80) = 50; comm = 30+20 = 50;
//      exposed = comm - compute = [10,30) + [80,90) = 30; idle = 100 - |[0,40)+[50,90)| = 100 - 80 = 20.
nlohmann::json one_step_trace(double offset_us = 0) {
  auto x = [&](const char* name, const char* cat, double ts, double dur, int64_t tid) {
    return nlohmann::json{{"name", name}, {"cat", cat}, {"ph", "X"}, {"ts", ts + offset_us},
                          {"dur", dur},   {"pid", 0},   {"tid", tid}};
  };
  nlohmann::json step = x("step 4", "step", 0, 100, 1);
  step["args"] = {{"step", 4}};
  return {{"traceEvents",
           {step, x("forward layers.0", "compute", 0, 40, 1), x("wait all_gather dp_shard", "wait", 10, 20, 1),
            x("backward layers.0", "compute", 50, 30, 1), x("all_gather dp_shard", "collective", 5, 30, 100000000),
            x("reduce_scatter dp_shard", "collective", 70, 20, 100000001), x("data", "data", 40, 5, 1),
            x("aten::mm", "cpu_op", 0, 100, 300000001)}}};
}

TEST(TraceAnalysis, ComputeCommExposedAndIdleOfAStep) {
  const auto steps = analyze_trace(one_step_trace());
  ASSERT_EQ(steps.size(), 1u);
  const StepBreakdown& s = steps[0];
  EXPECT_EQ(s.step, 4);
  EXPECT_FALSE(s.gpu);
  EXPECT_NEAR(s.step_s, 100e-6, 1e-12);
  EXPECT_NEAR(s.compute_s, 50e-6, 1e-12);
  EXPECT_NEAR(s.comm_s, 50e-6, 1e-12);
  EXPECT_NEAR(s.exposed_comm_s, 30e-6, 1e-12);
  EXPECT_NEAR(s.idle_s, 20e-6, 1e-12);
  EXPECT_NEAR(s.data_s, 5e-6, 1e-12);
  EXPECT_NEAR(s.compute_s + s.exposed_comm_s + s.idle_s, s.step_s, 1e-12);
  const BreakdownMean m = mean_breakdown(steps);
  EXPECT_EQ(m.n, 1);
  EXPECT_NEAR(m.exposed_comm_s, 30e-6, 1e-12);
  EXPECT_THROW(analyze_trace(nlohmann::json::object()), std::runtime_error);
}

nlohmann::json with_anchor(nlohmann::json trace, int rank, const std::string& boot, double mono_ns, double real_ns) {
  trace["ctitan"] = {{"rank", rank},
                     {"clock_anchor", {{"monotonic_ns", mono_ns}, {"realtime_ns", real_ns}, {"boot_id", boot},
                                       {"hostname", "h" + boot}}}};
  for (auto& e : trace["traceEvents"]) e["pid"] = rank;
  return trace;
}

TEST(TraceMerge, OneHostKeepsTheMonotonicClockAndRebasesToZero) {
  const auto r0 = with_anchor(one_step_trace(1000), 0, "boot", 5e9, 1.7e18);
  const auto r1 = with_anchor(one_step_trace(1010), 1, "boot", 6e9, 1.8e18);  // anchors ignored on one host
  const nlohmann::json m = merge_traces({r1, r0});
  EXPECT_TRUE(validate_chrome_trace(m).empty());
  EXPECT_EQ(m["ctitan"]["ranks"].size(), 2u);
  EXPECT_NE(m["ctitan"]["clock"].get<std::string>().find("one host"), std::string::npos);
  double first[2] = {1e300, 1e300};
  for (const auto& e : m["traceEvents"]) first[e["pid"].get<int>()] = std::min(first[e["pid"].get<int>()], e["ts"].get<double>());
  EXPECT_DOUBLE_EQ(first[0], 0.0);
  EXPECT_DOUBLE_EQ(first[1], 10.0);
  const auto steps = analyze_trace(m);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_NEAR(steps[1].exposed_comm_s, 30e-6, 1e-12);
}

TEST(TraceMerge, SeveralHostsAlignThroughTheirRealtimeAnchors) {
  // Host a: realtime = monotonic + 1000 µs; host b: realtime = monotonic + 500 µs.
  // Events at monotonic 0 on a and 600 on b happened at realtime 1000 and 1100.
  const auto r0 = with_anchor(one_step_trace(0), 0, "a", 0, 1000e3);
  const auto r1 = with_anchor(one_step_trace(600), 1, "b", 0, 500e3);
  const nlohmann::json m = merge_traces({r0, r1});
  double first[2] = {1e300, 1e300};
  for (const auto& e : m["traceEvents"]) first[e["pid"].get<int>()] = std::min(first[e["pid"].get<int>()], e["ts"].get<double>());
  EXPECT_NEAR(first[0], 0.0, 1e-9);
  EXPECT_NEAR(first[1], 100.0, 1e-9);
  EXPECT_NE(m["ctitan"]["clock"].get<std::string>().find("CLOCK_REALTIME"), std::string::npos);
  EXPECT_THROW(merge_traces({r0, r0}), std::runtime_error) << "two files of rank 0";
  EXPECT_THROW(merge_traces({one_step_trace()}), std::runtime_error) << "no clock anchor";
}

TEST(TraceMerge, FindsIterationFoldersOfRankFiles) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("ctitan_find_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "profile_traces" / "iteration_10");
  std::filesystem::create_directories(dir / "profile_traces" / "iteration_20");
  std::filesystem::create_directories(dir / "profile_traces" / "iteration_30");  // empty: not listed
  for (const char* f : {"iteration_10/rank0_trace.json", "iteration_10/rank1_trace.json", "iteration_20/rank0_trace.json",
                        "iteration_10/merged_trace.json"})
    std::ofstream(dir / "profile_traces" / f) << "{}";
  const auto found = find_rank_traces(dir);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found.at(10).size(), 2u);
  EXPECT_EQ(found.at(20).size(), 1u);
  std::filesystem::remove_all(dir);
}

TEST(ProfileSchedule, MatchesTorchTitansWaitWarmupActiveCycle) {
  // TorchTitan's defaults: profile_freq 10, warmup 3, active 1 -> wait 6.
  for (int64_t step = 1; step <= 20; ++step) {
    const ProfileAction a = profile_action(step, 10, 3, 1);
    const int64_t in_cycle = (step - 1) % 10;
    if (step % 10 == 0) {
      EXPECT_EQ(a, ProfileAction::kRecordAndSave) << step;
    } else if (in_cycle >= 6) {
      EXPECT_EQ(a, ProfileAction::kWarmup) << step;
    } else {
      EXPECT_EQ(a, ProfileAction::kNone) << step;
    }
  }
  // active 2, warmup 0, freq 4: steps 3 (record) and 4 (record and save), 7 and 8, ...
  EXPECT_EQ(profile_action(2, 4, 0, 2), ProfileAction::kNone);
  EXPECT_EQ(profile_action(3, 4, 0, 2), ProfileAction::kRecord);
  EXPECT_EQ(profile_action(4, 4, 0, 2), ProfileAction::kRecordAndSave);
  EXPECT_EQ(profile_action(7, 4, 0, 2), ProfileAction::kRecord);
  EXPECT_EQ(profile_action(1, 1, 0, 1), ProfileAction::kRecordAndSave) << "every step";
}

TEST(ProfilerSession, SavesTracesAtTheScheduledStepsAndAnalysesThem) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("ctitan_session_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  ProfilerOptions o;
  o.traces = true;
  o.trace_folder = (dir / "traces").string();
  o.memory_folder = (dir / "mem").string();
  o.freq = 2;
  o.warmup = 0;
  o.active = 1;
  o.ops = OpProfiler::Source::kNone;
  ProfilerSession session(o);
  if (!torch::cuda::is_available()) {
    EXPECT_NE(session.gpu_status().find("CUPTI unavailable"), std::string::npos) << "no GPU here";
  }
  for (int64_t step = 1; step <= 4; ++step) {
    session.step_begin(step);
    const int64_t t0 = trace_now_ns();
    { TraceRange r(trace_cat::kCompute, "forward"); std::this_thread::sleep_for(std::chrono::milliseconds(2)); }
    session.record_step(step, t0, trace_now_ns());
    session.step_end(step, 0.002);
  }
  session.finish(4);
  EXPECT_TRUE(std::filesystem::exists(dir / "traces" / "iteration_2" / "rank0_trace.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "traces" / "iteration_4" / "rank0_trace.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "traces" / "iteration_3"));
  ASSERT_EQ(session.breakdowns().size(), 2u);
  EXPECT_EQ(session.breakdowns()[0].step, 2);
  EXPECT_GT(session.breakdowns()[0].compute_s, 0.0015);
  EXPECT_NE(session.overhead_line().find("profiling overhead"), std::string::npos);
  std::ifstream in(dir / "traces" / "iteration_4" / "rank0_trace.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_TRUE(validate_chrome_trace(j).empty());
  EXPECT_EQ(j["ctitan"]["analysis"].size(), 1u);
  std::filesystem::remove_all(dir);
}

TEST(ProfilerSession, SummaryKeysAreTheMeanOverRanksThatTracedAndReplaceTheRecorders) {
  nlohmann::json summary = {{"comm_s", 0.5}, {"exposed_comm_s", 0.25}, {"comm_source", "flight_recorder"}};
  // rank 0: 2 steps of 1.0 s (compute 0.6, comm 0.3, exposed 0.1, idle 0.3); rank 1 traced nothing;
  // rank 2: 2 steps of 2.0 s (compute 1.0, comm 0.5, exposed 0.5, idle 0.5).
  add_trace_summary(summary, {2, 1.0, 0.6, 0.3, 0.1, 0.3, 0, 0, 0, 0, 0, 0, 2, 2.0, 1.0, 0.5, 0.5, 0.5}, {2, 4});
  EXPECT_EQ(summary["comm_source"], "trace");
  EXPECT_DOUBLE_EQ(summary["comm_s_flight_recorder"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(summary["exposed_comm_s_wait"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(summary["step_s_traced"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(summary["compute_s"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(summary["comm_s"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(summary["exposed_comm_s"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(summary["idle_s"].get<double>(), 0.4);
  EXPECT_EQ(summary["trace_breakdown"]["ranks"].size(), 2u);
  EXPECT_EQ(summary["trace_breakdown"]["ranks"][1]["rank"], 2);
  EXPECT_EQ(summary["trace_breakdown"]["steps"], (nlohmann::json{2, 4}));
  nlohmann::json untouched = {{"comm_s", 0.5}};
  add_trace_summary(untouched, {0, 0, 0, 0, 0, 0}, {});
  EXPECT_EQ(untouched, (nlohmann::json{{"comm_s", 0.5}})) << "no rank traced a step: the recorder's numbers stay";
}

void run_some_ops() {
  at::Tensor a = torch::ones({64, 64});
  for (int i = 0; i < 3; ++i) a = torch::mm(a, a) / 64.0;
}

void expect_ops_on_this_thread(OpProfiler::Source source) {
  Tracer& tracer = Tracer::get();
  tracer.name_thread("training");
  OpProfiler ops(source);
  tracer.start();
  ops.start();
  const int64_t t0 = trace_now_ns();
  run_some_ops();
  const int64_t t1 = trace_now_ns();
  auto events = ops.stop(tracer.torch_thread_ids());
  auto rest = tracer.stop();
  events.insert(events.end(), rest.begin(), rest.end());
  int mm = 0;
  for (const auto& e : events) {
    if (e.name != "aten::mm") continue;
    ++mm;
    EXPECT_EQ(e.cat, "cpu_op");
    EXPECT_EQ(e.tid, kOpTrackBase + current_thread_tid());
    // On the tracer's clock: inside the window, give or take Kineto's clock conversion.
    EXPECT_GE(e.ts_ns, t0 - 1'000'000);
    EXPECT_LE(e.ts_ns + e.dur_ns, t1 + 1'000'000);
  }
  EXPECT_EQ(mm, 3) << OpProfiler::name(ops.source()) << " " << ops.fallback_reason();
}

TEST(OpProfiler, KinetoCapturesOpsOnTheTracersClockAndThread) {
  expect_ops_on_this_thread(OpProfiler::Source::kKineto);
}

TEST(OpProfiler, RecordFunctionFallbackCapturesTheSameOps) {
  expect_ops_on_this_thread(OpProfiler::Source::kRecordFunction);
}

TEST(PeakFlops, TorchTitansGpuTableByDeviceName) {
  const std::vector<std::pair<std::string, double>> cases = {
      {"NVIDIA A100-SXM4-80GB", 312e12},  {"NVIDIA H100 80GB HBM3", 989e12}, {"NVIDIA H100 PCIe", 756e12},
      {"NVIDIA H100 NVL", 835e12},        {"NVIDIA H200", 989e12},           {"NVIDIA B200", 2.25e15},
      {"AMD Instinct MI300X", 1300e12},  {"AMD Instinct MI325X", 1300e12},  {"AMD Instinct MI250X", 191.5e12},
      {"NVIDIA L40S", 362e12},
  };
  for (const auto& [name, flops] : cases) {
    const auto p = gpu_table_peak_flops(name);
    ASSERT_TRUE(p.has_value()) << name;
    EXPECT_DOUBLE_EQ(p->flops, flops) << name;
  }
  EXPECT_EQ(gpu_table_peak_flops("NVIDIA H100 80GB HBM3")->entry, "H100 SXM");
}

// The Hopper names exactly as CUDA reports them (cudaDeviceProp::name): an
// NVL or PCIe card must not get the SXM part's peak.
TEST(PeakFlops, HopperVariantsByTheirCudaNames) {
  const std::vector<std::tuple<std::string, std::string, double>> cases = {
      {"NVIDIA H200", "H200 SXM", 989e12},          {"NVIDIA H200 NVL", "H200 NVL", 835e12},
      {"NVIDIA H100 80GB HBM3", "H100 SXM", 989e12}, {"NVIDIA H100 PCIe", "H100 PCIe", 756e12},
      {"NVIDIA H100 NVL", "H100 NVL", 835e12},
  };
  for (const auto& [name, entry, flops] : cases) {
    const auto p = gpu_table_peak_flops(name);
    ASSERT_TRUE(p.has_value()) << name;
    EXPECT_EQ(p->entry, entry) << name;
    EXPECT_DOUBLE_EQ(p->flops, flops) << name;
  }
}

TEST(PeakFlops, AnUnknownGpuGetsNoPeakAndAWarningNotAnotherGpusPeak) {
  const PeakFlops unknown = resolve_gpu_peak_flops("NVIDIA GeForce RTX 4090", 0);
  EXPECT_EQ(unknown.flops, 0.0);
  EXPECT_EQ(unknown.source, "unknown");
  EXPECT_NE(unknown.warning.find("--metrics.peak_tflops"), std::string::npos);
  const PeakFlops overridden = resolve_gpu_peak_flops("NVIDIA GeForce RTX 4090", 165.2);
  EXPECT_DOUBLE_EQ(overridden.flops, 165.2e12);
  EXPECT_EQ(overridden.source, "override");
  EXPECT_EQ(resolve_gpu_peak_flops("NVIDIA H100 PCIe", 0).source, "table:H100 PCIe");
  EXPECT_EQ(resolve_cpu_peak_flops(torch::kBFloat16, 2.5).flops, 2.5e12);
}

// A CPU peak cached while other work shared the cores is low and would
// inflate every later MFU: a run measures again and keeps the higher value;
// a cached value above what this run measures stays.
TEST(PeakFlops, ACachedCpuPeakOnlyRises) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("ctitan_peak_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "ctitan");
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  const std::string key = host_fingerprint() + "|Float";
  const auto write_cache = [&](double flops) {
    std::ofstream(dir / "ctitan" / "peak_flops.json") << "{\"" << key << "\": " << flops << "}\n";
  };
  write_cache(1e6);  // 1 MFLOP/s: far below any CPU
  const PeakFlops low = resolve_cpu_peak_flops(torch::kFloat, 0);
  EXPECT_GT(low.flops, 1e8);
  EXPECT_EQ(low.source, "measured");
  std::ifstream in(dir / "ctitan" / "peak_flops.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("1000000.0"), std::string::npos) << "the low value stayed cached: " << text;
  write_cache(1e18);  // above any CPU: kept
  const PeakFlops high = resolve_cpu_peak_flops(torch::kFloat, 0);
  EXPECT_EQ(high.flops, 1e18);
  EXPECT_EQ(high.source, "cached");
  if (old) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else unsetenv("XDG_CACHE_HOME");
  std::filesystem::remove_all(dir);
}

TEST(HardwareFlops, AddsWhatActivationCheckpointingRecomputes) {
  const ModelArgs a = llama3_flavor("debugmodel");  // D 256, L 6, H 16, Dh 16, F 768
  const int64_t S = 64;
  const double fpt = flops_per_token(a, S);
  const double D = 256, Dh = 16, H = 16, F = a.ffn_hidden_dim();
  const double block_params = D * H * Dh * 4 + 3 * D * F + 2 * D;  // wq wk wv wo (no GQA), w1 w2 w3, two norms
  const double block_fwd = 2 * block_params + 4 * H * Dh * S;
  const double op_fwd = 2 * (H * Dh * D + F * D);  // wo and w2
  auto hw = [&](const char* mode, const char* option, bool kept) {
    return hardware_flops_per_token(a, S, ActivationCheckpointPolicy::parse(mode, option), kept);
  };
  EXPECT_DOUBLE_EQ(hw("none", "2", true), fpt);
  EXPECT_DOUBLE_EQ(hw("full", "2", true), fpt + 6 * block_fwd);
  EXPECT_DOUBLE_EQ(hw("selective", "2", true), fpt + 3 * block_fwd);
  EXPECT_DOUBLE_EQ(hw("selective", "4", true), fpt + 1 * block_fwd);
  EXPECT_DOUBLE_EQ(hw("selective", "op", true), fpt + 6 * op_fwd);
  EXPECT_DOUBLE_EQ(hw("selective", "op", false), fpt + 6 * (op_fwd + 4 * H * Dh * S));
  // Consistency with TorchTitan's model FLOPs (whose parameter count is
  // pinned elsewhere): without the output projection and final norm, the
  // model FLOPs are 3 block forwards (forward + 2x backward) per layer.
  EXPECT_NEAR(6 * 3 * block_fwd, fpt - 6.0 * (D * a.vocab_size + D), 1e-9 * fpt);
}

}  // namespace
}  // namespace ctitan
