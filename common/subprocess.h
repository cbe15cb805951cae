// Running a short-lived program and capturing what it prints: the Slurm
// client commands (sbatch, squeue, scontrol, scancel, sacct), `ctitan
// version --json` of another build. Always an argument vector (execvp, no
// shell), stdin /dev/null, a wall-clock limit after which the child is
// killed. Long-running supervised children are harness/sweep.h's supervise().
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ctitan {

struct CommandResult {
  bool started = false;    // false: the program could not be executed (error says why)
  bool timed_out = false;  // killed (SIGKILL) at the limit
  int exit_code = -1;      // exit status, or 128 + signal
  std::string out, err;    // everything it printed (stdout, stderr)
  std::string error;       // why it did not start: "sbatch: not found on PATH", "...: Permission denied"
  // The first non-empty line of stderr, else of stdout, trimmed: the
  // program's own message for one-line errors.
  std::string first_line() const;
};

// Runs argv[0] (looked up on PATH when it has no '/') with argv[1..]. Output
// beyond `max_output` bytes per stream is dropped (the process still runs
// to the end). `env` entries ("NAME=value") are added to the environment.
CommandResult run_command(const std::vector<std::string>& argv,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60),
                          const std::vector<std::string>& env = {}, size_t max_output = 16u << 20);

// argv joined for messages, each word shell-quoted only where it needs it.
std::string describe_command(const std::vector<std::string>& argv);
// One word quoted for a POSIX shell ('...' with ' as '\'').
std::string shell_quote(const std::string& word);

}  // namespace ctitan
