// Child processes: the project's one fork/exec. Three kinds of caller:
//   - run_command(): a short-lived program whose output is captured (the
//     Slurm client commands, `ctitan version --json` of another build);
//   - harness/sweep.h's supervise(): one run in a process group of its own,
//     its output in files, stopped at a deadline or on Ctrl-C
//     (supervise_group() below);
//   - harness/launch.h's launch(): N ranks in one process group, their
//     output through pipes the launcher reads.
//
// Contract of spawn():
//   - always an argument vector (no shell); stdin is /dev/null: a child
//     never reads the terminal (from a background group that would stop it
//     with SIGTTIN);
//   - no descriptor of ours reaches the child beyond 0, 1 and 2;
//   - SIGINT, SIGTERM and SIGCHLD are blocked across fork(), so no handler
//     of the caller's ever runs in the child; the child starts with SIGINT,
//     SIGTERM, SIGCHLD and SIGPIPE at their defaults and with the signal
//     mask `child_signal_mask` (default: the caller's);
//   - `group`: the child is put into its process group by the child and by
//     the caller both, so no signal sent to the group right after spawn()
//     returns can miss it;
//   - an output file that cannot be created is an InputError (the
//     write_error_line of common/file_io.h), before anything is started; a
//     failed pipe() or fork() throws std::system_error; a failed chdir() or
//     exec is not an exception: Child::exec_errno says why, and the child
//     has written `exec_failure_line` to its stderr and exited 127.
// The caller owns the returned Child: it closes the pipe ends and reaps the
// child (reap(), or supervise_group()). Call spawn() from one thread at a
// time: the signal mask it changes is the calling thread's.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ctitan {

// How a child ended.
struct ExitStatus {
  int code = 0;    // its exit status, or 128 + signal when a signal killed it
  int signal = 0;  // the signal that killed it; 0 when it exited
};

// Where a child's stdout or stderr goes.
struct Output {
  enum class Kind { inherit, pipe, file };
  Kind kind = Kind::inherit;
  std::string path;  // Kind::file: created or truncated, mode 0644

  static Output to_pipe() { return {Kind::pipe, ""}; }
  static Output to_file(std::string path) { return {Kind::file, std::move(path)}; }
};

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0]: a path, or a name looked up on PATH with search_path
  bool search_path = false;
  std::vector<std::string> env;  // "NAME=value" entries set over this process's environment
  std::string cwd;               // the child's working directory; empty: ours
  Output out, err;
  // std::nullopt: the child stays in our process group; 0: it leads a new
  // one; otherwise it joins the group with that id.
  std::optional<pid_t> group;
  bool die_with_parent = false;   // PR_SET_PDEATHSIG = SIGKILL: it dies with this thread
  std::string exec_failure_line;  // written to the child's stderr when the exec fails
  std::optional<sigset_t> child_signal_mask;
};

struct Child {
  pid_t pid = -1;
  pid_t group = 0;         // its process group when spawned with one, else 0
  int out = -1, err = -1;  // the read ends of Output::pipe streams (close-on-exec)
  int exec_errno = 0;      // non-zero: the chdir or exec failed with it; the child exited 127

  // Its exit status once it has exited, without reaping it: the zombie keeps
  // its pid and group id from being reused, so signal() and signal_group()
  // can never reach another process.
  std::optional<ExitStatus> exited() const;
  ExitStatus reap() const;  // waits until it exits, and reaps it
  void signal(int sig) const;
  void signal_group(int sig) const;  // every process in its group; needs a group
};

Child spawn(const SpawnOptions& opts);

// How supervise_group() ended.
struct GroupEnd {
  ExitStatus status;
  bool timed_out = false;  // stopped at the deadline
  bool stopped = false;    // stopped because stop_requests() became non-zero
};

// Waits for `child`, the leader of its own process group, looking about
// every 100 ms. At `deadline`, or once stop_requests() returns more than 0:
// SIGTERM to the group, then SIGKILL `grace` later or as soon as
// stop_requests() grows again (a second Ctrl-C does not wait). Once the
// child has exited, whatever it left in its group is killed (SIGKILL) and
// the child is reaped. `tick` runs at every look.
GroupEnd supervise_group(const Child& child, std::chrono::steady_clock::time_point deadline,
                         std::chrono::seconds grace, const std::function<int()>& stop_requests,
                         const std::function<void()>& tick = {});

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

// Runs argv[0] (looked up on PATH when it has no '/') with argv[1..],
// capturing what it prints, with stdin /dev/null and a wall-clock limit
// after which the child is killed. Output beyond `max_output` bytes per
// stream is dropped (the process still runs to the end). `env` entries
// ("NAME=value") are set over this process's environment.
CommandResult run_command(const std::vector<std::string>& argv,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60),
                          const std::vector<std::string>& env = {}, size_t max_output = 16u << 20);

// argv joined for messages, each word shell-quoted only where it needs it.
std::string describe_command(const std::vector<std::string>& argv);
// One word quoted for a POSIX shell ('...' with ' as '\'').
std::string shell_quote(const std::string& word);

}  // namespace ctitan
