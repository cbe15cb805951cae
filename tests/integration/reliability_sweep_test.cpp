// Fault injection for `ctitan sweep` and the commands that read its database
// (issue 20), with the real binary: bad input met at run time, a spec fixed
// between invocations, a read-only filesystem, damaged pages and a dropped
// table, a full disk (a small tmpfs) under the database or under the run
// folders, two specs with one sweep name, and sweep names that would put run
// folders elsewhere. After each fault: one line on stderr, nothing of another
// sweep's runs touched, no run recorded ok or timeout for a config it did
// not run, `pragma integrity_check` = ok, and once the fault is removed a
// rerun completes the sweep. Runs use the `tiny` flavor and two steps.
#include <gtest/gtest.h>

#include "tests/schema_undo.h"
#include <sqlite3.h>
#include <sys/mount.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "results/results_db.h"
#include "tests/integration/process.h"
#include "tests/sqlite_check.h"
#include "tests/integration/small_fs.h"

namespace fs = std::filesystem;
using ctitan::ResultsDb;
using ctitan::RunRow;
using ctitan::testing::fresh_dir;
using ctitan::testing::integrity_ok;
using ctitan::testing::ProcessResult;
using ctitan::testing::run_ctitan;
using ctitan::testing::SmallFs;
using ctitan::testing::source_dir;

namespace {

// A spec over the tiny model in `dir`/<stem>.toml; `name` "" leaves [sweep]
// name out (the file's stem names the sweep).
fs::path write_spec(const fs::path& dir, const std::string& stem, const std::string& name, const std::string& grid,
                    const std::string& sweep_extra = "") {
  fs::create_directories(dir);
  const fs::path p = dir / (stem + ".toml");
  std::ofstream out(p);
  out << "[sweep]\n";
  if (!name.empty()) out << "name = \"" << name << "\"\n";
  out << "base = \"" << (fs::absolute(source_dir()) / "recipes/llama3_debugmodel_markov.toml").string() << "\"\n"
      << (sweep_extra.find("timeout_s") == std::string::npos ? "timeout_s = 120\n" : "")
      << "warmup_steps = 1\nmeasure_steps = 1\nworld_sizes = [1]\n"
      << sweep_extra << "[overrides]\nmodel.flavor = \"tiny\"\ntraining.seq_len = 32\n"
      << "training.local_batch_size = 2\nmetrics.log_freq = 1\nmetrics.peak_tflops = 1\n"
      << grid;
  return p;
}

const std::string kThreePoints = "[grid]\ntraining.local_batch_size = [1, 2, 4]\n";

// Pre-tokenized uint16 tokens for the tiny model (vocabulary 64).
void write_tokens(const fs::path& p) {
  std::mt19937 rng(1);
  std::vector<uint16_t> tokens(20000);
  for (auto& t : tokens) t = static_cast<uint16_t>(rng() % 16);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()),
                                           static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
}

std::vector<RunRow> runs(const fs::path& db) { return ResultsDb(db.string(), ResultsDb::Access::read_only).runs(); }

std::map<std::string, int> status_counts(const std::vector<RunRow>& rows) {
  std::map<std::string, int> m;
  for (const auto& r : rows) ++m[r.status];
  return m;
}

void sql(const fs::path& db_path, const std::string& text) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, text.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Every file under `dir` (relative path → bytes): another sweep's runs, to
// show a fault left them alone.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = read_bytes(e.path());
  return files;
}

// The sweep ended with exactly one line on stderr, containing `expect`.
void expect_one_line(const ProcessResult& r, int exit_code, const std::string& expect) {
  EXPECT_EQ(r.exit_code, exit_code) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
}

// A full disk: one line, exit 2, saying so (SQLite's "disk is full", or a
// write of the run folder: "No space left on device").
void expect_disk_full_line(const ProcessResult& r) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.err.find("full") != std::string::npos || r.err.find("No space left on device") != std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
}

// No run is recorded ok or timeout for a config it did not run: each such
// row (not shared from another sweep) has a run folder whose trainer-written
// config.toml is that folder's point, and an ok one has its numbers.
void expect_only_real_results(const fs::path& db) {
  ResultsDb r(db.string(), ResultsDb::Access::read_only);
  for (const RunRow& row : r.runs()) {
    if ((row.status != "ok" && row.status != "timeout") || row.error.rfind("shared:", 0) == 0) continue;
    SCOPED_TRACE("run " + std::to_string(row.id) + " " + row.status + " in " + row.run_dir);
    const std::string config = read_bytes(fs::path(row.run_dir) / "config.toml");
    EXPECT_NE(config.find("dump_folder = \"" + row.run_dir + "\""), std::string::npos) << config;
    EXPECT_EQ(read_bytes(fs::path(row.run_dir) / "point.toml").empty(), false);
    if (row.status == "ok") {
      const auto s = r.summary(row.id);
      EXPECT_TRUE(s && s->tps_median) << "an ok run without its numbers";
    }
  }
}

// Once the fault is gone: every (point, repeat) of `sweep` has an ok newest
// row, and no row anywhere is left running or pending.
void expect_complete(const fs::path& db, const std::string& sweep, size_t points) {
  ResultsDb r(db.string(), ResultsDb::Access::read_only);
  const auto s = r.sweep(sweep);
  ASSERT_TRUE(s) << sweep;
  std::map<std::pair<std::string, int64_t>, RunRow> newest;
  for (const RunRow& row : r.runs()) {
    EXPECT_NE(row.status, "running") << "run " << row.id << " is left running";
    EXPECT_NE(row.status, "pending") << "run " << row.id << " is left pending";
    if (row.sweep_id == s->id) newest[{row.point_key, row.repeat}] = row;
  }
  EXPECT_EQ(newest.size(), points);
  for (const auto& [key, row] : newest) EXPECT_EQ(row.status, "ok") << "run " << row.id << ": " << row.error;
  EXPECT_TRUE(integrity_ok(db));
}

// Issue 20, item 2: a trainer's exit 2 at run time (its data file is not
// there yet) is `failed` with the trainer's line, the sweep says so in its
// exit code, and --retry-failed runs it once the file is there. Infeasible
// stays the planner's word.
TEST(ReliabilitySweep, RunTimeBadInputIsFailedAndRetriedOnceFixed) {
  const auto dir = fresh_dir("rel_runtime_input");
  const fs::path db = dir / "r.db";
  ASSERT_EQ(run_ctitan({"sweep", write_spec(dir, "other", "", "[grid]\ntraining.local_batch_size = [1]\n").string(),
                        "--db", db.string()})
                .exit_code,
            0);
  const auto others = snapshot(dir / "r.db.runs" / "other");
  const fs::path tokens = dir / "later.bin";
  const fs::path spec = write_spec(dir, "data", "",
                                   "[grid]\ntraining.dataset = [\"bin\"]\ntraining.dataset_path = [\"" +
                                       tokens.string() + "\"]\n");
  const auto first = run_ctitan({"sweep", spec.string(), "--db", db.string()});
  EXPECT_EQ(first.exit_code, 3) << first.out << first.err;
  EXPECT_NE(first.out.find("1 failed"), std::string::npos) << first.out;
  auto rows = runs(db);
  EXPECT_EQ(status_counts(rows), (std::map<std::string, int>{{"ok", 1}, {"failed", 1}}));
  for (const RunRow& row : rows)
    if (row.status == "failed") {
      EXPECT_EQ(row.exit_code, 2);
      EXPECT_EQ(row.error.rfind("the trainer rejected its input (exit code 2): ", 0), 0u) << row.error;
      EXPECT_NE(row.error.substr(0, row.error.find('\n')).find(tokens.string()), std::string::npos) << row.error;
    }
  // Kept without --retry-failed, as any failure.
  const auto kept = run_ctitan({"sweep", spec.string(), "--db", db.string()});
  EXPECT_EQ(kept.exit_code, 3) << kept.out;
  EXPECT_NE(kept.out.find("ran 0 of 1 runs"), std::string::npos) << kept.out;

  write_tokens(tokens);
  const auto retried = run_ctitan({"sweep", spec.string(), "--db", db.string(), "--retry-failed"});
  EXPECT_EQ(retried.exit_code, 0) << retried.out << retried.err;
  EXPECT_NE(retried.out.find("ran 1 of 1 runs"), std::string::npos) << retried.out;
  expect_complete(db, "data", 1);
  expect_only_real_results(db);
  EXPECT_EQ(snapshot(dir / "r.db.runs" / "other"), others);
}

// Issue 20, item 2: every invocation plans again. A mistyped
// memory_budget_gb makes every point infeasible; fixed, the points run; a
// point that failed at run time and is infeasible now is recorded so.
TEST(ReliabilitySweep, EveryInvocationPlansAgain) {
  const auto dir = fresh_dir("rel_replan");
  const fs::path db = dir / "r.db";
  const std::string grid = "[grid]\ntraining.local_batch_size = [1, 2]\n";
  const fs::path spec = write_spec(dir, "budget", "", grid, "memory_budget_gb = 0.0001\n");
  const auto typo = run_ctitan({"sweep", spec.string(), "--db", db.string()});
  EXPECT_EQ(typo.exit_code, 0) << typo.out << typo.err;
  EXPECT_EQ(status_counts(runs(db)), (std::map<std::string, int>{{"infeasible", 2}}));

  write_spec(dir, "budget", "", grid, "memory_budget_gb = 64\n");  // may change on resume
  const auto fixed = run_ctitan({"sweep", spec.string(), "--db", db.string()});
  EXPECT_EQ(fixed.exit_code, 0) << fixed.out << fixed.err;
  EXPECT_NE(fixed.out.find("2 ok; ran 2 of 2 runs"), std::string::npos) << fixed.out;
  expect_complete(db, "budget", 2);

  // Infeasible again: the ok runs are measurements and stay the points' result.
  write_spec(dir, "budget", "", grid, "memory_budget_gb = 0.0001\n");
  const auto again = run_ctitan({"sweep", spec.string(), "--db", db.string()});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_EQ(status_counts(runs(db)), (std::map<std::string, int>{{"infeasible", 2}, {"ok", 2}}));

  // A run-time failure, then planned infeasible: the newest row says infeasible.
  const fs::path data = write_spec(dir, "data", "",
                                   "[grid]\ntraining.dataset = [\"bin\"]\ntraining.dataset_path = [\"" +
                                       (dir / "absent.bin").string() + "\"]\n");
  EXPECT_EQ(run_ctitan({"sweep", data.string(), "--db", db.string()}).exit_code, 3);
  write_spec(dir, "data", "",
             "[grid]\ntraining.dataset = [\"bin\"]\ntraining.dataset_path = [\"" + (dir / "absent.bin").string() +
                 "\"]\n",
             "memory_budget_gb = 0.0001\n");
  const auto now_infeasible = run_ctitan({"sweep", data.string(), "--db", db.string()});
  EXPECT_EQ(now_infeasible.exit_code, 0) << now_infeasible.out << now_infeasible.err;
  ResultsDb r(db.string(), ResultsDb::Access::read_only);
  const auto rows = r.runs(r.sweep("data")->id);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].status, "failed");
  EXPECT_EQ(rows[1].status, "infeasible");
  EXPECT_TRUE(integrity_ok(db));
}

// Issue 20, item 6: report, gate and db read a database on a read-only
// filesystem; a sweep is refused in one line; an older file that needs a
// migration says so; writable again, the sweep goes on.
TEST(ReliabilitySweep, ReadOnlyDatabaseIsReadAndASweepIsRefusedInOneLine) {
  SmallFs small(16u << 20);
  if (!small.ok()) GTEST_SKIP() << small.skip_reason();
  const fs::path root = small.dir();
  const fs::path db = root / "r.db";
  const fs::path spec = write_spec(fresh_dir("rel_read_only"), "ro", "", kThreePoints);
  ASSERT_EQ(run_ctitan({"sweep", spec.string(), "--db", db.string()}).exit_code, 0);
  fs::copy_file(db, root / "old.db");
  sql(root / "old.db", "ALTER TABLE steps DROP COLUMN moe_load_cv; ALTER TABLE steps DROP COLUMN moe_load_min; "
            "ALTER TABLE steps DROP COLUMN moe_load_max; ALTER TABLE steps DROP COLUMN moe_ep_imbalance; "
            "ALTER TABLE summaries DROP COLUMN moe_ep_imbalance; ALTER TABLE sweeps DROP COLUMN spec_path; "
            "ALTER TABLE predictions DROP COLUMN tps_prior; ALTER TABLE predictions DROP COLUMN tps_low; "
            "ALTER TABLE predictions DROP COLUMN tps_high; ALTER TABLE predictions DROP COLUMN learned_from; "
            "ALTER TABLE predictions DROP COLUMN tps_after; "
            "ALTER TABLE validation DROP COLUMN train_tokens; ALTER TABLE validation DROP COLUMN elapsed_s; "
            + std::string(ctitan::testing::kUndoSchemaV13) +
            "ALTER TABLE summaries DROP COLUMN seed; ALTER TABLE summaries DROP COLUMN validation_loss_final; "
            "ALTER TABLE summaries DROP COLUMN target_loss; ALTER TABLE summaries DROP COLUMN tokens_to_target; "
            "ALTER TABLE summaries DROP COLUMN time_to_target_s; UPDATE schema_version SET version = 7;");
  const auto before = snapshot(root);
  ASSERT_EQ(mount("tmpfs", root.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, nullptr), 0) << std::strerror(errno);

  const auto report = run_ctitan({"report", "--db", db.string(), "--format", "csv"});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find(",ok,"), std::string::npos) << report.out;
  const auto ls = run_ctitan({"db", "ls", "--db", db.string()});
  EXPECT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find("3 runs in"), std::string::npos) << ls.out;
  EXPECT_EQ(run_ctitan({"db", "show", "1", "--db", db.string()}).exit_code, 0);
  const auto gate = run_ctitan({"gate", "--db", db.string(), "--baseline", "sweep:ro", "--candidate", "sweep:ro"});
  EXPECT_EQ(gate.exit_code, 0) << gate.out << gate.err;
  expect_one_line(run_ctitan({"sweep", spec.string(), "--db", db.string()}), 2,
                  db.string() + " is read-only (it is on a read-only filesystem)");
  const auto old_ls = run_ctitan({"db", "ls", "--db", (root / "old.db").string()});  // migrated in memory
  EXPECT_EQ(old_ls.exit_code, 0) << old_ls.err;
  EXPECT_NE(old_ls.out.find("3 runs in"), std::string::npos) << old_ls.out;
  EXPECT_EQ(snapshot(root), before);

  ASSERT_EQ(mount("tmpfs", root.c_str(), "tmpfs", MS_REMOUNT, nullptr), 0) << std::strerror(errno);
  EXPECT_EQ(run_ctitan({"db", "ls", "--db", (root / "old.db").string()}).exit_code, 0);
  write_spec(spec.parent_path(), "ro", "", "[grid]\ntraining.local_batch_size = [1, 2, 4]\n", "repeats = 2\n");
  const auto more = run_ctitan({"sweep", spec.string(), "--db", db.string()});
  EXPECT_EQ(more.exit_code, 0) << more.out << more.err;
  EXPECT_NE(more.out.find("ran 3 of 6 runs"), std::string::npos) << more.out;
  expect_complete(db, "ro", 6);
  expect_only_real_results(db);
}

// Issue 20, item 6: pages overwritten below the header, or a dropped table:
// every command says in one line which file is damaged and what to do;
// restored from a copy, the sweep completes.
TEST(ReliabilitySweep, DamagedDatabaseIsOneLineAndARestoredCopyCompletes) {
  const auto dir = fresh_dir("rel_damaged");
  const fs::path db = dir / "r.db";
  ASSERT_EQ(run_ctitan({"sweep", write_spec(dir, "other", "", kThreePoints).string(), "--db", db.string()}).exit_code,
            0);
  const auto others = snapshot(dir / "r.db.runs");
  const fs::path copy = dir / "copy.db";
  fs::copy_file(db, copy);
  const fs::path spec = write_spec(dir, "next", "", "[grid]\nactivation_checkpoint.mode = [\"none\", \"full\"]\n");

  const auto size = fs::file_size(db);
  ASSERT_GT(size, 6 * 4096u);
  {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2 * 4096);
    const std::string junk(size - 3 * 4096, '\xAB');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  const std::string damaged = "results database " + db.string() + " is damaged";
  expect_one_line(run_ctitan({"sweep", spec.string(), "--db", db.string()}), 2, damaged);
  expect_one_line(run_ctitan({"report", "--db", db.string()}), 2, damaged);
  expect_one_line(run_ctitan({"db", "ls", "--db", db.string()}), 2, damaged);
  expect_one_line(run_ctitan({"gate", "--db", db.string(), "--baseline", "sweep:other", "--candidate", "sweep:other"}),
                  2, damaged);

  // Restored as a user would: the copy, without the damaged file's -wal / -shm.
  const auto restore = [&] {
    fs::remove(db.string() + "-wal");
    fs::remove(db.string() + "-shm");
    fs::copy_file(copy, db, fs::copy_options::overwrite_existing);
  };
  restore();
  sql(db, "DROP TABLE steps");
  const std::string dropped = db.string() + " is damaged: its table 'steps' is missing";
  expect_one_line(run_ctitan({"sweep", spec.string(), "--db", db.string()}), 2, dropped);
  expect_one_line(run_ctitan({"report", "--db", db.string()}), 2, dropped);
  expect_one_line(run_ctitan({"db", "show", "1", "--db", db.string()}), 2, dropped);
  EXPECT_EQ(snapshot(dir / "r.db.runs"), others);

  restore();
  const auto rerun = run_ctitan({"sweep", spec.string(), "--db", db.string()});
  EXPECT_EQ(rerun.exit_code, 0) << rerun.out << rerun.err;
  expect_complete(db, "next", 2);
  expect_only_real_results(db);
  for (const auto& [file, bytes] : others) EXPECT_EQ(read_bytes(dir / "r.db.runs" / file), bytes) << file;
}

// Issue 20, item 6: the database and the run folders on a filesystem that
// fills up, at several points of the sweep (opening the database, recording
// a run, ingesting it). One line, exit 2, the file consistent, nothing of
// the other sweep touched; after `release()` the same command completes.
TEST(ReliabilitySweep, FullDiskStopsTheSweepInOneLineAndARerunCompletes) {
  int stopped = 0, stopped_mid_run = 0;
  for (const size_t leave : {size_t{0}, size_t{64} << 10, size_t{96} << 10, size_t{128} << 10, size_t{192} << 10}) {
    SCOPED_TRACE("free bytes left: " + std::to_string(leave));
    SmallFs small(4u << 20);
    if (!small.ok()) GTEST_SKIP() << small.skip_reason();
    const fs::path root = small.dir();
    const fs::path db = root / "r.db";
    const auto specs = fresh_dir("rel_full_" + std::to_string(leave));
    ASSERT_EQ(run_ctitan({"sweep", write_spec(specs, "other", "", "[grid]\ntraining.local_batch_size = [1]\n").string(),
                          "--db", db.string()})
                  .exit_code,
              0);
    const auto others = snapshot(root / "r.db.runs" / "other");
    const fs::path spec = write_spec(specs, "full", "", kThreePoints);

    small.fill(leave);
    const auto hit = run_ctitan({"sweep", spec.string(), "--db", db.string()});
    small.release();
    if (hit.exit_code != 0) {
      ++stopped;
      expect_disk_full_line(hit);
      if (hit.out.find("] run  ") != std::string::npos) ++stopped_mid_run;
    }
    EXPECT_TRUE(integrity_ok(db));
    expect_only_real_results(db);
    EXPECT_EQ(snapshot(root / "r.db.runs" / "other"), others);

    const auto rerun = run_ctitan({"sweep", spec.string(), "--db", db.string()});
    EXPECT_EQ(rerun.exit_code, 0) << rerun.out << rerun.err;
    expect_complete(db, "full", 3);
    expect_only_real_results(db);
    EXPECT_EQ(snapshot(root / "r.db.runs" / "other"), others);
  }
  EXPECT_GE(stopped, 3) << "the fill levels no longer make the sweep meet a full disk";
  EXPECT_GE(stopped_mid_run, 1) << "no fill level stopped the sweep while a run was under way";
}

// Issue 20, items 1 and 6: only the run folders' filesystem is full (the
// database elsewhere): the run that could not write its folder is recorded
// cancelled, not failed or ok, the sweep stops in one line, and the same
// command (no --retry-failed) runs it again once there is space.
TEST(ReliabilitySweep, FullRunFolderStopsTheSweepAndTheSameCommandRetriesIt) {
  int cancelled_runs = 0;
  for (const size_t leave : {size_t{0}, size_t{16} << 10, size_t{24} << 10}) {
    SCOPED_TRACE("free bytes left: " + std::to_string(leave));
    SmallFs small(2u << 20);
    if (!small.ok()) GTEST_SKIP() << small.skip_reason();
    const auto dir = fresh_dir("rel_full_runs_" + std::to_string(leave));
    const fs::path db = dir / "r.db";
    fs::create_directory_symlink(small.dir(), dir / "r.db.runs");  // <db>.runs on the small filesystem
    ASSERT_EQ(run_ctitan({"sweep", write_spec(dir, "other", "", "[grid]\ntraining.local_batch_size = [1]\n").string(),
                          "--db", db.string()})
                  .exit_code,
              0);
    const auto others = snapshot(dir / "r.db.runs" / "other");
    const fs::path spec = write_spec(dir, "full", "", kThreePoints);

    small.fill(leave);
    const auto hit = run_ctitan({"sweep", spec.string(), "--db", db.string()});
    small.release();
    expect_disk_full_line(hit);
    for (const RunRow& row : runs(db)) {
      EXPECT_NE(row.status, "failed") << row.error;
      EXPECT_NE(row.status, "running") << "the database was writable: run " << row.id << " must be settled";
      if (row.status == "cancelled") {
        ++cancelled_runs;
        EXPECT_NE(row.error.find("the disk is full"), std::string::npos) << row.error;
      }
    }
    EXPECT_TRUE(integrity_ok(db));
    expect_only_real_results(db);
    EXPECT_EQ(snapshot(dir / "r.db.runs" / "other"), others);

    const auto rerun = run_ctitan({"sweep", spec.string(), "--db", db.string()});
    EXPECT_EQ(rerun.exit_code, 0) << rerun.out << rerun.err;
    expect_complete(db, "full", 3);
    expect_only_real_results(db);
    EXPECT_EQ(snapshot(dir / "r.db.runs" / "other"), others);
  }
  EXPECT_GE(cancelled_runs, 1) << "no fill level let a run start and fail on its folder";
}

// Issue 20, item 7: two spec files with one sweep name do not merge; the
// one line names both files. What a resume may change (timeout_s, repeats)
// is not a different spec; a renamed sweep runs.
TEST(ReliabilitySweep, TwoSpecsWithOneNameAreRefused) {
  const auto dir = fresh_dir("rel_same_name");
  const fs::path db = dir / "r.db";
  const fs::path a = write_spec(dir / "a", "same", "", "[grid]\ntraining.local_batch_size = [1]\n");
  const fs::path b = write_spec(dir / "b", "same", "", "[grid]\nactivation_checkpoint.mode = [\"full\"]\n");
  ASSERT_EQ(run_ctitan({"sweep", a.string(), "--db", db.string()}).exit_code, 0);
  const auto rows = runs(db);
  const auto folders = snapshot(dir / "r.db.runs");

  const auto refused = run_ctitan({"sweep", b.string(), "--db", db.string()});
  expect_one_line(refused, 2, "sweep 'same' in " + db.string() + " was run from " + fs::canonical(a).string() + "; " +
                                  fs::canonical(b).string() + " is a different spec with the same name (its [grid] differs)");
  EXPECT_NE(refused.err.find("rename this sweep"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("another --db"), std::string::npos) << refused.err;
  EXPECT_EQ(runs(db).size(), rows.size());
  EXPECT_EQ(ResultsDb(db.string(), ResultsDb::Access::read_only).sweep("same")->spec_path, fs::canonical(a).string());
  EXPECT_EQ(snapshot(dir / "r.db.runs"), folders);

  // The same file edited: what a resume may change is fine, its points are not.
  write_spec(dir / "a", "same", "", "[grid]\ntraining.local_batch_size = [1]\n", "timeout_s = 300\nrepeats = 2\n");
  const auto resumed = run_ctitan({"sweep", a.string(), "--db", db.string()});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("ran 1 of 2 runs"), std::string::npos) << resumed.out;
  write_spec(dir / "a", "same", "", "[grid]\ntraining.local_batch_size = [1, 2]\n", "timeout_s = 300\nrepeats = 2\n");
  expect_one_line(run_ctitan({"sweep", a.string(), "--db", db.string()}), 2,
                  "was run from " + fs::canonical(a).string() + " with another [grid] (the file has changed since)");

  write_spec(dir / "b", "same", "same-b", "[grid]\nactivation_checkpoint.mode = [\"full\"]\n");  // renamed
  const auto renamed = run_ctitan({"sweep", b.string(), "--db", db.string()});
  EXPECT_EQ(renamed.exit_code, 0) << renamed.out << renamed.err;
  expect_complete(db, "same-b", 1);
  expect_complete(db, "same", 2);
  expect_only_real_results(db);
}

// Issue 33, item 5: an edited base recipe is another spec. Its points were
// other points piling up under the old name with the same labels; now the
// resolved base's hash is part of the stored spec, so the edit is refused in
// one line, while a comment added to the base is no change.
TEST(ReliabilitySweep, EditedBaseRecipeIsAnotherSpec) {
  const auto dir = fresh_dir("rel_base_edit");
  const fs::path db = dir / "r.db";
  const fs::path base = dir / "base.toml";
  std::ifstream in(fs::absolute(source_dir()) / "recipes/llama3_debugmodel_markov.toml");
  const std::string recipe((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(base) << recipe;
  const fs::path spec = dir / "s.toml";
  std::ofstream(spec) << "[sweep]\nname = \"based\"\nbase = \"base.toml\"\ntimeout_s = 120\nwarmup_steps = 1\n"
                         "measure_steps = 1\nworld_sizes = [1]\n[overrides]\nmodel.flavor = \"tiny\"\n"
                         "training.seq_len = 32\ntraining.local_batch_size = 2\nmetrics.peak_tflops = 1\n";
  ASSERT_EQ(run_ctitan({"sweep", spec.string(), "--db", db.string()}).exit_code, 0);
  const auto rows = runs(db);

  std::ofstream(base) << recipe << "# a comment is no change\n";
  const auto same = run_ctitan({"sweep", spec.string(), "--db", db.string()});
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_EQ(runs(db).size(), rows.size()) << "a comment in the base reran the point";

  std::string edited_recipe = recipe;
  const size_t lr = edited_recipe.find("lr = 3e-3");
  ASSERT_NE(lr, std::string::npos);
  edited_recipe.replace(lr, 9, "lr = 5e-4");
  std::ofstream(base) << edited_recipe;
  const auto edited = run_ctitan({"sweep", spec.string(), "--db", db.string()});
  expect_one_line(edited, 2, "sweep 'based' in " + db.string() +
                                 " was run from a base recipe whose settings have changed since (" +
                                 fs::absolute(base).lexically_normal().string());
  EXPECT_NE(edited.err.find("rename this sweep"), std::string::npos) << edited.err;
  EXPECT_EQ(runs(db).size(), rows.size());
}

// Issue 20, item 8: a sweep name cannot put run folders outside <db>.runs
// ('..', a '/', an over-long name are refused when the spec is read; a
// sweep folder that is a link out of <db>.runs is refused before the
// database is opened). Nothing is written; without the link the sweep runs.
TEST(ReliabilitySweep, RunFoldersStayInsideTheRunsFolder) {
  const auto dir = fresh_dir("rel_confined");
  const fs::path db = dir / "r.db";
  const std::string grid = "[grid]\ntraining.local_batch_size = [2]\n";
  for (const std::string& name : {std::string(".."), std::string("../escape"), std::string("/tmp/abs"),
                                   std::string(300, 'x')}) {
    SCOPED_TRACE(name.substr(0, 20));
    expect_one_line(run_ctitan({"sweep", write_spec(dir, "named", name, grid).string(), "--db", db.string()}), 2,
                    "sweep name");
  }
  EXPECT_FALSE(fs::exists(db));
  EXPECT_FALSE(fs::exists(dir / "r.db.runs"));

  const fs::path outside = dir / "outside";
  fs::create_directories(outside);
  fs::create_directories(dir / "r.db.runs");
  fs::create_directory_symlink(outside, dir / "r.db.runs" / "linked");
  const fs::path spec = write_spec(dir, "linked", "", grid);
  expect_one_line(run_ctitan({"sweep", spec.string(), "--db", db.string()}), 2,
                  "its run folder " + (dir / "r.db.runs" / "linked").string() + " leads outside");
  EXPECT_TRUE(fs::is_empty(outside));
  EXPECT_FALSE(fs::exists(db));

  fs::remove(dir / "r.db.runs" / "linked");
  const auto runs_now = run_ctitan({"sweep", spec.string(), "--db", db.string()});
  EXPECT_EQ(runs_now.exit_code, 0) << runs_now.out << runs_now.err;
  expect_complete(db, "linked", 1);
  for (const RunRow& row : runs(db))
    EXPECT_EQ(fs::path(row.run_dir).parent_path(), fs::absolute(dir / "r.db.runs" / "linked"));
  EXPECT_TRUE(fs::is_empty(outside));
}

}  // namespace
