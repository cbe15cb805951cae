// `ctitan train` started by srun on a real one-node Slurm cluster
// (slurm_cluster.h): the tasks of the step find their rank, world and
// rendezvous from Slurm's variables alone (trainer/distributed/mesh.h), with no
// `ctitan launch` and no torchrun variables.
//
// The 2-task step is checked against `ctitan launch --nproc 2` of the same
// config file: the same layout (FSDP over 2 ranks), fp32, OMP_NUM_THREADS=1
// in both, so each step's loss agrees to 1e-5 relative (in practice bit for
// bit; a step that joined no rendezvous — two single processes — trains on
// half the batch and is off by far more). The run directory records the
// Slurm job, and ingest puts it into the env table as Slurm wrote it.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "harness/slurm.h"
#include "results/results_db.h"
#include "tests/integration/process.h"
#include "tests/slurm/slurm_cluster.h"
#include "trainer/distributed/mesh.h"

namespace fs = std::filesystem;
using ctitan::testing::ctitan_bin;
using ctitan::testing::fresh_dir;
using ctitan::testing::ProcessResult;
using ctitan::testing::read_json;
using ctitan::testing::read_jsonl;
using ctitan::testing::run_ctitan;
using ctitan::testing::SlurmCluster;

namespace ctitan {
namespace {

constexpr int kSteps = 6;

// The run both launchers start: the tiny flavor on the Markov corpus, fp32,
// FSDP over however many ranks there are (a global batch of 4 at 2 ranks).
constexpr const char* kConfig = R"([model]
flavor = "tiny"

[training]
dataset = "markov"
seq_len = 32
local_batch_size = 2
steps = 6
mixed_precision_param = "float32"

[lr_scheduler]
warmup_steps = 2

[metrics]
log_freq = 1
peak_tflops = 1.0
)";

std::map<int64_t, double> losses(const fs::path& dump) {
  std::map<int64_t, double> out;
  for (const auto& row : read_jsonl(dump / "metrics.jsonl"))
    if (row.contains("loss")) out[row.at("step").get<int64_t>()] = row.at("loss");
  return out;
}

void expect_same_losses(const std::map<int64_t, double>& expected, const std::map<int64_t, double>& actual) {
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [step, loss] : expected) {
    ASSERT_TRUE(actual.count(step)) << "step " << step;
    EXPECT_LE(std::abs(actual.at(step) - loss), 1e-5 * std::abs(loss))
        << "step " << step << ": " << actual.at(step) << " vs " << loss;
  }
}

class SrunTrain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_reason_ = new std::string(SlurmCluster::unavailable());
    if (!skip_reason_->empty()) return;
    ::setenv("OMP_NUM_THREADS", "1", 1);
    root_ = new fs::path(fresh_dir("srun_train"));
    { std::ofstream(*root_ / "tiny.toml") << kConfig; }
    cluster_ = new SlurmCluster(*root_ / "cluster");
    try {
      cluster_->start();
    } catch (const std::exception& e) {
      start_error_ = new std::string(e.what());
    }
  }
  static void TearDownTestSuite() {
    delete cluster_;  // stops the daemons, whatever happened
    cluster_ = nullptr;
    if (root_ != nullptr) fs::remove_all(*root_);
    delete root_;
    root_ = nullptr;
    delete skip_reason_;
    delete start_error_;
    skip_reason_ = start_error_ = nullptr;
    ::unsetenv("OMP_NUM_THREADS");
  }
  void SetUp() override {
    if (!skip_reason_->empty()) GTEST_SKIP() << *skip_reason_;
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
  }

  // `srun -n N ctitan train --job.config_file tiny.toml` into `dump`.
  static ProcessResult srun_train(int tasks, const fs::path& dump) {
    return cluster_->client("srun", {"-n", std::to_string(tasks), "--kill-on-bad-exit=1", "--time=3",
                                     "--job-name=ctitan-srun-test", ctitan_bin(), "train", "--job.config_file",
                                     (*root_ / "tiny.toml").string(), "--job.dump_folder", dump.string()});
  }
  static std::vector<std::string> train_args(const fs::path& dump) {
    return {"--job.config_file", (*root_ / "tiny.toml").string(), "--job.dump_folder", dump.string()};
  }
  // The reference: `ctitan launch --nproc 2` of the same config, run once
  // (its run directory; empty when it failed, with the failure recorded).
  static fs::path launch_nproc2() {
    static const fs::path dir = [] {
      const fs::path d = *root_ / "launch2";
      std::vector<std::string> args = {"launch", "--nproc", "2"};
      for (const auto& a : train_args(d)) args.push_back(a);
      const ProcessResult r = run_ctitan(args);
      EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
      EXPECT_EQ(losses(d).size(), static_cast<size_t>(kSteps));
      return r.exit_code == 0 ? d : fs::path();
    }();
    return dir;
  }

  static std::string* skip_reason_;
  static std::string* start_error_;
  static fs::path* root_;
  static SlurmCluster* cluster_;
};

std::string* SrunTrain::skip_reason_ = nullptr;
std::string* SrunTrain::start_error_ = nullptr;
fs::path* SrunTrain::root_ = nullptr;
SlurmCluster* SrunTrain::cluster_ = nullptr;

TEST_F(SrunTrain, TwoTasksMatchLaunchNproc2) {
  const fs::path launched = launch_nproc2(), srun = *root_ / "srun2";
  ASSERT_FALSE(launched.empty());
  const ProcessResult r = srun_train(2, srun);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ctitan: rank 0/2"), std::string::npos) << r.out;  // one world of two ranks
  expect_same_losses(losses(launched), losses(srun));

  // The run directory names the Slurm job it ran in, and the job is the one
  // Slurm knows (finished, two tasks).
  const auto env = read_json(srun / "env.json");
  EXPECT_EQ(env.value("launcher", ""), "srun");
  const std::string job = env.value("slurm_job_id", "");
  ASSERT_FALSE(job.empty()) << env.dump();
  EXPECT_EQ(job.find_first_not_of("0123456789"), std::string::npos) << job;
  EXPECT_EQ(env.value("slurm_ntasks", ""), "2");
  EXPECT_EQ(env.value("slurm_job_nodelist", ""), cluster_->node());
  EXPECT_EQ(env.value("slurm_cluster_name", ""), "ctitantest");
  EXPECT_EQ(env.value("slurm_partition", ""), "debug");
  // srun returns when the tasks have ended; Slurm may still be running the
  // job's epilogue (COMPLETING) for a moment after, so wait for the final
  // state as the sweep driver does (slurm_state_is_final), for at most 60 s.
  ProcessResult shown;
  std::string state;
  for (int i = 0; i < 120; ++i) {
    shown = cluster_->client("scontrol", {"show", "job", job});
    const size_t at = shown.out.find("JobState=");
    state = at == std::string::npos ? "" : shown.out.substr(at + 9, shown.out.find_first_of(" \n", at) - at - 9);
    if (state.empty() || slurm_state_is_final(state)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_NE(shown.out.find("JobId=" + job + " "), std::string::npos) << shown.out << shown.err;
  EXPECT_EQ(state, "COMPLETED") << shown.out;
  const auto launch_env = read_json(launched / "env.json");
  EXPECT_EQ(launch_env.value("launcher", ""), "torchrun");
  EXPECT_FALSE(launch_env.contains("slurm_job_id"));

  // Ingest stores the strings as Slurm wrote them.
  ResultsDb db((*root_ / "results.db").string());
  RunRow row;
  row.world_size = 2;
  row.status = "ok";
  row.run_dir = srun.string();
  const int64_t id = db.insert_run(row);
  db.ingest_run_dir(id, srun.string());
  std::map<std::string, std::string> stored;
  for (const auto& [k, v] : db.env(id)) stored[k] = v;
  EXPECT_EQ(stored["slurm_job_id"], job);
  EXPECT_EQ(stored["slurm_ntasks"], "2");
  EXPECT_EQ(stored["launcher"], "srun");
}

TEST_F(SrunTrain, OneTaskIsAPlainSingleProcess) {
  const fs::path plain = *root_ / "plain1", srun = *root_ / "srun1";
  const ProcessResult ref = run_ctitan([&] {
    std::vector<std::string> a = {"train"};
    for (const auto& x : train_args(plain)) a.push_back(x);
    return a;
  }());
  ASSERT_EQ(ref.exit_code, 0) << ref.out << ref.err;
  const ProcessResult r = srun_train(1, srun);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("ctitan: rank "), std::string::npos) << r.out;  // no world to join
  expect_same_losses(losses(plain), losses(srun));
  const auto env = read_json(srun / "env.json");
  EXPECT_EQ(env.value("launcher", ""), "srun");
  EXPECT_EQ(env.value("slurm_ntasks", ""), "1");
  EXPECT_EQ(read_json(plain / "env.json").value("launcher", ""), "none");
}

TEST_F(SrunTrain, SbatchTemplateRunsAsSubmitted) {
  // recipes/slurm/multinode.sbatch with its GPUs dropped on the command line
  // (docs/slurm.md): one node of 2 tasks, the same run as launch --nproc 2.
  // MASTER_PORT is given (and wins over the derived one): every test
  // cluster numbers its jobs from 1, so two tests running at once would
  // otherwise derive the same port.
  const fs::path launched = launch_nproc2(), dump = *root_ / "sbatch2", log = *root_ / "sbatch.out";
  ASSERT_FALSE(launched.empty());
  const std::string script = (fs::absolute(ctitan::testing::source_dir()) / "recipes/slurm/multinode.sbatch").string();
  std::string exports = "--export=ALL,CONFIG=";
  exports += (*root_ / "tiny.toml").string();
  exports += ",CTITAN=" + ctitan_bin() + ",DUMP_FOLDER=" + dump.string();
  exports += ",MASTER_PORT=" + std::to_string(ctitan::testing::slurm_detail::free_port());
  std::string output = "--output=";
  output += log.string();
  const ProcessResult r = cluster_->client("sbatch", {"--wait", "--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=0",
                                                      "--cpus-per-task=1", "--time=3", output, exports, script,
                                                      "--training.steps", std::to_string(kSteps)});
  std::ifstream in(log);
  const std::string printed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << printed;
  EXPECT_NE(printed.find("ctitan: rank 1/2"), std::string::npos) << printed;
  expect_same_losses(losses(launched), losses(dump));
  EXPECT_EQ(read_json(dump / "env.json").value("slurm_ntasks", ""), "2");
}

TEST_F(SrunTrain, ScontrolExpandsBracketedNodeLists) {
  // The real scontrol (SLURM_CONF names the test cluster): zero padding kept,
  // the first host of the first range.
  EXPECT_EQ(slurm_first_host("SLURM_JOB_NODELIST", "gpu[007-009,011],cpu1"), "gpu007");
  EXPECT_EQ(slurm_first_host("SLURM_JOB_NODELIST", "a1,b[2-3]"), "a1");
}

}  // namespace
}  // namespace ctitan
