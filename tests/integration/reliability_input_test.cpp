// Hostile inputs and a full disk against the real binary (issue 20):
//  - a battery of bad files and values, each of which must end in one line
//    on stderr and exit 2 — no crash, no hang, nothing silently accepted;
//    it prints a tally, so the same test run against an older binary
//    (CTITAN_BIN=old/ctitan) gives the "before" figures in docs/reliability.md;
//  - a sweep whose runs folder is on a full filesystem (a real tmpfs, see
//    small_fs.h): one line, no run recorded for a config it did not run,
//    another sweep's files untouched, nothing written to ./outputs, the
//    database intact, and a rerun after space is freed completes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "results/results_db.h"
#include "tests/integration/process.h"
#include "tests/sqlite_check.h"
#include "tests/integration/small_fs.h"

namespace fs = std::filesystem;
using ctitan::testing::ProcessResult;
using ctitan::testing::SmallFs;
using ctitan::testing::fresh_dir;
using ctitan::testing::integrity_ok;
using ctitan::testing::run_program;
using ctitan::testing::source_dir;

namespace {

std::string recipe(const std::string& name) { return (fs::absolute(source_dir()) / "recipes" / name).string(); }

void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// A sweep spec over the tiny model with `sweep_extra` in [sweep] and `rest` after.
std::string spec_text(const std::string& name, const std::string& sweep_extra, const std::string& rest = "") {
  return "[sweep]\nname = \"" + name + "\"\nbase = \"" + recipe("llama3_debugmodel_markov.toml") +
         "\"\nwarmup_steps = 1\nmeasure_steps = 1\n" + sweep_extra +
         "\n[overrides]\nmodel.flavor = \"tiny\"\ntraining.seq_len = 32\ntraining.local_batch_size = 2\n" + rest;
}

// ctitan under a time limit (an old binary hangs on some of these).
ProcessResult run_limited(const std::vector<std::string>& args, const fs::path& cwd, int limit_s = 60) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "-s", "KILL", std::to_string(limit_s),
                                   ctitan::testing::ctitan_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv, {}, cwd.string());
}

struct Case {
  std::string name;
  std::vector<std::string> args;
  std::string expect;  // a phrase the one line must hold
};

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

TEST(Reliability, HostileInputsAreOneLineExit2) {
  const fs::path dir = fresh_dir("hostile");
  const fs::path cwd = dir / "cwd";
  fs::create_directories(cwd);
  const std::string tiny = recipe("llama3_debugmodel_markov.toml");
  const auto file = [&](const std::string& name, const std::string& bytes) {
    write(dir / name, bytes);
    return (dir / name).string();
  };
  const std::string fifo = (dir / "fifo.toml").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  const std::string fifo_txt = (dir / "fifo.txt").string();
  ASSERT_EQ(mkfifo(fifo_txt.c_str(), 0644), 0);
  fs::create_directories(dir / "a_dir");
  const std::string deep_header = "[" + repeat("a.", 19999) + "a]\n";
  const std::string deep_array = "x = " + repeat("[", 20000) + repeat("]", 20000) + "\n";
  const std::string deep_inline = "x = " + repeat("{a=", 20000) + "1" + repeat("}", 20000) + "\n";
  std::string axis;
  for (int i = 0; i < 1000; ++i) axis += (i ? ", " : "") + std::to_string(i + 1);

  std::vector<Case> cases = {
      // The trainer's config file.
      {"empty config", {"train", "--job.config_file", file("empty.toml", "")}, "is empty"},
      {"blank config", {"train", "--job.config_file", file("blank.toml", "\n  \n")}, "is empty"},
      {"comments-only config", {"train", "--job.config_file", file("comments.toml", "# nothing\n")}, "sets no keys"},
      {"directory as config", {"train", "--job.config_file", (dir / "a_dir").string()}, "is a directory"},
      {"/dev/zero as config", {"train", "--job.config_file", "/dev/zero"}, "character device"},
      {"FIFO as config", {"train", "--job.config_file", fifo}, "is a FIFO"},
      {"config over 4 MiB", {"train", "--job.config_file", file("huge.toml", "# " + std::string(5 << 20, 'x') + "\n")},
       "bytes, more than"},
      {"binary config", {"train", "--job.config_file", file("bin.toml", std::string("\x7f" "ELF\x02\x01\x01\0\0\xff\xfe", 12))},
       "invalid TOML"},
      {"20000-deep table header", {"train", "--job.config_file", file("deep.toml", deep_header)}, "nested more than"},
      {"20000-deep array", {"train", "--job.config_file", file("deeparr.toml", deep_array)}, "nested more than"},
      {"20000-deep inline table", {"train", "--job.config_file", file("deepinl.toml", deep_inline)}, "nested more than"},
      {"steps 1e14", {"train", "--job.config_file", tiny, "--training.steps", "100000000000000"}, "out of range"},
      {"lr inf in TOML", {"train", "--job.config_file", file("inf.toml", "[optimizer]\nlr = inf\n")}, "out of range"},
      {"lr nan on the CLI", {"train", "--job.config_file", tiny, "--optimizer.lr", "nan"}, "out of range"},
      {"seed -1e15", {"train", "--job.config_file", tiny, "--debug.seed", "-1000000000000000"}, "out of range"},
      // Sweep specs (--dry-run: nothing is written either way).
      {"/dev/zero as spec", {"sweep", "/dev/zero", "--dry-run"}, "character device"},
      {"FIFO as spec", {"sweep", fifo, "--dry-run"}, "is a FIFO"},
      {"directory as spec", {"sweep", (dir / "a_dir").string(), "--dry-run"}, "is a directory"},
      {"empty spec", {"sweep", file("empty_spec.toml", ""), "--dry-run"}, "is empty"},
      {"20000-deep spec", {"sweep", file("deep_spec.toml", deep_header), "--dry-run"}, "nested more than"},
      {"timeout_s inf", {"sweep", file("t_inf.toml", spec_text("t", "timeout_s = inf")), "--dry-run"}, "timeout_s"},
      {"timeout_s 1e10", {"sweep", file("t_big.toml", spec_text("t", "timeout_s = 1e10")), "--dry-run"}, "timeout_s"},
      {"memory_budget_gb 9e9", {"sweep", file("m_big.toml", spec_text("m", "memory_budget_gb = 9e9")), "--dry-run"},
       "memory_budget_gb"},
      {"memory_budget_gb nan", {"sweep", file("m_nan.toml", spec_text("m", "memory_budget_gb = nan")), "--dry-run"},
       "memory_budget_gb"},
      {"10^6-point grid",
       {"sweep", file("grid.toml", spec_text("g", "", "[grid]\ndebug.seed = [" + axis + "]\ntraining.steps = [" + axis + "]\n")),
        "--dry-run"},
       "1000000 points"},
      {"sweep named ..", {"sweep", file("dots.toml", spec_text("..", "")), "--dry-run"}, "sweep name"},
      {"sweep name with /", {"sweep", file("slash.toml", spec_text("a/../../b", "")), "--dry-run"}, "sweep name"},
      {"300-character sweep name", {"sweep", file("long.toml", spec_text(std::string(300, 'n'), "")), "--dry-run"},
       "300 characters"},
      {"hardware spec /dev/zero", {"plan", tiny, "--hardware", "/dev/zero"}, "character device"},
  };
  // Data files (with a tokenizer where ../shared/data has one, so that a
  // loader which reads the file first really reaches it).
  const fs::path tok = fs::absolute(source_dir()) / "../shared/data";
  const bool have_tok = fs::exists(tok / "tokenizer.json");
  for (const auto& [name, path, expect] : std::vector<std::array<std::string, 3>>{
           {"dataset path a FIFO", fifo_txt, "is a FIFO"}, {"dataset path /dev/zero", "/dev/zero", "character device"}}) {
    std::vector<std::string> args = {"train", "--job.config_file", tiny, "--training.dataset", "text",
                                     "--training.dataset_path", path};
    if (have_tok) args.insert(args.end(), {"--model.hf_assets_path", tok.string()});
    cases.push_back({name, args, expect});
  }
  if (have_tok) {
    std::string noise(64 << 10, '\0');
    for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 2654435761u) >> 13);
    for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
             {"binary .txt data", noise}, {"invalid UTF-8 .txt data", "plain words \xff\xfe then more words\n"}}) {
      cases.push_back({name,
                       {"train", "--job.config_file", tiny, "--training.steps", "1", "--training.dataset", "text",
                        "--model.hf_assets_path", tok.string(), "--training.dataset_path",
                        file(name.substr(0, 3) + ".txt", bytes)},
                       "is not UTF-8 text"});
    }
  } else {
    std::cout << "[ note ] ../shared/data/tokenizer.json not present: the two text-data cases are left out\n";
  }

  std::map<std::string, int> tally;
  std::ostringstream table;
  for (const Case& c : cases) {
    const ProcessResult r = run_limited(c.args, cwd);
    const bool one_line = r.exit_code == 2 && std::count(r.err.begin(), r.err.end(), '\n') == 1;
    const std::string kind = r.exit_code == 137 ? "still running after 60 s (killed)"
                             : r.exit_code > 128 ? "crash (signal " + std::to_string(r.exit_code - 128) + ")"
                             : r.exit_code == 0  ? "accepted"
                             : one_line          ? "one line, exit 2"
                                                 : "exit " + std::to_string(r.exit_code) + ", " +
                                              std::to_string(std::count(r.err.begin(), r.err.end(), '\n')) + " lines";
    ++tally[kind];
    table << "  " << c.name << ": " << kind << ": " << first_line(r.err) << "\n";
    EXPECT_TRUE(one_line) << c.name << ": exit " << r.exit_code << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.name << ": " << r.err;
  }
  EXPECT_FALSE(fs::exists(cwd / "outputs")) << "a rejected input still wrote ./outputs";
  std::cout << table.str() << "hostile inputs: " << cases.size() << " cases";
  for (const auto& [kind, n] : tally) std::cout << "; " << n << " " << kind;
  std::cout << "\n";
}

namespace {

std::map<std::string, std::string> files_under(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    out[fs::relative(e.path(), root).string()] =
        std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  return out;
}

}  // namespace

TEST(Reliability, FullRunsFolderEndsTheSweepInOneLineAndTheRerunCompletes) {
  SmallFs small(8u << 20);
  if (!small.ok()) GTEST_SKIP() << small.skip_reason();
  const fs::path dir = fresh_dir("fullruns");
  const fs::path cwd = dir / "cwd";
  fs::create_directories(cwd);
  const fs::path db = dir / "r.db";
  fs::create_directory_symlink(small.dir(), dir / "r.db.runs");  // the runs folder on the small filesystem
  const auto spec = [&](const std::string& name, const std::string& grid) {
    const fs::path p = dir / (name + ".toml");
    write(p, spec_text(name, "world_sizes = [1]\ntimeout_s = 120", "metrics.log_freq = 1\n[grid]\n" + grid));
    return p.string();
  };
  // Another sweep's finished run, which the fault must not touch.
  const ProcessResult keep = run_limited({"sweep", spec("keep", "training.local_batch_size = [1]\n"), "--db", db.string()}, cwd, 300);
  ASSERT_EQ(keep.exit_code, 0) << keep.out << keep.err;
  const auto kept = files_under(fs::path(small.dir()) / "keep");
  ASSERT_FALSE(kept.empty());

  small.fill();
  const std::string full_spec = spec("full", "training.local_batch_size = [2, 4]\n");
  const ProcessResult r = run_limited({"sweep", full_spec, "--db", db.string()}, cwd, 300);
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("free space"), std::string::npos) << r.err;
  EXPECT_EQ(files_under(fs::path(small.dir()) / "keep"), kept) << "the other sweep's run folder changed";
  EXPECT_FALSE(fs::exists(cwd / "outputs")) << "something trained into ./outputs";
  EXPECT_TRUE(integrity_ok(db));
  {
    ctitan::ResultsDb rdb(db.string());
    for (const ctitan::RunRow& row : rdb.runs()) {
      if (row.label.find("local_batch_size=1") != std::string::npos) continue;  // the kept sweep's
      EXPECT_NE(row.status, "ok") << row.label;
      EXPECT_NE(row.status, "timeout") << row.label;
      EXPECT_NE(row.status, "running") << row.label << ": left running with no process behind it";
    }
  }

  small.release();
  const ProcessResult again = run_limited({"sweep", full_spec, "--db", db.string()}, cwd, 300);
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_TRUE(integrity_ok(db));
  ctitan::ResultsDb rdb(db.string());
  int ok = 0;
  for (const ctitan::RunRow& row : rdb.runs()) ok += row.status == "ok";
  EXPECT_EQ(ok, 3) << "keep's run and both points of the rerun";
  EXPECT_EQ(files_under(fs::path(small.dir()) / "keep"), kept);
}

TEST(Reliability, TrainerOnAFullDiskStopsWithOneLineAndLeavesNoHalfFile) {
  SmallFs small(4u << 20);
  if (!small.ok()) GTEST_SKIP() << small.skip_reason();
  const fs::path dir = fresh_dir("fulltrain");
  const fs::path dump = fs::path(small.dir()) / "run";
  fs::create_directories(dump);
  write(dump / "summary.json", "{\"status\": \"ok\", \"from\": \"an earlier run\"}\n");
  small.fill();
  const ProcessResult r = run_limited({"train", "--job.config_file", recipe("llama3_debugmodel_markov.toml"),
                                       "--model.flavor", "tiny", "--training.seq_len", "32", "--training.steps", "3",
                                       "--job.dump_folder", dump.string()},
                                      dir, 120);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  // The earlier file is whole and no temporary is left behind.
  std::ifstream in(dump / "summary.json");
  std::string old((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(old.find("an earlier run"), std::string::npos);
  for (const auto& e : fs::directory_iterator(dump))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}
