// Issue 55 (reliability, round 4), the sweep's items, with the real binary:
//   3. a point's checkpoints live in its own run folder: a checkpoint.folder
//      that would resolve outside it (absolute, or climbing out with '..'),
//      from the base recipe, [overrides] or a grid value, is refused when the
//      sweep is planned — one line, exit 2, no database, no folder written;
//      a relative folder runs every point from step 1 in its own folder;
//   5. a [report] stack that names one axis twice is refused with file:line.
// (Item 6, one summary per model, is tests/unit/report_models_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "results/results_db.h"
#include "tests/integration/process.h"

namespace fs = std::filesystem;
using ctitan::ResultsDb;
using ctitan::RunRow;
using ctitan::testing::fresh_dir;
using ctitan::testing::ProcessResult;
using ctitan::testing::read_jsonl;
using ctitan::testing::run_ctitan;
using ctitan::testing::source_dir;

namespace {

std::string base_recipe() {
  return (fs::absolute(source_dir()) / "recipes/llama3_debugmodel_markov.toml").string();
}

// A spec over the tiny model, two steps a point: [sweep], then `overrides`
// (more [overrides] lines), then `rest` (a [grid], a [report], ...).
std::string spec_text(const std::string& overrides, const std::string& rest, const std::string& base = "") {
  return "[sweep]\nname = \"r4\"\nbase = \"" + (base.empty() ? base_recipe() : base) +
         "\"\ntimeout_s = 120\nwarmup_steps = 1\nmeasure_steps = 1\nworld_sizes = [1]\n"
         "[overrides]\nmodel.flavor = \"tiny\"\ntraining.seq_len = 32\ntraining.local_batch_size = 2\n"
         "metrics.log_freq = 1\nmetrics.peak_tflops = 1\n" +
         overrides + rest;
}

fs::path write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
  return p;
}

// The 1-based line of `text` that holds `needle`.
int line_of(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
}

// One line on stderr with `expect`, exit 2, and no internal error.
void expect_refused(const ProcessResult& r, const std::string& expect) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
}

const std::string kTwoLrs = "[grid]\noptimizer.lr = [0.001, 0.002]\n";

// Item 3: with checkpoint.enable, a shared checkpoint folder (absolute in
// [overrides], climbing out with '..' in a grid value, absolute in the base
// recipe) is refused when the sweep is planned: one line naming the spec
// file and line (the base recipe's where it came from there), the key, the
// value, why and what to do; exit 2; no database, no run folder, nothing in
// the shared folder. Before the fix the second point resumed the first's
// checkpoint and was recorded ok.
TEST(ReliabilityRound4Sweep, SharedCheckpointFolderIsRefusedWhenPlanned) {
  const auto dir = fresh_dir("r4_shared_ckpt");
  const fs::path db = dir / "r.db", shared = dir / "shared_ckpt";
  const std::string abs_text =
      spec_text("checkpoint.enable = true\ncheckpoint.folder = \"" + shared.string() + "\"\n", kTwoLrs);
  const fs::path abs_spec = write(dir / "abs.toml", abs_text);
  const std::string want = abs_spec.string() + ":" + std::to_string(line_of(abs_text, "checkpoint.folder")) +
                           ": checkpoint.folder = \"" + shared.string() + "\" is an absolute path";
  expect_refused(run_ctitan({"sweep", abs_spec.string(), "--db", db.string()}), want);
  const auto dry = run_ctitan({"sweep", abs_spec.string(), "--dry-run"});
  expect_refused(dry, want);
  EXPECT_NE(dry.err.find("set a relative checkpoint.folder such as \"checkpoint\", which resolves under "
                         "job.dump_folder, each run's own folder"),
            std::string::npos)
      << dry.err;
  EXPECT_FALSE(fs::exists(db));
  EXPECT_FALSE(fs::exists(dir / "r.db.runs"));
  EXPECT_FALSE(fs::exists(shared));

  // A grid value climbing out of the run folder.
  const std::string up_text = spec_text("checkpoint.enable = true\n",
                                        kTwoLrs + "checkpoint.folder = [\"ckpt\", \"ckpt/../../../shared\"]\n");
  const fs::path up_spec = write(dir / "up.toml", up_text);
  expect_refused(run_ctitan({"sweep", up_spec.string(), "--dry-run"}),
                        up_spec.string() + ":" + std::to_string(line_of(up_text, "checkpoint.folder")) +
                            ": checkpoint.folder = \"ckpt/../../../shared\" climbs out of the run folder with '..'");

  // From the base recipe: the spec, then where the base recipe set it.
  std::ifstream in(base_recipe());
  std::string base_text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string off = "[checkpoint]\nenable = false\nfolder = \"checkpoint\"\n";
  const size_t at = base_text.find(off);
  ASSERT_NE(at, std::string::npos) << "the base recipe's [checkpoint] table changed";
  base_text.replace(at, off.size(), "[checkpoint]\nenable = true\nfolder = \"/tmp/ctitan-shared-ckpt\"\n");
  const fs::path base = write(dir / "base.toml", base_text);
  const fs::path base_spec = write(dir / "from_base.toml", spec_text("", kTwoLrs, base.string()));
  expect_refused(run_ctitan({"sweep", base_spec.string(), "--dry-run"}),
                        base_spec.string() + ": base recipe " + base.string() + ":" +
                            std::to_string(line_of(base_text, "folder = \"/tmp")) +
                            ": checkpoint.folder = \"/tmp/ctitan-shared-ckpt\" is an absolute path");
  EXPECT_FALSE(fs::exists(db));
}

// Item 3, what stays allowed: an absolute folder with checkpointing off
// (nothing is saved or read there), and a shared checkpoint.initial_load_path
// (a start, part of the point key, loaded only where the run's own folder
// holds no checkpoint).
TEST(ReliabilityRound4Sweep, UnusedFolderAndSharedInitialLoadPathArePlanned) {
  const auto dir = fresh_dir("r4_allowed");
  const fs::path off = write(dir / "off.toml", spec_text("checkpoint.folder = \"/abs/ckpt\"\n", kTwoLrs));
  const auto a = run_ctitan({"sweep", off.string(), "--dry-run"});
  EXPECT_EQ(a.exit_code, 0) << a.out << a.err;
  const fs::path init = write(dir / "init.toml", spec_text("checkpoint.enable = true\ncheckpoint.initial_load_path = \"" +
                                                               (dir / "seed" / "step-0").string() + "\"\n",
                                                           kTwoLrs));
  const auto b = run_ctitan({"sweep", init.string(), "--dry-run"});
  EXPECT_EQ(b.exit_code, 0) << b.out << b.err;
}

// Item 3, the fix at work: with a relative folder every point checkpoints
// into its own run folder and trains from step 1 — no point resumes
// another's checkpoint.
TEST(ReliabilityRound4Sweep, EachPointCheckpointsInItsOwnRunFolder) {
  const auto dir = fresh_dir("r4_own_ckpt");
  const fs::path db = dir / "r.db";
  const fs::path spec = write(dir / "own.toml", spec_text("checkpoint.enable = true\ncheckpoint.folder = \"ckpt\"\n"
                                                          "checkpoint.interval = 1\n",
                                                          kTwoLrs));
  const auto r = run_ctitan({"sweep", spec.string(), "--db", db.string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::vector<RunRow> rows = ResultsDb(db.string(), ResultsDb::Access::read_only).runs();
  ASSERT_EQ(rows.size(), 2u);
  for (const RunRow& row : rows) {
    SCOPED_TRACE(row.label);
    EXPECT_EQ(row.status, "ok") << row.error;
    EXPECT_TRUE(fs::exists(fs::path(row.run_dir) / "ckpt" / "step-2" / "metadata.json"));
    std::ifstream log(fs::path(row.run_dir) / "stdout.log");
    const std::string out((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_EQ(out.find("resumed from"), std::string::npos) << out;
    const auto steps = read_jsonl(fs::path(row.run_dir) / "metrics.jsonl");
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.front()["step"], 1);
  }
}

// Item 5: one axis twice in [report] stack (as written, or once bare and
// once with its value) is refused with the spec's file:line, as the other
// stack errors are.
TEST(ReliabilityRound4Sweep, DuplicatedReportStackEntryIsRefused) {
  const auto dir = fresh_dir("r4_stack_dup");
  const std::string grid = "[grid]\ncompile.enable = [false, true]\ntraining.local_batch_size = [1, 2]\n";
  for (const std::string& stack :
       {std::string("\"compile.enable\", \"compile.enable\""), std::string("\"compile.enable\", \"compile.enable=true\""),
        std::string("\"training.local_batch_size\", \"compile.enable\", \"compile.enable\"")}) {
    SCOPED_TRACE(stack);
    const std::string text = spec_text("", grid + "[report]\nstack = [" + stack + "]\n");
    const fs::path spec = write(dir / "dup.toml", text);
    const std::string line = std::to_string(line_of(text, "stack = ["));
    const auto r = run_ctitan({"sweep", spec.string(), "--dry-run"});
    expect_refused(r, spec.string() + ":" + line + ": [report] stack entry 'compile.enable");
    EXPECT_NE(r.err.find("' repeats 'compile.enable' (" + spec.string() + ":" + line +
                         "); each axis stacks once: remove one of them"),
              std::string::npos)
        << r.err;
  }
  const fs::path ok = write(dir / "ok.toml", spec_text("", grid + "[report]\nstack = [\"compile.enable\", "
                                                                   "\"training.local_batch_size\"]\n"));
  const auto r = run_ctitan({"sweep", ok.string(), "--dry-run"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

}  // namespace
