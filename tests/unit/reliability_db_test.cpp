// Faults of the results database and of what it exports, injected on real
// files (issue 20): damaged pages and a dropped table are one line naming
// the file (ResultsDbError), a read-only open writes nothing, a refused
// sweep row leaves the file as it was, and CSV text cells that a spreadsheet
// would run as formulas are neutralised while numbers stay numbers.
#include <gtest/gtest.h>

#include "tests/schema_undo.h"
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/errors.h"
#include "reports/report.h"
#include "results/results_db.h"
#include "tests/sqlite_check.h"

namespace fs = std::filesystem;
using ctitan::ResultsDb;
using ctitan::ResultsDbError;
using ctitan::RunRow;
using ctitan::testing::integrity_ok;

namespace {

fs::path fresh_dir(const std::string& name) {
  auto d = fs::path(::testing::TempDir()) / ("ctitan_reliability_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void sql(const fs::path& db_path, const std::string& text) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, text.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

// A database with one sweep and `n` runs, closed (checkpointed) on return.
fs::path make_db(const fs::path& dir, int n) {
  const fs::path path = dir / "r.db";
  ResultsDb db(path.string());
  const int64_t sweep = db.upsert_sweep("s", "");
  for (int i = 0; i < n; ++i) {
    RunRow r;
    r.sweep_id = sweep;
    r.point_key = "key" + std::to_string(i);
    r.status = "ok";
    r.config_toml = std::string(2000, 'c');  // a few pages of rows
    db.insert_run(r);
  }
  return path;
}

// The one-line message of the ResultsDbError `fn` throws.
std::string fault_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ResultsDbError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a ResultsDbError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected a ResultsDbError";
  return "";
}

TEST(ReliabilityDb, DroppedTableIsOneLineNamingTheFile) {
  const fs::path path = make_db(fresh_dir("dropped"), 3);
  sql(path, "DROP TABLE summaries");
  for (const auto access : {ResultsDb::Access::read_write, ResultsDb::Access::read_only}) {
    const std::string msg = fault_of([&] { ResultsDb db(path.string(), access); });
    EXPECT_NE(msg.find(path.string() + " is damaged: its table 'summaries' is missing"), std::string::npos) << msg;
    EXPECT_NE(msg.find("restore the file from a copy"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// Pages below the header overwritten: every query that reaches them is one
// line naming the file and what to do, never SQLite's raw text alone.
TEST(ReliabilityDb, DamagedPagesAreOneLineNamingTheFile) {
  const fs::path path = make_db(fresh_dir("damaged"), 40);
  const auto size = fs::file_size(path);
  ASSERT_GT(size, 8 * 4096u);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2 * 4096);
    const std::string junk(size - 3 * 4096, '\xAB');  // page 3 .. the next to last
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  const std::string msg = fault_of([&] {
    ResultsDb db(path.string(), ResultsDb::Access::read_only);
    db.runs();
  });
  EXPECT_NE(msg.find("results database " + path.string() + " is damaged (sqlite: database disk image is malformed)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(".recover"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// report / gate / db open read-only: the file's bytes do not change, and a
// write through such a handle is refused as read-only.
TEST(ReliabilityDb, ReadOnlyOpenWritesNothing) {
  const fs::path path = make_db(fresh_dir("read_only"), 2);
  const std::string before = file_bytes(path);
  {
    ResultsDb db(path.string(), ResultsDb::Access::read_only);
    EXPECT_EQ(db.runs().size(), 2u);
    EXPECT_EQ(db.schema_version(), ResultsDb::kSchemaVersion);
    const std::string msg = fault_of([&] { db.upsert_sweep("new", ""); });
    EXPECT_NE(msg.find("is read-only"), std::string::npos) << msg;
  }
  EXPECT_EQ(file_bytes(path), before);
  EXPECT_TRUE(integrity_ok(path));
  EXPECT_THROW(ResultsDb((path.parent_path() / "absent.db").string(), ResultsDb::Access::read_only),
               ctitan::InputError);
  EXPECT_FALSE(fs::exists(path.parent_path() / "absent.db"));
}

// Issue 55, item 9: an older file opened for reading is read through a
// migrated copy in memory; the file keeps its bytes and its version (it was
// migrated in place before). An empty file is one line, and stays empty.
TEST(ReliabilityDb, ReadOnlyOpenOfAnOlderFileReadsItAsItIs) {
  const fs::path path = make_db(fresh_dir("older"), 1);
  sql(path, "ALTER TABLE steps DROP COLUMN moe_load_cv; ALTER TABLE steps DROP COLUMN moe_load_min; "
            "ALTER TABLE steps DROP COLUMN moe_load_max; ALTER TABLE steps DROP COLUMN moe_ep_imbalance; "
            "ALTER TABLE summaries DROP COLUMN moe_ep_imbalance; ALTER TABLE sweeps DROP COLUMN spec_path; "
            "ALTER TABLE predictions DROP COLUMN tps_prior; ALTER TABLE predictions DROP COLUMN tps_low; "
            "ALTER TABLE predictions DROP COLUMN tps_high; ALTER TABLE predictions DROP COLUMN learned_from; "
            "ALTER TABLE predictions DROP COLUMN tps_after; "
            "ALTER TABLE validation DROP COLUMN train_tokens; ALTER TABLE validation DROP COLUMN elapsed_s; "
            + std::string(ctitan::testing::kUndoSchemaV13) +
            "ALTER TABLE summaries DROP COLUMN seed; ALTER TABLE summaries DROP COLUMN validation_loss_final; "
            "ALTER TABLE summaries DROP COLUMN target_loss; ALTER TABLE summaries DROP COLUMN tokens_to_target; "
            "ALTER TABLE summaries DROP COLUMN time_to_target_s; "
            "UPDATE schema_version SET version = 7;");
  const std::string before = file_bytes(path);
  {
    ResultsDb db(path.string(), ResultsDb::Access::read_only);
    EXPECT_EQ(db.schema_version(), ResultsDb::kSchemaVersion);
    EXPECT_EQ(db.sweeps().at(0).spec_path, "");
    EXPECT_EQ(db.runs().size(), 1u);
    const std::string msg = fault_of([&] { db.upsert_sweep("new", ""); });
    EXPECT_NE(msg.find("is read-only"), std::string::npos) << msg;
  }
  EXPECT_EQ(file_bytes(path), before);
  EXPECT_EQ(ResultsDb(path.string()).schema_version(), ResultsDb::kSchemaVersion);  // a writer still migrates it

  const fs::path empty = path.parent_path() / "empty.db";
  std::ofstream(empty).flush();
  try {
    ResultsDb db(empty.string(), ResultsDb::Access::read_only);
    ADD_FAILURE() << "an empty file was opened for reading";
  } catch (const ctitan::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("has no ctitan tables"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fs::file_size(empty), 0u);
  EXPECT_FALSE(fs::exists(empty.string() + "-wal"));
  EXPECT_FALSE(fs::exists(empty.string() + "-shm"));
}

// open_sweep: a refusal (the check throws) writes nothing; accepted, the
// row takes the spec it was run from.
TEST(ReliabilityDb, RefusedSweepRowLeavesTheFileAsItWas) {
  const fs::path path = make_db(fresh_dir("open_sweep"), 1);
  ResultsDb db(path.string());
  const ctitan::SweepRow first = db.open_sweep("grid", "[grid]\na = [1]\n", "/specs/a.toml", [](const auto&) {
    ADD_FAILURE() << "a new sweep has nothing to check";
  });
  EXPECT_EQ(first.spec_path, "/specs/a.toml");
  EXPECT_THROW(db.open_sweep("grid", "[grid]\na = [2]\n", "/specs/b.toml",
                             [](const ctitan::SweepRow&) { throw ctitan::InputError("refused"); }),
               ctitan::InputError);
  auto kept = db.sweep("grid");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->spec_path, "/specs/a.toml");
  EXPECT_EQ(kept->spec_toml, "[grid]\na = [1]\n");
  const ctitan::SweepRow again =
      db.open_sweep("grid", "[grid]\na = [1]\n# a comment\n", "/specs/a.toml", [](const auto&) {});
  EXPECT_EQ(again.id, first.id);
  EXPECT_EQ(db.sweep("grid")->spec_toml, "[grid]\na = [1]\n# a comment\n");  // the spec as last run
  EXPECT_TRUE(integrity_ok(path));
}

// OWASP CSV injection: text cells starting with = + - @ tab or CR get a
// leading ' and quotes; negative numbers (number columns, or a text cell
// that is only a number) stay numbers.
TEST(ReliabilityDb, CsvNeutralisesFormulaCellsAndKeepsNegativeNumbers) {
  ctitan::Report r;
  ctitan::SectionReport sec;
  sec.title = "=cmd|' /C calc'!A0";
  ctitan::PointStats p;
  p.label = "-2+3";
  p.display_label = "@SUM(A1:A9)";
  p.stack_name = "+Float8";
  p.error = "\tleading tab";
  p.predicted_on = "-1.5";  // a plain number: left as it is
  p.point_key = "abc";
  p.short_label = "=HYPERLINK(\"x\")";  // a name is text a spec wrote, too
  p.status = "ok";
  p.loss_final = -1.5;
  p.speedup = -0.25;
  p.peak_source = "=1+1";
  sec.points.push_back(p);
  r.sections.push_back(sec);
  const std::string csv = ctitan::render_csv(r);
  const std::string row = csv.substr(csv.find('\n') + 1);
  EXPECT_EQ(row.rfind("\"'=cmd|' /C calc'!A0\",\"'-2+3\",\"'@SUM(A1:A9)\",", 0), 0u) << row;
  EXPECT_NE(row.find(",\"'+Float8\","), std::string::npos) << row;
  EXPECT_NE(row.find(",\"'\tleading tab\","), std::string::npos) << row;
  EXPECT_NE(row.find(",-1.5,"), std::string::npos) << row;  // loss_final: a number
  EXPECT_NE(row.find(",-0.25,"), std::string::npos) << row;  // speedup: a number
  EXPECT_NE(row.find(",-1.5,"), std::string::npos) << row;  // predicted_on "-1.5": a plain number, kept
  EXPECT_NE(row.find(",\"'=HYPERLINK(\"\"x\"\")\",,"), std::string::npos) << row;  // name, then the empty layout
  EXPECT_NE(row.find(",\"'=1+1\"\n"), std::string::npos) << row;  // the peak's source, last
  EXPECT_EQ(row.find(",'-1.5"), std::string::npos) << row;
}

}  // namespace
