// Issue 55 (reliability, round 4) against the real binary: no output path
// destroys what it names, and the commands that only read write nothing.
// Each test failed on the binary of c802e74 (docs/reliability.md, round 4).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/fifo_read.h"
#include "tests/integration/process.h"

namespace fs = std::filesystem;
using ctitan::testing::read_fifo;
using ctitan::testing::expect_one_line_exit2;
using ctitan::testing::fresh_dir;
using ctitan::testing::ProcessResult;
using ctitan::testing::run_ctitan;
using ctitan::testing::source_dir;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A copy of a committed results database of an older schema (v6: 39 runs of
// the sweep `calibrate_cpu` recorded on a 2-core AMD EPYC) in `dir`.
fs::path results_db(const fs::path& dir) {
  const fs::path db = dir / "x.db";
  fs::copy_file(fs::path(source_dir()) / "tests/data/results_v6.db", db);
  return db;
}

}  // namespace

// Item 1: an output equal to the results database (or beside it) replaced
// it with HTML, a TOML spec or JSON, exit 0.
TEST(ReliabilityRound4Io, AnOutputThatIsTheDatabaseIsOneLineAndTheDatabaseStays) {
  const fs::path dir = fresh_dir("r4_out_db");
  const fs::path db = results_db(dir);
  const std::string before = slurp(db);
  const std::string x = db.string();
  expect_one_line_exit2(run_ctitan({"report", "--db", x, "--format", "html", "--out", x}),
                        "report --out '" + x + "' is the same file as --db '" + x + "', which this command reads");
  expect_one_line_exit2(run_ctitan({"plan", "--calibrate", x, "--hardware", "cpu", "--out", x}),
                        "plan --out '" + x + "' is the same file as --calibrate '" + x + "'");
  expect_one_line_exit2(
      run_ctitan({"gate", "--db", x, "--baseline", "sweep:calibrate_cpu", "--write-baseline-file", x}),
      "gate --write-baseline-file '" + x + "' is the same file as --db '" + x + "'");
  fs::create_symlink(db, dir / "alias.db");
  expect_one_line_exit2(run_ctitan({"report", "--db", x, "--out", (dir / "alias.db").string()}),
                        "is the same file as --db");
  expect_one_line_exit2(run_ctitan({"report", "--db", x, "--out", x + "-wal"}), "is a SQLite file beside --db");
  EXPECT_EQ(slurp(db), before);
  EXPECT_FALSE(fs::exists(x + "-wal"));
}

// Item 2: --out onto a device, FIFO or symlink renamed a regular file over it.
TEST(ReliabilityRound4Io, OutputOntoANodeThatIsNotAFileIsWrittenToNotReplaced) {
  const fs::path dir = fresh_dir("r4_out_node");
  const std::string db = results_db(dir).string();
  // A FIFO with a reader gets the report and stays a FIFO.
  const fs::path fifo = dir / "report.pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string piped;
  std::thread reader([&] { piped = read_fifo(fifo); });
  const ProcessResult r = run_ctitan({"report", "--db", db, "--format", "csv", "--out", fifo.string()});
  reader.join();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(piped.find("calibrate_cpu"), std::string::npos) << piped.substr(0, 200);
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));
  // A symlink to stdout (ln -s /proc/self/fd/1 so; --out so): the report on stdout, the link kept.
  const fs::path so = dir / "so";
  fs::create_symlink("/proc/self/fd/1", so);
  const ProcessResult via_link = run_ctitan({"report", "--db", db, "--format", "csv", "--out", so.string()});
  EXPECT_EQ(via_link.exit_code, 0) << via_link.err;
  EXPECT_NE(via_link.out.find("calibrate_cpu"), std::string::npos);
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(so)));
  // --out - is stdout.
  const ProcessResult dash = run_ctitan({"report", "--db", db, "--format", "json", "--out", "-"}, {}, dir.string());
  EXPECT_EQ(dash.exit_code, 0) << dash.err;
  EXPECT_EQ(dash.out.rfind("{", 0), 0u) << dash.out.substr(0, 80);
  EXPECT_FALSE(fs::exists(dir / "-"));
  // A full device (made here: a binary that renamed over it must not take
  // the system's /dev/full with it): one line, and still a device.
  const fs::path full = dir / "full";
  if (::mknod(full.c_str(), S_IFCHR | 0666, makedev(1, 7)) == 0) {
    expect_one_line_exit2(run_ctitan({"report", "--db", db, "--out", full.string()}),
                          "cannot write to a character device '" + full.string() + "': No space left on device");
    EXPECT_TRUE(fs::is_character_file(full));
  }
  expect_one_line_exit2(run_ctitan({"report", "--db", db, "--out", dir.string()}), "it is a directory");
  EXPECT_TRUE(fs::is_directory(dir));
}

// Item 9: `db ls` on an empty file created the whole schema (and -wal, -shm)
// where `report` refused it; `report` on an older file migrated it in place.
TEST(ReliabilityRound4Io, ReadersWriteNothingAndAgreeOnAnEmptyFile) {
  const fs::path dir = fresh_dir("r4_readers");
  const fs::path empty = dir / "e.db";
  std::ofstream(empty).flush();
  const std::string line = "has no ctitan tables (an empty database no sweep wrote)";
  expect_one_line_exit2(run_ctitan({"db", "ls", "--db", empty.string()}), line);
  expect_one_line_exit2(run_ctitan({"report", "--db", empty.string()}), line);
  expect_one_line_exit2(run_ctitan({"gate", "--db", empty.string(), "--baseline", "sweep:a", "--candidate", "sweep:b"}),
                        line);
  EXPECT_EQ(fs::file_size(empty), 0u);
  EXPECT_FALSE(fs::exists(empty.string() + "-wal"));
  EXPECT_FALSE(fs::exists(empty.string() + "-shm"));

  const fs::path old = results_db(dir);  // schema v6
  const std::string before = slurp(old);
  const ProcessResult report = run_ctitan({"report", "--db", old.string(), "--format", "csv"});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find(",ok,"), std::string::npos);
  const ProcessResult ls = run_ctitan({"db", "ls", "--db", old.string()});
  EXPECT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find("39 runs in"), std::string::npos) << ls.out;
  EXPECT_EQ(slurp(old), before);  // still v6, byte for byte
}

namespace {

std::string recipe() { return (fs::absolute(source_dir()) / "recipes/llama3_debugmodel_markov.toml").string(); }

std::vector<std::string> tiny_train(const fs::path& dump, std::vector<std::string> extra) {
  std::vector<std::string> args = {"--job.config_file", recipe(), "--model.flavor", "tiny", "--training.seq_len", "32",
                                   "--training.local_batch_size", "2", "--lr_scheduler.warmup_steps", "0",
                                   "--job.dump_folder", dump.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The pid of `launcher`'s child whose environment holds RANK=<rank>, or -1.
pid_t rank_pid(pid_t launcher, int rank) {
  std::ifstream children("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
  for (pid_t child; children >> child;) {
    const std::string env = slurp("/proc/" + std::to_string(child) + "/environ");
    if (env.find(std::string(1, '\0') + "RANK=" + std::to_string(rank) + '\0') != std::string::npos ||
        env.rfind("RANK=" + std::to_string(rank) + '\0', 0) == 0)
      return child;
  }
  return -1;
}

}  // namespace

// Item 11: bad input under `launch --nproc` printed the rank's line and the
// launcher's (which could name rank 0 for rank 1's line).
TEST(ReliabilityRound4Io, BadInputUnderLaunchIsOneLine) {
  const fs::path dir = fresh_dir("r4_launch_bad");
  const ProcessResult r = run_ctitan(
      [&] {
        std::vector<std::string> a = {"launch", "--nproc", "2", "--"};
        for (const std::string& x : tiny_train(dir / "run", {"--training.dataset", "bin", "--training.dataset_path",
                                                             (dir / "missing.bin").string()}))
          a.push_back(x);
        return a;
      }());
  expect_one_line_exit2(r, "training.dataset_path");
  EXPECT_EQ(r.err.find("ctitan launch: rank"), std::string::npos) << r.err;
}

// Item 11: when only rank 1 got SIGTERM, rank 0 said "interrupted by signal 0".
TEST(ReliabilityRound4Io, ARankStoppedByAnotherRanksSignalNamesIt) {
  const fs::path dir = fresh_dir("r4_launch_sig");
  std::vector<std::string> a = {"launch", "--nproc", "2", "--"};
  for (const std::string& x : tiny_train(dir / "run", {"--training.steps", "100000"})) a.push_back(x);
  bool sent = false;
  const ProcessResult r = run_ctitan(a, [&](const std::string& line, pid_t launcher) {
    if (sent || line.find("step:") == std::string::npos) return;
    const pid_t rank1 = rank_pid(launcher, 1);
    if (rank1 > 0) sent = ::kill(rank1, SIGTERM) == 0;
  });
  ASSERT_TRUE(sent) << r.out << r.err;
  EXPECT_EQ(r.err.find("signal 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[rank0]: ctitan: interrupted by signal 15 (Terminated) sent to rank 1 at step"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("[rank1]: ctitan: interrupted by signal 15 (Terminated) at step"), std::string::npos) << r.err;
}

// Item 11: stale help, a later TorchTitan's key met with a "did you mean",
// and an absurd expert-bias coefficient accepted.
TEST(ReliabilityRound4Io, HelpIsCurrentAndLaterKeysAndAbsurdCoefficientsAreOneLine) {
  const ProcessResult help = run_ctitan({"train", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("| ptrr"), std::string::npos);
  EXPECT_EQ(help.out.find("no MoE in ctitan"), std::string::npos);
  EXPECT_EQ(help.out.find("Hugging Face Llama"), std::string::npos);
  const fs::path dir = fresh_dir("r4_keys");
  expect_one_line_exit2(
      run_ctitan([&] {
        std::vector<std::string> a = {"train"};
        for (const std::string& x : tiny_train(dir / "run", {"--training.num_tokens_per_microbatch_per_dp_rank", "64"}))
          a.push_back(x);
        return a;
      }()),
      "unknown option '--training.num_tokens_per_microbatch_per_dp_rank'; it is a key of a TorchTitan later than "
      "v0.2.2, which ctitan does not read (it reads v0.2.x's recipe keys); remove it and say the same with v0.2.2's "
      "training.local_batch_size x training.seq_len");
  std::ofstream(dir / "later.toml") << "[training]\nmax_context_length = 64\n";
  expect_one_line_exit2(run_ctitan({"train", "--job.config_file", (dir / "later.toml").string()}),
                        "unknown key 'training.max_context_length'; it is a key of a TorchTitan later than v0.2.2");
  expect_one_line_exit2(
      run_ctitan([&] {
        std::vector<std::string> a = {"train"};
        for (const std::string& x : tiny_train(dir / "run", {"--model.moe_load_balance_coeff", "1e11"}))
          a.push_back(x);
        return a;
      }()),
      "model.moe_load_balance_coeff must be -1 (the flavor's) or in [0, 1]");
  EXPECT_FALSE(fs::exists(dir / "run"));
}
