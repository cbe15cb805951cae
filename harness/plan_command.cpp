#include "harness/plan_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <fstream>
#include <iomanip>
#include <iostream>

#include "common/errors.h"
#include "common/file_io.h"
#include "common/limits.h"
#include <filesystem>

#include "harness/cli.h"
#include "harness/published.h"
#include "planner/calibrate.h"
#include "planner/op_costs.h"
#include "planner/plan.h"
#include "profiling/gpu_probe.h"
#include "trainer/distributed/mesh.h"
#include "trainer/machine_probe.h"
#include "trainer/config/config_loader.h"

namespace ctitan {
namespace {

// `ctitan plan --help`: what the figures are, then the forms and the modes.
const char* kDescription =
    "Predicts one rank's memory (parameters, gradients and optimizer state from the trainer's own\n"
    "dry-run layout; activations per activation-checkpointing mode; logits; communication buffers;\n"
    "overhead) and step time (GEMMs and attention at shape-dependent efficiencies, element-wise\n"
    "traffic, Float8, recomputation, communication per mesh dimension with what overlaps, the\n"
    "pipeline schedule's bubble), and tokens/s and MFU per device. Every figure is a prediction on\n"
    "the named hardware spec (recipes/hardware/*.toml, default h100_sxm) with its calibration source.\n"
    "Any model.name of the trainer (llama3, qwen3, deepseek_v3, gpt_oss) with its flavors, model.n_layers and\n"
    "the MoE keys (model.moe_num_experts, moe_top_k); the --model.dim ... shape options describe\n"
    "dense Llama-style (or gpt) models. --framework plans another training loop's rules: torchtitan\n"
    "(its op-level AC keeps its unfused projections; under PP it accumulates unsharded gradients) or\n"
    "megatron (Megatron-LM as of Narayanan et al. 2021: unfused attention over all keys, fused\n"
    "element-wise ops, the data-parallel all-reduce after the last micro-batch, the tied embedding's\n"
    "all-reduce between first and last stage, pipeline scatter/gather).\n"
    "The world size is --ngpu (or NGPU), else nodes x gpus-per-node, else the product of the\n"
    "recipe's parallelism degrees, else one node of the spec. Config overrides as for `ctitan train`.";

const char* kFooter =
    "Forms:\n"
    "  ctitan plan RECIPE.toml [--hardware NAME|FILE] [--ngpu N | --nodes N --gpus-per-node G]\n"
    "              [--model.dim D --model.n_layers L --model.n_heads H --model.n_kv_heads K\n"
    "               --model.ffn_hidden F --model.vocab_size V --model.family llama3|gpt]\n"
    "              [--section.key value ...] [--json]\n"
    "  ctitan plan --calibrate RESULTS.db [--hardware NAME|FILE] [--out FILE] [--holdout every-third|largest] [--json]\n"
    "  ctitan plan --validate recipes/published [--json]\n"
    "  ctitan plan --probe [--hardware cpu|FILE] [--out FILE] [--json]\n"
    "  ctitan plan --profile RUN_DIR [--json]\n"
    "  ctitan plan RECIPE.toml --hardware cpu --profile RUN_DIR [--profile FURTHER_RUN_DIR ...] ...\n"
    "\n"
    "--calibrate fits the spec's efficiencies to the ok runs of a results database (default spec:\n"
    "cpu) on two thirds of them and reports the error on the held-out third (--holdout largest: fits\n"
    "the smaller models and world sizes, reports the largest); every constant stays in its physical\n"
    "range. Progress goes to stderr; the fitted spec is written to --out (default:\n"
    "<db>.<spec>.toml) after each round. Published rows: leave-one-out up to 50 rows, else 5-fold.\n"
    "--probe measures this machine now (GEMM per dtype on ctitan's paths, memory bandwidth, an ATen\n"
    "op's dispatch, Gloo's loopback bandwidth and latency; a few seconds) and replaces the cached\n"
    "probe a cpu spec's zeros stand for ($XDG_CACHE_HOME/ctitan/machine_probe.json); with --out it\n"
    "writes the cpu spec with those figures filled in, a file to keep or to plan this machine from\n"
    "elsewhere.\n"
    "--validate predicts every row of the published tables (recipes/published/*.toml) and prints\n"
    "predicted vs published tokens/s per GPU and memory with the errors and their medians.\n"
    "--profile reads a run's traces (ctitan train --profiling.enable_profiling) and fits, per op class\n"
    "(GEMM per dtype, attention, element-wise, collective), time = fixed + work / throughput to the ops\n"
    "it measured: what each class costs on this machine and build, and its share of the step. With a\n"
    "recipe, the plan uses the efficiencies those ops imply (GEMM and its size curve, attention,\n"
    "element-wise bandwidth, per-op dispatch) instead of the spec's, and says which were measured.\n"
    "A single-process RUN_DIR also gives its compute unit by unit (each block, the embedding, the\n"
    "head, forward and backward, by class; the parameter work; the step's fixed rest): the recipe's\n"
    "compute is that measurement times the analytic model's ratio between the two recipes\n"
    "(tokens, TP shards, model size, GEMM sizes, cores shared). Each further --profile is either a\n"
    "single process of the same model at another batch size (each class's measured/planned ratio\n"
    "at two sizes, interpolated in between: the size curve) or a multi-rank run: those measure how\n"
    "much ranks side by side slow each other on this machine (against the single process of their\n"
    "batch size), and fit the link (latency, bandwidth) to their step times.\n"
    "scripts/plan_validation.sh makes such a set of runs and scores the plans out of sample.\n"
    "Communication, the pipeline schedule and memory stay the analytic model's, on that link.";

// The `--section.key [value]` arguments (TorchTitan's config syntax, as for
// `ctitan train`; is_config_key_arg in harness/cli.h says why CLI11 does not
// own them): shape options --model.dim ... go to `model`, the other keys to
// `config`; what remains is for CLI11.
struct ConfigArgs {
  std::vector<std::pair<std::string, std::string>> model;
  std::vector<std::string> config, rest;
};

bool is_model_shape_key(const std::string& flag) {
  return flag.rfind("--model.", 0) == 0 && flag != "--model.flavor" && flag != "--model.name" &&
         flag != "--model.converters" && flag != "--model.n_layers" && flag.rfind("--model.moe_", 0) != 0 &&
         flag.rfind("--model.hf_assets", 0) != 0 && flag.rfind("--model.tokenizer", 0) != 0 &&
         flag.rfind("--model.print", 0) != 0;
}

ConfigArgs split_config_args(const std::vector<std::string>& args) {
  ConfigArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const size_t eq = a.find('=');
    const std::string flag = a.substr(0, eq);
    if (!is_config_key_arg(a)) {
      out.rest.push_back(a);
    } else if (is_model_shape_key(flag)) {
      if (eq != std::string::npos) {
        out.model.emplace_back(flag.substr(8), a.substr(eq + 1));
      } else if (i + 1 < args.size()) {
        out.model.emplace_back(flag.substr(8), args[++i]);
      } else {
        throw command_line_error("plan", a + " needs a value");
      }
    } else {
      out.config.push_back(a);
      if (eq == std::string::npos && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0)
        out.config.push_back(args[++i]);
    }
  }
  return out;
}

// The published rows of one hardware spec as measured runs: the step time
// a row's tokens/s per GPU implies, its peak memory when published.
std::vector<MeasuredRun> published_runs(const std::string& path, const std::string& hardware) {
  std::vector<MeasuredRun> runs;
  for (const PublishedRow& row : load_published(path)) {
    if (row.hardware != hardware) continue;
    MeasuredRun r;
    r.run_id = static_cast<int64_t>(runs.size()) + 1;
    r.label = row.table + ": " + row.label;
    r.cfg = row.cfg;
    r.world_size = row.world_size;
    r.framework = row.framework;
    r.model = row.model;
    PlanRequest q;
    q.cfg = row.cfg;
    q.model = row.model;
    q.world_size = row.world_size;
    const MeshShape shape = resolve_mesh_shape(row.cfg.parallelism, row.world_size);
    const int64_t dp = shape.dp_replicate * shape.dp_shard;
    const auto& t = row.cfg.training;
    const int64_t accum = t.global_batch_size > 0 ? std::max<int64_t>(1, t.global_batch_size / (t.local_batch_size * dp)) : 1;
    const double tokens_per_device = static_cast<double>(t.local_batch_size * dp * accum * t.seq_len) / row.world_size;
    r.step_time_s = tokens_per_device / row.tps;
    r.mem_peak_bytes = row.mem_gib ? *row.mem_gib * 1073741824.0 : 0;
    runs.push_back(std::move(r));
  }
  if (runs.size() < 3)
    throw InputError("ctitan plan --calibrate " + path + ": " + std::to_string(runs.size()) + " published rows on " + hardware +
                     "; fitting needs at least 3");
  return runs;
}

// Fits one spec to every published row of its hardware and, to say how well
// that generalises, predicts each row from a spec fitted without it:
// leave-one-out up to kLeaveOneOutRows rows, above them 5-fold
// cross-validation (a refit per row grows with the square of the rows: 113 s
// for 144, hours for 1,440). `holdout` largest adds a fit without the
// largest models and world sizes and their errors. The all-rows spec is
// written as soon as it is fitted (and after each of its rounds), then again
// with the cross-validated error, so a stopped calibration leaves one.
constexpr size_t kLeaveOneOutRows = 50;
constexpr size_t kFolds = 5;

int calibrate_published(const std::string& path, const std::string& hardware, const std::string& out_path,
                        Holdout holdout, std::ostream& out) {
  const HardwareSpec start = load_hardware(hardware);
  const std::vector<MeasuredRun> runs = published_runs(path, start.name);
  const bool loo = runs.size() <= kLeaveOneOutRows;
  const size_t folds = loo ? runs.size() : kFolds;
  const std::string cv_name = loo ? "leave-one-out" : std::to_string(kFolds) + "-fold cross-validation";
  out << "calibrating " << start.name << " from its " << runs.size() << " published rows in " << path << " ("
      << (loo ? "each row, then each table, left out once"
              : "k-fold with k = " + std::to_string(kFolds) + ": every fifth row left out together, " +
                    std::to_string(runs.size()) + " rows are too many to refit once per row; then each table left out")
      << ") ..." << std::endl;
  const std::string dest = out_path.empty() ? start.name + ".calibrated.toml" : out_path;
  std::vector<double> cv_step, cv_mem, fit_step, fit_mem, loto_tps, loto_mem;
  // Progress on stderr: each fit takes seconds to minutes (a pipeline of 64
  // stages replays its 512 micro-batches at every evaluation).
  const auto since = [t0 = std::chrono::steady_clock::now()] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const auto write_partial = [&](HardwareSpec s, const std::string& what) {
    s.calibration = "partial calibration from the " + std::to_string(runs.size()) + " published rows of " + start.name +
                    " in " + path + " (" + what + ")";
    save_hardware(s, dest);
  };
  FitOptions fo;
  fo.progress = true;
  fo.label = "all rows";
  fo.on_round = [&](const HardwareSpec& s, const std::string& stage) { write_partial(s, stage + " of the all-rows fit"); };
  HardwareSpec all = fit_spec(start, runs, fo);
  write_partial(all, "fitted to all rows; the cross-validation not finished");
  std::fprintf(stderr, "  fitted to all %zu rows (%.0f s); written to %s\n", runs.size(), since(), dest.c_str());
  FitOptions refit;  // warm start from `all`, the same prior
  refit.prior = &start;
  refit.rounds = 1;
  refit.progress = true;
  // Leave one table out: each published table predicted from a spec fitted to
  // the other tables only (a new model size, layout or scale the fit never saw).
  const auto table_of = [](const MeasuredRun& r) { return r.label.substr(0, r.label.find(": ")); };
  std::map<std::string, HardwareSpec> without_table;
  for (const MeasuredRun& r : runs) {
    const std::string t = table_of(r);
    if (without_table.count(t)) continue;
    std::vector<MeasuredRun> others;
    for (const MeasuredRun& o : runs)
      if (table_of(o) != t) others.push_back(o);
    refit.label = "without table " + t;
    without_table.emplace(t, others.empty() ? all : fit_spec(all, others, refit));
    std::fprintf(stderr, "  fitted without table %s (%.0f s)\n", t.c_str(), since());
  }
  // Cross-validation: fold f leaves out rows i with i % folds == f.
  const std::vector<RunErrors> cv = cross_validate(all, runs, folds, refit, [&](size_t f) {
    if (loo) return;
    std::fprintf(stderr, "  %s: fold %zu/%zu fitted (%.0f s)\n", cv_name.c_str(), f + 1, folds, since());
    write_partial(all, "fitted to all rows; " + std::to_string(f + 1) + " of " + std::to_string(folds) +
                           " cross-validation folds done");
  });
  const std::string cv_col = loo ? "LOO err" : std::to_string(kFolds) + "-fold";
  char line[512];
  std::snprintf(line, sizeof line, "  %-62s %9s %9s %9s %9s %9s\n", "row", "fit err", cv_col.c_str(), "LOTO err",
                "mem err", (loo ? "LOO mem" : "k-f mem"));
  out << line;
  const auto pct = [](double e) {
    char b[32];
    if (std::isnan(e)) return std::string("        -");
    std::snprintf(b, sizeof b, "%+8.1f%%", 100 * e);
    return std::string(b);
  };
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunErrors in = run_errors(all, runs[i]);
    const RunErrors loto = run_errors(without_table.at(table_of(runs[i])), runs[i]);
    cv_step.push_back(cv[i].step), cv_mem.push_back(cv[i].mem), fit_step.push_back(in.step), fit_mem.push_back(in.mem);
    loto_tps.push_back(1 / (1 + loto.step) - 1), loto_mem.push_back(loto.mem);
    // tokens/s error = 1 / (1 + step error) - 1
    std::snprintf(line, sizeof line, "  %-62s %s %s %s %s %s\n", runs[i].label.substr(0, 62).c_str(),
                  pct(1 / (1 + in.step) - 1).c_str(), pct(1 / (1 + cv[i].step) - 1).c_str(), pct(loto_tps.back()).c_str(),
                  pct(in.mem).c_str(), pct(cv[i].mem).c_str());
    out << line;
  }
  std::vector<double> cv_tps, fit_tps;
  for (double e : cv_step) cv_tps.push_back(1 / (1 + e) - 1);
  for (double e : fit_step) fit_tps.push_back(1 / (1 + e) - 1);
  std::snprintf(line, sizeof line,
                "median absolute error of tokens/s per GPU: %.1f %% fitted on all rows, %.1f %% %s, %.1f %% "
                "leave-one-table-out (%zu tables)",
                100 * median_abs_error(fit_tps), 100 * median_abs_error(cv_tps), cv_name.c_str(),
                100 * median_abs_error(loto_tps), without_table.size());
  out << line;
  if (std::any_of(runs.begin(), runs.end(), [](const MeasuredRun& r) { return r.mem_peak_bytes > 0; })) {
    std::snprintf(line, sizeof line, "; memory %.1f %% / %.1f %% / %.1f %%", 100 * median_abs_error(fit_mem),
                  100 * median_abs_error(cv_mem), 100 * median_abs_error(loto_mem));
    out << line;
  } else {
    out << "; no published memory";
  }
  out << "\n";
  if (holdout == Holdout::largest) {
    // Extrapolation: fit on the smaller models and world sizes only, predict the largest.
    FitOptions small = refit;
    small.label = "without the largest";
    const CalibrationResult x = calibrate(start, runs, path, Holdout::largest, small);
    out << "held out the largest models and world sizes, fitted on the other " << x.fit.size() << " rows:\n";
    std::vector<double> x_tps;
    for (size_t i = 0; i < x.holdout.size(); ++i) {
      x_tps.push_back(1 / (1 + x.holdout_time_err[i]) - 1);
      std::snprintf(line, sizeof line, "  %-62s %s %s  (%s)\n", x.holdout[i].label.substr(0, 62).c_str(),
                    pct(x_tps.back()).c_str(), pct(x.holdout_mem_err[i]).c_str(), x.holdout_why[i].c_str());
      out << line;
    }
    std::snprintf(line, sizeof line,
                  "median absolute error of tokens/s per GPU on the %zu largest rows held out: %.1f %%; memory %.1f %%\n",
                  x.holdout.size(), 100 * median_abs_error(x_tps), 100 * median_abs_error(x.holdout_mem_err));
    out << line;
  }
  std::snprintf(line, sizeof line, "calibrated from the %zu published rows of %s in %s (%s median error of tokens/s %.1f %%)",
                runs.size(), start.name.c_str(), path.c_str(), cv_name.c_str(), 100 * median_abs_error(cv_tps));
  all.calibration = line;
  save_hardware(all, dest);
  out << "fitted spec written to " << dest << "\n";
  return 0;
}

// The world size to plan: --ngpu, else NGPU, else --nodes x
// --gpus-per-node, else the product of the recipe's parallel degrees (a
// node's devices for an open degree); one cap however it is given
// (common/limits.h).
int64_t plan_world_size(int ngpu, int nodes, int per_node, const HardwareSpec& hw, const JobConfig& cfg) {
  if (ngpu == 0)
    if (const char* env = std::getenv("NGPU")) {
      if (const std::string problem = integer_problem(env, 1, kMaxWorldSize); !problem.empty())
        throw InputError("plan: the environment's NGPU " + problem + "; unset it or give --ngpu N");
      ngpu = std::stoi(env);
    }
  int64_t world = ngpu;
  std::string from = "--ngpu";
  if (world == 0 && nodes > 0) {
    world = int64_t{nodes} * (per_node > 0 ? per_node : hw.devices_per_node);
    from = "--nodes x --gpus-per-node";
  }
  if (world == 0) {
    const auto& p = cfg.parallelism;
    const int64_t degrees[] = {p.data_parallel_replicate_degree, p.data_parallel_shard_degree, p.tensor_parallel_degree,
                               p.pipeline_parallel_degree, p.context_parallel_degree};
    int64_t product = 1;
    bool open = false;
    for (int64_t d : degrees) d < 0 ? open = true : product = std::min<int64_t>(product * d, kMaxWorldSize + 1);
    world = open ? std::max<int64_t>(product, hw.kind == "cpu" ? 1 : hw.devices_per_node) : product;
    from = "the product of the recipe's parallel degrees";
  }
  if (world > kMaxWorldSize)
    throw InputError("ctitan plan: the world size (" + from + ") is more than " + std::to_string(kMaxWorldSize) +
                     " ranks, the most ctitan plans or runs; give a smaller one");
  return world;
}

// `ctitan plan --probe`: this machine measured again, the cache replaced;
// with --out the spec with the probe's figures written in.
int probe_command(const std::string& hardware, const std::string& out, bool json) {
  HardwareSpec spec = load_hardware(hardware.empty() ? "cpu" : hardware);
  if (spec.kind != "cpu") {
    // A GPU spec: its peaks stay the maker's; the node's GEMMs and copy set
    // its gemm, gemm_half_size and memory efficiencies.
    require_cuda_device();
    std::cerr << "probing this node's GPU 0 (a few seconds) ..." << std::endl;
    const GpuProbe p = measure_gpu();
    const Efficiency before = spec.eff;
    apply_gpu_probe(spec, p);
    if (json) {
      nlohmann::json rates = nlohmann::json::array();
      for (const auto& [n, r] : p.gemm_bf16) rates.push_back({{"n", n}, {"flops", r}});
      std::cout << nlohmann::json{{"device", p.device_name},
                                  {"measured_at", p.measured_at},
                                  {"devices", p.devices},
                                  {"seconds", p.seconds},
                                  {"gemm_bf16", rates},
                                  {"gemm_fp32_flops", p.gemm_fp32},
                                  {"hbm_bandwidth", p.hbm_bandwidth},
                                  {"efficiency", {{"gemm", spec.eff.gemm},
                                                  {"gemm_half_size", spec.eff.gemm_half_size},
                                                  {"memory", spec.eff.memory}}}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << p.describe() << "\n  measured in " << std::fixed << std::setprecision(1) << p.seconds << " s\n"
                << std::setprecision(3) << "  " << spec.name << ": gemm " << before.gemm << " -> " << spec.eff.gemm
                << ", gemm_half_size " << std::setprecision(0) << before.gemm_half_size << " -> "
                << spec.eff.gemm_half_size << std::setprecision(3) << ", memory " << before.memory << " -> "
                << spec.eff.memory << " (peaks, links and the other efficiencies stay the spec's; NCCL is not measured)\n";
    }
    if (!out.empty()) {
      save_hardware(spec, out);
      if (!json) std::cout << "wrote " << out << "\n";
    }
    return 0;
  }
  std::cerr << "probing this machine (a few seconds) ..." << std::endl;
  const MachineProbe& p = this_machine(/*refresh=*/true);
  if (json)
    std::cout << p.to_json().dump(2) << "\n";
  else
  {
    std::cout << p.describe() << "\n  measured in " << std::fixed << std::setprecision(1) << p.seconds << " s\n";
    // The rates by size a plan interpolates a GEMM's rate on (by its smallest dimension).
    std::cout << "  GEMM TFLOP/s at n^3, n =" << std::setprecision(2);
    for (const auto& g : p.gemm_sizes) std::cout << std::setw(7) << static_cast<int>(g.n);
    const auto row = [&](const char* what, double MachineProbe::GemmAt::*rate) {
      std::cout << "\n    " << std::left << std::setw(22) << what << std::right;
      for (const auto& g : p.gemm_sizes) std::cout << std::setw(7) << g.*rate / 1e12;
    };
    const std::string all = std::to_string(p.threads) + " thread" + (p.threads == 1 ? "" : "s");
    row(("bf16, " + all).c_str(), &MachineProbe::GemmAt::bf16);
    row("bf16, 1 thread", &MachineProbe::GemmAt::bf16_1t);
    row(("fp32, " + all).c_str(), &MachineProbe::GemmAt::fp32);
    row("fp32, 1 thread", &MachineProbe::GemmAt::fp32_1t);
    std::cout << "\n  machine " << p.fingerprint << "\n";
  }
  if (!out.empty()) {
    apply_probe(spec, p);
    spec.probed.clear();  // written in: the file now describes this machine wherever it is read
    spec.source = "this machine as probed on " + p.measured_at + " (" + p.fingerprint + ") by `ctitan plan --probe`; " +
                  spec.source;
    save_hardware(spec, out);
    if (!json) std::cout << "wrote " << out << "\n";
  }
  return 0;
}

}  // namespace

int plan_command(const std::vector<std::string>& args) {
  std::string recipe, hardware, calibrate_db, validate_path, out, framework = "ctitan", holdout = "every-third";
  std::vector<std::string> profile_dirs;
  bool json = false, probe = false;
  int ngpu = 0, nodes = 0, per_node = 0;
  const ConfigArgs config = split_config_args(args);
  CLI::App app{kDescription, "ctitan plan"};
  app.add_option("RECIPE", recipe, "a trainer TOML (its --section.key overrides as for `ctitan train`)");
  app.add_option("--hardware", hardware, "a spec: recipes/hardware/NAME.toml or a file (default h100_sxm)")
      ->type_name("NAME|FILE");
  app.add_option("--ngpu", ngpu, "the world size (or NGPU)")->type_name("N")->check(integer_in(1, kMaxWorldSize));
  app.add_option("--nodes", nodes, "nodes, with --gpus-per-node (default: the spec's)")
      ->type_name("N")
      ->check(integer_in(1, kMaxWorldSize));
  app.add_option("--gpus-per-node", per_node, "GPUs per node")->type_name("G")->check(integer_in(1, kMaxWorldSize));
  app.add_option("--framework", framework,
                 "the training loop whose rules are planned: ctitan (the default), torchtitan or megatron "
                 "(Megatron-LM as of Narayanan et al. 2021)")
      ->type_name("ctitan|torchtitan|megatron")
      ->check(one_of({"ctitan", "torchtitan", "megatron"}));
  app.add_option("--calibrate", calibrate_db, "fit the spec to a results database, or to published tables")
      ->type_name("RESULTS.db");
  app.add_option("--validate", validate_path, "check the published tables against the predictions")->type_name("DIR");
  app.add_option("--profile", profile_dirs, "a run's traces (repeatable; see below)")
      ->type_name("RUN_DIR")
      ->allow_extra_args(false);
  app.add_option("--out", out, "where --calibrate writes the fitted spec")->type_name("FILE");
  app.add_option("--holdout", holdout,
                 "--calibrate's held-out runs: every-third (default) or largest (the largest models and world "
                 "sizes, fitting on the smaller ones: does the fit extrapolate?)")
      ->type_name("every-third|largest")
      ->check(one_of({"every-third", "largest"}));
  app.add_flag("--probe", probe, "measure this machine again (see below)");
  app.add_flag("--json", json, "one JSON document instead of the tables");
  app.footer(kFooter);
  parse_command_line(app, config.rest, "plan");
  const std::vector<std::pair<std::string, std::string>>& model_overrides = config.model;
  const std::vector<std::string>& config_args = config.config;
  for (size_t i = 0; i < profile_dirs.size(); ++i)
    if (std::find(profile_dirs.begin(), profile_dirs.begin() + static_cast<std::ptrdiff_t>(i), profile_dirs[i]) !=
        profile_dirs.begin() + static_cast<std::ptrdiff_t>(i))
      throw command_line_error("plan", "--profile " + profile_dirs[i] +
                                           " given twice; after the single-process run, each further --profile is a "
                                           "single process at another batch size or a multi-rank run");
  const std::string profile_dir = profile_dirs.empty() ? "" : profile_dirs.front();
  const std::vector<std::string> multi_rank_dirs(profile_dirs.begin() + (profile_dirs.empty() ? 0 : 1),
                                                 profile_dirs.end());
  // --out replaces its file: never one this command reads (the results database above all).
  check_output_is_not_an_input(out, "plan --out", {{"--calibrate", calibrate_db}, {"--hardware", hardware}, {"recipe", recipe}});
  if (!validate_path.empty()) return validate_published(validate_path, json, std::cout);
  if (probe) return probe_command(hardware, out, json);
  if (!multi_rank_dirs.empty() && recipe.empty())
    throw command_line_error("plan", "a second --profile (" + multi_rank_dirs.front() +
                                         ") only goes with a recipe; the op table reads one run");
  if (!profile_dir.empty() && recipe.empty()) {
    const OpCostModel m = op_costs_from_run(profile_dir);
    std::cout << (json ? op_costs_json(m).dump(2) + "\n" : render_op_costs(m));
    return 0;
  }
  if (!calibrate_db.empty() && (std::filesystem::is_directory(calibrate_db) || calibrate_db.ends_with(".toml"))) {
    if (hardware.empty())
      throw InputError("ctitan plan --calibrate " + calibrate_db + ": name the hardware whose published rows to fit (--hardware NAME)");
    return calibrate_published(calibrate_db, hardware, out, parse_holdout(holdout), std::cout);
  }
  if (!calibrate_db.empty()) {
    CalibrationOptions o;
    o.db_path = calibrate_db;
    o.hardware = hardware.empty() ? "cpu" : hardware;
    o.out_path = out;
    o.json = json;
    o.holdout = parse_holdout(holdout);
    return calibrate_command(o, std::cout);
  }
  if (recipe.empty()) throw command_line_error("plan", "give a recipe (a trainer TOML)");
  std::vector<std::string> cargs = {"--job.config_file", recipe};
  cargs.insert(cargs.end(), config_args.begin(), config_args.end());
  PlanRequest req;
  req.cfg = parse_job_config(cargs);
  req.model = model_from_config(req.cfg.model);
  for (const auto& [k, v] : model_overrides) override_model(req.model, k, v);
  check_model_shape(req.model);
  req.framework = framework;
  HardwareSpec hw = load_hardware(hardware.empty() ? "h100_sxm" : hardware);
  // A cpu spec's zeros: this machine's probe, measured once and cached
  // (every plan below, and the measured modes plan many, uses it).
  hw = resolved_for_plan(hw);
  if (!profile_dir.empty()) {
    std::vector<std::string> dirs = {profile_dir};
    dirs.insert(dirs.end(), multi_rank_dirs.begin(), multi_rank_dirs.end());
    MeasuredPlanning m = measured_planning(hw, dirs);
    hw = std::move(m.spec);
    req.measured = std::move(m.units);
  }
  const int64_t world = plan_world_size(ngpu, nodes, per_node, hw, req.cfg);
  req.world_size = static_cast<int>(world);
  req.nodes = nodes;
  req.devices_per_node = per_node;
  const Prediction p = predict(req, hw);
  if (json)
    std::cout << to_json(p).dump(2) << "\n";
  else
    std::cout << render_prediction(p);
  return 0;
}

}  // namespace ctitan
