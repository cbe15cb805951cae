// `ctitan sweep --launcher slurm` against a real one-node Slurm cluster
// (slurm_cluster.h: munged + slurmctld + slurmd from Debian's packages,
// started and stopped by each test): every point ok and ingested with its
// job id, a driver killed with SIGKILL and restarted submitting nothing
// twice, scancel → cancelled, a time limit → timeout, SIGTERM leaving the
// jobs to Slurm, --cancel, and bad input (sbatch missing, controller down,
// unknown partition) → one line, exit 2, nothing submitted, database unchanged.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "results/results_db.h"
#include "tests/integration/process.h"
#include "tests/slurm/slurm_cluster.h"

namespace fs = std::filesystem;
using ctitan::ResultsDb;
using ctitan::RunRow;
using ctitan::testing::expect_one_line_exit2;
using ctitan::testing::fresh_dir;
using ctitan::testing::run_ctitan;
using ctitan::testing::SlurmCluster;
using ctitan::testing::source_dir;

namespace {

// A sweep over the tiny model; `extra` goes into [sweep], `tail` after [overrides].
fs::path write_spec(const fs::path& dir, const std::string& name, const std::string& extra, const std::string& tail,
                    int steps = 3) {
  const fs::path p = dir / (name + ".toml");
  std::ofstream(p) << "[sweep]\nname = \"" << name << "\"\nbase = \""
                   << (fs::absolute(source_dir()) / "recipes/llama3_debugmodel_markov.toml").string() << "\"\n"
                   << "launcher = \"slurm\"\nwarmup_steps = 1\nmeasure_steps = " << steps - 1 << "\n"
                   << extra << "[overrides]\nmodel.flavor = \"tiny\"\ntraining.seq_len = 32\n"
                   << "training.local_batch_size = 2\nmetrics.log_freq = 1\nmetrics.peak_tflops = 1\n"
                   << tail;
  return p;
}

std::map<std::string, int> status_counts(const std::vector<RunRow>& rows) {
  std::map<std::string, int> m;
  for (const auto& r : rows) ++m[r.status];
  return m;
}

// Every job the controller knows: id → name.
std::map<std::string, std::string> slurm_jobs(const SlurmCluster& c) {
  std::map<std::string, std::string> jobs;
  const auto r = c.client("squeue", {"-h", "-t", "all", "-o", "%i|%j"});
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line))
    if (const size_t bar = line.find('|'); bar != std::string::npos) jobs[line.substr(0, bar)] = line.substr(bar + 1);
  return jobs;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class SlurmSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = SlurmCluster::unavailable(); !why.empty()) GTEST_SKIP() << why;
    dir_ = fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    cluster_ = std::make_unique<SlurmCluster>(dir_ / "cluster");
    cluster_->start();
  }
  void TearDown() override {
    if (cluster_) cluster_->stop();
  }
  fs::path dir_;
  std::unique_ptr<SlurmCluster> cluster_;
};

// Three points (world sizes 1 and 2) through sbatch/srun; the driver is
// SIGKILLed after its second submission and started again: it re-attaches
// to the recorded jobs and submits only the third, so Slurm sees exactly
// one job per run.
TEST_F(SlurmSweep, ThreePointsOkIngestedAndAKilledDriverSubmitsNothingTwice) {
  const fs::path spec = write_spec(dir_, "three", "world_sizes = [1, 2]\ntimeout_s = 600\n",
                                   "[grid]\noptimizer.lr = [0.001, 0.002]\n"
                                   "[[exclude]]\noptimizer.lr = 0.002\nworld_size = 2\n");
  const std::string db = (dir_ / "r.db").string();
  int submits = 0;
  const auto first = run_ctitan({"sweep", spec.string(), "--db", db, "--max-queued", "2"},
                                [&](const std::string& line, pid_t pid) {
                                  if (line.find("] submit ") != std::string::npos && ++submits == 2) kill(pid, SIGKILL);
                                });
  ASSERT_EQ(first.exit_code, 128 + SIGKILL) << first.out << first.err;
  ASSERT_EQ(slurm_jobs(*cluster_).size(), 2u) << first.out;

  const auto second = run_ctitan({"sweep", spec.string(), "--db", db, "--max-queued", "2"});
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  EXPECT_EQ(std::count(second.out.begin(), second.out.end(), '\n') > 0, true);
  EXPECT_NE(second.out.find("] attach "), std::string::npos) << second.out;
  EXPECT_NE(second.out.find("3 ok"), std::string::npos) << second.out;

  const auto jobs = slurm_jobs(*cluster_);
  EXPECT_EQ(jobs.size(), 3u) << "one job per run, none submitted twice:\n" << second.out;
  std::set<std::string> names;
  for (const auto& [id, name] : jobs) names.insert(name);
  EXPECT_EQ(names.size(), 3u);

  ResultsDb r(db);
  const auto rows = r.runs();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(status_counts(rows)["ok"], 3);
  std::set<int64_t> sizes;
  for (const RunRow& row : rows) {
    sizes.insert(row.world_size);
    const auto job = r.slurm_job(row.id);
    ASSERT_TRUE(job) << row.id;
    EXPECT_EQ(job->state, "COMPLETED");
    EXPECT_TRUE(jobs.count(job->job_id)) << job->job_id;
    EXPECT_EQ(jobs.at(job->job_id), job->job_name);
    EXPECT_FALSE(r.steps(row.id).empty()) << "run " << row.id << " not ingested";
    ASSERT_TRUE(r.summary(row.id)) << row.id;
    std::map<std::string, std::string> env;
    for (const auto& [k, v] : r.env(row.id)) env[k] = v;
    EXPECT_EQ(env["slurm_job_id"], job->job_id) << "the trainer's env.json records the job it ran in";
    EXPECT_TRUE(fs::exists(fs::path(row.run_dir) / "job.sbatch"));
  }
  EXPECT_EQ(sizes, (std::set<int64_t>{1, 2}));

  // A third run of the command changes nothing and submits nothing.
  const auto third = run_ctitan({"sweep", spec.string(), "--db", db});
  EXPECT_EQ(third.exit_code, 0) << third.out << third.err;
  EXPECT_EQ(slurm_jobs(*cluster_).size(), 3u);
}

// Two long points with a one-minute limit: the driver gets SIGTERM once both
// run and leaves them to Slurm; one is scancelled; a rerun re-attaches and
// records `cancelled` for it and `timeout` for the other.
TEST_F(SlurmSweep, ScancelIsCancelledTimeLimitIsTimeoutAndSigtermLeavesJobsRunning) {
  const fs::path spec = write_spec(dir_, "long", "world_sizes = [1]\ntimeout_s = 30\n",
                                   "[grid]\noptimizer.lr = [0.001, 0.002]\n", 1000000);
  const std::string db = (dir_ / "r.db").string();
  int running = 0;
  const auto first = run_ctitan({"sweep", spec.string(), "--db", db}, [&](const std::string& line, pid_t pid) {
    if (line.find("] running ") != std::string::npos && ++running == 2) kill(pid, SIGTERM);
  });
  ASSERT_EQ(first.exit_code, 130) << first.out << first.err;
  EXPECT_NE(first.out.find("stay in Slurm"), std::string::npos) << first.out;
  const auto jobs = slurm_jobs(*cluster_);
  ASSERT_EQ(jobs.size(), 2u);
  const std::string victim = jobs.begin()->first;
  ASSERT_EQ(cluster_->client("scancel", {victim}).exit_code, 0);

  const auto second = run_ctitan({"sweep", spec.string(), "--db", db});
  EXPECT_EQ(second.exit_code, 3) << second.out << second.err;
  EXPECT_EQ(slurm_jobs(*cluster_).size(), 2u) << "re-attached, not resubmitted:\n" << second.out;
  ResultsDb r(db);
  for (const RunRow& row : r.runs()) {
    const auto job = r.slurm_job(row.id);
    ASSERT_TRUE(job);
    if (job->job_id == victim) {
      EXPECT_EQ(row.status, "cancelled") << row.error;
      EXPECT_EQ(job->state, "CANCELLED");
    } else {
      EXPECT_EQ(row.status, "timeout") << row.error;
      EXPECT_EQ(job->state, "TIMEOUT");
      EXPECT_NE(row.error.find("time limit"), std::string::npos) << row.error;
    }
  }
}

// `ctitan sweep --cancel` scancels what the sweep submitted.
TEST_F(SlurmSweep, CancelCommandScancelsTheSweepsJobs) {
  const fs::path spec = write_spec(dir_, "tocancel", "world_sizes = [1]\ntimeout_s = 600\n", "", 1000000);
  const std::string db = (dir_ / "r.db").string();
  const auto first = run_ctitan({"sweep", spec.string(), "--db", db}, [&](const std::string& line, pid_t pid) {
    if (line.find("] submit ") != std::string::npos) kill(pid, SIGTERM);
  });
  ASSERT_EQ(first.exit_code, 130) << first.out << first.err;
  const auto cancel = run_ctitan({"sweep", spec.string(), "--db", db, "--cancel"});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.out << cancel.err;
  EXPECT_NE(cancel.out.find("cancelled 1 Slurm jobs"), std::string::npos) << cancel.out;
  ResultsDb r(db);
  const auto rows = r.runs();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, "cancelled");
  const std::string id = r.slurm_job(rows[0].id)->job_id;
  for (int i = 0; i < 100; ++i) {  // scancel is asynchronous
    const auto s = cluster_->client("squeue", {"-h", "-t", "all", "-j", id, "-o", "%T"});
    if (s.out.find("CANCELLED") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(cluster_->client("squeue", {"-h", "-t", "all", "-j", id, "-o", "%T"}).out.find("CANCELLED"),
            std::string::npos);
  // Nothing left to cancel: says so, exit 0.
  const auto again = run_ctitan({"sweep", spec.string(), "--db", db, "--cancel"});
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_NE(again.out.find("nothing to cancel"), std::string::npos) << again.out;
}

// Bad input: one line naming the command and its error, exit 2, nothing
// submitted, the database byte-identical.
TEST_F(SlurmSweep, BadInputIsOneLineNothingSubmittedDatabaseUnchanged) {
  const fs::path spec = write_spec(dir_, "bad", "world_sizes = [1]\n", "");
  const std::string db = (dir_ / "r.db").string();
  { ResultsDb create(db); }
  const std::string before = read_bytes(db);

  const auto partition = run_ctitan({"sweep", spec.string(), "--db", db, "--partition", "nosuch"});
  expect_one_line_exit2(partition, "invalid partition specified: nosuch");

  // sbatch not on PATH.
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", (dir_ / "empty-bin").c_str(), 1);
  const auto missing = run_ctitan({"sweep", spec.string(), "--db", db});
  ::setenv("PATH", path.c_str(), 1);
  expect_one_line_exit2(missing, "`sbatch` is not on PATH");

  EXPECT_TRUE(slurm_jobs(*cluster_).empty()) << "nothing submitted";
  cluster_->stop_controller();
  const auto down = run_ctitan({"sweep", spec.string(), "--db", db});
  expect_one_line_exit2(down, "sbatch --test-only");

  EXPECT_EQ(read_bytes(db), before) << "the database must not change";
  EXPECT_FALSE(fs::exists(db + ".runs")) << "no run folder before Slurm accepted the options";
}

}  // namespace
