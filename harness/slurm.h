// Slurm as a sweep's launcher: the options ([slurm] in a spec, or flags),
// the sbatch script of one run, the client commands (sbatch, squeue,
// scontrol, sacct, scancel — argument vectors, never a shell string) and
// the mapping of Slurm's job states to run statuses.
//
// ctitan schedules nothing itself: every run of a point is one batch job
//   sbatch <run dir>/job.sbatch      →  srun ctitan train --job.config_file <run dir>/point.toml
// with the run directory on the filesystem the nodes share (the database's
// <db>.runs/ folder), and the sweep follows what Slurm does with it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/subprocess.h"

namespace ctitan {

struct SlurmOptions {
  std::string partition, account, qos;  // "": the cluster's default
  std::string time;                     // sbatch --time; "": from the spec's timeout_s
  int gpus_per_node = 0;                // 0: CPU nodes (one task per rank, one node unless tasks_per_node)
  int tasks_per_node = 0;               // ranks per node; 0: gpus_per_node, or (CPU) the whole world size
  int cpus_per_task = 0;                // 0: Slurm's default
  int max_queued = 16;                  // jobs submitted and not finished at once
  std::vector<std::string> sbatch_lines;  // extra "#SBATCH ..." options, as written after #SBATCH
  std::string where;                    // "spec.toml:12" or "--flags", for messages
};

// [slurm] keys, for the spec parser and its messages.
const std::vector<std::string>& slurm_keys();

// The layout of one run as a Slurm allocation.
struct SlurmShape {
  int nodes = 1, tasks_per_node = 1, gpus_per_node = 0;
};
// nodes = world size / ranks per node. "" when it fits, else the reason
// (a world size that does not fill whole nodes).
std::string slurm_shape(const SlurmOptions& o, int world_size, SlurmShape& shape);

// "HH:MM:SS" (or "D-HH:MM:SS") for sbatch --time from seconds, rounded up to
// the minute (Slurm's granularity). InputError for a non-positive value.
std::string slurm_time(double seconds);

// What the batch script runs and where it writes.
struct SlurmJob {
  std::string name;        // --job-name, unique per run: re-attach finds a job by it
  std::string run_dir;     // --chdir, stdout.log / stderr.log, slurm_exit
  std::vector<std::string> train_argv;  // the command each task runs (srun prepends itself)
  SlurmShape shape;
  std::string time;        // --time
};

// The script's text: #SBATCH lines (values double-quoted where they need
// it; InputError for a value Slurm cannot take: a newline, a '"'), then
// `srun <argv>` with every word shell-quoted, then the srun exit status
// written to <run dir>/slurm_exit (atomically, by rename).
std::string sbatch_script(const SlurmOptions& o, const SlurmJob& job);

// The Slurm commands, found on PATH; each call is bounded in time.
class SlurmClient {
 public:
  explicit SlurmClient(std::chrono::seconds timeout = std::chrono::seconds(60)) : timeout_(timeout) {}

  // Before a sweep writes anything: sbatch/squeue/scontrol/scancel exist,
  // the controller answers, and `sbatch --test-only` accepts the options
  // (partition, account, qos, shape). InputError with one line otherwise:
  // the command and its own message.
  void preflight(const SlurmOptions& o, const SlurmShape& shape, const std::string& time) const;

  // Submits the script; returns the job id. InputError (sbatch's message)
  // when Slurm refuses it; std::runtime_error when sbatch cannot be run.
  std::string submit(const std::string& script_path) const;

  struct JobState {
    std::string id;
    std::string state;   // Slurm's: PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, ...
    std::string reason;  // Slurm's reason ("TimeLimit", "Resources", "None", ...)
    std::string exit_code;  // "2:0" (exit:signal) where known
    std::string nodes;
  };
  // The states of `ids` that Slurm still knows: squeue (all states), then
  // `scontrol show job` for the ones squeue left out, then sacct where
  // accounting is on. Ids it knows nothing of are absent from the result.
  // std::runtime_error when the controller does not answer.
  std::vector<JobState> states(const std::vector<std::string>& ids) const;
  // Jobs of this user named `name` (any state): re-attach after a driver
  // died between sbatch and recording the job id.
  std::vector<std::string> jobs_named(const std::string& name) const;
  // scancel; returns scancel's message on failure ("" when it succeeded).
  std::string cancel(const std::vector<std::string>& ids) const;

 private:
  CommandResult run(const std::vector<std::string>& argv) const;
  std::chrono::seconds timeout_;
};

// A run status for a Slurm job state. Terminal states give ok, failed,
// timeout, oom, cancelled; PENDING/REQUEUED/... → pending, RUNNING/
// COMPLETING/... → running. NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE are
// failed (with the reason) unless Slurm requeues the job, which shows as
// PENDING again.
std::string run_status_of(const std::string& slurm_state);
bool slurm_state_is_final(const std::string& slurm_state);

}  // namespace ctitan
