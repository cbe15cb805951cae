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

std::string utc_now();
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
  std::optional<std::string> final_status;
  std::optional<RunRow> mine;  // this sweep's newest row for it
};

class SweepBook {
 public:
  SweepBook(const SweepSpec& spec, const SweepOptions& opts, ResultsDb& db);

  int64_t sweep_id() const { return sweep_id_; }
  ResultsDb& db() { return db_; }
  const SweepSpec& spec() const { return spec_; }
  const SweepOptions& opts() const { return opts_; }

  // Records the infeasible points once per sweep, with their reason.
  void record_infeasible(const SweepPoint& pt);
  // Call with the claim held.
  Recorded recorded(const SweepPoint& pt, int repeat);
  // A fresh run folder (an earlier attempt's is removed: a cancelled or
  // failed run must not be resumed from its checkpoint) holding point.toml;
  // returns the folder.
  std::string prepare_run_dir(const SweepPoint& pt, int repeat) const;
  // A row for a run of (pt, repeat) in this sweep, with its prediction.
  RunRow new_row(const SweepPoint& pt, int repeat) const;
  void insert(RunRow& row, const SweepPoint& pt);  // sets row.id
  // Reads the run folder into the database; a partial folder is still a
  // recorded run (a warning, not an error).
  void ingest(int64_t run_id, const std::string& dir);
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
