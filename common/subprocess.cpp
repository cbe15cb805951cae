#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace

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
  int out_pipe[2], err_pipe[2], exec_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 || pipe2(exec_pipe, O_CLOEXEC) != 0) {
    r.error = argv[0] + ": cannot create a pipe: " + std::strerror(errno);
    return r;
  }
  std::vector<std::string> args = argv;
  std::vector<char*> c_argv;
  for (auto& a : args) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  for (const auto& kv : env) {
    const std::string name = kv.substr(0, kv.find('=') + 1);
    std::erase_if(env_strings, [&](const std::string& s) { return s.rfind(name, 0) == 0; });
    env_strings.push_back(kv);
  }
  std::vector<char*> c_env;
  for (auto& e : env_strings) c_env.push_back(e.data());
  c_env.push_back(nullptr);

  const pid_t pid = fork();
  if (pid == 0) {  // async-signal-safe calls only
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    signal(SIGPIPE, SIG_DFL);
    execvpe(c_argv[0], c_argv.data(), c_env.data());
    const int e = errno;
    [[maybe_unused]] const ssize_t n = write(exec_pipe[1], &e, sizeof e);
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(exec_pipe[1]);
  if (pid < 0) {
    r.error = argv[0] + ": fork failed: " + std::strerror(errno);
    close(out_pipe[0]), close(err_pipe[0]), close(exec_pipe[0]);
    return r;
  }
  int exec_errno = 0;
  const bool exec_failed = read(exec_pipe[0], &exec_errno, sizeof exec_errno) == sizeof exec_errno;
  close(exec_pipe[0]);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill(pid, SIGKILL);
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
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (exec_failed) {
    r.error = argv[0];
    if (exec_errno == ENOENT) {
      r.error += ": not found";
      if (argv[0].find('/') == std::string::npos) r.error += " on PATH";
    } else {
      r.error += ": ";
      r.error += std::strerror(exec_errno);
    }
    return r;
  }
  r.started = true;
  return r;
}

}  // namespace ctitan
