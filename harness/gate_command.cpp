#include "harness/gate_command.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <iostream>
#include <sstream>

#include "common/errors.h"
#include "common/file_io.h"
#include "harness/cli.h"
#include "harness/gate_run.h"
#include "harness/report_command.h"
#include "harness/sweep.h"
#include "harness/sweep_spec.h"
#include "reports/convergence.h"
#include "reports/format.h"
#include "reports/gate.h"
#include "reports/stats.h"
#include "reports/loss_parity.h"
#include "results/results_db.h"

namespace ctitan {
namespace {

struct GateArgs {
  std::string db, baseline_db, candidate_db;
  std::string baseline, candidate, baseline_file, write_baseline_file;
  std::string md_out, json_out, format = "md";
  bool losses = false;  // loss parity instead of performance
  bool bands = false;   // with losses: the seeds' tolerance bands instead of bit-identity
  GateRunArgs run;      // --run SPEC: paired A/B runs first
  std::string calibrate, calibrate_bin;  // --calibrate SPEC [--bin PATH]: A/A pairs → thresholds
  bool pairs_given = false;
  size_t gate_pairs = 6;  // --calibrate: the pairs the gate will run
  GateOptions opts;
};

// `ctitan gate`'s flags and help.
struct GateCli {
  CLI::App app{"Compares a candidate with a baseline per point (recipe x world size) and metric (tps, step_time,\n"
               "mfu, mem, loss). A regression needs size (beyond the threshold) and significance (Mann-Whitney U at\n"
               "alpha, or a bootstrap CI where the U test cannot reach alpha); too few samples is inconclusive, not a\n"
               "pass.",
               "ctitan gate"};
  GateArgs g;
  double pairs = 0, gate_pairs = 0, seed = 0, min_samples = 0;
  std::vector<std::string> thresholds, metrics;
  CLI::Option* pairs_option = nullptr;

  GateCli() {
    const auto file = [&](const char* flag, std::string& into, const char* what) {
      app.add_option(flag, into, what)->type_name("FILE");
    };
    file("--db", g.db, "results database of both sides (or --baseline-db / --candidate-db)");
    file("--baseline-db", g.baseline_db, "the baseline's results database");
    file("--candidate-db", g.candidate_db, "the candidate's results database");
    app.add_option("--baseline", g.baseline, "the baseline's runs")->type_name("SEL");
    app.add_option("--candidate", g.candidate, "the candidate's runs")->type_name("SEL");
    file("--baseline-file", g.baseline_file, "reference numbers kept in a repo, written by --write-baseline-file");
    file("--write-baseline-file", g.write_baseline_file, "write the baseline's numbers there");
    app.add_option("--run", g.run.spec,
                   "paired A/B: each point's runs alternate baseline/candidate (order drawn per pair from --seed), as "
                   "sweeps <name>-baseline / <name>-candidate (--baseline-sweep, --candidate-sweep); judged on the "
                   "pairs (Wilcoxon)")
        ->type_name("SPEC");
    app.add_option("--baseline-bin", g.run.baseline_bin, "the ctitan binary of the baseline build (default: this one)")
        ->type_name("PATH");
    app.add_option("--candidate-bin", g.run.candidate_bin, "the candidate build's (default: the baseline's)")
        ->type_name("PATH");
    app.add_option("--candidate-override", g.run.candidate_overrides,
                   "the candidate's recipe change (repeatable): two recipes, one binary")
        ->type_name("K=V")
        ->allow_extra_args(false);
    app.add_option("--baseline-sweep", g.run.baseline_sweep, "the baseline's sweep name for --run")->type_name("NAME");
    app.add_option("--candidate-sweep", g.run.candidate_sweep, "the candidate's sweep name for --run")->type_name("NAME");
    pairs_option = app.add_option("--pairs", pairs,
                                  "pairs per point (default 6: the fewest that can reach alpha 0.05; --calibrate: 12)")
                       ->type_name("N")
                       ->check(number_in(1, 1000));
    app.add_option("--seed", seed, "draws the order within each pair (default 0)")->type_name("N")->check(number_in(0, 1e15));
    app.add_flag("--paired", g.opts.paired, "judge two sweeps written by an earlier --run as pairs (by repeat)");
    app.add_option("--calibrate", g.calibrate,
                   "A/A pairs of one build (default 12), then per point and metric the threshold an A/A gate of "
                   "--gate-pairs pairs (default 6) stays within")
        ->type_name("SPEC");
    app.add_option("--bin", g.calibrate_bin, "the ctitan binary --calibrate runs (default: this one)")->type_name("PATH");
    app.add_option("--gate-pairs", gate_pairs, "the pairs the gate will run (--calibrate; default 6)")
        ->type_name("N")
        ->check(number_in(1, 1000));
    app.add_option("--threshold", thresholds,
                   "per metric, optionally per point (fnmatch on 'LABEL ws=N'); repeatable, later wins; defaults "
                   "tps/step_time/mfu/mem 5%, loss 2%")
        ->type_name("[GLOB:]M=X%")
        ->allow_extra_args(false);
    app.add_option("--alpha", g.opts.alpha, "significance level (default 0.05)")->type_name("A")->check(number_in(1e-9, 0.5));
    app.add_option("--min-samples", min_samples,
                   "values per side needed to call a change beyond the threshold (default 3)")
        ->type_name("N")
        ->check(number_in(1, 1e6));
    app.add_option("--metrics", metrics, "only these metrics: tps, step_time, mfu, mem, loss")
        ->type_name("a,b")
        ->delimiter(',')
        ->allow_extra_args(false);
    app.add_flag("--allow-env-mismatch", g.opts.allow_env_mismatch,
                 "report different hardware / LibTorch without failing with 3");
    app.add_flag("--losses", g.losses,
                 "loss parity instead: are the losses bit-identical step by step (a refactor's check, as "
                 "TorchTitan's loss_compare.py --assert-equal)? Exit 0 identical, 1 differ (naming the first step), "
                 "3 missing");
    app.add_flag("--bands", g.bands,
                 "with --losses, for changes that are not bit-identical: each candidate seed's validation loss inside "
                 "the band the baseline's seeds allow (t prediction interval, Bonferroni over the evaluations), and "
                 "tokens to target not significantly more (Welch). Needs runs of a [quality] sweep, 3+ baseline "
                 "seeds. Exit 0 inside, 1 outside or slower, 3 missing, too few seeds or suspiciously fast");
    app.add_option("--format", g.format, "stdout (default md: the PR comment)")
        ->type_name("md|json")
        ->check(one_of({"md", "json"}));
    file("--md", g.md_out, "also write the Markdown summary");
    file("--json", g.json_out, "also write the JSON verdict");
    app.footer(
        "Forms:\n"
        "  ctitan gate --db FILE --baseline SEL --candidate SEL [options]\n"
        "  ctitan gate --db FILE --run SPEC [--baseline-bin PATH] [--candidate-bin PATH]\n"
        "              [--candidate-override KEY=VALUE ...] [--pairs N] [options]\n"
        "  ctitan gate --db FILE --calibrate SPEC [--bin PATH] [--pairs N] [--gate-pairs N]\n"
        "  ctitan gate --db FILE --baseline-file FILE --candidate SEL [options]\n"
        "  ctitan gate --db FILE --baseline SEL --write-baseline-file FILE\n"
        "  ctitan gate --db FILE --baseline SEL --candidate SEL --losses [--bands]\n"
        "SEL: sweep:NAME (or NAME), sha:GITSHA (runs built at that commit), build:ID (runs of that build:\n"
        "     `ctitan version --json`), label:LABEL (that recipe label; two labels pair points by world size)\n"
        "Exit codes: 0 pass, 1 regression, 3 needs action (inconclusive, missing data, different environment),\n"
        "4 improved (better than a threshold, significant: refresh the baseline), 2 bad input.");
  }

  GateArgs parse(const std::vector<std::string>& args) {
    parse_command_line(app, args, "gate");
    if (pairs_option->count() > 0) {
      g.run.pairs = static_cast<int>(pairs);
      g.pairs_given = true;
    }
    if (gate_pairs > 0) g.gate_pairs = static_cast<size_t>(gate_pairs);
    g.run.seed = static_cast<uint64_t>(seed);
    if (min_samples > 0) g.opts.min_samples = static_cast<size_t>(min_samples);
    for (const std::string& t : thresholds) g.opts.thresholds.push_back(parse_threshold_rule(t));
    for (const std::string& m : metrics) {
      const GateMetric* metric = find_gate_metric(m);
      if (!metric)
        throw command_line_error("gate", "--metrics: unknown metric '" + m + "'; metrics: tps, step_time, mfu, mem, loss");
      g.opts.metrics.push_back(metric->name);
    }
    return g;
  }
};

GateArgs parse_gate_args(const std::vector<std::string>& args) {
  GateArgs g = GateCli().parse(args);
  if (g.bands && !g.losses) throw InputError("gate: --bands goes with --losses (ctitan gate --losses --bands ...)");
  if (!g.calibrate.empty()) {  // A/A pairs of one build
    if (g.db.empty()) throw InputError("gate --calibrate needs --db FILE (the results database the A/A runs go into)");
    if (!g.run.spec.empty()) throw InputError("gate: --calibrate and --run are two different jobs; give one");
    g.run.spec = g.calibrate;
    g.run.baseline_bin = g.run.candidate_bin = g.calibrate_bin;
    if (!g.pairs_given) g.run.pairs = 12;
    g.run.db = g.db;
    return g;
  }
  if (!g.calibrate_bin.empty()) throw InputError("gate: --bin goes with --calibrate SPEC");
  if (!g.run.spec.empty()) {  // the sides are the two sweeps the paired run writes
    if (g.db.empty()) throw InputError("gate --run needs --db FILE (the results database both sides go into)");
    if (!g.baseline.empty() || !g.candidate.empty() || !g.baseline_file.empty())
      throw InputError("gate --run chooses both sides itself; drop --baseline/--candidate/--baseline-file");
    g.run.db = g.baseline_db = g.candidate_db = g.db;
    g.opts.paired = true;
    return g;  // the sides are set once the paired run has named its sweeps
  } else if (!g.run.baseline_bin.empty() || !g.run.candidate_bin.empty() || !g.run.candidate_overrides.empty()) {
    throw InputError("gate: --baseline-bin, --candidate-bin and --candidate-override go with --run SPEC");
  }
  if (g.baseline_db.empty()) g.baseline_db = g.db;
  if (g.candidate_db.empty()) g.candidate_db = g.db;
  if (!g.write_baseline_file.empty()) {
    if (g.baseline.empty()) throw InputError("gate: --write-baseline-file needs --baseline SEL (e.g. sweep:main)");
    if (g.baseline_db.empty()) throw InputError("gate: --write-baseline-file needs --db FILE");
    return g;
  }
  if (g.baseline.empty() == g.baseline_file.empty())
    throw InputError(
        "gate needs exactly one of --baseline SEL (sweep:NAME, sha:GITSHA, build:ID, label:LABEL) and "
        "--baseline-file FILE");
  if (g.candidate.empty()) throw InputError("gate needs --candidate SEL (sweep:NAME, sha:GITSHA, build:ID or label:LABEL)");
  if (g.losses && g.baseline.empty())
    throw InputError("gate: --losses compares two sets of runs: give --baseline SEL (a baseline file holds no losses)");
  if (g.candidate_db.empty() || (!g.baseline.empty() && g.baseline_db.empty()))
    throw InputError("gate needs --db FILE (the results database), or --baseline-db and --candidate-db");
  return g;
}

// The points of `selection` in db_path; InputError when it selects nothing.
std::vector<PointData> points_from_db(const std::string& db_path, const std::string& selection) {
  require_database(db_path);
  const ResultsDb db(db_path, ResultsDb::Access::read_only);
  const Selection sel = parse_selection(selection);
  std::vector<PointData> points = load_points(db, sel);
  if (points.empty()) throw InputError("gate: " + sel.describe() + " has no runs in " + db_path);
  return points;
}

std::string side_description(const std::string& db_path, const std::string& selection, size_t n_points) {
  return parse_selection(selection).describe() + " in " + db_path + " (" + std::to_string(n_points) + " points)";
}

GateSide side_from_db(const std::string& db_path, const std::string& selection) {
  const std::vector<PointData> points = points_from_db(db_path, selection);
  return gate_side(points, side_description(db_path, selection, points.size()));
}

void write_file(const std::string& path, const std::string& text) { write_output(path, text); }

// The verdict: --md and --json written, stdout in --format (Markdown where
// a mode has no JSON: loss parity); returns exit_code.
int emit(const GateArgs& g, const std::string& md, const std::string& json, int exit_code) {
  if (!g.md_out.empty()) write_file(g.md_out, md);
  if (!g.json_out.empty() && !json.empty()) write_file(g.json_out, json);
  std::cout << (g.format == "json" && !json.empty() ? json : md);
  return exit_code;
}

// No output may be a file the gate reads: --write-baseline-file onto --db
// replaced every stored run with JSON.
void check_outputs(const GateArgs& g) {
  const std::vector<CommandInput> inputs = {{"--db", g.db},
                                            {"--baseline-db", g.baseline_db},
                                            {"--candidate-db", g.candidate_db},
                                            {"--baseline-file", g.baseline_file},
                                            {"--run", g.run.spec},
                                            {"--calibrate", g.calibrate}};
  check_output_is_not_an_input(g.write_baseline_file, "gate --write-baseline-file", inputs);
  check_output_is_not_an_input(g.md_out, "gate --md", inputs);
  check_output_is_not_an_input(g.json_out, "gate --json", inputs);
}

// --calibrate: A/A pairs of one build, then per point and per-step metric
// the threshold an A/A gate of --gate-pairs pairs stays within (1 − alpha).
int calibrate(GateArgs& g) {
  const SweepSpec spec = load_sweep_spec(g.run.spec);
  g.run.baseline_sweep = spec.name + "-calibrate-a";
  g.run.candidate_sweep = spec.name + "-calibrate-b";
  const int ran = run_gate_pairs(g.run);
  if (ran == kExitInterrupted) return ran;
  const GateSide a = side_from_db(g.db, "sweep:" + g.run.baseline_sweep);
  const GateSide b = side_from_db(g.db, "sweep:" + g.run.candidate_sweep);
  std::map<std::string, double> worst;  // metric → the largest recommendation over the points
  std::ostringstream out;
  out << "### ctitan gate --calibrate: A/A noise of " << fmt::md_escape(a.description) << "\n\n"
      << "Thresholds that an A/A gate of " << g.gate_pairs << " pairs stays within with probability "
      << fmt::fixed(1 - g.opts.alpha, 2) << " (sign-flipped resamples of the observed paired log-ratios).\n\n"
      << "| point | metric | A/A pairs | median A/A change | largest A/A change | recommended threshold |\n"
      << "|---|---|---:|---:|---:|---:|\n";
  for (const GatePoint& pb : b.points) {
    const auto pa = std::find_if(a.points.begin(), a.points.end(), [&](const GatePoint& p) { return p.name() == pb.name(); });
    if (pa == a.points.end()) continue;
    for (const char* metric : {"tps", "step_time", "mfu"}) {
      const std::vector<double> d = paired_log_ratios(*pa, pb, metric);
      if (d.empty()) continue;
      double largest = 0;
      for (double x : d) largest = std::max(largest, std::abs(std::expm1(x)));
      const double t = recommend_threshold(d, g.gate_pairs, g.opts.alpha);
      worst[metric] = std::max(worst[metric], t);
      out << "| `" << fmt::md_escape(pb.name()) << "` | " << metric << " | " << d.size() << " | "
          << fmt::signed_percent(std::expm1(stats::median(d))) << " | " << fmt::fixed(100 * largest, 1) << "% | "
          << fmt::fixed(100 * t, 0) << "% |\n";
    }
  }
  if (worst.empty()) throw InputError("gate --calibrate: no ok A/A pair to learn from in " + g.db);
  out << "\nUse:";
  for (const auto& [metric, t] : worst) out << " --threshold " << metric << "=" << fmt::fixed(100 * t, 0) << "%";
  out << "\n";
  std::cout << out.str();
  return 0;
}

}  // namespace

int gate_command(const std::vector<std::string>& args) {
  GateArgs g = parse_gate_args(args);
  check_outputs(g);
  if (!g.calibrate.empty()) return calibrate(g);
  if (!g.run.spec.empty()) {
    const SweepSpec spec = load_sweep_spec(g.run.spec);
    if (g.run.baseline_sweep.empty()) g.run.baseline_sweep = spec.name + "-baseline";
    if (g.run.candidate_sweep.empty()) g.run.candidate_sweep = spec.name + "-candidate";
    const int ran = run_gate_pairs(g.run);
    if (ran == kExitInterrupted) return ran;
    g.baseline = "sweep:" + g.run.baseline_sweep;
    g.candidate = "sweep:" + g.run.candidate_sweep;
  }
  if (!g.write_baseline_file.empty()) {
    const GateSide side = side_from_db(g.baseline_db, g.baseline);
    write_file(g.write_baseline_file, baseline_file_json(side).dump(1) + "\n");
    std::cout << "wrote " << g.write_baseline_file << ": " << side.description << "\n";
    return 0;
  }
  g.opts.match_by_world_size = !g.baseline.empty() && parse_selection(g.baseline).kind == Selection::Kind::label &&
                               parse_selection(g.candidate).kind == Selection::Kind::label;
  if (g.losses && g.bands) {
    const auto base = points_from_db(g.baseline_db, g.baseline), cand = points_from_db(g.candidate_db, g.candidate);
    const BandGateResult r =
        band_gate(base, cand, side_description(g.baseline_db, g.baseline, base.size()),
                  side_description(g.candidate_db, g.candidate, cand.size()), g.opts.match_by_world_size, g.opts.alpha);
    return emit(g, band_gate_markdown(r), band_gate_json(r).dump(2) + "\n", r.exit_code);
  }
  if (g.losses) {
    const auto base = points_from_db(g.baseline_db, g.baseline), cand = points_from_db(g.candidate_db, g.candidate);
    const LossParityResult r =
        compare_losses(base, cand, side_description(g.baseline_db, g.baseline, base.size()),
                       side_description(g.candidate_db, g.candidate, cand.size()), g.opts.match_by_world_size);
    return emit(g, loss_parity_markdown(r), "", r.exit_code);
  }
  const GateSide base =
      g.baseline_file.empty() ? side_from_db(g.baseline_db, g.baseline) : read_baseline_file(g.baseline_file);
  const GateSide cand = side_from_db(g.candidate_db, g.candidate);
  const GateResult result = run_gate(base, cand, g.opts);
  return emit(g, gate_markdown(result), gate_json(result).dump(2) + "\n", result.exit_code);
}

}  // namespace ctitan
