#include "harness/sweep_command.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>

#include "common/errors.h"
#include "harness/cli.h"
#include "harness/sweep.h"
#include "harness/sweep_spec.h"
#include "planner/hardware.h"

namespace ctitan {
namespace {

struct SweepArgs {
  std::string spec, db, hardware, launcher;
  bool dry_run = false, retry_failed = false, cancel = false;
  // Slurm flags: each overrides its [slurm] key when given.
  std::optional<std::string> partition, account, qos, time;
  std::optional<int> gpus_per_node, tasks_per_node, cpus_per_task, max_queued;
  std::vector<std::string> sbatch_lines;
};

// `ctitan sweep`'s flags and help.
struct SweepCli {
  CLI::App app{"Expands a sweep spec (recipes/sweeps/*.toml; docs/sweeps.md) into points (config x world size),\n"
               "prunes the infeasible ones with their reason (the planner's predicted memory among them), and runs\n"
               "the rest, the highest predicted tokens/s first: world size 1 as `ctitan train`,\n"
               "N as `ctitan launch --nproc N`, each in <FILE>.runs/<sweep>/<point key>-r<repeat>/.\n"
               "A rerun resumes: finished points are skipped; failed ones are retried with --retry-failed.",
               "ctitan sweep"};
  SweepArgs a;

  SweepCli() {
    app.add_option("SPEC", a.spec, "the sweep spec, e.g. recipes/sweeps/debug.toml");
    app.add_option("--db", a.db, "the SQLite results database (created if absent)")->type_name("FILE");
    app.add_flag("--dry-run", a.dry_run, "print the points and the reasons for the infeasible ones; run nothing");
    app.add_flag("--retry-failed", a.retry_failed,
                 "run again the points whose last run failed (a trainer exit 2 included: bad input met at run "
                 "time), timed out or ran out of memory");
    app.add_option("--hardware", a.hardware,
                   "the planner's hardware spec to predict on (recipes/hardware/NAME.toml or a path; default: "
                   "[sweep] hardware, else this machine's: cpu, or the GPU's spec)")
        ->type_name("NAME");
    app.add_option("--launcher", a.launcher,
                   "local (run here) or slurm: one sbatch job per run (srun ctitan train), followed until it ends; "
                   "a rerun re-attaches to the jobs it recorded ([sweep] launcher; docs/slurm.md)")
        ->type_name("local|slurm")
        ->check(one_of({"local", "slurm"}));
    app.add_option("--partition", a.partition, "Slurm partition")->type_name("P");
    app.add_option("--account", a.account, "Slurm account")->type_name("A");
    app.add_option("--qos", a.qos, "Slurm QOS")->type_name("Q");
    app.add_option("--time", a.time, "Slurm time limit per job")->type_name("HH:MM:SS");
    const auto count = [&](const char* flag, std::optional<int>& into, const char* what, int lo, int hi) {
      app.add_option(flag, into, what)->type_name("N")->check(integer_in(lo, hi));
    };
    count("--gpus-per-node", a.gpus_per_node, "GPUs per node, 0..1024", 0, 1024);
    count("--tasks-per-node", a.tasks_per_node, "ranks per node, 1..4096", 1, 4096);
    count("--cpus-per-task", a.cpus_per_task, "CPUs per rank, 1..4096", 1, 4096);
    count("--max-queued", a.max_queued, "jobs in Slurm at once (default 16)", 1, 100000);
    app.add_option("--sbatch", a.sbatch_lines, "an sbatch option, e.g. --sbatch=--exclusive (repeatable)")
        ->type_name("OPTION")
        ->allow_extra_args(false);
    app.add_flag("--cancel", a.cancel, "scancel the sweep's queued and running Slurm jobs, recorded as cancelled");
    app.footer(
        "Forms:\n"
        "  ctitan sweep SPEC --db FILE [--dry-run] [--retry-failed] [--hardware NAME] [--launcher local|slurm]\n"
        "  ctitan sweep SPEC --db FILE --cancel\n"
        "The Slurm flags (--partition ... --sbatch) each override their [slurm] key.\n"
        "Every invocation plans again: a point infeasible before and feasible now runs.\n"
        "Exit codes: 0 every point ok or infeasible (rejected by the planner); 3 some runs failed; 130 interrupted;\n"
        "2 bad input, or a fault of the disk or the database (one line; the same command continues afterwards).");
  }

  SweepArgs parse(const std::vector<std::string>& args) {
    parse_command_line(app, args, "sweep");
    if (a.spec.empty())
      throw InputError("ctitan sweep needs a spec file, e.g. `ctitan sweep recipes/sweeps/debug.toml --db results.db`");
    if (a.db.empty() && (a.cancel || !a.dry_run))
      throw InputError("ctitan sweep needs --db FILE (the results database), or --dry-run");
    return a;
  }
};

// The spec's [slurm] with the flags applied over it.
SlurmOptions slurm_options(const SweepSpec& spec, const SweepArgs& a) {
  SlurmOptions o = spec.slurm;
  if (a.partition) o.partition = *a.partition;
  if (a.account) o.account = *a.account;
  if (a.qos) o.qos = *a.qos;
  if (a.time) o.time = *a.time;
  if (a.gpus_per_node) o.gpus_per_node = *a.gpus_per_node;
  if (a.tasks_per_node) o.tasks_per_node = *a.tasks_per_node;
  if (a.cpus_per_task) o.cpus_per_task = *a.cpus_per_task;
  if (a.max_queued) o.max_queued = *a.max_queued;
  o.sbatch_lines.insert(o.sbatch_lines.end(), a.sbatch_lines.begin(), a.sbatch_lines.end());
  return o;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1ll << 30));
  return buf;
}

// The plan as a table: one row per point, the reason under an infeasible one.
void print_plan(const SweepSpec& spec, const std::vector<SweepPoint>& points, const DeviceBudget& budget) {
  size_t infeasible = 0;
  for (const auto& p : points) infeasible += !p.infeasible.empty();
  std::string sizes;
  for (int w : spec.world_sizes) sizes += (sizes.empty() ? "" : ", ") + std::to_string(w);
  std::cout << "sweep " << spec.name << " (" << spec.path << "), base " << spec.base_path << "\n"
            << points.size() << " points at world sizes " << sizes << ": " << points.size() - infeasible << " to run x "
            << spec.repeats << (spec.repeats == 1 ? " repeat" : " repeats") << ", " << infeasible
            << " infeasible; timeout " << format_duration(spec.timeout_s) << " per run; memory budget "
            << gib(budget.memory_bytes) << " (" << budget.source << ")\n";
  std::printf("%4s  %-16s  %2s  %14s  %9s  %-10s  %s\n", "#", "key", "ws", "pred. tokens/s", "pred. mem", "plan",
              "point");
  std::string on;  // the specs the predictions were made on
  for (size_t i = 0; i < points.size(); ++i) {
    const SweepPoint& p = points[i];
    std::string tps = "-", mem = "-";
    if (p.prediction) {
      char buf[32];
      if (p.prediction->tps_per_device > 0) {
        std::snprintf(buf, sizeof buf, "%.0f", p.prediction->tps_per_device * p.world_size);
        tps = buf;
      }
      mem = gib(static_cast<int64_t>(p.prediction->memory.total));
      const std::string spec_of = p.prediction->hardware + " (" + p.prediction->calibration + ")";
      if (on.find(spec_of) == std::string::npos) on += (on.empty() ? "" : "; ") + spec_of;
    }
    std::printf("%4zu  %-16s  %2d  %14s  %9s  %-10s  %s\n", i + 1, p.key.c_str(), p.world_size, tps.c_str(),
                mem.c_str(), p.infeasible.empty() ? "run" : "infeasible", p.label.empty() ? "(base)" : p.label.c_str());
    if (!p.infeasible.empty()) std::printf("%40s why: %s\n", "", p.infeasible.c_str());
  }
  std::printf("in run order: the highest predicted tokens/s (all ranks) first; pred. mem is per rank; "
              "predicted on %s\n",
              on.empty() ? "nothing (no point could be predicted)" : on.c_str());
  std::fflush(stdout);
}

}  // namespace

int sweep_command(const std::vector<std::string>& args) {
  const SweepArgs a = SweepCli().parse(args);
  SweepSpec spec = load_sweep_spec(a.spec);
  if (spec.published && std::any_of(spec.published->rows.begin(), spec.published->rows.end(),
                                    [&](const PublishedRowSpec& r) { return spec.published->names_own_model(r); }))
    throw InputError("sweep spec error: " + spec.published->where + ": its [published] rows are another framework's "
                     "measurements of a model ctitan's trainer does not build ([published] model); `ctitan plan "
                     "--validate " + spec.path + "` predicts them, a sweep cannot run them");
  if (a.cancel) return cancel_sweep_slurm(spec, a.db);
  if (!a.launcher.empty()) spec.launcher = a.launcher;
  const SlurmOptions slurm = slurm_options(spec, a);
  if (!a.hardware.empty()) {
    load_hardware(a.hardware);  // an unknown name: InputError before anything is planned
    spec.hardware = a.hardware;
  }
  DeviceBudget budget = device_budget(spec);
  if (spec.launcher == "slurm" && slurm.gpus_per_node > 0) {
    // The GPUs are the cluster's, not this (login) node's: any number of
    // nodes, each GPU with the memory of memory_budget_gb or of the spec.
    budget.gpus = std::numeric_limits<int>::max();
    budget.gpu_name = "Slurm nodes of " + std::to_string(slurm.gpus_per_node) + " GPUs";
    if (spec.memory_budget_gb <= 0) {
      const HardwareSpec hw = load_hardware(spec.hardware.empty() ? "h100_sxm" : spec.hardware);
      budget.gpu_memory_bytes = static_cast<int64_t>(hw.memory_bytes);
      budget.source = hw.name + "'s memory";
    }
  }
  std::vector<SweepPoint> points = plan_sweep(spec, budget);
  order_by_prediction(points);
  if (points.empty())
    throw InputError("sweep spec error: " + spec.path + ": no points: every grid point is excluded");
  if (a.dry_run) {
    print_plan(spec, points, budget);
    return 0;
  }
  SweepOptions opts;
  opts.db_path = a.db;
  opts.retry_failed = a.retry_failed;
  if (spec.launcher == "slurm") return run_sweep_slurm(spec, points, opts, slurm);
  return run_sweep(spec, points, opts);
}

}  // namespace ctitan
