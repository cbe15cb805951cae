// Runs the real `ctitan` binary (CTITAN_BIN, set by CTest) as a child
// process: exit code, stdout and stderr, and a way to signal it mid-run.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <functional>
#include <ostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace ctitan::testing {

struct ProcessResult {
  int exit_code = -1;
  std::string out, err;
};

inline std::string ctitan_bin() {
  const char* b = std::getenv("CTITAN_BIN");
  return b ? b : "build/ctitan";
}

inline std::string source_dir() {
  const char* s = std::getenv("CTITAN_SOURCE_DIR");
  return s ? s : ".";
}

// Runs `ctitan args...`. on_stdout_line sees each stdout line as it arrives
// and may signal the child through the pid it is given.
// Runs argv[0] (a path) with its arguments, no shell; `cwd`: the child's
// working directory (empty: this process's).
inline ProcessResult run_program(const std::vector<std::string>& argv_in,
                                 const std::function<void(const std::string&, pid_t)>& on_stdout_line = {},
                                 const std::string& cwd = "") {
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]);
    close(err_pipe[0]);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    std::vector<std::string> full = argv_in;
    std::vector<char*> argv;
    for (auto& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  ProcessResult r;
  // stderr is drained after stdout; ctitan writes little to stderr.
  std::string line;
  char c;
  while (read(out_pipe[0], &c, 1) == 1) {
    r.out.push_back(c);
    if (c == '\n') {
      if (on_stdout_line) on_stdout_line(line, pid);
      line.clear();
    } else {
      line.push_back(c);
    }
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(err_pipe[0], buf, sizeof(buf))) > 0) r.err.append(buf, n);
  close(out_pipe[0]);
  close(err_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

inline ProcessResult run_ctitan(const std::vector<std::string>& args,
                                const std::function<void(const std::string&, pid_t)>& on_stdout_line = {},
                                const std::string& cwd = "") {
  std::vector<std::string> argv{ctitan_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv, on_stdout_line, cwd);
}

// The project's venv Python: the tests' readers of ctitan's files
// (tensorboard, transformers; scripts/requirements-test.txt).
inline std::string venv_python() {
  return (std::filesystem::absolute(source_dir()) / ".venv" / "bin" / "python").string();
}

// Whether venv_python() imports every module of `modules` ("a, b").
inline bool python_has(const std::string& modules) {
  if (!std::filesystem::exists(venv_python())) return false;
  return run_program({venv_python(), "-c", "import " + modules}).exit_code == 0;
}

// Runs tests/tools/<script> with `args` under venv_python().
inline ProcessResult run_python_tool(const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> argv{venv_python(), (std::filesystem::absolute(source_dir()) / "tests" / "tools" / script).string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv);
}

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& p) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// A bad-input case for parametrised tests: the arguments and a fragment the
// one-line error must contain.
struct BadInputCase {
  std::string name;
  std::vector<std::string> args;
  std::string expect_in_message;
};
inline void PrintTo(const BadInputCase& c, std::ostream* os) { *os << c.name; }

// Bad input: exit code 2 and exactly one line on stderr containing `expect`.
inline void expect_one_line_exit2(const ProcessResult& r, const std::string& expect) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
}

inline std::filesystem::path fresh_dir(const std::string& name) {
  auto d = std::filesystem::path(::testing::TempDir()) / ("ctitan_it_" + std::to_string(getpid()) + "_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace ctitan::testing
