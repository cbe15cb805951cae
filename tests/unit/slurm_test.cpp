// The Slurm launcher's pieces that need no cluster: time limits, allocation
// shapes, state mapping, [slurm] parsing, and the generated sbatch script —
// run through bash with a stand-in `srun` that records its argument vector,
// so the quoting is checked by the shell that will read it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/errors.h"
#include "common/subprocess.h"
#include "harness/slurm.h"
#include "harness/sweep_spec.h"
#include "input_error.h"

namespace fs = std::filesystem;
using namespace ctitan;

TEST(Slurm, TimeLimitRoundsUpToTheMinute) {
  EXPECT_EQ(slurm_time(1), "00:01:00");
  EXPECT_EQ(slurm_time(60), "00:01:00");
  EXPECT_EQ(slurm_time(61), "00:02:00");
  EXPECT_EQ(slurm_time(1800), "00:30:00");
  EXPECT_EQ(slurm_time(3601), "01:01:00");
  EXPECT_EQ(slurm_time(25 * 3600), "1-01:00:00");
  EXPECT_THROW(slurm_time(0), InputError);
}

TEST(Slurm, ShapeFillsWholeNodes) {
  SlurmOptions o;
  SlurmShape s;
  EXPECT_EQ(slurm_shape(o, 4, s), "");  // CPU nodes: the whole world on one node
  EXPECT_EQ(s.nodes, 1);
  EXPECT_EQ(s.tasks_per_node, 4);
  o.gpus_per_node = 8;
  EXPECT_EQ(slurm_shape(o, 32, s), "");
  EXPECT_EQ(s.nodes, 4);
  EXPECT_EQ(s.tasks_per_node, 8);
  EXPECT_EQ(s.gpus_per_node, 8);
  EXPECT_EQ(slurm_shape(o, 2, s), "");  // less than a node: one node, 2 ranks
  EXPECT_EQ(s.nodes, 1);
  EXPECT_EQ(s.tasks_per_node, 2);
  EXPECT_NE(slurm_shape(o, 12, s).find("does not fill whole nodes of 8"), std::string::npos);
  o.tasks_per_node = 4;
  EXPECT_EQ(slurm_shape(o, 12, s), "");
  EXPECT_EQ(s.nodes, 3);
}

TEST(Slurm, StatesMapToRunStatuses) {
  EXPECT_EQ(run_status_of("COMPLETED"), "ok");
  EXPECT_EQ(run_status_of("FAILED"), "failed");
  EXPECT_EQ(run_status_of("TIMEOUT"), "timeout");
  EXPECT_EQ(run_status_of("OUT_OF_MEMORY"), "oom");
  EXPECT_EQ(run_status_of("CANCELLED"), "cancelled");
  EXPECT_EQ(run_status_of("NODE_FAIL"), "failed");
  EXPECT_EQ(run_status_of("PREEMPTED"), "failed");
  EXPECT_EQ(run_status_of("PENDING"), "pending");
  EXPECT_EQ(run_status_of("REQUEUED"), "pending");
  EXPECT_EQ(run_status_of("RUNNING"), "running");
  EXPECT_EQ(run_status_of("COMPLETING"), "running");
  EXPECT_TRUE(slurm_state_is_final("TIMEOUT"));
  EXPECT_FALSE(slurm_state_is_final("COMPLETING"));
  EXPECT_FALSE(slurm_state_is_final("PENDING"));
}

TEST(Slurm, SpecTableAndErrors) {
  const std::string head = "[sweep]\nname = \"s\"\nbase = \"recipes/llama3_debugmodel.toml\"\nlauncher = \"slurm\"\n";
  const SweepSpec s = parse_sweep_spec(head +
                                           "[slurm]\npartition = \"gpu\"\naccount = \"llm\"\nqos = \"hi\"\n"
                                           "time = \"02:00:00\"\ngpus_per_node = 8\ncpus_per_task = 12\n"
                                           "max_queued = 3\nsbatch = [\"--exclusive\", \"--mem=0\"]\n",
                                       "spec.toml");
  EXPECT_EQ(s.launcher, "slurm");
  EXPECT_EQ(s.slurm.partition, "gpu");
  EXPECT_EQ(s.slurm.account, "llm");
  EXPECT_EQ(s.slurm.qos, "hi");
  EXPECT_EQ(s.slurm.time, "02:00:00");
  EXPECT_EQ(s.slurm.gpus_per_node, 8);
  EXPECT_EQ(s.slurm.cpus_per_task, 12);
  EXPECT_EQ(s.slurm.max_queued, 3);
  EXPECT_EQ(s.slurm.sbatch_lines, (std::vector<std::string>{"--exclusive", "--mem=0"}));
  const auto err = [&](const std::string& text) {
    return ctitan::error_of([&] { parse_sweep_spec(head + text, "spec.toml"); });
  };
  EXPECT_NE(err("[slurm]\npartiton = \"gpu\"\n").find("spec.toml:6: unknown [slurm] key 'partiton'"), std::string::npos);
  EXPECT_NE(err("[slurm]\nmax_queued = 0\n").find("max_queued must be an integer in 1.."), std::string::npos);
  EXPECT_NE(err("[slurm]\nsbatch = \"--exclusive\"\n").find("must be an array of strings"), std::string::npos);
  EXPECT_NE(ctitan::error_of([] { parse_sweep_spec("[sweep]\nlauncher = \"pbs\"\n", "spec.toml"); })
                .find("launcher must be \"local\""),
            std::string::npos);
}

// The script as bash reads it: srun gets exactly the words it was given,
// whatever the folder is called, and the exit status lands in slurm_exit.
TEST(Slurm, ScriptQuotesEveryWordForTheShell) {
  const fs::path root = fs::path(::testing::TempDir()) / ("ctitan_slurm_script_" + std::to_string(getpid()));
  fs::remove_all(root);
  const fs::path dir = root / "runs of 'the' sweep $HOME `x`";
  fs::create_directories(dir);
  fs::create_directories(root / "bin");
  // A stand-in srun: one argument per line, then exit 7.
  {
    std::ofstream f(root / "bin" / "srun");
    f << "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$ARGS_OUT\"\nexit 7\n";
  }
  chmod((root / "bin" / "srun").c_str(), 0755);
  SlurmOptions o;
  o.partition = "gpu";
  o.sbatch_lines = {"--exclusive"};
  SlurmJob job;
  job.name = "ctitan-abc-r0-s1-2";
  job.run_dir = dir.string();
  job.train_argv = {"/opt/c titan/ctitan", "train", "--job.config_file", (dir / "point.toml").string()};
  job.shape = {2, 4, 8};
  job.time = "00:30:00";
  const std::string script = sbatch_script(o, job);
  EXPECT_NE(script.find("#SBATCH --nodes=2\n"), std::string::npos) << script;
  EXPECT_NE(script.find("#SBATCH --ntasks-per-node=4\n"), std::string::npos);
  EXPECT_NE(script.find("#SBATCH --gpus-per-node=8\n"), std::string::npos);
  EXPECT_NE(script.find("#SBATCH --partition=gpu\n"), std::string::npos);
  EXPECT_NE(script.find("#SBATCH --time=00:30:00\n"), std::string::npos);
  EXPECT_NE(script.find("#SBATCH --exclusive\n"), std::string::npos);
  EXPECT_NE(script.find("#SBATCH --chdir=\"" + dir.string() + "\"\n"), std::string::npos) << script;
  std::ofstream(root / "job.sbatch") << script;
  const CommandResult r =
      run_command({"bash", (root / "job.sbatch").string()}, std::chrono::seconds(30),
                  {"PATH=" + (root / "bin").string() + ":/usr/bin:/bin", "ARGS_OUT=" + (root / "args").string()});
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.exit_code, 7) << r.err;
  std::ifstream args(root / "args");
  std::vector<std::string> got;
  for (std::string line; std::getline(args, line);) got.push_back(line);
  std::vector<std::string> want = {"--kill-on-bad-exit=1"};
  want.insert(want.end(), job.train_argv.begin(), job.train_argv.end());
  EXPECT_EQ(got, want);
  std::ifstream exit_file(dir / "slurm_exit");
  int code = -1;
  exit_file >> code;
  EXPECT_EQ(code, 7);
  EXPECT_FALSE(fs::exists(dir / "slurm_exit.tmp"));

  SlurmOptions bad;
  bad.account = "a\"b";
  EXPECT_THROW(sbatch_script(bad, job), InputError);
  job.run_dir = (root / "50%").string();
  EXPECT_THROW(sbatch_script(o, job), InputError);
  fs::remove_all(root);
}

TEST(Subprocess, RunsArgvCapturesAndNamesAMissingProgram) {
  const CommandResult ok = run_command({"sh", "-c", "printf 'a b'; echo oops >&2; exit 3"});
  ASSERT_TRUE(ok.started);
  EXPECT_EQ(ok.out, "a b");
  EXPECT_EQ(ok.exit_code, 3);
  EXPECT_EQ(ok.first_line(), "oops");
  const CommandResult missing = run_command({"ctitan-no-such-program", "x"});
  EXPECT_FALSE(missing.started);
  EXPECT_EQ(missing.error, "ctitan-no-such-program: not found on PATH");
  const CommandResult slow = run_command({"sleep", "10"}, std::chrono::milliseconds(200));
  EXPECT_TRUE(slow.timed_out);
  EXPECT_EQ(shell_quote("plain/path-1.toml"), "plain/path-1.toml");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(describe_command({"sbatch", "--wrap", "a b"}), "sbatch --wrap 'a b'");
}
