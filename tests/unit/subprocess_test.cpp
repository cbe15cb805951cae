// common/subprocess.h: spawn()'s contract and supervise_group(). run_command()
// is covered in slurm_test.cpp, the sweep's supervise() in sweep_spec_test.cpp.
#include "common/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <string>

#include "common/errors.h"

namespace ctitan {
namespace {

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

SpawnOptions shell(const std::string& script) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.out = Output::to_pipe();
  return o;
}

TEST(Spawn, EnvironmentOverridesWorkingDirectoryAndStdin) {
  SpawnOptions o = shell("echo \"$CTITAN_SPAWN_TEST $HOME\"; pwd; cat; echo done");
  o.env = {"CTITAN_SPAWN_TEST=set", "HOME=/elsewhere"};
  o.cwd = std::filesystem::canonical(std::filesystem::temp_directory_path()).string();
  const Child c = spawn(o);
  EXPECT_EQ(c.exec_errno, 0);
  EXPECT_EQ(read_all(c.out), "set /elsewhere\n" + o.cwd + "\ndone\n");  // stdin is /dev/null: cat ends at once
  EXPECT_EQ(c.reap().code, 0);
}

TEST(Spawn, OnlyStandardDescriptorsReachTheChild) {
  const int ours = dup(1);  // no close-on-exec
  const Child c = spawn(shell("ls /proc/self/fd"));
  const std::string fds = read_all(c.out);
  c.reap();
  close(ours);
  // 0, 1, 2 and the descriptor ls opens to read the folder.
  EXPECT_EQ(std::count(fds.begin(), fds.end(), '\n'), 4) << fds;
}

TEST(Spawn, FailedExecIsReportedAndLeavesItsLine) {
  SpawnOptions o;
  o.argv = {"/nonexistent/program"};
  o.err = Output::to_pipe();
  o.exec_failure_line = "cannot execute /nonexistent/program\n";
  const Child c = spawn(o);
  EXPECT_EQ(c.exec_errno, ENOENT);
  EXPECT_EQ(read_all(c.err), "cannot execute /nonexistent/program\n");
  EXPECT_EQ(c.reap().code, 127);

  o.argv = {"sh", "-c", "exit 4"};  // a name: found only with search_path
  o.err = {};
  o.exec_failure_line.clear();
  const Child not_found = spawn(o);
  EXPECT_EQ(not_found.exec_errno, ENOENT);
  not_found.reap();
  o.search_path = true;
  const Child found = spawn(o);
  EXPECT_EQ(found.exec_errno, 0);
  EXPECT_EQ(found.reap().code, 4);
}

TEST(Spawn, AnOutputFileThatCannotBeCreatedIsOneInputError) {
  SpawnOptions o = shell("true");
  o.out = Output::to_file("/nonexistent/folder/out.log");
  try {
    spawn(o);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/folder/out.log"), std::string::npos) << e.what();
  }
}

TEST(Spawn, GroupsAreJoinedAndSignalledTogether) {
  SpawnOptions o = shell("trap '' TERM; sleep 30");
  o.out = {};
  o.group = 0;
  const Child leader = spawn(o);
  EXPECT_EQ(leader.group, leader.pid);
  EXPECT_EQ(getpgid(leader.pid), leader.pid);
  o.group = leader.group;
  o.argv = {"/bin/sleep", "30"};
  const Child member = spawn(o);
  EXPECT_EQ(getpgid(member.pid), leader.pid);
  EXPECT_FALSE(member.exited());
  leader.signal_group(SIGTERM);  // the shell ignores it; sleep does not
  const ExitStatus m = member.reap();
  EXPECT_EQ(m.signal, SIGTERM);
  EXPECT_EQ(m.code, 128 + SIGTERM);
  EXPECT_FALSE(leader.exited());
  leader.signal(SIGKILL);
  EXPECT_EQ(leader.reap().signal, SIGKILL);
}

// A stop request: SIGTERM to the group; a second one: SIGKILL without
// waiting out the grace period.
TEST(SuperviseGroup, StopRequestsTerminateThenKill) {
  SpawnOptions o = shell("trap '' TERM; while :; do sleep 0.05; done");
  o.out = {};
  o.group = 0;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  int requests = 0, ticks = 0;
  const GroupEnd end = supervise_group(spawn(o), t0 + std::chrono::seconds(60), std::chrono::seconds(60),
                                       [&] { return requests; },
                                       [&] {
                                         if (++ticks == 3) requests = 1;
                                         if (ticks == 6) requests = 2;
                                       });
  EXPECT_TRUE(end.stopped);
  EXPECT_FALSE(end.timed_out);
  EXPECT_EQ(end.status.signal, SIGKILL);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
}

}  // namespace
}  // namespace ctitan
