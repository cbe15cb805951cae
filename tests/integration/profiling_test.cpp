// [profiling] end to end, with the real binary: the traces a run writes
// (valid trace-event JSON with every range, collective and op), memory
// snapshots, MFU/HFU, `ctitan trace merge`, and — on a 2-rank FSDP run —
// summary.json's exposed communication against the same quantity
// re-derived here from the merged trace with interval arithmetic of this
// test's own (elementary segments, not the library's union/subtract).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "profiling/trace_validate.h"
#include "trainer/config/config_loader.h"
#include "tests/integration/process.h"

namespace fs = std::filesystem;
using ctitan::testing::expect_one_line_exit2;
using ctitan::testing::fresh_dir;
using ctitan::testing::read_json;
using ctitan::testing::read_jsonl;
using ctitan::testing::run_ctitan;

namespace {

std::vector<std::string> debug_run(const fs::path& dump, int steps, std::vector<std::string> more) {
  std::vector<std::string> a = {"train",
                                "--model.flavor", "debugmodel", "--training.seq_len", "64",
                                "--training.local_batch_size", "2", "--training.dataset", "markov",
                                "--training.mixed_precision_param", "float32", "--training.steps",
                                std::to_string(steps), "--metrics.log_freq", "1", "--metrics.warmup_steps", "1",
                                "--metrics.peak_tflops", "1", "--job.dump_folder", dump.string()};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

class Profiling : public ::testing::Test {
 protected:
  void SetUp() override { setenv("OMP_NUM_THREADS", "1", 1); }
  void TearDown() override { unsetenv("OMP_NUM_THREADS"); }
};

std::set<std::string> names_of(const nlohmann::json& trace, const std::string& cat = "") {
  std::set<std::string> out;
  for (const auto& e : trace["traceEvents"])
    if (cat.empty() || e.value("cat", "") == cat) out.insert(e.value("name", ""));
  return out;
}

TEST_F(Profiling, SingleRankTracesEveryRangeAndOpAndSnapshotsMemory) {
  const auto dir = fresh_dir("prof1");
  const auto r = run_ctitan(debug_run(dir, 4,
                                      {"--profiling.enable_profiling", "--profiling.profile_freq", "2",
                                       "--profiling.profiler_warmup", "1", "--profiling.profiler_active", "1",
                                       "--profiling.enable_memory_snapshot", "--activation_checkpoint.mode", "full"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("CUPTI unavailable: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("profiling overhead: "), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("not implemented"), std::string::npos) << r.err;
  for (int it : {2, 4}) {
    const fs::path f = dir / "profile_traces" / ("iteration_" + std::to_string(it)) / "rank0_trace.json";
    ASSERT_TRUE(fs::exists(f)) << f;
    const nlohmann::json trace = read_json(f);
    const auto problems = ctitan::validate_chrome_trace(trace);
    EXPECT_TRUE(problems.empty()) << problems.front();
    const auto names = names_of(trace);
    for (const std::string& n : {"step " + std::to_string(it), std::string("data"), std::string("forward tok_embeddings"),
                                std::string("forward layers.0"), std::string("forward layers.5"),
                                std::string("forward norm+output"), std::string("backward norm+output"),
                                std::string("backward layers.5"), std::string("backward layers.0"),
                                std::string("backward tok_embeddings"), std::string("clip_grad_norm"),
                                std::string("optimizer")})
      EXPECT_TRUE(names.count(n)) << n;
    const auto ops = names_of(trace, "cpu_op");
    EXPECT_TRUE(ops.count("aten::mm") || ops.count("aten::addmm") || ops.count("aten::linear")) << "LibTorch ops";
    EXPECT_EQ(trace["ctitan"]["op_source"], "kineto");
    EXPECT_EQ(trace["ctitan"]["analysis"].size(), 1u);
    EXPECT_EQ(trace["ctitan"]["analysis"][0]["step"], it);
    // Backward runs the blocks in reverse.
    double b5 = 0, b0 = 0;
    for (const auto& e : trace["traceEvents"]) {
      if (e["name"] == "backward layers.5") b5 = e["ts"];
      if (e["name"] == "backward layers.0") b0 = e["ts"];
    }
    EXPECT_LT(b5, b0);
    const fs::path snap = dir / "memory_snapshot" / ("iteration_" + std::to_string(it)) / "rank0_memory_snapshot.json";
    ASSERT_TRUE(fs::exists(snap)) << snap;
    const nlohmann::json m = read_json(snap);
    for (const char* c : {"parameters", "gradients", "optimizer_state"})
      EXPECT_GT(m["by_category"][c]["current_bytes"].get<int64_t>(), 0) << c;
    EXPECT_GT(m["by_category"]["activations"]["max_bytes"].get<int64_t>(), 0);
    EXPECT_FALSE(m["timeline"]["entries"].empty());
  }
  EXPECT_FALSE(fs::exists(dir / "profile_traces" / "iteration_3"));
  // The planner's op-level laws from these traces: GEMMs (fp32 here) and element-wise ops, with
  // positive throughput, their time within the traced steps'.
  const auto plan = run_ctitan({"plan", "--profile", dir.string(), "--json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.out << plan.err;
  const nlohmann::json costs = nlohmann::json::parse(plan.out);
  EXPECT_EQ(costs["traces"].size(), 2u);
  EXPECT_EQ(costs["steps"], 2);
  double classes_s = 0;
  std::set<std::string> classes;
  for (const auto& f : costs["fits"]) {
    classes.insert(f["class"].get<std::string>());
    classes_s += f["seconds_per_step"].get<double>();
    if (f["class"] == "gemm") {
      EXPECT_EQ(f["dtype"], "float");
      EXPECT_GT(f["per_unit_s"].get<double>(), 0) << f.dump();
      EXPECT_GT(f["ops"].get<int>(), 20) << f.dump();
    }
  }
  EXPECT_TRUE(classes.count("gemm") && classes.count("elementwise")) << plan.out;
  EXPECT_LT(classes_s, costs["step_seconds"].get<double>()) << plan.out;
  EXPECT_GT(classes_s, 0.3 * costs["step_seconds"].get<double>()) << plan.out;
  const nlohmann::json s = read_json(dir / "summary.json");
  EXPECT_EQ(s["comm_source"], "trace");
  EXPECT_GT(s["compute_s"].get<double>(), 0);
  EXPECT_EQ(s["comm_s"].get<double>(), 0);
  EXPECT_NEAR(s["compute_s"].get<double>() + s["exposed_comm_s"].get<double>() + s["idle_s"].get<double>(),
              s["step_s_traced"].get<double>(), 1e-9);
  // Full activation checkpointing: HFU / MFU = hardware / model FLOPs per token, both reported.
  const double ratio = s["hardware_flops_per_token"].get<double>() / s["flops_per_token"].get<double>();
  EXPECT_GT(ratio, 1.2);
  EXPECT_NEAR(s["hfu"].get<double>() / s["mfu"].get<double>(), ratio, 1e-9);
  for (const auto& row : read_jsonl(dir / "metrics.jsonl")) EXPECT_TRUE(row.contains("hfu"));
  EXPECT_GT(s["mem_by_category"]["optimizer_state"]["current_bytes"].get<int64_t>(), 0);

  // A recipe planned with this run's measured compute says so, in the plan
  // and in what a sweep stores beside each run (the prediction's source).
  const std::string cfg = (dir / "config.toml").string();
  const auto measured = run_ctitan({"plan", cfg, "--hardware", "cpu", "--ngpu", "2", "--profile", dir.string(), "--json"});
  ASSERT_EQ(measured.exit_code, 0) << measured.out << measured.err;
  const nlohmann::json mp = nlohmann::json::parse(measured.out);
  EXPECT_EQ(mp["source"], "measured");
  EXPECT_EQ(mp["compute_source"], "measured (" + dir.string() + ")");
  EXPECT_GT(mp["time_s"]["step"].get<double>(), 0);
  // After the first, a further single process is the size curve: the same
  // model at another micro-batch size. The same size again is refused.
  const fs::path copy = dir.string() + "_copy";
  fs::remove_all(copy);
  fs::copy(dir, copy, fs::copy_options::recursive);
  const auto twice = run_ctitan({"plan", cfg, "--hardware", "cpu", "--ngpu", "2", "--profile", dir.string(),
                                 "--profile", copy.string()});
  EXPECT_EQ(twice.exit_code, 2) << twice.out << twice.err;
  EXPECT_NE(twice.err.find(copy.string() + " is a single process of another model or of a micro-batch size already "
                                           "profiled"),
            std::string::npos)
      << twice.err;
  EXPECT_EQ(std::count(twice.err.begin(), twice.err.end(), '\n'), 1) << twice.err;
  // The copy's config saying a 4x micro-batch (its traces this run's): read
  // as a second size, it changes the plan of a recipe at 2x the size.
  {
    std::ifstream in(copy / "config.toml");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const ctitan::JobConfig run_cfg = ctitan::parse_job_config({"--job.config_file", (dir / "config.toml").string()});
    const std::string key = "local_batch_size = " + std::to_string(run_cfg.training.local_batch_size);
    ASSERT_NE(text.find(key), std::string::npos) << text;
    const auto with_batch = [&](int64_t times) {
      std::string t = text;
      t.replace(t.find(key), key.size(), "local_batch_size = " + std::to_string(times * run_cfg.training.local_batch_size));
      return t;
    };
    std::ofstream(copy / "config.toml") << with_batch(4);
    const std::string bigger = (dir / "bigger.toml").string();
    std::ofstream(bigger) << with_batch(2);
    const auto one = run_ctitan({"plan", bigger, "--hardware", "cpu", "--ngpu", "2", "--profile", dir.string(), "--json"});
    const auto curve = run_ctitan({"plan", bigger, "--hardware", "cpu", "--ngpu", "2", "--profile", dir.string(),
                                   "--profile", copy.string(), "--json"});
    ASSERT_EQ(one.exit_code, 0) << one.err;
    ASSERT_EQ(curve.exit_code, 0) << curve.err;
    EXPECT_NE(nlohmann::json::parse(one.out)["time_s"]["step"], nlohmann::json::parse(curve.out)["time_s"]["step"]);
  }
  fs::remove_all(copy);
  const auto analytic = run_ctitan({"plan", cfg, "--hardware", "cpu", "--ngpu", "2", "--json"});
  ASSERT_EQ(analytic.exit_code, 0) << analytic.err;
  EXPECT_EQ(nlohmann::json::parse(analytic.out)["source"], "analytic");
  const fs::path spec = dir / "measured_sweep.toml";
  std::ofstream(spec) << "[sweep]\nname = \"measured\"\nbase = \"config.toml\"\nworld_sizes = [2]\n"
                         "plan_profile = [\".\"]\n[grid]\ntraining.local_batch_size = [1, 2]\n";
  const auto sweep = run_ctitan({"sweep", spec.string(), "--dry-run"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.out << sweep.err;
  EXPECT_NE(sweep.out.find("measured from the traced ops of " + dir.string()), std::string::npos) << sweep.out;
  std::ofstream(spec) << "[sweep]\nname = \"measured\"\nbase = \"config.toml\"\nworld_sizes = [2]\n"
                         "plan_profile = [\"no_such_run\"]\n[grid]\ntraining.local_batch_size = [1, 2]\n";
  const auto bad = run_ctitan({"sweep", spec.string(), "--dry-run"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("plan_profile"), std::string::npos) << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
}

// --- this test's own interval arithmetic -----------------------------------
struct Span {
  double a, b;
};
bool covers(const std::vector<Span>& v, double x) {
  for (const Span& s : v)
    if (s.a <= x && x < s.b) return true;
  return false;
}
struct Derived {
  double step = 0, compute = 0, comm = 0, exposed = 0, idle = 0;
};

// (rank, step) -> seconds, from a merged trace: the step window is cut at
// every event boundary, and each elementary segment is classified by its
// midpoint. Compute: some thread runs a compute/data_parallel range and is
// not inside a wait of its own; comm: a collective is in flight.
std::map<std::pair<int64_t, int64_t>, Derived> rederive(const nlohmann::json& trace) {
  struct Rank {
    std::vector<std::pair<int64_t, Span>> steps;
    std::map<int64_t, std::vector<Span>> compute, waits;
    std::vector<Span> comm;
  };
  std::map<int64_t, Rank> ranks;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const Span s{e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
    Rank& r = ranks[e["pid"].get<int64_t>()];
    const std::string cat = e.value("cat", "");
    const int64_t tid = e["tid"].get<int64_t>();
    if (cat == "step") r.steps.emplace_back(e["args"]["step"].get<int64_t>(), s);
    if (cat == "compute" || cat == "data_parallel") r.compute[tid].push_back(s);
    if (cat == "wait") r.waits[tid].push_back(s);
    if (cat == "collective") r.comm.push_back(s);
  }
  std::map<std::pair<int64_t, int64_t>, Derived> out;
  for (auto& [pid, r] : ranks) {
    for (const auto& [step, w] : r.steps) {
      std::set<double> cuts = {w.a, w.b};
      auto add_cuts = [&](const std::vector<Span>& v) {
        for (const Span& s : v)
          for (double x : {s.a, s.b})
            if (x > w.a && x < w.b) cuts.insert(x);
      };
      for (auto& [tid, v] : r.compute) add_cuts(v);
      for (auto& [tid, v] : r.waits) add_cuts(v);
      add_cuts(r.comm);
      Derived d;
      d.step = (w.b - w.a) / 1e6;
      for (auto it = cuts.begin(); std::next(it) != cuts.end(); ++it) {
        const double x0 = *it, x1 = *std::next(it), mid = 0.5 * (x0 + x1), len = (x1 - x0) / 1e6;
        bool computing = false;
        for (auto& [tid, v] : r.compute) computing |= covers(v, mid) && !covers(r.waits[tid], mid);
        const bool communicating = covers(r.comm, mid);
        if (computing) d.compute += len;
        if (communicating) d.comm += len;
        if (communicating && !computing) d.exposed += len;
        if (!communicating && !computing) d.idle += len;
      }
      out[{pid, step}] = d;
    }
  }
  return out;
}

TEST_F(Profiling, FsdpTwoRanksExposedCommunicationMatchesTheMergedTrace) {
  const auto dir = fresh_dir("prof_fsdp");
  std::vector<std::string> args = debug_run(dir, 4,
                                            {"--parallelism.data_parallel_shard_degree", "2",
                                             "--profiling.enable_profiling", "--profiling.profile_freq", "2",
                                             "--profiling.profiler_warmup", "0", "--profiling.profiler_active", "1"});
  args.insert(args.begin() + 1, {"--nproc", "2"});
  const auto r = run_ctitan(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto m = run_ctitan({"trace", "merge", dir.string()});
  ASSERT_EQ(m.exit_code, 0) << m.out << m.err;
  EXPECT_NE(m.out.find("one host"), std::string::npos) << m.out;

  // The planner's op-level laws see FSDP's collectives, per op and group.
  const auto plan = run_ctitan({"plan", "--profile", dir.string(), "--json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.out << plan.err;
  std::set<std::string> collectives;
  const nlohmann::json costs = nlohmann::json::parse(plan.out);
  for (const auto& f : costs["fits"])
    if (f["class"] == "collective") collectives.insert(f["dtype"].get<std::string>());
  EXPECT_TRUE(collectives.count("all_gather dp_shard")) << plan.out;
  EXPECT_TRUE(collectives.count("reduce_scatter dp_shard")) << plan.out;

  std::map<int64_t, Derived> per_rank;  // means over the traced steps after warmup (2 and 4)
  for (int it : {2, 4}) {
    const fs::path f = dir / "profile_traces" / ("iteration_" + std::to_string(it)) / "merged_trace.json";
    ASSERT_TRUE(fs::exists(f)) << m.out;
    const nlohmann::json trace = read_json(f);
    const auto problems = ctitan::validate_chrome_trace(trace);
    EXPECT_TRUE(problems.empty()) << problems.front();
    std::set<int64_t> pids;
    int gathers = 0, scatters = 0;
    for (const auto& e : trace["traceEvents"]) {
      pids.insert(e["pid"].get<int64_t>());
      if (e.value("cat", "") != "collective") continue;
      // FSDP's collectives on dp_shard; on world the per-step agreement to stop (a MAX
      // all-reduce) and, at log steps, every rank's step times (metrics.rank_timing).
      const bool world = e["args"]["group"] == "world";
      EXPECT_TRUE(e["args"]["group"] == "dp_shard" ||
                  (world && (e["args"]["op"] == "all_reduce" || e["args"]["op"] == "all_gather")))
          << e.dump();
      EXPECT_GT(e["args"]["bytes"].get<int64_t>(), 0);
      EXPECT_TRUE(e["args"]["waited"].get<bool>()) << "ctitan waits on every collective it issues";
      gathers += !world && e["args"]["op"] == "all_gather";
      scatters += e["args"]["op"] == "reduce_scatter";
    }
    EXPECT_EQ(pids, (std::set<int64_t>{0, 1}));
    // 8 units (embeddings, 6 blocks, norm+output): all gathered for forward, all
    // but the last again for backward (TorchTitan's default keeps the last unit).
    EXPECT_EQ(gathers, 2 * (8 + 7));
    EXPECT_EQ(scatters, 2 * 8) << "each rank reduce-scatters each unit once";
    for (const auto& [key, d] : rederive(trace)) {
      EXPECT_EQ(key.second, it);
      EXPECT_NEAR(d.compute + d.exposed + d.idle, d.step, 1e-9);
      per_rank[key.first].step += d.step / 2;
      per_rank[key.first].compute += d.compute / 2;
      per_rank[key.first].comm += d.comm / 2;
      per_rank[key.first].exposed += d.exposed / 2;
      per_rank[key.first].idle += d.idle / 2;
    }
  }
  ASSERT_EQ(per_rank.size(), 2u);
  const Derived mean{0, (per_rank[0].compute + per_rank[1].compute) / 2, (per_rank[0].comm + per_rank[1].comm) / 2,
                     (per_rank[0].exposed + per_rank[1].exposed) / 2, (per_rank[0].idle + per_rank[1].idle) / 2};
  const nlohmann::json s = read_json(dir / "summary.json");
  EXPECT_EQ(s["comm_source"], "trace");
  EXPECT_EQ(s["trace_breakdown"]["steps"], (nlohmann::json{2, 4}));
  EXPECT_GT(mean.exposed, 0.0);
  EXPECT_NEAR(s["exposed_comm_s"].get<double>(), mean.exposed, 1e-7);
  EXPECT_NEAR(s["comm_s"].get<double>(), mean.comm, 1e-7);
  EXPECT_NEAR(s["compute_s"].get<double>(), mean.compute, 1e-7);
  EXPECT_NEAR(s["idle_s"].get<double>(), mean.idle, 1e-7);
  // The always-on measurement is kept beside it (all steady-state steps).
  EXPECT_GT(s["comm_s_flight_recorder"].get<double>(), 0);
  EXPECT_GT(s["exposed_comm_s_wait"].get<double>(), 0);
}

// A real out-of-memory: the address space is capped (RLIMIT_AS, so only this
// process can run short) below what a step of batch 64 x seq 2048 needs
// (about 1.6 GB of activations on top of ~3 GB of mapped libraries), and
// the step's first large allocation fails.
// A pipelined run traces each unit's forward and backward inside its
// stage's actions, as an unpipelined one does, so `ctitan plan --profile`
// measures its ranks side by side (and plans pipelined recipes with it).
TEST_F(Profiling, PipelineStagesTraceEveryUnitForTheirActions) {
  const auto dir = fresh_dir("prof_pp");
  const std::vector<std::string> prof = {"--profiling.enable_profiling", "--profiling.profile_freq", "2",
                                         "--profiling.profiler_warmup", "0", "--profiling.profiler_active", "1"};
  // One micro-batch of 1 in the single process: the pipeline's micro-batch.
  std::vector<std::string> one = debug_run(dir / "single", 4, prof);
  one.insert(one.end(), {"--training.local_batch_size", "1"});
  const auto s = run_ctitan(one);
  ASSERT_EQ(s.exit_code, 0) << s.out << s.err;
  std::vector<std::string> args = debug_run(dir / "pp", 4, prof);
  args.insert(args.end(), {"--parallelism.pipeline_parallel_degree", "2", "--parallelism.pipeline_parallel_schedule",
                           "1F1B", "--parallelism.pipeline_parallel_microbatch_size", "1"});
  args.insert(args.begin() + 1, {"--nproc", "2"});
  const auto r = run_ctitan(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // debugmodel's 8 units split 4 + 4 (embedding, 3 blocks | 3 blocks, head),
  // 2 micro-batches: every unit of a rank's stage forward and backward
  // twice, each inside a "pipeline" range of its action.
  std::set<std::string> all;
  for (int rank : {0, 1}) {
    const fs::path f = dir / "pp" / "profile_traces" / "iteration_4" / ("rank" + std::to_string(rank) + "_trace.json");
    ASSERT_TRUE(fs::exists(f)) << f;
    const nlohmann::json trace = read_json(f);
    std::map<std::string, int> count;
    std::vector<std::pair<double, double>> actions;
    for (const auto& e : trace["traceEvents"]) {
      const std::string name = e.value("name", "");
      if (e.value("ph", "") != "X") continue;
      if (name.rfind("pipeline ", 0) == 0 && name.find("send") == std::string::npos &&
          name.find("recv") == std::string::npos)
        actions.emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
    }
    for (const auto& e : trace["traceEvents"]) {
      const std::string name = e.value("name", "");
      if (e.value("ph", "") != "X" || (name.rfind("forward ", 0) != 0 && name.rfind("backward ", 0) != 0)) continue;
      ++count[name];
      all.insert(name);
      const double a = e["ts"].get<double>(), b = a + e["dur"].get<double>();
      EXPECT_TRUE(std::any_of(actions.begin(), actions.end(),
                              [&](const auto& w) { return a >= w.first - 1 && b <= w.second + 1; }))
          << name << " outside every pipeline action";
    }
    EXPECT_EQ(count.size(), 8u) << trace.dump().substr(0, 2000);
    for (const auto& [name, n] : count) EXPECT_EQ(n, 2) << name;
  }
  for (const char* u : {"forward tok_embeddings", "backward layers.0", "forward layers.5", "backward norm+output"})
    EXPECT_TRUE(all.count(u)) << u;
  const auto plan = run_ctitan({"plan", (dir / "pp" / "config.toml").string(), "--hardware", "cpu", "--ngpu", "2",
                                "--profile", (dir / "single").string(), "--profile", (dir / "pp").string()});
  ASSERT_EQ(plan.exit_code, 0) << plan.out << plan.err;
  EXPECT_NE(plan.out.find("for ranks side by side (measured in " + (dir / "pp").string() + ")"), std::string::npos)
      << plan.out;
}

TEST_F(Profiling, OutOfMemoryInAStepWritesASnapshotAndOneLine) {
  const auto dir = fresh_dir("prof_oom");
  std::string cmd = "ulimit -v 4194304 && exec '" + ctitan::testing::ctitan_bin() + "'";
  for (const auto& a : debug_run(dir, 2, {"--training.seq_len", "2048", "--training.local_batch_size", "64",
                                          "--profiling.enable_memory_snapshot"}))
    cmd += " '" + a + "'";
  cmd += " > '" + (dir / "out.txt").string() + "' 2> '" + (dir / "err.txt").string() + "'";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  std::ifstream err_file(dir / "err.txt");
  const std::string err((std::istreambuf_iterator<char>(err_file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("ctitan: rank 0: out of memory in step 1: "), std::string::npos) << err;
  const fs::path snap = dir / "memory_snapshot" / "iteration_0_exit" / "rank0_memory_snapshot.json";
  EXPECT_NE(err.find(snap.string()), std::string::npos) << err;
  ASSERT_TRUE(fs::exists(snap));
  const nlohmann::json m = read_json(snap);
  EXPECT_EQ(m["reason"], "out_of_memory");
  EXPECT_EQ(m["failed_allocation"]["category"], "activations");
  EXPECT_GT(m["failed_allocation"]["live_by_category"]["activations"].get<int64_t>(), int64_t{1} << 28);
  EXPECT_FALSE(m["timeline"]["entries"].empty()) << "the allocations leading up to the failure";
  EXPECT_EQ(read_json(dir / "summary.json")["status"], "oom");
}

TEST_F(Profiling, AScheduleLongerThanItsCycleIsBadInput) {
  const auto dir = fresh_dir("prof_bad");
  const auto r = run_ctitan(debug_run(dir, 2,
                                      {"--profiling.enable_profiling", "--profiling.profile_freq", "2",
                                       "--profiling.profiler_warmup", "3"}));
  expect_one_line_exit2(r, "profiling.profile_freq 2 is less than profiler_warmup + profiler_active");
  EXPECT_FALSE(fs::exists(dir / "config.toml"));
}

TEST_F(Profiling, TraceCommandsRejectWhatIsNotThere) {
  const auto dir = fresh_dir("prof_none");
  expect_one_line_exit2(run_ctitan({"trace", "merge", dir.string()}), "no iteration_N/rank<R>_trace.json");
  std::ofstream(dir / "broken.json") << "{\"traceEvents\": [";
  expect_one_line_exit2(run_ctitan({"trace", "analyze", (dir / "broken.json").string()}), "is not valid JSON");
  expect_one_line_exit2(run_ctitan({"trace", "frobnicate"}), "unknown trace command 'frobnicate'");
}

}  // namespace
