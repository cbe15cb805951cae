#include "harness/sweep_command.h"

#include <cstdio>
#include <iostream>

#include "common/errors.h"
#include "harness/sweep.h"
#include "harness/sweep_spec.h"
#include "planner/hardware.h"

namespace ctitan {
namespace {

struct SweepArgs {
  std::string spec, db, hardware;
  bool dry_run = false, retry_failed = false;
};

SweepArgs parse_sweep_args(const std::vector<std::string>& args) {
  SweepArgs a;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& s = args[i];
    if (s == "--db" || s.rfind("--db=", 0) == 0) {
      if (s != "--db") {
        a.db = s.substr(5);
      } else if (i + 1 < args.size()) {
        a.db = args[++i];
      } else {
        throw InputError("--db needs a file: the results database, e.g. --db results.db");
      }
      if (a.db.empty()) throw InputError("--db needs a file: the results database, e.g. --db results.db");
    } else if (s == "--hardware" || s.rfind("--hardware=", 0) == 0) {
      if (s != "--hardware") {
        a.hardware = s.substr(11);
      } else if (i + 1 < args.size()) {
        a.hardware = args[++i];
      }
      if (a.hardware.empty())
        throw InputError("--hardware needs a spec: a name from recipes/hardware/ (h100_sxm, cpu, ...) or a .toml path");
    } else if (s == "--dry-run") {
      a.dry_run = true;
    } else if (s == "--retry-failed") {
      a.retry_failed = true;
    } else if (s.rfind("-", 0) == 0 || !a.spec.empty()) {
      throw InputError("unknown sweep argument '" + s + "'; run `ctitan sweep --help`");
    } else {
      a.spec = s;
    }
  }
  if (a.spec.empty()) throw InputError("ctitan sweep needs a spec file, e.g. `ctitan sweep recipes/sweeps/debug.toml --db results.db`");
  if (a.db.empty() && !a.dry_run) throw InputError("ctitan sweep needs --db FILE (the results database), or --dry-run");
  return a;
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

std::string sweep_usage() {
  return "usage: ctitan sweep SPEC --db FILE [--dry-run] [--retry-failed] [--hardware NAME]\n"
         "Expands a sweep spec (recipes/sweeps/*.toml; docs/sweeps.md) into points (config x world size),\n"
         "prunes the infeasible ones with their reason (the planner's predicted memory among them), and runs\n"
         "the rest, the highest predicted tokens/s first: world size 1 as `ctitan train`,\n"
         "N as `ctitan launch --nproc N`, each in <FILE>.runs/<sweep>/<point key>-r<repeat>/.\n"
         "A rerun resumes: finished points are skipped; failed ones are retried with --retry-failed.\n"
         "  --db FILE        the SQLite results database (created if absent)\n"
         "  --dry-run        print the points and the reasons for the infeasible ones; run nothing\n"
         "  --retry-failed   run again the points whose last run failed, timed out or ran out of memory\n"
         "  --hardware NAME  the planner's hardware spec to predict on (recipes/hardware/NAME.toml or a path;\n"
         "                   default: [sweep] hardware, else this machine's: cpu, or the GPU's spec)\n"
         "Exit codes: 0 every point ok or infeasible; 3 some runs failed; 130 interrupted; 2 bad input.\n";
}

int sweep_command(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "-h" || a == "--help") {
      std::cout << sweep_usage();
      return 0;
    }
  const SweepArgs a = parse_sweep_args(args);
  SweepSpec spec = load_sweep_spec(a.spec);
  if (!a.hardware.empty()) {
    load_hardware(a.hardware);  // an unknown name: InputError before anything is planned
    spec.hardware = a.hardware;
  }
  const DeviceBudget budget = device_budget(spec);
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
  return run_sweep(spec, points, opts);
}

}  // namespace ctitan
