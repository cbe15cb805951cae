// scripts/perf_gate.sh end to end on real commits: a scratch clone of this
// repository gets an empty commit and a commit that changes one op (SiLU →
// GELU in the eager feed-forward); the script builds the commits in its
// scratch worktree (each once, the second incrementally), runs the paired
// gate of the two binaries into one database and writes the verdict and the
// report. The clone holds the committed HEAD of this checkout: the builds
// are of commits, as in a pull request.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/integration/process.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;
using testing::source_dir;

struct Shell {
  int exit_code = -1;
  std::string out, err;
};

// Runs `cmd` (sh) in `dir`; stdout and stderr kept apart (stderr through a
// file in the test's scratch folder, never beside `dir`).
Shell run_in(const fs::path& dir, const std::string& cmd) {
  const fs::path err_file = fs::temp_directory_path() / "run_in_stderr.txt";  // the test's scratch
  const std::string full = "cd '" + dir.string() + "' && " + cmd + " 2>'" + err_file.string() + "'";
  Shell r;
  FILE* p = ::popen(full.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  return r;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// sweep name -> (number of runs, the git_sha their env recorded, or "mixed").
std::map<std::string, std::pair<int, std::string>> runs_by_sweep(const fs::path& db_path) {
  std::map<std::string, std::pair<int, std::string>> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return out;
  }
  sqlite3_stmt* st = nullptr;
  const char* sql =
      "SELECT s.name, e.value FROM runs r JOIN sweeps s ON s.id = r.sweep_id "
      "LEFT JOIN env e ON e.run_id = r.id AND e.key = 'git_sha' WHERE r.status = 'ok'";
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
      const std::string sweep = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      const auto* v = sqlite3_column_text(st, 1);
      const std::string sha = v ? reinterpret_cast<const char*>(v) : "";
      auto& [n, seen] = out[sweep];
      seen = n == 0 || seen == sha ? sha : "mixed";
      ++n;
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

TEST(PerfGate, TwoCommitsBuiltOnceGatedPairedWithTheirOwnRunsAndLossParity) {
  const fs::path src = fs::absolute(source_dir());
  if (run_in(src, "git rev-parse --verify -q HEAD >/dev/null").exit_code != 0)
    GTEST_SKIP() << "the source folder is not a git checkout: perf_gate.sh compares commits";
  if (!fs::exists(src / ".venv/bin/python")) GTEST_SKIP() << "no .venv with LibTorch beside the sources";
  const fs::path dir = testing::fresh_dir("perf_gate");
  const fs::path repo = dir / "repo", out = dir / "out";
  ASSERT_EQ(run_in(dir, "git clone -q '" + src.string() + "' repo").exit_code, 0);
  fs::create_directory_symlink(src / ".venv", repo / ".venv");
  const std::string commit = "git -c user.name=t -c user.email=t@example.com commit -q";
  ASSERT_EQ(run_in(repo, commit + " --allow-empty -m 'an empty commit'").exit_code, 0);
  // One op changed: the eager feed-forward's SiLU becomes GELU.
  const fs::path model = repo / "trainer/model/feed_forward.cpp";
  std::string text = slurp(model);
  const std::string silu = "act = at::silu(parts[0]) * parts[1];";
  const size_t at = text.find(silu);
  ASSERT_NE(at, std::string::npos) << "the eager SwiGLU line this test changes moved; update the test";
  text.replace(at, silu.size(), "act = at::gelu(parts[0]) * parts[1];");
  std::ofstream(model) << text;
  ASSERT_EQ(run_in(repo, commit + " -am 'GELU instead of SiLU'").exit_code, 0);
  const std::string base = run_in(repo, "git rev-parse HEAD~2").out.substr(0, 12);
  const std::string empty = run_in(repo, "git rev-parse HEAD~1").out.substr(0, 12);
  const std::string gelu = run_in(repo, "git rev-parse HEAD").out.substr(0, 12);
  std::string script = (src / "scripts/perf_gate.sh").string();
  script = "'" + script + "'";
  // The flow is under test, not this machine's timing: the gate judges
  // memory and loss only (deterministic here), so a loaded CI machine's
  // noise cannot turn the A/A comparison inconclusive.
  const std::string spec =
      " recipes/sweeps/gate_debugmodel.toml --out '" + out.string() + "' --pairs 3 --losses -- --metrics mem,loss";

  // An empty commit: a different build of the same code. Its runs are new
  // (recorded with its own sha), the gate passes, the losses are identical.
  const Shell same = run_in(repo, script + " HEAD~2 HEAD~1" + spec);
  ASSERT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_NE(same.err.find("building ctitan at " + base), std::string::npos) << same.err;
  EXPECT_NE(same.err.find("building ctitan at " + empty), std::string::npos) << same.err;
  auto runs = runs_by_sweep(out / "gate.db");
  EXPECT_EQ(runs["base-" + base], std::make_pair(3, base)) << "baseline runs and the sha they recorded";
  EXPECT_EQ(runs["head-" + empty], std::make_pair(3, empty)) << "the candidate's runs are its own";
  const std::string verdict = slurp(out / "verdict.md");
  EXPECT_NE(verdict.find("→ `HEAD~1` (" + empty + ")"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("ctitan gate: ✅ pass"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("| identical | identical over 8 steps |"), std::string::npos) << verdict;
  const std::string html = slurp(out / "report.html");
  EXPECT_NE(html.find("head-" + empty), std::string::npos);

  // One op changed: the base binary is reused, its runs are not repeated,
  // and loss parity names the first step whose loss differs.
  const Shell op = run_in(repo, script + " HEAD~2 HEAD" + spec);
  EXPECT_EQ(op.exit_code, 1) << op.out << op.err;
  EXPECT_NE(op.err.find("ctitan at " + base + ": built before"), std::string::npos) << op.err;
  runs = runs_by_sweep(out / "gate.db");
  EXPECT_EQ(runs["base-" + base].first, 3);
  EXPECT_EQ(runs["head-" + gelu], std::make_pair(3, gelu));
  const std::string changed = slurp(out / "verdict.md");
  EXPECT_NE(changed.find("| differ | step 1: baseline "), std::string::npos) << changed;

  // Bad input: one line, exit 2.
  const Shell bad = run_in(repo, script + " no-such-ref HEAD" + spec);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "perf_gate: 'no-such-ref' is not a commit of " + repo.string() +
                         " (fetch it first: git fetch origin no-such-ref)\n");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ctitan
