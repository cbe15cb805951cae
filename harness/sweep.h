// Running a planned sweep: one supervised `ctitan train` / `ctitan launch`
// per (point, repeat), each in its own process group and run directory,
// recorded in the results database so that a rerun resumes.
//
// Contract of run_sweep():
//   - runs go in the order of `points` (`ctitan sweep`: order_by_prediction),
//     repeat-major (A B C A B C): machine drift spreads
//     over every point instead of landing on one;
//   - the sweep learns as it runs (harness/sweep_learn.h): after each point
//     it measures, the planner is refitted on the sweep's measurements and
//     the points still to run are predicted again, reordered fastest first
//     within their repeat and checked again against the memory budget (one
//     now too large is recorded infeasible); each run's stored prediction
//     is the one made just before it ran;
//   - every invocation plans the points again: infeasible means "the
//     planner proves it cannot run" now, so a point recorded infeasible
//     before and feasible now runs, and one infeasible now is recorded;
//   - a (point, repeat) with an ok run in the database (this sweep or any
//     other: the key says it is the same measurement) is not run again; a
//     failed / timeout / oom one is retried only with retry_failed;
//   - a sweep name already in the database with a different spec (outside
//     what a resume may change: timeout_s, memory_budget_gb, hardware,
//     launcher, repeats, [slurm], [published]) is an InputError, before
//     anything is written; run folders stay inside <db>.runs;
//   - each (point, repeat) is claimed with an flock on
//     <db>.runs/.locks/<key>-r<repeat>.lock, so two sweeps on one database
//     never run the same thing twice; a "running" row whose lock is free was
//     left by a sweep that died, and is marked cancelled and rerun;
//   - SIGINT/SIGTERM stop the current run (SIGTERM to its group, SIGKILL
//     after a grace period; a second signal kills at once), mark it
//     cancelled and return kExitInterrupted; every database write is one
//     transaction, so the file is consistent at any moment;
//   - a full disk (the database's, or a run that could not write its
//     folder) ends the sweep with one InputError line: the run under way is
//     recorded cancelled where the database can still be written (else its
//     row stays running, unclaimed, and the next invocation marks it), and
//     the same command continues once there is space.
// Installs SIGINT/SIGTERM handlers for its duration (restored on return).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/slurm.h"
#include "harness/sweep_spec.h"

namespace ctitan {

constexpr int kExitRunsFailed = 3;    // the sweep finished; some runs failed, timed out or ran out of memory
constexpr int kExitInterrupted = 130;

// How a supervised child ended.
struct ChildExit {
  int exit_code = 0;    // exit status, or 128 + signal when a signal killed it
  int term_signal = 0;  // the signal that killed it, 0 if it exited
  bool timed_out = false;
  bool cancelled = false;  // stopped because the sweep got SIGINT/SIGTERM
  double seconds = 0;
  std::string stderr_tail;  // the last lines of its stderr
};

// Runs argv (argv[0] an executable path) in a new process group with stdin
// /dev/null and stdout/stderr to the given files, until it exits. At the
// deadline or on a stop signal: SIGTERM to the group, SIGKILL `grace` later.
// The group is swept with SIGKILL once the child exits; the child has
// PR_SET_PDEATHSIG so it dies with us. `tick` runs about 10 times a second.
// (common/subprocess.h's spawn() and supervise_group(), with the sweep's
// stop signals.)
ChildExit supervise(const std::vector<std::string>& argv, const std::string& stdout_path,
                    const std::string& stderr_path, double timeout_s, std::chrono::seconds grace,
                    const std::function<void()>& tick = {});

struct Outcome {
  std::string status;  // ok, failed, timeout, oom, infeasible, cancelled
  std::optional<int64_t> exit_code;
  std::string error;  // first line: the cause; then the last lines of stderr
};

// Rules, first match wins: stopped by the sweep → cancelled; past the
// deadline → timeout; exit 0 → ok; an allocation failure in stderr, or
// SIGKILL we did not send (the kernel's OOM killer) → oom; exit 2 (the
// trainer's "bad input": a data file not there yet, ...) → failed, with the
// trainer's one line first (infeasible is the planner's word only);
// SIGINT/SIGTERM from elsewhere → cancelled; anything else → failed.
Outcome classify(const ChildExit& e, double timeout_s);

struct SweepOptions {
  std::string db_path;
  bool retry_failed = false;
  // The ctitan binary whose `train` / `launch` runs the points (its build id
  // must be the one the points were planned with); empty: this binary.
  std::string binary;
  // Take an ok run of the same point key from another sweep instead of
  // running it. Off for paired A/B runs: an A/A pair must be two runs.
  bool share = true;
  std::chrono::seconds grace{15};  // SIGTERM → SIGKILL; ranks finish their step and write summary.json
};

// Runs the sweep (see the contract above); returns 0 when every point is ok
// or infeasible, kExitRunsFailed, or kExitInterrupted. The sweep name and
// its run folder are checked, then the results database is opened: a file
// that is not one is an InputError, untouched.
int run_sweep(const SweepSpec& spec, const std::vector<SweepPoint>& points, const SweepOptions& opts);

// The same sweep with Slurm as the launcher (harness/sweep_slurm.cpp): each
// (point, repeat) still to run becomes one batch job (harness/slurm.h),
// at most slurm.max_queued of them in Slurm at once, in the same order and
// with the same resume rules as run_sweep. Before the database is opened,
// the Slurm commands and the options are checked (SlurmClient::preflight):
// InputError, nothing submitted, nothing written. The job ids are stored
// (slurm_jobs); the driver polls Slurm with back-off, ingests each finished
// run folder and maps the job's state to the run's status. Stopped
// (SIGINT/SIGTERM/SIGKILL), it leaves the jobs to Slurm: a rerun follows
// the recorded jobs instead of submitting them again. Ctrl-C on a terminal
// asks whether to cancel them. Exit codes as run_sweep.
int run_sweep_slurm(const SweepSpec& spec, const std::vector<SweepPoint>& points, const SweepOptions& opts,
                    const SlurmOptions& slurm);
// `ctitan sweep --cancel`: scancels the jobs of the sweep `spec` names that
// are queued or running, and records them cancelled. Returns 0 (also when
// there was nothing to cancel); InputError when the database has no such sweep.
int cancel_sweep_slurm(const SweepSpec& spec, const std::string& db_path);

// Paired, interleaved A/B runs (ctitan gate --run): each side is a sweep
// of its own (its spec's name, points planned for its binary's build id);
// for pair r = 0..pairs-1 and each point, the two sides' runs go back to
// back, in an order drawn per pair from `seed`, so machine drift hits both
// alike. Points must correspond one to one (same labels and world sizes):
// InputError otherwise, before anything runs. Resumes like run_sweep;
// returns what run_sweep returns.
struct PairedSide {
  SweepSpec spec;
  std::vector<SweepPoint> points;
  SweepOptions opts;
};
int run_paired(const PairedSide& base, const PairedSide& cand, int pairs, uint64_t seed);

// Where a run of `point_key` / `repeat` lives: <db>.runs/<sweep>/<key>-r<repeat>.
std::string run_dir_of(const std::string& db_path, const std::string& sweep, const std::string& point_key,
                       int repeat);

// "1m02s", "45.3s", "2h05m": durations in progress lines and summaries.
std::string format_duration(double seconds);

}  // namespace ctitan
