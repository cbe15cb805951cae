// `ctitan launch`: torchrun's local launcher. Starts N rank processes on this
// machine with torchrun's environment contract (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) so the trainer finds its peers
// the same way under ctitan, torchrun or srun.
//
// Contract of launch():
//   - every rank's stdout/stderr line reaches ours prefixed "[rankR]: ",
//     whole lines only (unless --log-rank drops it);
//   - the first rank that fails (non-zero exit or a signal) stops the others
//     (SIGTERM, then SIGKILL after a grace period) and its code becomes ours
//     (128 + signal when it was killed), with one line on stderr naming it;
//   - SIGINT/SIGTERM to the launcher stop every rank the same way, exit
//     128 + signal;
//   - no rank outlives the launcher: ranks live in one process group that
//     is swept before returning, and each rank has PR_SET_PDEATHSIG=SIGKILL
//     in case the launcher itself is killed.
// The launcher installs SIGCHLD/SIGINT/SIGTERM handlers for the rest of the
// process's life: call it as the last thing a `ctitan` process does, from
// the main thread (PDEATHSIG fires when the forking *thread* exits).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ctitan {

struct LaunchOptions {
  int nproc = 0;
  std::vector<int> log_ranks;  // ranks whose output is shown; empty = all
  std::string master_addr = "127.0.0.1";
  int master_port = 0;               // 0 = a free port, picked at launch
  std::vector<std::string> command;  // argv of every rank; [0] is an executable path
};

// Parses the arguments after `ctitan launch`. Launcher flags come first; the
// rank command starts at `--`, at the first `--section.key` argument or at
// a path (an argument containing '/'). Bad input throws InputError; -h/--help
// throws HelpRequested holding the help (harness/cli.h).
LaunchOptions parse_launch_args(const std::vector<std::string>& args);

// Removes the launcher's flags (--nproc, --log-rank, --master-addr,
// --master-port, as `--flag v` or `--flag=v`) from `ctitan train` arguments
// — the `ctitan train --nproc N` shorthand — and returns them in order, as
// `--flag v`. A flag that ends the arguments without its value is the
// InputError "launch: --flag needs a value".
std::vector<std::string> take_launcher_flags(std::vector<std::string>& train_args);

// The path of this very binary (/proc/self/exe).
std::string self_executable();

// The argv of a rank that runs this very binary's `ctitan train <train_args>`.
std::vector<std::string> train_command(const std::vector<std::string>& train_args);

// Runs the ranks to completion (see the contract above); returns the exit code.
int launch(const LaunchOptions& opts);

}  // namespace ctitan
