#include "common/subprocess.h"

#include <fcntl.h>       // open, pipe2, O_CLOEXEC
#include <poll.h>        // poll
#include <sys/prctl.h>   // PR_SET_PDEATHSIG
#include <sys/wait.h>    // waitid
#include <unistd.h>      // fork, execve, close_range

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

#include "common/errors.h"
#include "common/file_io.h"  // write_error_line

extern char** environ;

namespace ctitan {
namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

std::string first_nonempty_line(const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    std::string line = trim(text.substr(start, end - start));
    if (!line.empty()) return line;
    start = end + 1;
  }
  return "";
}

ExitStatus status_of(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) return {info.si_status, 0};
  return {128 + info.si_status, info.si_status};
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// This process's environment with `overrides` ("NAME=value") set over it.
std::vector<std::string> environment_with(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  for (const auto& kv : overrides) {
    const std::string name = kv.substr(0, kv.find('=') + 1);
    std::erase_if(env, [&](const std::string& s) { return s.rfind(name, 0) == 0; });
    env.push_back(kv);
  }
  return env;
}

// The descriptors spawn() opens before fork(), closed on every way out.
enum { kDevNull, kOutRead, kOutWrite, kErrRead, kErrWrite, kStatusRead, kStatusWrite, kFdCount };
struct Fds {
  int fd[kFdCount];
  Fds() { std::fill(std::begin(fd), std::end(fd), -1); }
  ~Fds() {
    for (int f : fd)
      if (f >= 0) close(f);
  }
  void close_now(int i) {
    if (fd[i] >= 0) close(fd[i]);
    fd[i] = -1;
  }
  // Hands descriptor `i` to the caller: no longer closed here.
  int release(int i) { return std::exchange(fd[i], -1); }
};

// Opens what `o` needs; for a pipe, its two ends.
void open_output(const Output& o, int& read_end, int& write_end) {
  if (o.kind == Output::Kind::file) {
    write_end = open(o.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (write_end < 0) throw InputError(write_error_line(o.path, errno));
  } else if (o.kind == Output::Kind::pipe) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "cannot create a pipe");
    read_end = p[0];
    write_end = p[1];
  }
}

}  // namespace

Child spawn(const SpawnOptions& opts) {
  if (opts.argv.empty()) throw std::invalid_argument("spawn: no command");
  Fds fds;
  open_output(opts.out, fds.fd[kOutRead], fds.fd[kOutWrite]);
  open_output(opts.err, fds.fd[kErrRead], fds.fd[kErrWrite]);
  fds.fd[kDevNull] = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int status[2];
  if (pipe2(status, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "cannot create a pipe");
  fds.fd[kStatusRead] = status[0];
  fds.fd[kStatusWrite] = status[1];
  // Everything the child touches is prepared before fork(): between fork
  // and exec only async-signal-safe calls are allowed.
  std::vector<std::string> argv_strings = opts.argv, env_strings = environment_with(opts.env);
  const std::vector<char*> argv = c_strings(argv_strings), envp = c_strings(env_strings);
  const int dev_null = fds.fd[kDevNull], out = fds.fd[kOutWrite], err = fds.fd[kErrWrite], status_w = status[1];
  const pid_t parent = getpid();

  sigset_t blocked, caller_mask;
  sigemptyset(&blocked);
  for (int sig : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&blocked, sig);
  sigprocmask(SIG_BLOCK, &blocked, &caller_mask);
  const sigset_t child_mask = opts.child_signal_mask.value_or(caller_mask);
  const pid_t pid = fork();
  if (pid == 0) {
    // A parent that died between fork() and prctl() would not trigger
    // PDEATHSIG, hence the getppid() check.
    if (opts.die_with_parent && (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)) _exit(127);
    if (opts.group) setpgid(0, *opts.group);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE}) sigaction(sig, &dfl, nullptr);
    if (dev_null >= 0) dup2(dev_null, 0);
    if (out >= 0) dup2(out, 1);
    if (err >= 0) dup2(err, 2);
    // Like Python's close_fds; the status pipe closes itself at exec.
    if (status_w > 3) close_range(3, static_cast<unsigned>(status_w) - 1, 0);
    close_range(static_cast<unsigned>(status_w) + 1, ~0U, 0);
    sigprocmask(SIG_SETMASK, &child_mask, nullptr);
    if (opts.cwd.empty() || chdir(opts.cwd.c_str()) == 0) {
      if (opts.search_path) {
        execvpe(argv[0], argv.data(), envp.data());
      } else {
        execve(argv[0], argv.data(), envp.data());
      }
    }
    const int e = errno;
    [[maybe_unused]] ssize_t n = write(status_w, &e, sizeof e);
    n = write(2, opts.exec_failure_line.data(), opts.exec_failure_line.size());
    _exit(127);
  }
  const int fork_errno = errno;
  sigprocmask(SIG_SETMASK, &caller_mask, nullptr);
  if (pid < 0) throw std::system_error(fork_errno, std::generic_category(), "fork failed");
  Child child;
  child.pid = pid;
  if (opts.group) {
    child.group = *opts.group == 0 ? pid : *opts.group;
    setpgid(pid, child.group);  // the child does it too: whichever runs first
  }
  // The child's ends: the status pipe reads EOF once the exec has closed the child's copy.
  for (int i : {kDevNull, kOutWrite, kErrWrite, kStatusWrite}) fds.close_now(i);
  ssize_t got;
  while ((got = read(status[0], &child.exec_errno, sizeof child.exec_errno)) < 0 && errno == EINTR) {
  }
  if (got != sizeof child.exec_errno) child.exec_errno = 0;  // closed by a successful exec
  child.out = fds.release(kOutRead);
  child.err = fds.release(kErrRead);
  return child;
}

std::optional<ExitStatus> Child::exited() const {
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != pid)
    return std::nullopt;
  return status_of(info);
}

ExitStatus Child::reap() const {
  siginfo_t info{};
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED) != 0 && errno == EINTR) {
  }
  return status_of(info);
}

void Child::signal(int sig) const { kill(pid, sig); }

void Child::signal_group(int sig) const {
  if (group > 0) kill(-group, sig);
}

GroupEnd supervise_group(const Child& child, std::chrono::steady_clock::time_point deadline,
                         std::chrono::seconds grace, const std::function<int()>& stop_requests,
                         const std::function<void()>& tick) {
  using Clock = std::chrono::steady_clock;
  GroupEnd end;
  Clock::time_point kill_at{};
  bool stopping = false, killed = false;
  int stops_seen = 0;
  while (true) {
    if (const auto status = child.exited()) {
      end.status = *status;
      break;
    }
    const int stops = stop_requests();
    if (!stopping && (stops > 0 || Clock::now() >= deadline)) {
      (stops > 0 ? end.stopped : end.timed_out) = true;
      stopping = true;
      stops_seen = stops;
      child.signal_group(SIGTERM);
      kill_at = Clock::now() + grace;
    } else if (stopping && !killed && (Clock::now() >= kill_at || stops > stops_seen)) {
      child.signal_group(SIGKILL);  // grace over, or a second Ctrl-C
      killed = true;
    }
    if (tick) tick();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  child.signal_group(SIGKILL);  // whatever the run left in its group
  child.reap();
  return end;
}

std::string CommandResult::first_line() const {
  std::string line = first_nonempty_line(err);
  return line.empty() ? first_nonempty_line(out) : line;
}

std::string shell_quote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                              "@%_-+=:,./") == std::string::npos)
    return word;
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::string describe_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += shell_quote(a);
  }
  return out;
}

CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          const std::vector<std::string>& env, size_t max_output) {
  CommandResult r;
  if (argv.empty()) {
    r.error = "no command";
    return r;
  }
  SpawnOptions opts;
  opts.argv = argv;
  opts.search_path = true;
  opts.env = env;
  opts.out = opts.err = Output::to_pipe();
  Child child;
  try {
    child = spawn(opts);
  } catch (const std::system_error& e) {
    r.error = argv[0] + ": " + e.what();
    return r;
  }

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{child.out, POLLIN, 0}, {child.err, POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      child.signal(SIGKILL);
      r.timed_out = true;
      break;
    }
    const int n = poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[8192];
      const ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        if (sinks[i]->size() < max_output)
          sinks[i]->append(buf, std::min(static_cast<size_t>(got), max_output - sinks[i]->size()));
      } else if (got == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  r.exit_code = child.reap().code;
  if (child.exec_errno != 0) {
    r.error = argv[0];
    if (child.exec_errno == ENOENT) {
      r.error += ": not found";
      if (argv[0].find('/') == std::string::npos) r.error += " on PATH";
    } else {
      r.error += ": ";
      r.error += std::strerror(child.exec_errno);
    }
    return r;
  }
  r.started = true;
  return r;
}

}  // namespace ctitan
