// `ctitan gate` end to end: the same sweep spec run twice, the candidate
// with a deliberate slowdown in one point, through the real binary.
//
// Spec: the base point (no label) takes training.local_batch_size from
// [overrides] — 8 in the baseline, 1 in the candidate: eight times fewer
// tokens per step of the same fixed cost, a large and reliable drop in
// tokens/s. A second point pins training.local_batch_size = 2 itself, so it
// is the same config on both sides; the candidate sweep reuses the
// baseline's run of it (same point key) and it must pass. Tiny model, 12
// steps per run: the whole test takes seconds.
//
// The runs get one intra-op thread (OMP_NUM_THREADS=1): on a 2-core machine
// shared with other jobs, two spinning OpenMP threads per process turn a
// 3 ms step into anything up to 300 ms, which would bury the 5x slowdown;
// with one thread each step's time reflects its work.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/integration/process.h"

namespace fs = std::filesystem;
using ctitan::testing::expect_one_line_exit2;
using ctitan::testing::fresh_dir;
using ctitan::testing::read_json;
using ctitan::testing::run_ctitan;
using ctitan::testing::source_dir;

namespace {

fs::path spec(const fs::path& dir, const std::string& name, int batch) {
  const fs::path p = dir / (name + ".toml");
  std::ofstream(p) << "[sweep]\nname = \"" << name << "\"\nbase = \""
                   << (fs::absolute(source_dir()) / "recipes/llama3_debugmodel_markov.toml").string() << "\"\n"
                   << "world_sizes = [1]\nrepeats = 1\ntimeout_s = 120\nwarmup_steps = 2\nmeasure_steps = 10\n"
                   << "[overrides]\nmodel.flavor = \"tiny\"\ntraining.seq_len = 32\nmetrics.log_freq = 1\n"
                   << "metrics.peak_tflops = 1\ntraining.local_batch_size = " << batch << "\n"
                   << "[[include]]\ntraining.local_batch_size = 2\n";
  return p;
}

const nlohmann::json& point(const nlohmann::json& verdict, const std::string& name) {
  for (const auto& p : verdict["points"])
    if (p["point"] == name) return p;
  static const nlohmann::json none;
  ADD_FAILURE() << "no point " << name << " in " << verdict.dump(1);
  return none;
}

class GateE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("OMP_NUM_THREADS", "1", 1);
    dir_ = new fs::path(fresh_dir("gate"));
    db_ = new std::string((*dir_ / "r.db").string());
    for (const auto& [name, batch] : {std::pair{"main", 8}, std::pair{"pr", 1}}) {
      const auto r = run_ctitan({"sweep", spec(*dir_, name, batch).string(), "--db", *db_});
      ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete db_;
  }
  static fs::path* dir_;
  static std::string* db_;
};
fs::path* GateE2E::dir_ = nullptr;
std::string* GateE2E::db_ = nullptr;

TEST_F(GateE2E, SlowedCandidateFailsNamingThePoint) {
  const fs::path json = *dir_ / "verdict.json", md = *dir_ / "verdict.md";
  const auto r = run_ctitan({"gate", "--db", *db_, "--baseline", "sweep:main", "--candidate", "sweep:pr", "--json",
                             json.string(), "--md", md.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("### ctitan gate: \u274c regression"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| `(base) ws=1` | tps/device |"), std::string::npos) << r.out;
  const nlohmann::json v = read_json(json);
  EXPECT_EQ(v["verdict"], "regression");
  EXPECT_EQ(v["exit_code"], 1);
  const auto& slowed = point(v, "(base) ws=1");
  EXPECT_EQ(slowed["verdict"], "regression");
  EXPECT_EQ(slowed["metrics"][0]["metric"], "tps");
  EXPECT_EQ(slowed["metrics"][0]["verdict"], "regression");
  EXPECT_LT(slowed["metrics"][0]["change"].get<double>(), -0.05);
  EXPECT_EQ(point(v, "training.local_batch_size=2 ws=1")["verdict"], "pass");  // the same measurement on both sides
  std::ifstream in(md);
  const std::string md_text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(md_text, r.out);  // --md holds what stdout printed
}

TEST_F(GateE2E, ASweepAgainstItselfPasses) {
  const auto r = run_ctitan({"gate", "--db", *db_, "--baseline", "sweep:main", "--candidate", "sweep:main"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\u2705 pass"), std::string::npos);
  const auto j = run_ctitan({"gate", "--db", *db_, "--baseline", "main", "--candidate", "main", "--format", "json"});
  EXPECT_EQ(j.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(j.out)["verdict"], "pass");
}

TEST_F(GateE2E, BaselineFileKeptInARepo) {
  const fs::path file = *dir_ / "baseline.json";
  const auto w = run_ctitan({"gate", "--db", *db_, "--baseline", "sweep:main", "--write-baseline-file", file.string()});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const nlohmann::json b = read_json(file);
  EXPECT_EQ(b["format"], "ctitan-gate-baseline-v1");
  EXPECT_EQ(b["points"].size(), 2u);
  EXPECT_EQ(run_ctitan({"gate", "--db", *db_, "--baseline-file", file.string(), "--candidate", "sweep:pr"}).exit_code,
            1);
  EXPECT_EQ(run_ctitan({"gate", "--db", *db_, "--baseline-file", file.string(), "--candidate", "sweep:main"}).exit_code,
            0);
}

// Loss parity through the real binary. The same spec run into a second
// database gives independent runs of the same build: training on the CPU is
// deterministic, so their losses are bit-identical. The candidate sweep's
// batch 1 changes the recipe of the base point: its losses differ from
// step 1, and the point the two sweeps share is identical.
TEST_F(GateE2E, LossParityNamesTheFirstStepThatDiffers) {
  const std::string other_db = (*dir_ / "again.db").string();
  const auto again = run_ctitan({"sweep", spec(*dir_, "main", 8).string(), "--db", other_db});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  const auto same = run_ctitan({"gate", "--losses", "--baseline-db", *db_, "--baseline", "sweep:main",
                                "--candidate-db", other_db, "--candidate", "sweep:main"});
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("| `(base) ws=1` | identical | identical over 12 steps |"), std::string::npos) << same.out;

  const auto changed = run_ctitan({"gate", "--losses", "--db", *db_, "--baseline", "sweep:main", "--candidate", "sweep:pr"});
  EXPECT_EQ(changed.exit_code, 1) << changed.out << changed.err;
  EXPECT_NE(changed.out.find("| `(base) ws=1` | differ | step 1: baseline "), std::string::npos) << changed.out;
  EXPECT_NE(changed.out.find("| `training.local_batch_size=2 ws=1` | identical |"), std::string::npos) << changed.out;
  expect_one_line_exit2(run_ctitan({"gate", "--losses", "--db", *db_, "--baseline-file", "x.json", "--candidate", "pr"}),
                        "--losses compares two sets of runs");
}

TEST_F(GateE2E, ThresholdAndMetricFlagsChangeTheDecision) {
  // Only memory: batch 1 needs less, which is no regression. The two
  // points are still compared; nothing is missing, so the gate passes.
  const auto mem =
      run_ctitan({"gate", "--db", *db_, "--baseline", "sweep:main", "--candidate", "sweep:pr", "--metrics", "mem"});
  EXPECT_EQ(mem.exit_code, 0) << mem.out;
  // A threshold no slowdown reaches (a drop is at most −100 %) turns the tps failure off.
  const auto loose = run_ctitan({"gate", "--db", *db_, "--baseline", "sweep:main", "--candidate", "sweep:pr",
                                 "--metrics", "tps", "--threshold", "(base)*:tps=100%"});
  EXPECT_EQ(loose.exit_code, 0) << loose.out;
}

TEST_F(GateE2E, BadInputIsOneLineAndExitTwo) {
  expect_one_line_exit2(run_ctitan({"gate", "--db", *db_, "--baseline", "sweep:nope", "--candidate", "sweep:pr"}),
                        "no sweep named 'nope'");
  expect_one_line_exit2(run_ctitan({"gate", "--db", *db_, "--candidate", "sweep:pr"}), "exactly one of --baseline");
  expect_one_line_exit2(run_ctitan({"gate", "--db", *db_, "--baseline", "main"}), "needs --candidate");
  expect_one_line_exit2(
      run_ctitan({"gate", "--db", *db_, "--baseline", "main", "--candidate", "pr", "--threshold", "tpz=5%"}),
      "unknown metric 'tpz'");
  expect_one_line_exit2(
      run_ctitan({"gate", "--db", (*dir_ / "absent.db").string(), "--baseline", "main", "--candidate", "pr"}),
      "does not exist");
  expect_one_line_exit2(
      run_ctitan({"gate", "--db", *db_, "--baseline-file", (*dir_ / "none.json").string(), "--candidate", "pr"}),
      "cannot be read");
}

}  // namespace
