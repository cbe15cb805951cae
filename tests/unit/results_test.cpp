// The results database on real SQLite files: round trips of every table,
// ingest of run directories (whole, truncated, resumed), migration of an
// older file, files that are not ours left byte-identical, and two
// processes writing one file at once.
#include <gtest/gtest.h>

#include "tests/schema_undo.h"
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "common/errors.h"
#include "results/results_db.h"

namespace fs = std::filesystem;
using ctitan::IngestReport;
using ctitan::InputError;
using ctitan::ResultsDb;
using ctitan::RunRow;
using ctitan::SummaryRow;

namespace {

fs::path fresh_dir(const std::string& name) {
  auto d = fs::path(::testing::TempDir()) / ("ctitan_results_" + std::to_string(getpid()) + "_" + name);
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

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// Raw SQL on a file, outside ResultsDb: to build old or foreign files and to
// look at what ResultsDb wrote.
void sql(const fs::path& db_path, const std::string& text) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, text.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

std::string sql_text(const fs::path& db_path, const std::string& query) {
  sqlite3* db = nullptr;
  sqlite3_open(db_path.c_str(), &db);
  sqlite3_stmt* st = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, query.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    out = t ? t : "";
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

RunRow full_run(int64_t sweep_id, const std::string& label) {
  RunRow r;
  r.sweep_id = sweep_id;
  r.point_key = "pk-" + label;
  r.label = label;
  r.config_toml = "[training]\nsteps = 6\n";
  r.config_hash = "c0ffee";
  r.world_size = 4;
  r.repeat = 2;
  r.status = "running";
  r.run_dir = "/runs/" + label;
  r.host = "node7";
  r.started_at = "2025-01-02T03:04:05Z";
  return r;
}

void expect_same_run(const RunRow& a, const RunRow& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.sweep_id, b.sweep_id);
  EXPECT_EQ(a.point_key, b.point_key);
  EXPECT_EQ(a.label, b.label);
  EXPECT_EQ(a.config_toml, b.config_toml);
  EXPECT_EQ(a.config_hash, b.config_hash);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.repeat, b.repeat);
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.exit_code, b.exit_code);
  EXPECT_EQ(a.error, b.error);
  EXPECT_EQ(a.run_dir, b.run_dir);
  EXPECT_EQ(a.host, b.host);
  EXPECT_EQ(a.started_at, b.started_at);
  EXPECT_EQ(a.ended_at, b.ended_at);
}

// A run directory as `ctitan train` writes it (keys from trainer/metrics.cpp),
// plus the artifacts a profiled, checkpointed, multi-rank run leaves.
const char* kMetricsLines[] = {
    R"({"step":1,"loss":10.5,"grad_norm":2.25,"lr":0.0001,"tps":1000.5,"tflops":0.125,"mfu":null,"mem_peak_bytes":1048576,"step_time_s":0.5,"data_time_s":0.01,"steps_in_interval":1})",
    R"({"step":2,"loss":9.75,"grad_norm":2.0,"lr":0.0002,"tps":1200.0,"tflops":0.15,"mfu":12.5,"mem_peak_bytes":2097152,"step_time_s":0.25,"data_time_s":0.02,"steps_in_interval":1})",
    R"({"step":3,"loss":9.0,"grad_norm":1.5,"lr":0.0003,"tps":1300.0,"tflops":0.1625,"mfu":13.5,"mem_peak_bytes":2097152,"step_time_s":0.2,"data_time_s":0.03,"steps_in_interval":1})",
};

void make_run_dir(const fs::path& d) {
  std::string metrics;
  for (const char* l : kMetricsLines) metrics += std::string(l) + "\n";
  write_file(d / "metrics.jsonl", metrics);
  write_file(d / "summary.json", R"({"status":"ok","steps_run":3,"tps_median":1250.0,"tps_p10":1210.0,"tps_p90":1290.0,
      "tflops":0.15625,"mfu":null,"loss_final":9.0,"mem_peak_bytes":3145728,"comm_s":0.05,"exposed_comm_s":0.02,
      "comm_by_dim":{"dp_shard":{"comm_s":0.04,"exposed_comm_s":0.005},"tp":{"comm_s":0.01,"exposed_comm_s":0.015}},
      "pipeline_bubble":0.3,"pipeline_bubble_theory":0.25,
      "flavor":"tiny"})");
  write_file(d / "env.json", R"({"git_sha":"abc123","cpu_cores":8,"cuda_available":false,"gpu":null,
      "versions":{"libtorch":"2.15.0","compiler":{"id":"GNU","version":"12.2"}},"ranks":[0,1]})");
  write_file(d / "config.toml", "[training]\nsteps = 3\n");
  write_file(d / "profile_traces/iteration_2/rank0_trace.json", "{}");
  write_file(d / "comm_traces/rank_0.json", "{}");
  write_file(d / "memory_snapshot/iteration_2/rank0_memory_snapshot.pickle", "x");
  write_file(d / "checkpoint/step-2/metadata.json", "{}");
  write_file(d / "checkpoint/step-2/rank_0.pt", "x");
  write_file(d / "checkpoint/.step-3.tmp/rank_0.pt", "x");  // never finished: not a checkpoint
  write_file(d / "rank0.log", "step: 1\n");
  write_file(d / "notes.txt", "not an artifact");
}

// A fresh database holding one run, and a run directory for it.
struct OneRun {
  explicit OneRun(const std::string& name)
      : dir(fresh_dir(name)), run_dir(dir / "run"), db((dir / "r.db").string()) {
    make_run_dir(run_dir);
    id = db.insert_run(full_run(0, "a"));
  }
  IngestReport ingest() { return db.ingest_run_dir(id, run_dir.string()); }
  fs::path dir, run_dir;
  ResultsDb db;
  int64_t id = 0;
};

}  // namespace

TEST(Results, CreatesTheCurrentSchemaInWalMode) {
  const auto d = fresh_dir("create");
  const auto path = d / "results.db";
  {
    ResultsDb db(path.string());
    EXPECT_EQ(db.schema_version(), ResultsDb::kSchemaVersion);
    EXPECT_EQ(db.path(), path.string());
  }
  EXPECT_EQ(sql_text(path, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(sql_text(path, "SELECT version FROM schema_version"), std::to_string(ResultsDb::kSchemaVersion));
  for (const char* t : {"sweeps", "runs", "steps", "summaries", "env", "hardware", "artifacts"})
    EXPECT_EQ(sql_text(path, std::string("SELECT name FROM sqlite_master WHERE name = '") + t + "'"), t);
  EXPECT_EQ(sql_text(path, "SELECT count(*) FROM pragma_table_info('runs') WHERE name = 'label'"), "1");
  EXPECT_EQ(sql_text(path, "SELECT count(*) FROM pragma_table_info('sweeps') WHERE name = 'paired_with'"), "1");
  // Opening again changes nothing and keeps one version row.
  ResultsDb again(path.string());
  EXPECT_EQ(sql_text(path, "SELECT count(*) FROM schema_version"), "1");
}

TEST(Results, SweepsRoundTripAndUpsertReturnsTheSameId) {
  const auto d = fresh_dir("sweeps");
  ResultsDb db((d / "r.db").string());
  const int64_t a = db.upsert_sweep("scaling", "[sweep]\nname = 'scaling'\n");
  const int64_t b = db.upsert_sweep("float8", "spec b");
  EXPECT_NE(a, b);
  EXPECT_EQ(db.upsert_sweep("scaling", "changed spec"), a);  // a rerun resumes it
  const auto s = db.sweep("scaling");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->id, a);
  EXPECT_EQ(s->name, "scaling");
  EXPECT_EQ(s->spec_toml, "[sweep]\nname = 'scaling'\n");  // the first spec stays
  EXPECT_FALSE(s->ctitan_version.empty());
  EXPECT_FALSE(s->git_sha.empty());
  ASSERT_EQ(s->created_at.size(), 20u) << s->created_at;  // 2025-01-02T03:04:05Z
  EXPECT_EQ(s->created_at[10], 'T');
  EXPECT_EQ(s->created_at.back(), 'Z');
  EXPECT_FALSE(db.sweep("nope"));
  const auto all = db.sweeps();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "scaling");
  EXPECT_EQ(all[1].name, "float8");
}

TEST(Results, RunsRoundTripUpdateAndQueries) {
  const auto d = fresh_dir("runs");
  ResultsDb db((d / "r.db").string());
  const int64_t sweep = db.upsert_sweep("s", "");
  RunRow r = full_run(sweep, "compile.enable=true float8=tensorwise 'quoted' ; DROP TABLE runs");
  r.id = db.insert_run(r);
  ASSERT_GT(r.id, 0);
  expect_same_run(*db.run(r.id), r);

  r.status = "ok";
  r.exit_code = 0;
  r.error = "";
  r.ended_at = "2025-01-02T03:05:00Z";
  r.run_dir = "/runs/elsewhere";
  db.update_run(r);
  expect_same_run(*db.run(r.id), r);

  RunRow lone = full_run(0, "no sweep");  // sweep_id 0 = not part of a sweep
  lone.status = "failed";
  lone.exit_code = 137;
  lone.error = "killed: out of memory";
  lone.point_key = r.point_key;
  lone.id = db.insert_run(lone);
  expect_same_run(*db.run(lone.id), lone);

  EXPECT_FALSE(db.run(999));
  EXPECT_EQ(db.runs().size(), 2u);
  ASSERT_EQ(db.runs(sweep).size(), 1u);
  EXPECT_EQ(db.runs(sweep)[0].id, r.id);
  ASSERT_EQ(db.runs(0).size(), 1u);
  EXPECT_EQ(db.runs(0)[0].id, lone.id);

  const auto point = db.runs_of_point(r.point_key);
  ASSERT_EQ(point.size(), 2u);
  EXPECT_EQ(point[0].id, lone.id);  // newest first
  const auto ok = db.runs_of_point(r.point_key, "ok");
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].id, r.id);
  EXPECT_TRUE(db.runs_of_point("other").empty());

  RunRow bad = r;
  bad.status = "exploded";
  EXPECT_THROW(db.insert_run(bad), std::invalid_argument);
  EXPECT_THROW(db.update_run(bad), std::invalid_argument);
  RunRow missing = r;
  missing.id = 999;
  EXPECT_THROW(db.update_run(missing), std::invalid_argument);
  EXPECT_EQ(db.runs().size(), 2u);
}

TEST(Results, SummaryEnvArtifactsAndHardwareRoundTrip) {
  const auto d = fresh_dir("summary");
  ResultsDb db((d / "r.db").string());
  const int64_t id = db.insert_run(full_run(0, "a"));
  EXPECT_FALSE(db.summary(id));
  SummaryRow s;
  s.run_id = id;
  s.tps_median = 1234.5;
  s.mfu = 42.25;
  s.mem_peak_bytes = int64_t{1} << 40;
  s.idle_s = 0.0;
  db.put_summary(s);
  auto got = db.summary(id);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->tps_median, 1234.5);
  EXPECT_EQ(got->mfu, 42.25);
  EXPECT_EQ(got->mem_peak_bytes, int64_t{1} << 40);
  EXPECT_EQ(got->idle_s, 0.0);
  EXPECT_FALSE(got->tps_p10);
  EXPECT_FALSE(got->loss_final);
  EXPECT_FALSE(got->comm_s);
  s.compute_s = 0.5;  // trace analysis fills in later
  db.put_summary(s);
  EXPECT_EQ(db.summary(id)->compute_s, 0.5);

  EXPECT_FALSE(db.hardware_peak("host-a", "bf16"));
  db.put_hardware("host-a", "bf16", 1.5e12);
  db.put_hardware("host-a", "float32", 0.75e12);
  EXPECT_EQ(db.hardware_peak("host-a", "bf16"), 1.5e12);
  db.put_hardware("host-a", "bf16", 1.6e12);  // re-measured
  EXPECT_EQ(db.hardware_peak("host-a", "bf16"), 1.6e12);
  EXPECT_EQ(db.hardware_peak("host-a", "float32"), 0.75e12);
  EXPECT_FALSE(db.hardware_peak("host-b", "bf16"));
}

TEST(Results, IngestsARunDirectoryIntoEveryTable) {
  OneRun f("ingest");
  const IngestReport rep = f.ingest();
  EXPECT_FALSE(rep.partial);
  EXPECT_TRUE(rep.notes.empty()) << rep.notes.front();
  EXPECT_EQ(rep.steps, 3);
  EXPECT_EQ(rep.summary_status, "ok");

  const auto steps = f.db.steps(f.id);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0]["run_id"], f.id);
  EXPECT_EQ(steps[0]["rank"], 0);
  EXPECT_EQ(steps[0]["step"], 1);
  EXPECT_EQ(steps[0]["loss"], 10.5);
  EXPECT_EQ(steps[0]["grad_norm"], 2.25);
  EXPECT_EQ(steps[0]["tps"], 1000.5);
  EXPECT_EQ(steps[0]["tflops"], 0.125);
  EXPECT_TRUE(steps[0]["mfu"].is_null());
  EXPECT_EQ(steps[0]["step_time_s"], 0.5);
  EXPECT_EQ(steps[0]["data_time_s"], 0.01);
  EXPECT_EQ(steps[0]["mem_peak_bytes"], 1048576);
  EXPECT_EQ(steps[2]["mfu"], 13.5);

  const auto s = f.db.summary(f.id);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->tps_median, 1250.0);
  EXPECT_EQ(s->tps_p10, 1210.0);
  EXPECT_EQ(s->tps_p90, 1290.0);
  EXPECT_EQ(s->tflops, 0.15625);
  EXPECT_FALSE(s->mfu);  // null in summary.json: no peak known
  EXPECT_EQ(s->loss_final, 9.0);
  EXPECT_EQ(s->mem_peak_bytes, 3145728);
  EXPECT_EQ(s->comm_s, 0.05);
  EXPECT_EQ(s->exposed_comm_s, 0.02);
  EXPECT_FALSE(s->compute_s);  // absent keys are NULL
  EXPECT_FALSE(s->idle_s);
  EXPECT_EQ(s->pipeline_bubble, 0.3);
  EXPECT_EQ(s->pipeline_bubble_theory, 0.25);
  EXPECT_EQ(sql_text(f.dir / "r.db", "SELECT group_concat(mesh_dim || '=' || comm_s || '/' || exposed_comm_s, ' ') FROM "
                             "(SELECT * FROM comm_dims WHERE run_id = " + std::to_string(f.id) + " ORDER BY mesh_dim)"),
            "dp_shard=0.04/0.005 tp=0.01/0.015");

  const std::vector<std::pair<std::string, std::string>> want_env = {
      {"cpu_cores", "8"},           {"cuda_available", "false"},       {"git_sha", "abc123"}, {"gpu", ""},
      {"ranks", "[0,1]"},           {"versions.compiler.id", "GNU"},   {"versions.compiler.version", "12.2"},
      {"versions.libtorch", "2.15.0"}};
  EXPECT_EQ(f.db.env(f.id), want_env);
  EXPECT_EQ(sql_text(f.dir / "r.db", "SELECT value IS NULL FROM env WHERE key = 'gpu'"), "1");

  const fs::path root = fs::absolute(f.run_dir);
  std::vector<std::pair<std::string, std::string>> arts;
  for (const auto& a : f.db.artifacts(f.id))
    arts.emplace_back(a.kind, fs::path(a.path).lexically_relative(root).string());
  const std::vector<std::pair<std::string, std::string>> want_arts = {
      {"checkpoint", "checkpoint/step-2"},
      {"comm_trace", "comm_traces/rank_0.json"},
      {"config", "config.toml"},
      {"env", "env.json"},
      {"memory_snapshot", "memory_snapshot/iteration_2/rank0_memory_snapshot.pickle"},
      {"metrics", "metrics.jsonl"},
      {"trace", "profile_traces/iteration_2/rank0_trace.json"},
      {"log", "rank0.log"},
      {"summary", "summary.json"}};
  EXPECT_EQ(arts, want_arts);
  EXPECT_EQ(rep.artifacts, static_cast<int64_t>(want_arts.size()));
  for (const auto& a : f.db.artifacts(f.id)) EXPECT_TRUE(fs::path(a.path).is_absolute()) << a.path;
}

TEST(Results, ReingestReplacesTheRunsRows) {
  OneRun f("reingest");
  const int64_t other = f.db.insert_run(full_run(0, "b"));
  f.ingest();
  f.db.ingest_run_dir(other, f.run_dir.string());
  EXPECT_EQ(f.ingest().steps, 3);  // idempotent
  EXPECT_EQ(f.db.steps(f.id).size(), 3u);
  EXPECT_EQ(f.db.artifacts(f.id).size(), 9u);

  write_file(f.run_dir / "metrics.jsonl", std::string(kMetricsLines[0]) + "\n");
  fs::remove_all(f.run_dir / "checkpoint");
  fs::remove(f.run_dir / "env.json");
  const IngestReport rep = f.ingest();
  EXPECT_EQ(rep.steps, 1);
  EXPECT_EQ(f.db.steps(f.id).size(), 1u);
  EXPECT_EQ(f.db.artifacts(f.id).size(), 7u);
  EXPECT_TRUE(f.db.env(f.id).empty());
  EXPECT_FALSE(rep.partial);  // env.json is optional; a note says it is missing
  ASSERT_EQ(rep.notes.size(), 1u);
  EXPECT_NE(rep.notes[0].find("env.json"), std::string::npos);
  // The other run's rows are untouched.
  EXPECT_EQ(f.db.steps(other).size(), 3u);
  EXPECT_EQ(f.db.env(other).size(), 8u);
}

// [validation] lines go to their own table and leave the step rows alone.
TEST(Results, ValidationLinesBecomeValidationRows) {
  OneRun f("validation");
  write_file(f.run_dir / "metrics.jsonl",
             std::string(kMetricsLines[0]) + "\n" +
                 R"({"step": 1, "validation_loss": 7.25, "validation_perplexity": 1408.1, "validation_tokens": 512, )"
                 R"("validation_time_s": 0.5, "validation_tps": 1024.0, "validation_mem_peak_bytes": 4096})" + "\n" +
                 kMetricsLines[1] + "\n" + kMetricsLines[2] + "\n" +
                 R"({"step": 3, "validation_loss": 6.5, "validation_perplexity": 665.14, "validation_tokens": 512, )"
                 R"("validation_time_s": 0.25, "validation_tps": 2048.0, "validation_mem_peak_bytes": 2048})" + "\n");
  const IngestReport rep = f.ingest();
  EXPECT_EQ(rep.steps, 3);
  EXPECT_EQ(rep.validations, 2);
  const auto steps = f.db.steps(f.id);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0]["loss"], 10.5);  // not replaced by the validation line of step 1
  const auto v = f.db.validation(f.id);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0]["step"], 1);
  EXPECT_EQ(v[0]["loss"], 7.25);
  EXPECT_EQ(v[0]["perplexity"], 1408.1);
  EXPECT_EQ(v[0]["tokens"], 512);
  EXPECT_EQ(v[0]["time_s"], 0.5);
  EXPECT_EQ(v[0]["tps"], 1024.0);
  EXPECT_EQ(v[0]["mem_peak_bytes"], 4096);
  EXPECT_EQ(v[1]["loss"], 6.5);
  f.ingest();  // a re-ingest replaces, not duplicates
  EXPECT_EQ(f.db.validation(f.id).size(), 2u);
}

TEST(Results, IngestOfATruncatedRunStoresWhatIsThereAndSaysPartial) {
  OneRun f("truncated");
  const std::string third = kMetricsLines[2];
  // The third line cut mid-write, as a crash leaves it.
  write_file(f.run_dir / "metrics.jsonl",
             std::string(kMetricsLines[0]) + "\n" + kMetricsLines[1] + "\n" + third.substr(0, third.size() / 2));
  fs::remove(f.run_dir / "summary.json");
  const IngestReport rep = f.ingest();
  EXPECT_TRUE(rep.partial);
  EXPECT_EQ(rep.steps, 2);
  EXPECT_EQ(rep.summary_status, "");
  ASSERT_EQ(rep.notes.size(), 2u);
  EXPECT_NE(rep.notes[0].find("metrics.jsonl line 3 is cut short"), std::string::npos) << rep.notes[0];
  EXPECT_NE(rep.notes[1].find("summary.json is missing"), std::string::npos) << rep.notes[1];
  EXPECT_EQ(f.db.steps(f.id).size(), 2u);
  EXPECT_FALSE(f.db.summary(f.id));
  EXPECT_EQ(f.db.env(f.id).size(), 8u);

  // A directory that was never created (the run failed before writing it).
  const IngestReport none = f.db.ingest_run_dir(f.id, (f.dir / "never").string());
  EXPECT_TRUE(none.partial);
  EXPECT_EQ(none.steps, 0);
  EXPECT_TRUE(f.db.steps(f.id).empty());
  EXPECT_TRUE(f.db.artifacts(f.id).empty());
}

TEST(Results, IngestOfAResumedRunKeepsTheLaterLineOfARepeatedStep) {
  OneRun f("resumed");
  // Steps 1-2, interrupted, resumed from the step-1 checkpoint: 2-3 again.
  const std::string again = R"({"step":2,"loss":9.5,"tps":1100.0,"mem_peak_bytes":7})";
  write_file(f.run_dir / "metrics.jsonl",
             std::string(kMetricsLines[0]) + "\n" + kMetricsLines[1] + "\n" + again + "\n" + kMetricsLines[2] + "\n");
  const IngestReport rep = f.ingest();
  EXPECT_FALSE(rep.partial);
  EXPECT_EQ(rep.steps, 3);
  const auto steps = f.db.steps(f.id);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[1]["loss"], 9.5);
  EXPECT_TRUE(steps[1]["grad_norm"].is_null());
  EXPECT_EQ(steps[1]["mem_peak_bytes"], 7);
}

TEST(Results, IngestForAnUnknownRunIsAnInputErrorAndWritesNothing) {
  const auto d = fresh_dir("unknown_run");
  make_run_dir(d / "run");
  ResultsDb db((d / "r.db").string());
  try {
    db.ingest_run_dir(42, (d / "run").string());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("run 42 is not in"), std::string::npos) << e.what();
  }
  EXPECT_EQ(sql_text(d / "r.db", "SELECT count(*) FROM steps"), "0");
}

// Version 0 is DESIGN.md's starting shape: runs has no label column. This
// file is built by hand, the way an older ctitan left it, with data in every
// table; opening it must keep every row and bring the schema to the current one.
TEST(Results, MigratesAVersion0DatabaseAndKeepsItsData) {
  const auto d = fresh_dir("migrate");
  const auto path = d / "old.db";
  sql(path, R"sql(
    CREATE TABLE schema_version(version INTEGER NOT NULL);
    INSERT INTO schema_version VALUES (0);
    CREATE TABLE sweeps(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, spec_toml TEXT NOT NULL DEFAULT '',
      created_at TEXT NOT NULL, ctitan_version TEXT NOT NULL DEFAULT '', git_sha TEXT NOT NULL DEFAULT '');
    CREATE TABLE runs(id INTEGER PRIMARY KEY, sweep_id INTEGER REFERENCES sweeps(id) ON DELETE CASCADE,
      point_key TEXT NOT NULL DEFAULT '', config_toml TEXT NOT NULL DEFAULT '', config_hash TEXT NOT NULL DEFAULT '',
      world_size INTEGER NOT NULL DEFAULT 1, repeat INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL DEFAULT 'pending',
      exit_code INTEGER, error TEXT NOT NULL DEFAULT '', run_dir TEXT NOT NULL DEFAULT '', host TEXT NOT NULL DEFAULT '',
      started_at TEXT NOT NULL DEFAULT '', ended_at TEXT NOT NULL DEFAULT '');
    CREATE TABLE steps(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, rank INTEGER NOT NULL,
      step INTEGER NOT NULL, loss REAL, grad_norm REAL, tps REAL, tflops REAL, mfu REAL, step_time_s REAL,
      data_time_s REAL, mem_peak_bytes INTEGER, PRIMARY KEY(run_id, rank, step));
    CREATE TABLE summaries(run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE, tps_median REAL,
      tps_p10 REAL, tps_p90 REAL, tflops REAL, mfu REAL, mem_peak_bytes INTEGER, loss_final REAL, compute_s REAL,
      comm_s REAL, exposed_comm_s REAL, idle_s REAL);
    CREATE TABLE env(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, key TEXT NOT NULL, value TEXT,
      PRIMARY KEY(run_id, key));
    CREATE TABLE hardware(host_fingerprint TEXT NOT NULL, dtype TEXT NOT NULL, peak_flops REAL NOT NULL,
      measured_at TEXT NOT NULL, PRIMARY KEY(host_fingerprint, dtype));
    CREATE TABLE artifacts(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, kind TEXT NOT NULL,
      path TEXT NOT NULL, PRIMARY KEY(run_id, path));
    INSERT INTO sweeps VALUES (1, 'old-sweep', 'spec', '2024-06-01T00:00:00Z', '0.0.9', 'deadbeef');
    INSERT INTO runs(id, sweep_id, point_key, world_size, repeat, status, exit_code, run_dir)
      VALUES (7, 1, 'pk7', 8, 1, 'ok', 0, '/old/run7');
    INSERT INTO steps VALUES (7, 0, 1, 3.5, 1.0, 100.0, 0.5, 40.0, 0.1, 0.0, 1024);
    INSERT INTO summaries(run_id, tps_median, loss_final) VALUES (7, 100.0, 3.5);
    INSERT INTO env VALUES (7, 'git_sha', 'deadbeef');
    INSERT INTO hardware VALUES ('host-old', 'bf16', 2e12, '2024-06-01T00:00:00Z');
    INSERT INTO artifacts VALUES (7, 'trace', '/old/run7/trace.json');
  )sql");

  ResultsDb db(path.string());
  EXPECT_EQ(db.schema_version(), ResultsDb::kSchemaVersion);
  const auto sweep = db.sweep("old-sweep");
  ASSERT_TRUE(sweep);
  EXPECT_EQ(sweep->git_sha, "deadbeef");
  EXPECT_EQ(sweep->paired_with, "");  // a version-2 column, empty for old sweeps
  const auto run = db.run(7);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->sweep_id, 1);
  EXPECT_EQ(run->label, "");  // the new column, empty for old rows
  EXPECT_EQ(run->world_size, 8);
  EXPECT_EQ(run->exit_code, 0);
  EXPECT_EQ(run->run_dir, "/old/run7");
  ASSERT_EQ(db.steps(7).size(), 1u);
  EXPECT_EQ(db.steps(7)[0]["mfu"], 40.0);
  EXPECT_EQ(db.summary(7)->tps_median, 100.0);
  EXPECT_EQ(db.env(7).size(), 1u);
  EXPECT_EQ(db.artifacts(7).size(), 1u);
  EXPECT_EQ(db.hardware_peak("host-old", "bf16"), 2e12);

  RunRow r = full_run(1, "new label");
  r.id = db.insert_run(r);
  EXPECT_EQ(db.run(r.id)->label, "new label");
  EXPECT_EQ(sql_text(path, "SELECT count(*) FROM schema_version"), "1");
  EXPECT_EQ(sql_text(path, "PRAGMA integrity_check"), "ok");
}

// Version 6 adds the planner's predictions. A version-5 file (the current
// shape less that table) opens with its runs intact and without predictions;
// new runs store theirs with the run, in one transaction, and deleting a
// run deletes its prediction.
// A version-6 file (no slurm_jobs) gains the table; a run's job row is
// replaced by run id, listed per sweep, and deleted with its run.
TEST(Results, MigratesAVersion6DatabaseToSlurmJobs) {
  const auto d = fresh_dir("migrate_v6");
  const auto path = d / "v6.db";
  int64_t sweep = 0, run = 0;
  {
    ResultsDb db(path.string());
    sweep = db.upsert_sweep("s", "");
    run = db.insert_run(full_run(sweep, "old"));
  }
  sql(path, "ALTER TABLE steps DROP COLUMN moe_load_cv; ALTER TABLE steps DROP COLUMN moe_load_min; "
            "ALTER TABLE steps DROP COLUMN moe_load_max; ALTER TABLE steps DROP COLUMN moe_ep_imbalance; "
            "ALTER TABLE summaries DROP COLUMN moe_ep_imbalance; DROP TABLE slurm_jobs; ALTER TABLE sweeps DROP COLUMN spec_path; "
            "ALTER TABLE predictions DROP COLUMN tps_prior; ALTER TABLE predictions DROP COLUMN tps_low; "
            "ALTER TABLE predictions DROP COLUMN tps_high; ALTER TABLE predictions DROP COLUMN learned_from; "
            "ALTER TABLE predictions DROP COLUMN tps_after; "
            "ALTER TABLE validation DROP COLUMN train_tokens; ALTER TABLE validation DROP COLUMN elapsed_s; "
            + std::string(ctitan::testing::kUndoSchemaV13) +
            "ALTER TABLE summaries DROP COLUMN seed; ALTER TABLE summaries DROP COLUMN validation_loss_final; "
            "ALTER TABLE summaries DROP COLUMN target_loss; ALTER TABLE summaries DROP COLUMN tokens_to_target; "
            "ALTER TABLE summaries DROP COLUMN time_to_target_s; "
            "UPDATE schema_version SET version = 6;");
  ResultsDb db(path.string());
  EXPECT_EQ(db.schema_version(), ResultsDb::kSchemaVersion);
  EXPECT_FALSE(db.slurm_job(run));
  ctitan::SlurmJobRow j;
  j.run_id = run;
  j.job_name = "ctitan-k-r0-s1-1";
  db.put_slurm_job(j);  // recorded before sbatch answers
  EXPECT_EQ(db.slurm_job(run)->job_id, "");
  j.job_id = "42";
  j.state = "PENDING";
  j.reason = "Resources";
  j.script = "/x/job.sbatch";
  j.submitted_at = j.updated_at = "2026-11-24T00:00:00Z";
  db.put_slurm_job(j);
  const auto back = db.slurm_job(run);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->job_id, "42");
  EXPECT_EQ(back->job_name, "ctitan-k-r0-s1-1");
  EXPECT_EQ(back->state, "PENDING");
  EXPECT_EQ(back->reason, "Resources");
  EXPECT_EQ(back->script, "/x/job.sbatch");
  EXPECT_EQ(db.slurm_jobs(sweep).size(), 1u);
  EXPECT_TRUE(db.slurm_jobs(sweep + 1).empty());
  sql(path, "PRAGMA foreign_keys=ON; DELETE FROM runs WHERE id = " + std::to_string(run));
  EXPECT_EQ(sql_text(path, "SELECT count(*) FROM slurm_jobs"), "0");
  EXPECT_EQ(sql_text(path, "PRAGMA integrity_check"), "ok");
}

TEST(Results, MigratesAVersion5DatabaseToPredictions) {
  const auto d = fresh_dir("migrate_v5");
  const auto path = d / "v5.db";
  int64_t old_run = 0;
  {
    ResultsDb db(path.string());
    old_run = db.insert_run(full_run(db.upsert_sweep("s", ""), "old"));
  }
  sql(path, "ALTER TABLE steps DROP COLUMN moe_load_cv; ALTER TABLE steps DROP COLUMN moe_load_min; "
            "ALTER TABLE steps DROP COLUMN moe_load_max; ALTER TABLE steps DROP COLUMN moe_ep_imbalance; "
            "ALTER TABLE summaries DROP COLUMN moe_ep_imbalance; "
            "DROP TABLE predictions; DROP TABLE slurm_jobs; ALTER TABLE sweeps DROP COLUMN spec_path; "
            "ALTER TABLE validation DROP COLUMN train_tokens; ALTER TABLE validation DROP COLUMN elapsed_s; "
            + std::string(ctitan::testing::kUndoSchemaV13) +
            "ALTER TABLE summaries DROP COLUMN seed; ALTER TABLE summaries DROP COLUMN validation_loss_final; "
            "ALTER TABLE summaries DROP COLUMN target_loss; ALTER TABLE summaries DROP COLUMN tokens_to_target; "
            "ALTER TABLE summaries DROP COLUMN time_to_target_s; "
            "UPDATE schema_version SET version = 5;");
  ASSERT_EQ(sql_text(path, "SELECT count(*) FROM sqlite_master WHERE name = 'predictions'"), "0");

  ResultsDb db(path.string());
  EXPECT_EQ(db.schema_version(), ResultsDb::kSchemaVersion);
  ASSERT_TRUE(db.run(old_run));
  EXPECT_EQ(db.run(old_run)->label, "old");
  EXPECT_FALSE(db.prediction(old_run));

  ctitan::PredictionRow p;
  p.hardware = "cpu";
  p.calibration = "uncalibrated: maker's figures";
  p.tps = 1234.5;
  p.step_time_s = 0.25;
  p.mfu = 1.5;
  p.mem_peak_bytes = int64_t{3} << 30;
  p.detail_json = R"({"hardware":"cpu"})";
  p.plan_index = 4;
  p.tps_prior = 2000.0;
  p.tps_low = 1100.0;
  p.tps_high = 1400.0;
  p.learned_from = 6;
  const int64_t id = db.insert_run(full_run(1, "new"), p);
  const auto back = db.prediction(id);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->run_id, id);
  EXPECT_EQ(back->hardware, "cpu");
  EXPECT_EQ(back->calibration, "uncalibrated: maker's figures");
  EXPECT_EQ(back->tps, 1234.5);
  EXPECT_EQ(back->step_time_s, 0.25);
  EXPECT_EQ(back->mfu, 1.5);
  EXPECT_EQ(back->mem_peak_bytes, int64_t{3} << 30);
  EXPECT_EQ(back->detail_json, R"({"hardware":"cpu"})");
  EXPECT_EQ(back->plan_index, 4);
  EXPECT_EQ(back->tps_prior, 2000.0);
  EXPECT_EQ(back->tps_low, 1100.0);
  EXPECT_EQ(back->tps_high, 1400.0);
  EXPECT_EQ(back->learned_from, 6);
  EXPECT_FALSE(back->tps_after);
  ctitan::PredictionRow after = *back;
  after.tps_after = 1250.0;  // the refit that took the run in
  db.put_prediction(after);
  EXPECT_EQ(db.prediction(id)->tps_after, 1250.0);
  EXPECT_EQ(db.prediction(id)->tps_prior, 2000.0);
  // A point the planner could not predict: a row with no figures.
  ctitan::PredictionRow none;
  none.plan_index = 0;
  const int64_t bare = db.insert_run(full_run(1, "bare"), none);
  ASSERT_TRUE(db.prediction(bare));
  EXPECT_FALSE(db.prediction(bare)->tps);
  EXPECT_FALSE(db.prediction(bare)->mem_peak_bytes);
  sql(path, "PRAGMA foreign_keys=ON; DELETE FROM runs WHERE id = " + std::to_string(id));
  EXPECT_EQ(sql_text(path, "SELECT count(*) FROM predictions"), "1");
  EXPECT_EQ(sql_text(path, "PRAGMA integrity_check"), "ok");
}

// Files ctitan must not touch: each is rejected with one line naming the
// file and what to do, and is left byte for byte as it was.
struct ForeignFile {
  std::string name;
  std::function<void(const fs::path&)> make;
  std::string expect;
};
void PrintTo(const ForeignFile& f, std::ostream* os) { *os << f.name; }

class ResultsRejects : public ::testing::TestWithParam<ForeignFile> {};

TEST_P(ResultsRejects, WithOneLineAndLeavesTheFileByteIdentical) {
  const auto d = fresh_dir("reject_" + GetParam().name);
  const auto path = d / "file.db";
  GetParam().make(path);
  const std::string before = file_bytes(path);
  ASSERT_FALSE(before.empty());
  try {
    ResultsDb db(path.string());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(GetParam().expect), std::string::npos) << msg;
  }
  EXPECT_EQ(std::hash<std::string>{}(file_bytes(path)), std::hash<std::string>{}(before));
  EXPECT_EQ(file_bytes(path), before);
  EXPECT_FALSE(fs::exists(path.string() + "-wal"));
  EXPECT_FALSE(fs::exists(path.string() + "-journal"));
}

INSTANTIATE_TEST_SUITE_P(
    Results, ResultsRejects,
    ::testing::Values(
        ForeignFile{"toml", [](const fs::path& p) { write_file(p, "[training]\nsteps = 10\n"); },
                    "is not an SQLite database"},
        ForeignFile{"binary_garbage",
                    [](const fs::path& p) {
                      std::string bytes;
                      for (int i = 0; i < 8192; ++i) bytes.push_back(static_cast<char>(i * 37));
                      write_file(p, bytes);
                    },
                    "is not an SQLite database"},
        ForeignFile{"someone_elses_sqlite",
                    [](const fs::path& p) { sql(p, "CREATE TABLE photos(id, path); INSERT INTO photos VALUES (1, 'a');"); },
                    "not a ctitan results database (tables: photos)"},
        ForeignFile{"newer_schema",
                    [](const fs::path& p) {
                      sql(p, "CREATE TABLE schema_version(version INTEGER); INSERT INTO schema_version VALUES (14);"
                             "CREATE TABLE runs(id INTEGER PRIMARY KEY, shiny_new_column TEXT);");
                    },
                    "newer ctitan (results schema v14, this ctitan reads up to v13)"},
        ForeignFile{"newer_schema_in_wal_mode",
                    [](const fs::path& p) {
                      sql(p, "PRAGMA journal_mode=WAL; CREATE TABLE schema_version(version INTEGER);"
                             "INSERT INTO schema_version VALUES (14);");
                    },
                    "newer ctitan (results schema v14"},
        ForeignFile{"empty_schema_version",
                    [](const fs::path& p) { sql(p, "CREATE TABLE schema_version(version INTEGER);"); },
                    "empty schema_version table"}),
    [](const auto& info) { return info.param.name; });

// Two processes (two `ctitan sweep`s) create and write one database at once:
// the busy timeout serialises their transactions, nothing is lost.
TEST(Results, TwoProcessesWritingOneFileLoseNothing) {
  const auto d = fresh_dir("concurrent");
  const auto path = d / "shared.db";
  const auto run_dir = d / "run";
  make_run_dir(run_dir);
  constexpr int kRunsPerProcess = 60;
  int gate[2];
  ASSERT_EQ(pipe(gate), 0);
  std::vector<pid_t> children;
  for (int child = 0; child < 2; ++child) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(gate[1]);
      char c;
      if (read(gate[0], &c, 1) != 0) _exit(3);  // both start when the parent closes the gate
      int code = 0;
      try {
        ResultsDb db(path.string());  // both may be the one that creates it
        const int64_t sweep = db.upsert_sweep("shared", "");
        for (int i = 0; i < kRunsPerProcess; ++i) {
          RunRow r = full_run(sweep, "p" + std::to_string(child) + "-" + std::to_string(i));
          r.id = db.insert_run(r);
          if (i % 10 == 0) db.ingest_run_dir(r.id, run_dir.string());
          r.status = "ok";
          db.update_run(r);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", child, e.what());
        code = 1;
      }
      _exit(code);
    }
    children.push_back(pid);
  }
  close(gate[0]);
  close(gate[1]);
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child exit status " << status;
  }
  ResultsDb db(path.string());
  EXPECT_EQ(db.sweeps().size(), 1u);
  const auto runs = db.runs();
  ASSERT_EQ(runs.size(), 2u * kRunsPerProcess);
  std::set<std::string> labels;
  for (const RunRow& r : runs) {
    labels.insert(r.label);
    EXPECT_EQ(r.status, "ok");
  }
  EXPECT_EQ(labels.size(), 2u * kRunsPerProcess);
  EXPECT_EQ(sql_text(path, "SELECT count(*) FROM steps"), std::to_string(2 * (kRunsPerProcess / 10) * 3));
  EXPECT_EQ(sql_text(path, "PRAGMA integrity_check"), "ok");
  EXPECT_EQ(sql_text(path, "PRAGMA foreign_key_check"), "");
}
