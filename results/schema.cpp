// Opening a results database: recognise the file, then migrate it forward.
//
// Nothing is written to a file before it is recognised as an empty database
// or a ctitan one this build can read: the checks below only read, so a
// wrong --db (a TOML file, someone else's SQLite file, a database from a
// newer ctitan) is left byte-identical.
//
// Migrations: kMigrations[i] takes the schema from version i-1 to version i
// (an empty file is "version -1"). Version 0 is DESIGN.md's starting shape;
// version 1 adds runs.label. All steps a file needs run in one transaction
// together with the new schema_version, so a crash mid-way leaves the old
// version intact. A new column or table is a new step appended here;
// existing steps never change, because files out there were made by them.
#include "results/schema.h"

#include <sys/statvfs.h>  // statvfs, ST_RDONLY
#include <unistd.h>       // access

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "results/results_db.h"
#include "results/sqlite_stmt.h"

namespace ctitan::results_detail {
namespace {

namespace fs = std::filesystem;

struct Migration {
  int to_version;
  const char* sql;
};

constexpr Migration kMigrations[] = {
    {0, R"sql(
CREATE TABLE schema_version(version INTEGER NOT NULL);
CREATE TABLE sweeps(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  spec_toml TEXT NOT NULL DEFAULT '',
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  ctitan_version TEXT NOT NULL DEFAULT '',
  git_sha TEXT NOT NULL DEFAULT '');
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  sweep_id INTEGER REFERENCES sweeps(id) ON DELETE CASCADE,
  point_key TEXT NOT NULL DEFAULT '',
  config_toml TEXT NOT NULL DEFAULT '',
  config_hash TEXT NOT NULL DEFAULT '',
  world_size INTEGER NOT NULL DEFAULT 1,
  repeat INTEGER NOT NULL DEFAULT 0,
  status TEXT NOT NULL DEFAULT 'pending',
  exit_code INTEGER,
  error TEXT NOT NULL DEFAULT '',
  run_dir TEXT NOT NULL DEFAULT '',
  host TEXT NOT NULL DEFAULT '',
  started_at TEXT NOT NULL DEFAULT '',
  ended_at TEXT NOT NULL DEFAULT '');
CREATE INDEX runs_by_sweep ON runs(sweep_id);
CREATE INDEX runs_by_point ON runs(point_key, status);
CREATE TABLE steps(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  rank INTEGER NOT NULL,
  step INTEGER NOT NULL,
  loss REAL, grad_norm REAL, tps REAL, tflops REAL, mfu REAL,
  step_time_s REAL, data_time_s REAL, mem_peak_bytes INTEGER,
  PRIMARY KEY(run_id, rank, step));
CREATE TABLE summaries(
  run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
  tps_median REAL, tps_p10 REAL, tps_p90 REAL, tflops REAL, mfu REAL,
  mem_peak_bytes INTEGER, loss_final REAL,
  compute_s REAL, comm_s REAL, exposed_comm_s REAL, idle_s REAL);
CREATE TABLE env(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  value TEXT,
  PRIMARY KEY(run_id, key));
CREATE TABLE hardware(
  host_fingerprint TEXT NOT NULL,
  dtype TEXT NOT NULL,
  peak_flops REAL NOT NULL,
  measured_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  PRIMARY KEY(host_fingerprint, dtype));
CREATE TABLE artifacts(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  kind TEXT NOT NULL,
  path TEXT NOT NULL,
  PRIMARY KEY(run_id, path));
)sql"},
    {1, "ALTER TABLE runs ADD COLUMN label TEXT NOT NULL DEFAULT '';"},
    // The baseline sweep a candidate sweep was run in pairs with (`gate --run`).
    {2, "ALTER TABLE sweeps ADD COLUMN paired_with TEXT NOT NULL DEFAULT '';"},
    // Communication per mesh dimension (summary.json's comm_by_dim).
    {3, R"sql(
CREATE TABLE comm_dims(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  mesh_dim TEXT NOT NULL,
  comm_s REAL, exposed_comm_s REAL,
  PRIMARY KEY(run_id, mesh_dim));
)sql"},
    // Pipeline parallelism: the measured and the schedule's bubble fraction.
    {4, "ALTER TABLE summaries ADD COLUMN pipeline_bubble REAL;"
        "ALTER TABLE summaries ADD COLUMN pipeline_bubble_theory REAL;"},
    // [validation]: each pass's loss (metrics.jsonl's validation lines).
    {5, R"sql(
CREATE TABLE validation(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  loss REAL, perplexity REAL, tokens INTEGER, time_s REAL, tps REAL, mem_peak_bytes INTEGER,
  PRIMARY KEY(run_id, step));
)sql"},
    // The planner's prediction for a sweep's run, made when the sweep planned
    // it, and the point's place in the spec (reports keep spec order while
    // sweeps run the fastest points first).
    {6, R"sql(
CREATE TABLE predictions(
  run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
  hardware TEXT, calibration TEXT,
  step_time_s REAL, tps REAL, mfu REAL, mem_peak_bytes INTEGER,
  detail_json TEXT,
  plan_index INTEGER);
)sql"},
    // The Slurm batch job of each run a sweep submitted (--launcher slurm).
    {7, R"sql(
CREATE TABLE slurm_jobs(
  run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
  job_id TEXT NOT NULL DEFAULT '',
  job_name TEXT NOT NULL DEFAULT '',
  state TEXT NOT NULL DEFAULT '',
  reason TEXT NOT NULL DEFAULT '',
  script TEXT NOT NULL DEFAULT '',
  submitted_at TEXT NOT NULL DEFAULT '',
  updated_at TEXT NOT NULL DEFAULT '');
CREATE INDEX slurm_jobs_by_job ON slurm_jobs(job_id);
)sql"},
    // The spec file a sweep was run from: two different specs with one name
    // are refused, and the message names both files.
    {8, "ALTER TABLE sweeps ADD COLUMN spec_path TEXT NOT NULL DEFAULT '';"},
    // MoE runs: each logged step's expert load (tokens per expert over the
    // data-parallel group: the MoE layers' mean coefficient of variation,
    // the fewest and most tokens one expert got). NULL for dense models.
    {9, "ALTER TABLE steps ADD COLUMN moe_load_cv REAL;"
        "ALTER TABLE steps ADD COLUMN moe_load_min REAL;"
        "ALTER TABLE steps ADD COLUMN moe_load_max REAL;"},
    // Expert parallelism: the busiest rank's routed rows over the ep
    // group's mean, per logged step and the run's mean. NULL without EP.
    {10, "ALTER TABLE steps ADD COLUMN moe_ep_imbalance REAL;"
         "ALTER TABLE summaries ADD COLUMN moe_ep_imbalance REAL;"},
    // A sweep that learns as it runs (harness/sweep_learn.h): the spec's
    // prediction before the sweep measured anything (tps_prior), the 80 %
    // interval of the prediction the run was made with (tps_low, tps_high),
    // how many measured points that prediction was refitted on
    // (learned_from; 0: the spec as written), and the prediction after the
    // refit that took this run in (tps_after).
    {11, "ALTER TABLE predictions ADD COLUMN tps_prior REAL;"
         "ALTER TABLE predictions ADD COLUMN tps_low REAL;"
         "ALTER TABLE predictions ADD COLUMN tps_high REAL;"
         "ALTER TABLE predictions ADD COLUMN learned_from INTEGER;"
         "ALTER TABLE predictions ADD COLUMN tps_after REAL;"},
    // Quality (issue 58): each validation pass's place on the run's clock
    // (the global tokens trained so far, the wall clock from the first
    // step to the pass's end) and the run's summary.json `quality`: its
    // seed, last validation loss and, with a target loss, the tokens and
    // time to reach it (NULL: not reached).
    {12, "ALTER TABLE validation ADD COLUMN train_tokens INTEGER;"
         "ALTER TABLE validation ADD COLUMN elapsed_s REAL;"
         "ALTER TABLE summaries ADD COLUMN seed INTEGER;"
         "ALTER TABLE summaries ADD COLUMN validation_loss_final REAL;"
         "ALTER TABLE summaries ADD COLUMN target_loss REAL;"
         "ALTER TABLE summaries ADD COLUMN tokens_to_target REAL;"
         "ALTER TABLE summaries ADD COLUMN time_to_target_s REAL;"},
    // Issue 59: summary.json's stragglers (the rank slowest in most steady
    // steps, that share of the steps, the others' median wait for it as a
    // share of the step, the median max - min busy time, marked), goodput
    // (the wall clock from the process's start, steady steps' share of it,
    // and each part as a row), the peak MFU divides by and where it came
    // from, the MFU with each GEMM at its dtype's peak and the MFU of the
    // attention pairs the masks leave visible; each rank's busy, data and
    // exposed-communication time per steady step.
    {13, R"sql(
ALTER TABLE summaries ADD COLUMN straggler_rank INTEGER;
ALTER TABLE summaries ADD COLUMN straggler_persistence REAL;
ALTER TABLE summaries ADD COLUMN straggler_share REAL;
ALTER TABLE summaries ADD COLUMN straggler_spread_s REAL;
ALTER TABLE summaries ADD COLUMN straggler_marked INTEGER;
ALTER TABLE summaries ADD COLUMN wall_s REAL;
ALTER TABLE summaries ADD COLUMN goodput REAL;
ALTER TABLE summaries ADD COLUMN steady_tokens INTEGER;
ALTER TABLE summaries ADD COLUMN peak_flops REAL;
ALTER TABLE summaries ADD COLUMN peak_flops_source TEXT;
ALTER TABLE summaries ADD COLUMN mfu_by_dtype REAL;
ALTER TABLE summaries ADD COLUMN useful_mfu REAL;
CREATE TABLE goodput(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  part TEXT NOT NULL,
  seconds REAL,
  PRIMARY KEY(run_id, part));
CREATE TABLE rank_steps(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  busy_s REAL, data_s REAL, exposed_comm_s REAL,
  PRIMARY KEY(run_id, step, rank));
)sql"},
};
static_assert(std::size(kMigrations) == ResultsDb::kSchemaVersion + 1, "one migration step per schema version");

constexpr int kEmpty = -1;  // a file with no tables at all

// Reads what the file is, writing nothing. Returns its schema version, or
// kEmpty; throws InputError for anything ctitan must not touch.
int recognise(sqlite3* db, const std::string& path) {
  const std::string what_to_do = "pass a results database written by ctitan, or a new file name";
  std::vector<std::string> tables;
  try {
    Statement q(db, path, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name");
    while (q.step()) tables.push_back(q.text(0));
  } catch (const std::runtime_error&) {
    const int code = sqlite3_errcode(db);
    if (code == SQLITE_NOTADB)
      throw InputError(path + " is not an SQLite database (so not a ctitan results database); " + what_to_do);
    throw_file_fault(db, path);  // damaged, or cannot be opened: one line
    throw;
  }
  if (tables.empty()) return kEmpty;
  if (std::find(tables.begin(), tables.end(), "schema_version") == tables.end()) {
    std::string names;
    for (size_t i = 0; i < tables.size() && i < 4; ++i) names += (i ? ", " : "") + tables[i];
    if (tables.size() > 4) names += ", ...";
    throw InputError(path + " is an SQLite database but not a ctitan results database (tables: " + names + "); " +
                     what_to_do);
  }
  Statement v(db, path, "SELECT max(version) FROM schema_version");
  if (!v.step() || v.is_null(0))
    throw InputError(path + " has an empty schema_version table, so its layout is unknown; " + what_to_do);
  const int64_t version = v.int64(0);
  if (version > ResultsDb::kSchemaVersion)
    throw InputError(path + " was written by a newer ctitan (results schema v" + std::to_string(version) +
                     ", this ctitan reads up to v" + std::to_string(ResultsDb::kSchemaVersion) +
                     "); open it with that ctitan or pass a new file name");
  return static_cast<int>(version);
}

// WAL lets readers (a report, the sqlite3 shell) run beside a writing sweep.
// Setting it writes the header, so it comes only after recognise(). Two
// processes opening a new file at once both try the switch; SQLite answers
// the loser SQLITE_BUSY at once (its busy handler cannot help a lock
// upgrade), so retry until the other one has done it.
void use_wal(sqlite3* db, const std::string& path) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(ResultsDb::kBusyTimeoutMs);
  for (;;) {
    int rc = SQLITE_OK;
    // `mode` is finalised before the switch: an open statement would make it fail.
    try {
      Statement mode(db, path, "PRAGMA journal_mode");
      if (mode.step() && mode.text(0) == "wal") return;
    } catch (const std::runtime_error&) {
      rc = sqlite3_errcode(db);
      if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) throw;
    }
    if (rc == SQLITE_OK) rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || Clock::now() > deadline)
      throw_sqlite(db, path, "switching to WAL mode");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Why a file cannot be written, in words; "" when nothing says it cannot.
std::string why_not_writable(const std::string& path) {
  const std::string dir = fs::absolute(path).parent_path().string();
  struct statvfs st {};
  if (statvfs(dir.c_str(), &st) == 0 && (st.f_flag & ST_RDONLY) != 0) return "it is on a read-only filesystem";
  if (fs::exists(path) && access(path.c_str(), W_OK) != 0) return "the file is not writable";
  if (access(dir.c_str(), W_OK) != 0) return "its folder " + dir + " is not writable";
  return "";
}

// Every table of schema kSchemaVersion; a file missing one was damaged (a
// table dropped by hand, a partial restore). Checked at every open, so the
// fault is one line here instead of "no such table" in the middle of a query.
void check_tables(sqlite3* db, const std::string& path) {
  static const char* const kTables[] = {"schema_version", "sweeps",     "runs",        "steps",
                                        "summaries",      "env",        "hardware",    "artifacts",
                                        "comm_dims",      "validation", "predictions", "slurm_jobs",
                                        "goodput",        "rank_steps"};
  Statement q(db, path, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1");
  for (const char* table : kTables) {
    q.reset();
    q.bind_all(table);
    if (!q.step())
      throw ResultsDbError("results database " + path + " is damaged: its table '" + table + "' is missing (schema v" +
                           std::to_string(ResultsDb::kSchemaVersion) +
                           " has it); restore the file from a copy, or pass a new file name");
  }
}

sqlite3* open_flags(const std::string& path, int flags, const std::string& uri = "") {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(uri.empty() ? path.c_str() : uri.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    const std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    throw ResultsDbError("cannot open results database " + path + " (sqlite: " + msg +
                         "); check the path and its permissions");
  }
  sqlite3_busy_timeout(db, ResultsDb::kBusyTimeoutMs);
  return db;
}

// file:PATH?immutable=1, the path percent-encoded (RFC 3986 unreserved and '/' kept).
std::string immutable_uri(const std::string& path) {
  std::string uri = "file:";
  for (const unsigned char c : fs::absolute(path).string()) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      uri += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      uri += buf;
    }
  }
  return uri + "?immutable=1";
}

// Read-only handle on a file that recognise() accepts; its version in `found`.
sqlite3* open_reader(const std::string& path, int& found) {
  sqlite3* db = open_flags(path, SQLITE_OPEN_READONLY);
  try {
    exec(db, path, "PRAGMA query_only=ON");
    found = recognise(db, path);
    return db;
  } catch (const ResultsDbError&) {
    // A WAL file needs its -shm index; where the folder cannot hold one (a
    // read-only filesystem or folder) and none is there, no process is
    // writing the file: it is read as immutable.
    const bool cannot_open = sqlite3_errcode(db) == SQLITE_CANTOPEN;
    sqlite3_close(db);
    if (!cannot_open || why_not_writable(path).empty() || fs::exists(path + "-wal")) throw;
  } catch (...) {
    sqlite3_close(db);
    throw;
  }
  db = open_flags(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, immutable_uri(path));
  try {
    found = recognise(db, path);
  } catch (...) {
    sqlite3_close(db);
    throw;
  }
  return db;
}

// Every migration step above the file's version, in one transaction.
void migrate(sqlite3* db, const std::string& path) {
  WriteTransaction tx(db, path);
  // Again under the write lock: another process may have migrated meanwhile.
  const int from = recognise(db, path);
  for (const Migration& m : kMigrations)
    if (m.to_version > from) exec(db, path, m.sql);
  if (from < ResultsDb::kSchemaVersion) {
    exec(db, path, "DELETE FROM schema_version");
    Statement set(db, path, "INSERT INTO schema_version(version) VALUES (?1)");
    set.bind_all(ResultsDb::kSchemaVersion).run();
  }
  tx.commit();
}

// An older file, read without writing it: a copy in memory (SQLite's
// backup API), migrated there. Takes `file_db` (closed here).
sqlite3* migrated_copy_in_memory(sqlite3* file_db, const std::string& path) {
  sqlite3* mem = nullptr;
  if (sqlite3_open_v2(":memory:", &mem, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    sqlite3_close(mem);
    sqlite3_close(file_db);
    throw ResultsDbError("cannot read results database " + path + ": out of memory for its migrated copy");
  }
  sqlite3_backup* backup = sqlite3_backup_init(mem, "main", file_db, "main");
  const int rc = backup ? sqlite3_backup_step(backup, -1) : sqlite3_errcode(mem);
  sqlite3_backup_finish(backup);
  if (rc != SQLITE_DONE) {
    const std::string why = sqlite3_errstr(rc);
    sqlite3_close(mem);
    sqlite3_close(file_db);
    throw ResultsDbError("cannot read results database " + path + " (sqlite: " + why + "); check the file");
  }
  sqlite3_close(file_db);
  try {
    exec(mem, path, "PRAGMA foreign_keys=ON");
    migrate(mem, path);
    exec(mem, path, "PRAGMA query_only=ON");
  } catch (...) {
    sqlite3_close(mem);
    throw;
  }
  return mem;
}

}  // namespace

sqlite3* open_and_migrate(const std::string& path) {
  if (fs::is_directory(path))
    throw InputError(path + " is a directory; pass a results database file (e.g. results.db)");
  sqlite3* db = open_flags(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  try {
    exec(db, path, "PRAGMA foreign_keys=ON");
    // SQLite opens a file it cannot write read-only; a WAL file on a
    // read-only filesystem cannot even be read without its -shm index.
    const auto refuse_read_only = [&] {
      if (sqlite3_db_readonly(db, "main") != 1) return;
      const std::string why = why_not_writable(path);
      throw ResultsDbError("results database " + path + " is read-only (" + (why.empty() ? "SQLite opened it so" : why) +
                           ") and this command records results in it; make it writable or pass another --db");
    };
    int found = kEmpty;
    try {
      found = recognise(db, path);
    } catch (const ResultsDbError&) {
      refuse_read_only();
      throw;
    }
    refuse_read_only();
    use_wal(db, path);
    if (found < ResultsDb::kSchemaVersion) migrate(db, path);
    check_tables(db, path);
  } catch (...) {
    sqlite3_close(db);
    throw;
  }
  return db;
}

sqlite3* open_for_reading(const std::string& path) {
  if (fs::is_directory(path))
    throw InputError(path + " is a directory; pass a results database file (e.g. results.db)");
  if (!fs::exists(path))
    throw InputError("results database " + path + " does not exist; pass the --db file a sweep wrote");
  int found = kEmpty;
  sqlite3* db = open_reader(path, found);
  if (found == kEmpty) {
    sqlite3_close(db);
    throw InputError("results database " + path +
                     " has no ctitan tables (an empty database no sweep wrote); pass the --db file a sweep wrote");
  }
  // An older file is read as it is: migrated in a copy in memory, never on
  // disk (a reader writes nothing; the next sweep into it migrates the file).
  if (found < ResultsDb::kSchemaVersion) db = migrated_copy_in_memory(db, path);
  try {
    check_tables(db, path);
  } catch (...) {
    sqlite3_close(db);
    throw;
  }
  return db;
}

int read_schema_version(sqlite3* db, const std::string& path) {
  Statement v(db, path, "SELECT max(version) FROM schema_version");
  return v.step() ? static_cast<int>(v.int64(0)) : kEmpty;
}

}  // namespace ctitan::results_detail
