// What the two sweep drivers share (harness/sweep.cpp runs points here,
// harness/sweep_slurm.cpp submits them to Slurm): the stop-signal flag, the
// per-(point, repeat) claim, and SweepBook — the database side of a sweep
// (which runs are already recorded, the rows a run gets, its folder).
// Internal to harness/.
#pragma once

#include <signal.h>

#include <filesystem>
#include <optional>
#include <string>

#include "common/utc_time.h"  // utc_now: the stamps of runs and jobs
#include "harness/sweep.h"
#include "results/results_db.h"

namespace ctitan::sweep_detail {

// SIGINT/SIGTERM set a flag for the lifetime of the object (and reset it
// when it is made); the loops poll stop_requests().
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {};
};
int stop_requests();  // signals received since the StopSignals was made
int stop_signal();    // the last one (SIGINT or SIGTERM)

// <db>.runs/<sweep>: the folder of a sweep's runs, after check_sweep_name
// and a check that it resolves (weakly_canonical: a symlink counts) to a
// folder directly inside <db>.runs. InputError otherwise; creates nothing.
std::filesystem::path sweep_runs_folder(const std::string& db_path, const std::string& sweep);

// Whether a failed run's error (or its ingest notes) says its disk is full
// (ENOSPC, EDQUOT, SQLite's "disk is full"), or the filesystem holding `dir`
// has less than 1 MiB left.
bool disk_full(const std::string& text, const std::string& dir);
// The last `max_lines` non-empty lines of a file (its last 16 KiB at most).
std::string tail_lines(const std::string& path, size_t max_lines);

// An exclusive claim on one (point, repeat) across processes. flock dies
// with its process, so a killed sweep never leaves a stale claim behind.
class Claim {
 public:
  explicit Claim(const std::filesystem::path& path);
  ~Claim();
  Claim(const Claim&) = delete;
  Claim& operator=(const Claim&) = delete;
  bool try_lock();
  // Waits for the claim; false when a stop signal came first.
  bool lock_unless_stopped();

 private:
  int fd_ = -1;
};

// A (point, repeat) as the database has it for this sweep.
struct Recorded {
  // Set: nothing to run — this sweep has it ok, another sweep's ok run was
  // shared into it (recorded now), or a failure kept without retry_failed.
  // An infeasible row is never final: the point was planned again and is
  // feasible now (a fixed spec, more memory), so it runs.
  std::optional<std::string> final_status;
  std::optional<RunRow> mine;  // this sweep's newest row for it (before a shared one)
};

class SweepBook {
 public:
  // Opens the sweep's row: InputError when the database has a sweep of this
  // name run from a different spec (spec_difference), nothing written.
  SweepBook(const SweepSpec& spec, const SweepOptions& opts, ResultsDb& db);

  int64_t sweep_id() const { return sweep_id_; }
  ResultsDb& db() { return db_; }
  const SweepSpec& spec() const { return spec_; }
  const SweepOptions& opts() const { return opts_; }

  // Records a point the planner rejects, with its reason: again when the
  // reason changed since it was last recorded, not over an ok run of it.
  void record_infeasible(const SweepPoint& pt);
  // Call with the claim held.
  Recorded recorded(const SweepPoint& pt, int repeat);
  // A fresh run folder (an earlier attempt's is removed: a cancelled or
  // failed run must not be resumed from its checkpoint) holding point.toml;
  // returns the folder.
  std::string prepare_run_dir(const SweepPoint& pt, int repeat) const;
  // The config run `repeat` of `pt` trains: the point's, with [quality]
  // its own seed (the point's debug.seed + repeat).
  JobConfig run_config(const SweepPoint& pt, int repeat) const;
  // A row for a run of (pt, repeat) in this sweep, with its prediction.
  RunRow new_row(const SweepPoint& pt, int repeat) const;
  void insert(RunRow& row, const SweepPoint& pt);  // sets row.id
  // Reads the run folder into the database; a partial folder is still a
  // recorded run (a warning, not an error). A fault of the database
  // (ResultsDbError: disk full, damaged) is thrown.
  IngestReport ingest(int64_t run_id, const std::string& dir);
  // An "ok" outcome whose folder left no summary.json is "failed": "ok" in
  // the database means the run's numbers are there.
  static Outcome vet(Outcome o, const IngestReport& ingested);
  // Best effort, for a run whose sweep stops on an exception: the row is
  // marked cancelled (a rerun runs it again). When even that write fails,
  // the row stays running and the next invocation finds it unclaimed.
  void abandon(RunRow& row, const std::string& why) noexcept;
  std::filesystem::path lock_path(const std::string& key, int repeat) const;

 private:
  const SweepSpec& spec_;
  const SweepOptions& opts_;
  ResultsDb& db_;
  const std::string host_;
  const std::filesystem::path locks_;
  int64_t sweep_id_ = 0;
};

}  // namespace ctitan::sweep_detail
