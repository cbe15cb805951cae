// The results database: every sweep, run, step and summary ctitan measures,
// in one SQLite file (the C API; no hand-written file format).
//
// Schema (docs/results.md documents it for users of the sqlite3 shell):
//   schema_version(version)
//   sweeps(id, name, spec_toml, created_at, ctitan_version, git_sha, paired_with,
//          spec_path)
//   runs(id, sweep_id, point_key, label, config_toml, config_hash, world_size,
//        repeat, status, exit_code, error, run_dir, host, started_at, ended_at)
//   steps(run_id, rank, step, loss, grad_norm, tps, tflops, mfu, step_time_s,
//         data_time_s, mem_peak_bytes)
//   summaries(run_id, tps_median, tps_p10, tps_p90, tflops, mfu,
//             mem_peak_bytes, loss_final, compute_s, comm_s, exposed_comm_s, idle_s)
//   validation(run_id, step, loss, perplexity, tokens, time_s, tps, mem_peak_bytes, train_tokens, elapsed_s)
//   predictions(run_id, hardware, calibration, step_time_s, tps, mfu,
//               mem_peak_bytes, detail_json, plan_index, tps_prior, tps_low,
//               tps_high, learned_from, tps_after)
//   slurm_jobs(run_id, job_id, job_name, state, reason, script, submitted_at,
//              updated_at)  (runs a sweep submitted with --launcher slurm)
//   env(run_id, key, value)
//   hardware(host_fingerprint, dtype, peak_flops, measured_at)
//   artifacts(run_id, kind, path)
// status ∈ pending, running, ok, failed, timeout, oom, infeasible, cancelled
// (pending: recorded and not started; under Slurm, queued).
//
// Every write is one transaction; the file is in WAL mode so readers (a
// report, the sqlite3 shell) never block a running sweep. Opening an older
// file migrates it forward inside a transaction; a file that is not a
// ctitan database (or is newer than this ctitan) is an InputError naming
// it, and nothing in it is changed. Prepared statements only.
//
// Faults of the file itself (disk full, damaged pages or a missing table,
// a read-only file) are ResultsDbError: one line naming the file and what
// to do. The transaction that met the fault is rolled back, so the file
// stays consistent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/errors.h"

struct sqlite3;

namespace ctitan {

// A fault of the database file rather than of a value passed in: the disk
// is full, the file is damaged (a malformed page, a missing table), it is
// read-only where a write was needed, or an I/O error. what() is one line
// naming the file and what to do; an InputError, so `ctitan` exits 2.
class ResultsDbError : public InputError {
 public:
  using InputError::InputError;
};

struct SweepRow {
  int64_t id = 0;
  std::string name, spec_toml, created_at, ctitan_version, git_sha;
  // The baseline sweep this one ran in pairs with (`ctitan gate --run`: each
  // of its runs back to back with the baseline's run of the same point and
  // repeat); "" for a sweep run on its own.
  std::string paired_with;
  // The spec file the sweep was last run from (absolute); "" when unknown
  // (recorded before schema v8, or a sweep made through the API).
  std::string spec_path;
};

struct RunRow {
  int64_t id = 0;
  int64_t sweep_id = 0;          // 0: not part of a sweep
  std::string point_key;         // stable hash of (resolved config, world size, ctitan version)
  std::string label;             // the recipe's varying keys, e.g. "compile.enable=true float8=tensorwise"
  std::string config_toml, config_hash;
  int64_t world_size = 1, repeat = 0;
  std::string status = "pending";
  std::optional<int64_t> exit_code;
  std::string error;             // one line: cause, or the last lines of stderr
  std::string run_dir, host, started_at, ended_at;
};

struct SummaryRow {
  int64_t run_id = 0;
  std::optional<double> tps_median, tps_p10, tps_p90, tflops, mfu, loss_final;
  std::optional<double> compute_s, comm_s, exposed_comm_s, idle_s;
  std::optional<int64_t> mem_peak_bytes;
  std::optional<double> pipeline_bubble, pipeline_bubble_theory;  // pipeline parallelism only
  std::optional<double> moe_ep_imbalance;  // expert parallelism only: busiest rank's routed rows / the mean
  // summary.json's quality ([validation] runs): the seed, the last pass's
  // loss, the target and when it was first reached (unset: not reached).
  std::optional<int64_t> seed;
  std::optional<double> validation_loss_final, target_loss, tokens_to_target, time_to_target_s;
  // summary.json's stragglers (multi-rank runs with metrics.rank_timing).
  std::optional<int64_t> straggler_rank;
  std::optional<double> straggler_persistence, straggler_share, straggler_spread_s;
  std::optional<bool> straggler_marked;
  // summary.json's goodput: the process's wall clock, steady steps' share of it.
  std::optional<double> wall_s, goodput;
  std::optional<int64_t> steady_tokens;  // the global batch's tokens of its steady steps
  // The peak MFU divides by (none: unknown, and no MFU) and its source
  // ("table:H100 SXM", "measured", "override", "unknown"); the MFU with
  // each GEMM at its dtype's peak; the MFU of the visible attention pairs.
  std::optional<double> peak_flops;
  std::optional<std::string> peak_flops_source;
  std::optional<double> mfu_by_dtype, useful_mfu;
};

// One rank's times in one steady step (summary.json's stragglers.by_step).
struct RankStepRow {
  int64_t step = 0;
  int rank = 0;
  std::optional<double> busy_s, data_s, exposed_comm_s;
};

// The planner's prediction for a run (planner/plan.h), stored by a sweep
// for each run it records: what the measurement is compared with. A point
// the planner could not predict (its layout does not fit the model) has a
// row with no figures; runs.error says why.
// The Slurm batch job of a run (`ctitan sweep --launcher slurm`). The row
// is written with an empty job_id before sbatch runs, so a driver killed
// between the two finds the job again by its unique name.
struct SlurmJobRow {
  int64_t run_id = 0;
  std::string job_id;        // "" until sbatch answered
  std::string job_name;      // --job-name, unique per run
  std::string state, reason;  // Slurm's, as last seen (PENDING / Resources, COMPLETED / None, ...)
  std::string script;        // the sbatch file
  std::string submitted_at, updated_at;
};

struct PredictionRow {
  int64_t run_id = 0;
  std::string hardware;                         // the hardware spec's name ("" without a prediction)
  std::string calibration;                      // the spec's calibration source
  std::optional<double> step_time_s, tps, mfu;  // tps: tokens/s per device; none: throughput not predicted
  std::optional<int64_t> mem_peak_bytes;        // per rank (the largest)
  std::string detail_json;                      // to_json(Prediction): every figure broken down
  std::optional<int64_t> plan_index;            // the point's place in the spec's expansion (0-based)
  // A learning sweep (harness/sweep_learn.h): tokens/s per device as the
  // spec predicted it before the sweep measured anything; the 80 % interval
  // of `tps`; the measured points `tps` was refitted on (0: the spec as
  // written); `tps` again after the refit that took this run's measurement.
  std::optional<double> tps_prior, tps_low, tps_high, tps_after;
  std::optional<int64_t> learned_from;
};

struct IngestReport {
  int64_t steps = 0;            // step rows stored
  int64_t validations = 0;      // validation rows stored
  int64_t artifacts = 0;        // artifact rows stored
  bool partial = false;         // summary.json or metrics.jsonl missing/truncated
  std::vector<std::string> notes;  // what was missing, one line each
  std::string summary_status;   // summary.json's "status" ("ok", "interrupted"); empty without one
};

// A file or folder a run left behind. kind ∈ config, metrics, summary, env,
// trace, comm_trace, memory_snapshot, checkpoint, log; path is absolute.
struct ArtifactRow {
  std::string kind, path;
};

// One connection to one file. Not thread-safe: give each thread (and each
// process) its own ResultsDb; SQLite's file locks and the busy timeout
// serialise their writes. Faults of the file throw ResultsDbError (above);
// other SQLite failures (still locked after the busy timeout) throw
// std::runtime_error naming the file.
class ResultsDb {
 public:
  static constexpr int kSchemaVersion = 13;
  // How long a statement waits for another process's write to finish.
  static constexpr int kBusyTimeoutMs = 10000;
  // read_write: opens (creating if absent) and migrates; a read-only file is
  // a ResultsDbError. read_only (`ctitan report`, `gate`, `db`): the file
  // must exist; opened with SQLITE_OPEN_READONLY, nothing is written (no WAL
  // switch), so a file on a read-only filesystem can be read. An older file
  // is read through a migrated copy in memory and left as it was; an empty
  // one is an InputError. Either way: InputError for a file that is not a
  // ctitan results database or was written by a newer schema, and
  // ResultsDbError for one whose tables are missing (damaged).
  enum class Access { read_write, read_only };
  explicit ResultsDb(const std::string& path, Access access = Access::read_write);
  ~ResultsDb();
  ResultsDb(const ResultsDb&) = delete;
  ResultsDb& operator=(const ResultsDb&) = delete;

  const std::string& path() const { return path_; }
  int schema_version() const;

  // Sweeps: the same name returns the existing id (a rerun resumes it) and
  // keeps the first spec_toml.
  int64_t upsert_sweep(const std::string& name, const std::string& spec_toml);
  // The sweep `name` as `ctitan sweep` opens it, in one write transaction:
  // an existing row is passed to `check` first (which throws to refuse it:
  // nothing is written), then takes spec_toml and spec_path (the spec as
  // last run); a new one is created with them. Returns the row as it was
  // before (id set; for a new sweep, the new values).
  SweepRow open_sweep(const std::string& name, const std::string& spec_toml, const std::string& spec_path,
                      const std::function<void(const SweepRow&)>& check);
  std::optional<SweepRow> sweep(const std::string& name) const;
  std::vector<SweepRow> sweeps() const;
  // Records that `candidate`'s runs were paired with `baseline`'s (both exist).
  void set_paired_with(const std::string& candidate, const std::string& baseline);

  // Runs. With a prediction, the run and its prediction are one transaction.
  int64_t insert_run(const RunRow& r);       // returns the new id
  int64_t insert_run(const RunRow& r, const std::optional<PredictionRow>& prediction);
  void update_run(const RunRow& r);          // by id: status, exit code, error, times, run_dir, host
  std::optional<RunRow> run(int64_t id) const;
  std::vector<RunRow> runs(int64_t sweep_id = -1) const;  // -1: all; 0: runs of no sweep
  // Runs of a point (any sweep) with this status, newest first.
  std::vector<RunRow> runs_of_point(const std::string& point_key, const std::string& status = "") const;

  // Reads a run directory (metrics.jsonl, summary.json, env.json, traces)
  // into steps / summaries / env / artifacts for `run_id`, replacing what
  // was stored for it before — one transaction. A partial directory (a
  // crashed run) stores what it has and says so in the report. InputError
  // when run_id is not in the database. The run row itself is not changed.
  IngestReport ingest_run_dir(int64_t run_id, const std::string& run_dir);

  // Replaces the summary of run_id (e.g. trace analysis filling compute_s).
  void put_summary(const SummaryRow& s);
  std::optional<SummaryRow> summary(int64_t run_id) const;
  std::vector<nlohmann::json> steps(int64_t run_id) const;  // one object per row
  std::vector<nlohmann::json> validation(int64_t run_id) const;  // one object per validation pass, by step
  // summary.json's goodput parts ("init_s", ... in common/run_timing.h's order), empty when none.
  std::vector<std::pair<std::string, double>> goodput(int64_t run_id) const;
  std::vector<RankStepRow> rank_steps(int64_t run_id) const;  // by step, then rank
  std::vector<std::pair<std::string, std::string>> env(int64_t run_id) const;  // sorted by key
  std::vector<ArtifactRow> artifacts(int64_t run_id) const;                  // sorted by path

  // Replaces the prediction of run_id; nullopt for a run without one (a run
  // recorded before schema v6, or outside a sweep).
  void put_prediction(const PredictionRow& p);
  std::optional<PredictionRow> prediction(int64_t run_id) const;

  // Slurm jobs: the row of run_id replaced; the jobs of a sweep's runs.
  void put_slurm_job(const SlurmJobRow& j);
  std::optional<SlurmJobRow> slurm_job(int64_t run_id) const;
  std::vector<SlurmJobRow> slurm_jobs(int64_t sweep_id) const;

  // Measured peak FLOPs per host fingerprint and dtype.
  void put_hardware(const std::string& host_fingerprint, const std::string& dtype, double peak_flops);
  std::optional<double> hardware_peak(const std::string& host_fingerprint, const std::string& dtype) const;

 private:
  void write_prediction(const PredictionRow& p);  // inside the caller's transaction

  std::string path_;
  sqlite3* db_ = nullptr;
};

}  // namespace ctitan
