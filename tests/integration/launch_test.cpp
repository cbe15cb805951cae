// `ctitan launch` and `ctitan train --nproc`: torchrun's environment for
// every rank, prefixed line-atomic output, --log-rank, and the fault cases
// (a rank fails or is killed, the launcher is signalled or killed) where no
// process may be left behind. Ranks are small /bin/sh scripts that write
// their pid ($$, then `exec sleep` so the pid stays the sleeper's) to a file.
#include "harness/launch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "common/errors.h"
#include "tests/integration/process.h"

namespace fs = std::filesystem;
using ctitan::testing::fresh_dir;
using ctitan::testing::run_ctitan;
using Clock = std::chrono::steady_clock;

namespace {

fs::path write_script(const fs::path& dir, const std::string& body) {
  const fs::path p = dir / "rank.sh";
  std::ofstream(p) << "#!/bin/sh\n" << body;
  fs::permissions(p, fs::perms::owner_all);
  return p;
}

// A rank script for the fault cases: each rank writes its pid to
// dir/pid<RANK>; rank `actor` waits until all `nproc` did, then runs
// `action`; the others print "ready" and sleep. Ranks ignore SIGTERM when
// `ignore_term` (so only SIGKILL stops them).
fs::path fault_script(const fs::path& dir, int nproc, int actor, const std::string& action, bool ignore_term = false) {
  const std::string d = "'" + dir.string() + "'";
  return write_script(dir, std::string(ignore_term ? "trap '' TERM\n" : "") + "echo $$ > " + d +
                               "/pid$RANK.tmp && mv " + d + "/pid$RANK.tmp " + d + "/pid$RANK\n" +
                               "if [ \"$RANK\" = " + std::to_string(actor) + " ]; then\n" + "  while [ $(ls " + d +
                               " | grep -c '^pid[0-9]*$') -lt " + std::to_string(nproc) +
                               " ]; do sleep 0.05; done\n  " + action + "\nfi\necho ready\nexec sleep 60\n");
}

std::vector<pid_t> read_pids(const fs::path& dir) {
  std::vector<pid_t> pids;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("pid", 0) != 0 || name.find('.') != std::string::npos) continue;
    pid_t pid = 0;
    std::ifstream(e.path()) >> pid;
    if (pid > 0) pids.push_back(pid);
  }
  return pids;
}

// Reaped by the launcher: the pid no longer exists.
bool reaped(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

// Dead: reaped, or a zombie waiting for whoever adopted it (PID 1 here may
// never reap).
bool dead(pid_t pid) {
  if (reaped(pid)) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(stat, s);
  const size_t close = s.rfind(')');
  return close != std::string::npos && close + 2 < s.size() && s[close + 2] == 'Z';
}

bool all_dead_within(const std::vector<pid_t>& pids, std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  while (true) {
    bool all = true;
    for (pid_t p : pids) all = all && dead(p);
    if (all) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string last_line(const std::string& text) {
  const auto lines = split_lines(text);
  return lines.empty() ? "" : lines.back();
}

// Lines of one rank with the "[rankR]: " prefix removed.
std::vector<std::string> rank_lines(const std::string& text, int rank) {
  const std::string prefix = "[rank" + std::to_string(rank) + "]: ";
  std::vector<std::string> out;
  for (const auto& line : split_lines(text))
    if (line.rfind(prefix, 0) == 0) out.push_back(line.substr(prefix.size()));
  return out;
}

// Sets (or unsets, with nullptr) an environment variable for one scope; the
// launcher under test inherits our environment.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Runs the launcher over a fault script and signals it (`sigs` in order,
// 200 ms apart) once all ranks but `actor` printed "ready".
ctitan::testing::ProcessResult launch_and_signal(const std::vector<std::string>& args, int ready_ranks,
                                                 const std::vector<int>& sigs) {
  int ready = 0;
  return run_ctitan(args, [&](const std::string& line, pid_t launcher) {
    if (line.find("]: ready") == std::string::npos || ++ready != ready_ranks) return;
    for (size_t k = 0; k < sigs.size(); ++k) {
      if (k > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      kill(launcher, sigs[k]);
    }
  });
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

// ---- argument parsing (in process) ------------------------------------------

TEST(LaunchArgs, FlagsThenTrainArguments) {
  auto o = ctitan::parse_launch_args({"--nproc", "4", "--log-rank=0,2", "--master-port=29501", "--master-addr",
                                      "10.0.0.7", "--", "--training.steps", "3"});
  EXPECT_EQ(o.nproc, 4);
  EXPECT_EQ(o.log_ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(o.master_port, 29501);
  EXPECT_EQ(o.master_addr, "10.0.0.7");
  ASSERT_EQ(o.command.size(), 4u);
  EXPECT_EQ(o.command[0], fs::read_symlink("/proc/self/exe").string());
  EXPECT_EQ(std::vector<std::string>(o.command.begin() + 1, o.command.end()),
            (std::vector<std::string>{"train", "--training.steps", "3"}));
}

TEST(LaunchArgs, TrainArgumentsOrAProgramWithoutTheSeparator) {
  auto train = ctitan::parse_launch_args({"--nproc=2", "--job.config_file", "a.toml"});
  EXPECT_EQ(train.master_port, 0);
  EXPECT_EQ(train.master_addr, "127.0.0.1");
  EXPECT_TRUE(train.log_ranks.empty());
  EXPECT_EQ(std::vector<std::string>(train.command.begin() + 1, train.command.end()),
            (std::vector<std::string>{"train", "--job.config_file", "a.toml"}));
  auto program = ctitan::parse_launch_args({"--nproc", "2", "/bin/sh", "-c", "exit 0"});
  EXPECT_EQ(program.command, (std::vector<std::string>{"/bin/sh", "-c", "exit 0"}));
}

TEST(LaunchArgs, TrainShorthandTakesTheLauncherFlags) {
  std::vector<std::string> a{"--training.steps", "3", "--nproc", "2", "--log-rank", "0", "--job.print_config"};
  EXPECT_EQ(ctitan::take_launcher_flags(a), (std::vector<std::string>{"--nproc", "2", "--log-rank", "0"}));
  EXPECT_EQ(a, (std::vector<std::string>{"--training.steps", "3", "--job.print_config"}));
  std::vector<std::string> b{"--nproc=8", "--master-port=1234"};
  EXPECT_EQ(ctitan::take_launcher_flags(b), (std::vector<std::string>{"--nproc", "8", "--master-port", "1234"}));
  EXPECT_TRUE(b.empty());
  std::vector<std::string> c{"--training.steps", "3"};
  EXPECT_TRUE(ctitan::take_launcher_flags(c).empty());
  EXPECT_EQ(c.size(), 2u);
}

// CLI11 takes the launcher's flags (harness/cli.h take_known_options): each
// takes the next argument whatever it looks like, in the order given (the
// later of two wins in parse_launch_args); -h/--help, negative numbers and
// unknown flags stay the trainer's, in their order.
TEST(LaunchArgs, TrainShorthandLeavesTheRestInOrder) {
  std::vector<std::string> a{"--log-rank",      "0",  "--help", "--nproc",      "2",
                             "--training.seed", "-1", "-h",     "--log-rank=1", "--bogus"};
  EXPECT_EQ(ctitan::take_launcher_flags(a),
            (std::vector<std::string>{"--log-rank", "0", "--nproc", "2", "--log-rank", "1"}));
  EXPECT_EQ(a, (std::vector<std::string>{"--help", "--training.seed", "-1", "-h", "--bogus"}));
  std::vector<std::string> b{"--nproc", "--training.steps", "3"};
  EXPECT_EQ(ctitan::take_launcher_flags(b), (std::vector<std::string>{"--nproc", "--training.steps"}));
  EXPECT_EQ(b, (std::vector<std::string>{"3"}));
  std::vector<std::string> c{"--training.steps", "3", "--nproc"};
  std::string error;
  try {
    ctitan::take_launcher_flags(c);
  } catch (const ctitan::InputError& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "launch: --nproc needs a value; run `ctitan launch --help`");
}

// ---- bad input: one line, exit code 2 ----------------------------------------

using BadInput = ctitan::testing::BadInputCase;
class LaunchBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(LaunchBadInput, OneLineAndExitCode2) {
  ctitan::testing::expect_one_line_exit2(run_ctitan(GetParam().args), GetParam().expect_in_message);
}

INSTANTIATE_TEST_SUITE_P(
    Launch, LaunchBadInput,
    ::testing::Values(
        BadInput{"MissingNproc", {"launch", "--", "/bin/true"}, "--nproc is required"},
        BadInput{"ZeroRanks", {"launch", "--nproc", "0"}, "--nproc: must be an integer in 1..64, got '0'"},
        BadInput{"TooManyRanks", {"launch", "--nproc=65"}, "got '65'"},
        BadInput{"NprocNotANumber", {"launch", "--nproc", "two"}, "got 'two'"},
        BadInput{"NprocWithoutValue", {"launch", "--nproc"}, "--nproc needs a value"},
        BadInput{"UnknownFlag", {"launch", "--nproc", "2", "--nnodes", "2"}, "'--nnodes'"},
        BadInput{"StrayWord", {"launch", "--nproc", "2", "train"}, "'train'"},
        BadInput{"LogRankOutOfRange", {"launch", "--nproc", "2", "--log-rank", "2"}, "0..1"},
        BadInput{"LogRankEmptyItem", {"launch", "--nproc", "4", "--log-rank", "0,,1"}, "'0,,1'"},
        BadInput{"PortOutOfRange", {"launch", "--nproc", "2", "--master-port", "70000"}, "'70000'"},
        BadInput{"ProgramMissing", {"launch", "--nproc", "2", "--", "/nonexistent/rank.sh"}, "/nonexistent/rank.sh"},
        BadInput{"TrainNprocZero", {"train", "--nproc", "0"}, "got '0'"},
        BadInput{"TrainNprocWithoutValue", {"train", "--training.steps", "2", "--nproc"}, "--nproc needs a value"},
        BadInput{"TrainLogRankWithoutNproc", {"train", "--log-rank", "0"}, "add --nproc N"},
        // The flag, as CLI11 read it, not the argument as given ("--log-rank=0").
        BadInput{"TrainLogRankEqualsWithoutNproc",
                 {"train", "--log-rank=0"},
                 "--log-rank is a launcher flag: add --nproc N"},
        // A value is missing before it matters whether --nproc is there.
        BadInput{"TrainLogRankWithoutValue", {"train", "--log-rank"}, "launch: --log-rank needs a value"},
        // ... even beside the trainer's --help (which used to print the help).
        BadInput{"TrainHelpThenNprocWithoutValue", {"train", "--help", "--nproc"}, "launch: --nproc needs a value"},
        // CLI11 reads `--nproc=` as `--nproc`: the next argument is its value.
        BadInput{"TrainNprocEmptyValue",
                 {"train", "--nproc=", "--job.print_config"},
                 "--nproc: must be an integer in 1..64, got '--job.print_config'"}),
    [](const auto& info) { return info.param.name; });

TEST(LaunchHelp, PrintsUsage) {
  auto r = run_ctitan({"launch", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Usage: ctitan launch [OPTIONS]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--nproc N"), std::string::npos) << r.out;
}

// ---- the environment contract and the output ---------------------------------

TEST(LaunchRanks, EveryRankGetsTorchrunsEnvironment) {
  auto dir = fresh_dir("launch_env");
  auto script = write_script(dir,
                             "echo \"env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT "
                             "$OMP_NUM_THREADS\"\necho \"err $RANK\" >&2\n");
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  struct Case {
    const char* omp;  // OMP_NUM_THREADS of the launcher, nullptr = unset
    std::vector<std::string> flags;
    std::string addr, threads;
    int port;  // 0 = any free one
  };
  for (const Case& c : {Case{nullptr, {}, "127.0.0.1", std::to_string(std::max(1, cores / 4)), 0},
                        Case{"3", {"--master-addr", "localhost", "--master-port", "29555"}, "localhost", "3", 29555}}) {
    ScopedEnv omp("OMP_NUM_THREADS", c.omp);
    std::vector<std::string> args{"launch", "--nproc", "4"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    args.insert(args.end(), {"--", script.string()});
    auto r = run_ctitan(args);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(split_lines(r.out).size(), 4u) << r.out;
    EXPECT_EQ(split_lines(r.err).size(), 4u) << r.err;  // no launcher line when every rank succeeds
    std::set<std::string> ports;
    for (int rank = 0; rank < 4; ++rank) {
      const auto lines = rank_lines(r.out, rank);
      ASSERT_EQ(lines.size(), 1u) << r.out;
      std::istringstream in(lines[0]);
      std::string tag, rank_v, world, local, local_world, addr, port, threads;
      in >> tag >> rank_v >> world >> local >> local_world >> addr >> port >> threads;
      EXPECT_EQ(tag, "env");
      EXPECT_EQ(rank_v, std::to_string(rank));
      EXPECT_EQ(world, "4");
      EXPECT_EQ(local, std::to_string(rank));
      EXPECT_EQ(local_world, "4");
      EXPECT_EQ(addr, c.addr);
      EXPECT_EQ(threads, c.threads);
      EXPECT_GT(std::stoi(port), 0);
      if (c.port) {
        EXPECT_EQ(std::stoi(port), c.port);
      }
      ports.insert(port);
      EXPECT_EQ(rank_lines(r.err, rank), (std::vector<std::string>{"err " + std::to_string(rank)})) << r.err;
    }
    EXPECT_EQ(ports.size(), 1u);
  }
}

TEST(LaunchRanks, LogRankShowsOnlyThoseRanks) {
  auto dir = fresh_dir("launch_logrank");
  auto script = write_script(dir, "echo \"out $RANK\"\necho \"err $RANK\" >&2\n");
  auto r = run_ctitan({"launch", "--nproc", "4", "--log-rank", "1,3", "--", script.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = split_lines(r.out), err = split_lines(r.err);
  EXPECT_EQ(std::multiset<std::string>(out.begin(), out.end()),
            (std::multiset<std::string>{"[rank1]: out 1", "[rank3]: out 3"}));
  EXPECT_EQ(std::multiset<std::string>(err.begin(), err.end()),
            (std::multiset<std::string>{"[rank1]: err 1", "[rank3]: err 3"}));
}

// Four ranks writing 400 long lines each at once: every line arrives whole,
// in its rank's order, and a last line without '\n' still arrives.
TEST(LaunchRanks, LinesNeverInterleave) {
  auto dir = fresh_dir("launch_lines");
  const std::string pad(300, 'x');
  auto script = write_script(dir, "i=0\nwhile [ $i -lt 400 ]; do echo \"$RANK $i " + pad +
                                      "\"; i=$((i+1)); done\nprintf 'last line without newline'\n");
  auto r = run_ctitan({"launch", "--nproc", "4", "--", script.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(split_lines(r.out).size(), 4u * 401u);
  for (int rank = 0; rank < 4; ++rank) {
    const auto lines = rank_lines(r.out, rank);
    ASSERT_EQ(lines.size(), 401u);
    for (int i = 0; i < 400; ++i)
      ASSERT_EQ(lines[i], std::to_string(rank) + " " + std::to_string(i) + " " + pad) << "rank " << rank;
    EXPECT_EQ(lines[400], "last line without newline");
  }
}

// A rank's background child would keep the pipes (and the machine) busy
// after a successful run; the launcher sweeps the rank group.
TEST(LaunchRanks, LeftoverChildrenAreSweptAfterSuccess) {
  auto dir = fresh_dir("launch_sweep");
  auto script = write_script(dir, "sleep 60 & echo $! > '" + dir.string() + "'/pid$RANK\necho done\n");
  const auto t0 = Clock::now();
  auto r = run_ctitan({"launch", "--nproc", "2", "--", script.string()});
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto pids = read_pids(dir);
  EXPECT_EQ(pids.size(), 2u);
  EXPECT_TRUE(all_dead_within(pids, std::chrono::seconds(2)));
}

// ---- faults: no process may survive ------------------------------------------

TEST(LaunchFailure, FirstFailingRankStopsTheOthers) {
  auto dir = fresh_dir("launch_fail");
  // Ranks 0, 2, 3 also leave a background child in the group, which must go too.
  const std::string bg = "sleep 60 & echo $! > '" + dir.string() + "'/bg$RANK\n";
  auto script = fault_script(dir, 4, 1, "echo 'rank 1 gives up' >&2; exit 3");
  { std::ofstream(dir / "wrapper.sh") << "#!/bin/sh\n[ \"$RANK\" = 1 ] || { " << bg << "}\nexec " << script << "\n"; }
  fs::permissions(dir / "wrapper.sh", fs::perms::owner_all);

  const auto t0 = Clock::now();
  auto r = run_ctitan({"launch", "--nproc", "4", "--", (dir / "wrapper.sh").string()});
  EXPECT_LT(seconds_since(t0), 10.0);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const auto pids = read_pids(dir);
  ASSERT_EQ(pids.size(), 4u);
  pid_t pid1 = 0;
  std::ifstream(dir / "pid1") >> pid1;
  EXPECT_EQ(last_line(r.err),
            "ctitan launch: rank 1 (pid " + std::to_string(pid1) + ") exited with code 3; stopped the other 3 ranks");
  EXPECT_NE(r.err.find("[rank1]: rank 1 gives up\n"), std::string::npos) << r.err;
  for (pid_t p : pids) EXPECT_TRUE(reaped(p)) << "rank pid " << p << " still exists";
  std::vector<pid_t> background;
  for (int rank : {0, 2, 3}) {
    pid_t p = 0;
    std::ifstream(dir / ("bg" + std::to_string(rank))) >> p;
    EXPECT_GT(p, 0) << "rank " << rank;
    background.push_back(p);
  }
  EXPECT_TRUE(all_dead_within(background, std::chrono::seconds(2)));
}

TEST(LaunchFailure, RankKilledBySignalIsNamed) {
  auto dir = fresh_dir("launch_sigkill_rank");
  auto script = fault_script(dir, 3, 2, "kill -9 $$");
  auto r = run_ctitan({"launch", "--nproc", "3", "--", script.string()});
  EXPECT_EQ(r.exit_code, 137) << r.err;
  pid_t pid2 = 0;
  std::ifstream(dir / "pid2") >> pid2;
  EXPECT_EQ(last_line(r.err), "ctitan launch: rank 2 (pid " + std::to_string(pid2) +
                                  ") was killed by signal 9 (SIGKILL); stopped the other 2 ranks");
  for (pid_t p : read_pids(dir)) EXPECT_TRUE(reaped(p)) << p;
}

struct LauncherSignal {
  int sig, exit_code;
  std::string name;
};
class LaunchSignal : public ::testing::TestWithParam<LauncherSignal> {};

TEST_P(LaunchSignal, StopsEveryRankAndExits128PlusSignal) {
  auto dir = fresh_dir("launch_" + GetParam().name);
  auto script = fault_script(dir, 4, -1, "");
  auto r = launch_and_signal({"launch", "--nproc", "4", "--", script.string()}, 4, {GetParam().sig});
  EXPECT_EQ(r.exit_code, GetParam().exit_code) << r.err;
  EXPECT_EQ(last_line(r.err), "ctitan launch: received " + GetParam().name + "; stopped 4 ranks");
  const auto pids = read_pids(dir);
  EXPECT_EQ(pids.size(), 4u);
  for (pid_t p : pids) EXPECT_TRUE(reaped(p)) << p;
}

INSTANTIATE_TEST_SUITE_P(Launch, LaunchSignal,
                         ::testing::Values(LauncherSignal{SIGTERM, 143, "SIGTERM"},
                                           LauncherSignal{SIGINT, 130, "SIGINT"}),
                         [](const auto& info) { return info.param.name; });

// Ranks that ignore SIGTERM get SIGKILL after the 5 s grace period, or at
// once on a second signal.
TEST(LaunchSignalGrace, StubbornRanksAreKilledAfterTheGracePeriod) {
  auto dir = fresh_dir("launch_grace");
  auto script = fault_script(dir, 2, -1, "", /*ignore_term=*/true);
  const auto t0 = Clock::now();
  auto r = launch_and_signal({"launch", "--nproc", "2", "--", script.string()}, 2, {SIGTERM});
  const double took = seconds_since(t0);
  EXPECT_EQ(r.exit_code, 143) << r.err;
  EXPECT_GT(took, 4.5);
  EXPECT_LT(took, 9.0);
  for (pid_t p : read_pids(dir)) EXPECT_TRUE(reaped(p)) << p;
}

TEST(LaunchSignalGrace, SecondSignalKillsAtOnce) {
  auto dir = fresh_dir("launch_twice");
  auto script = fault_script(dir, 2, -1, "", /*ignore_term=*/true);
  const auto t0 = Clock::now();
  auto r = launch_and_signal({"launch", "--nproc", "2", "--", script.string()}, 2, {SIGINT, SIGINT});
  EXPECT_LT(seconds_since(t0), 4.0);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  for (pid_t p : read_pids(dir)) EXPECT_TRUE(reaped(p)) << p;
}

// SIGKILL cannot be caught: the ranks go through PR_SET_PDEATHSIG.
TEST(LaunchSignalGrace, KilledLauncherTakesItsRanksAlong) {
  auto dir = fresh_dir("launch_killed");
  auto script = fault_script(dir, 3, -1, "");
  auto r = launch_and_signal({"launch", "--nproc", "3", "--", script.string()}, 3, {SIGKILL});
  EXPECT_EQ(r.exit_code, 137);
  const auto pids = read_pids(dir);
  EXPECT_EQ(pids.size(), 3u);
  EXPECT_TRUE(all_dead_within(pids, std::chrono::seconds(3)));
}

// ---- `ctitan train --nproc N` ------------------------------------------------

TEST(LaunchTrain, NprocShorthandRunsEveryRank) {
  auto single = run_ctitan({"train", "--training.steps", "17", "--job.print_config"});
  ASSERT_EQ(single.exit_code, 0) << single.err;
  auto r = run_ctitan({"train", "--training.steps", "17", "--nproc", "2", "--job.print_config"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank : {0, 1}) EXPECT_EQ(rank_lines(r.out, rank), split_lines(single.out)) << "rank " << rank;
  EXPECT_EQ(split_lines(r.out).size(), 2 * split_lines(single.out).size());
}
