// Issue 55 (reliability, round 4), the planner's inputs, against the real
// binary: a sequence no model can hold is one line wherever it is given (a
// plan, the meta-device dry run, a sweep's grid), a plan or dry run holds
// nothing proportional to the sequence, and `plan --profile` refuses a trace
// no real run can write (durations, shapes, a law faster than the hardware).
// Each test failed on the binary before its fix (docs/reliability.md).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "tests/integration/process.h"

namespace fs = std::filesystem;
using ctitan::testing::expect_one_line_exit2;
using ctitan::testing::fresh_dir;
using ctitan::testing::read_json;
using ctitan::testing::run_ctitan;
using ctitan::testing::source_dir;

namespace {

std::string recipe(const std::string& name) { return (fs::absolute(source_dir()) / "recipes" / name).string(); }

class ReliabilityRound4Plan : public ::testing::Test {
 protected:
  void SetUp() override { setenv("OMP_NUM_THREADS", "1", 1); }
  void TearDown() override {
    unsetenv("OMP_NUM_THREADS");
    unsetenv("NGPU");
  }
};

// `ctitan args...` with its output discarded: its exit code and its own peak
// resident memory (wait4's rusage of that child alone), in bytes.
std::pair<int, int64_t> peak_rss(const std::vector<std::string>& args) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    std::vector<std::string> full = {ctitan::testing::ctitan_bin()};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  struct rusage usage {};
  if (wait4(pid, &status, 0, &usage) != pid) return {-1, 0};
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, static_cast<int64_t>(usage.ru_maxrss) * 1024};
}

constexpr const char* kTooLong =
    "training.seq_len 1000000000 is more than 16777216 tokens (2^24), the longest sequence ctitan runs or plans";

TEST_F(ReliabilityRound4Plan, ASequenceNoModelHoldsIsOneLineInPlanDryRunAndSweep) {
  // Before: "you tried to allocate 256000000000 bytes", exit 1, in each.
  expect_one_line_exit2(run_ctitan({"plan", recipe("llama3_8b.toml"), "--hardware", "h100_sxm", "--ngpu", "8",
                                    "--training.seq_len", "1000000000"}),
                        kTooLong);
  setenv("NGPU", "8", 1);
  expect_one_line_exit2(run_ctitan({"train", "--job.config_file", recipe("llama3_8b.toml"), "--comm.mode",
                                    "fake_backend", "--training.seq_len", "1000000000"}),
                        kTooLong);
  unsetenv("NGPU");
  expect_one_line_exit2(run_ctitan({"plan", recipe("llama3_debugmodel.toml"), "--hardware", "cpu",
                                    "--validation.enable", "--validation.seq_len", "20000000"}),
                        "validation.seq_len 20000000 is more than 16777216 tokens");
  // A sweep: a grid value no point accepts is the spec's error (as every
  // value the trainer rejects in every point), one line; before, the planner
  // of its first point died with the allocation.
  const fs::path dir = fresh_dir("r4_seq_sweep");
  const fs::path spec = dir / "long.toml";
  std::ofstream(spec) << "[sweep]\nbase = \"" << recipe("llama3_debugmodel_markov.toml")
                      << "\"\nworld_sizes = [1]\n[overrides]\nmodel.flavor = \"tiny\"\n"
                         "[grid]\ntraining.seq_len = [32, 1000000000]\n";
  const auto sweep = run_ctitan({"sweep", spec.string(), "--dry-run"});
  expect_one_line_exit2(sweep, "grid value training.seq_len = 1000000000 is rejected in every point: ");
  EXPECT_NE(sweep.err.find("more than 16777216 tokens"), std::string::npos) << sweep.err;
  fs::remove_all(dir);
}

TEST_F(ReliabilityRound4Plan, PlansAndDryRunsHoldNothingProportionalToTheSequence) {
  // 2^21 tokens against 2^11: the same peak memory within 128 MiB. Before,
  // the RoPE table was computed in real memory (angles, ones and the complex
  // table: 2 GiB more at 2^21 for Llama 3 8B; 10 GB at 10^7).
  const auto plan = [](const std::string& seq) {
    return peak_rss({"plan", recipe("llama3_8b.toml"), "--hardware", "h100_sxm", "--ngpu", "8",
                     "--training.seq_len", seq});
  };
  const auto [short_rc, short_rss] = plan("2048");
  const auto [long_rc, long_rss] = plan("2097152");
  ASSERT_EQ(short_rc, 0);
  ASSERT_EQ(long_rc, 0);
  EXPECT_LT(long_rss - short_rss, int64_t{128} << 20) << short_rss << " bytes at 2048, " << long_rss << " at 2^21";
  setenv("NGPU", "8", 1);
  const auto dry = [](const std::string& seq) {
    return peak_rss({"train", "--job.config_file", recipe("llama3_8b.toml"), "--comm.mode", "fake_backend",
                     "--training.seq_len", seq, "--parallelism.context_parallel_degree", "2"});
  };
  const auto [dry_short_rc, dry_short_rss] = dry("2048");
  const auto [dry_long_rc, dry_long_rss] = dry("2097152");
  unsetenv("NGPU");
  ASSERT_EQ(dry_short_rc, 0);
  ASSERT_EQ(dry_long_rc, 0);
  EXPECT_LT(dry_long_rss - dry_short_rss, int64_t{128} << 20)
      << dry_short_rss << " bytes at 2048, " << dry_long_rss << " at 2^21";
}

// --- plan --profile on a damaged real trace ---------------------------------

std::vector<fs::path> traces_of(const fs::path& run) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(run))
    if (e.path().filename() == "rank0_trace.json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// A copy of `run` whose traces' events pass through `damage` (the op events'
// JSON, edited in place).
fs::path damaged_copy(const fs::path& run, const std::string& name,
                      const std::function<void(nlohmann::json& event)>& damage) {
  const fs::path copy = run.parent_path() / name;
  fs::remove_all(copy);
  fs::copy(run, copy, fs::copy_options::recursive);
  for (const fs::path& f : traces_of(copy)) {
    nlohmann::json trace = read_json(f);
    for (nlohmann::json& e : trace["traceEvents"]) damage(e);
    std::ofstream(f) << trace.dump();
  }
  return copy;
}

bool is_aten(const nlohmann::json& e) {
  return e.value("cat", "") == "cpu_op" && e.value("name", "").rfind("aten::", 0) == 0;
}

TEST_F(ReliabilityRound4Plan, ProfileRefusesTracesNoRealRunWrites) {
  const fs::path dir = fresh_dir("r4_profile");
  const fs::path run = dir / "run";
  const auto trained = run_ctitan({"train", "--job.config_file", recipe("llama3_debugmodel_markov.toml"),
                                   "--model.flavor", "tiny", "--training.seq_len", "64", "--training.local_batch_size",
                                   "2", "--training.steps", "3", "--lr_scheduler.warmup_steps", "0",
                                   "--metrics.peak_tflops", "1", "--profiling.enable_profiling",
                                   "--profiling.profile_freq", "3", "--profiling.profiler_warmup", "1",
                                   "--profiling.profiler_active", "1", "--job.dump_folder", run.string()});
  ASSERT_EQ(trained.exit_code, 0) << trained.out << trained.err;
  ASSERT_FALSE(traces_of(run).empty());
  const std::string cfg = (run / "config.toml").string();
  // The real trace: read and planned with.
  const auto table = run_ctitan({"plan", "--profile", run.string()});
  ASSERT_EQ(table.exit_code, 0) << table.out << table.err;
  const auto planned = run_ctitan({"plan", cfg, "--hardware", "cpu", "--profile", run.string()});
  ASSERT_EQ(planned.exit_code, 0) << planned.out << planned.err;

  // Every aten:: op's duration negative. Before: "gemm -12396099 ms,
  // -48035828.5 %" and a step of 7,911,216 ms, exit 0.
  const fs::path negative = damaged_copy(run, "negative", [](nlohmann::json& e) {
    if (is_aten(e)) e["dur"] = -e["dur"].get<double>();
  });
  for (const auto& r : {run_ctitan({"plan", "--profile", negative.string()}),
                        run_ctitan({"plan", cfg, "--hardware", "cpu", "--profile", negative.string()})}) {
    expect_one_line_exit2(r, "ctitan plan --profile: " + traces_of(negative).front().string() + ": event ");
    EXPECT_NE(r.err.find("('aten::"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("has \"dur\" = -"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("a duration is a positive number of microseconds"), std::string::npos) << r.err;
  }
  // A zero duration, and one of 11 days (JSON cannot hold an infinite one:
  // 1e999 is a parse error, already one line).
  const fs::path zero = damaged_copy(run, "zero", [](nlohmann::json& e) {
    if (is_aten(e)) e["dur"] = 0;
  });
  expect_one_line_exit2(run_ctitan({"plan", "--profile", zero.string()}), "has \"dur\" = 0: a duration is");
  const fs::path days = damaged_copy(run, "days", [](nlohmann::json& e) {
    if (is_aten(e)) e["dur"] = 1e12;
  });
  expect_one_line_exit2(run_ctitan({"plan", "--profile", days.string()}), "has \"dur\" = 1e+12: a duration is");

  // Shapes of 2^62. Before: "MFU 439 %" in the plan, exit 0.
  const fs::path huge = damaged_copy(run, "huge", [](nlohmann::json& e) {
    if (!is_aten(e) || !e.contains("args") || !e["args"].contains("Input Dims")) return;
    for (auto& shape : e["args"]["Input Dims"])
      for (auto& d : shape) d = int64_t{1} << 62;
  });
  for (const auto& r : {run_ctitan({"plan", "--profile", huge.string()}),
                        run_ctitan({"plan", cfg, "--hardware", "cpu", "--profile", huge.string()})}) {
    expect_one_line_exit2(r, "ctitan plan --profile: " + traces_of(huge).front().string() + ": event ");
    EXPECT_NE(r.err.find("[4611686018427387904"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("a size is a whole number from 0 to 2^48"), std::string::npos) << r.err;
  }
  // Shapes each within bounds whose GEMMs then run at 65536x the measured
  // rate: a law faster than the peak this run's MFU had (1 TFLOP/s here).
  const fs::path fast = damaged_copy(run, "fast", [](nlohmann::json& e) {
    const std::string name = e.value("name", "");
    if (e.value("cat", "") != "cpu_op" || (name != "aten::mm" && name != "aten::addmm")) return;
    auto& dims = e["args"]["Input Dims"];
    auto& a = dims[name == "aten::addmm" ? 1 : 0];
    a[0] = a[0].get<int64_t>() * 65536;
  });
  for (const auto& r : {run_ctitan({"plan", "--profile", fast.string()}),
                        run_ctitan({"plan", cfg, "--hardware", "cpu", "--profile", fast.string()})}) {
    expect_one_line_exit2(r, "ctitan plan --profile: " + fast.string() + ": the traced gemm ops (");
    EXPECT_NE(r.err.find("more than the peak of the hardware they ran on (1e+12 FLOP/s, summary.json peak_flops, "
                         "override)"),
              std::string::npos)
        << r.err;
  }
  fs::remove_all(dir);
}

}  // namespace
