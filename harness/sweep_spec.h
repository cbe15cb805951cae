// Sweep specs (recipes/sweeps/*.toml) and the plan they expand into: every
// point (one resolved trainer config at one world size), its stable key, and
// whether it can run here — with the reason when it cannot.
//
// A spec (docs/sweeps.md has the full reference):
//   [sweep]      name, base (trainer TOML, relative to the spec), world_sizes,
//                repeats, timeout_s, warmup_steps, measure_steps, memory_budget_gb,
//                hardware (the planner's spec the points are predicted on:
//                a name from recipes/hardware/ or a .toml path; default: this
//                machine's — see point_hardware())
//   [overrides]  section.key = value             — every point
//   [grid]       section.key = [v1, v2, ...]     — crossed, first axis slowest
//   [[exclude]]  section.key = v | [v..], world_size = n | [n..]  — drop matches
//   [[include]]  section.key = v, world_size = n | [n..]          — add one point
//   [[stack]]    name = "+compile", section.key = v — cumulative rows applied
//                to every grid point (TorchTitan's stacked-optimization tables)
//   [slurm]      partition, account, qos, time, gpus_per_node, tasks_per_node,
//                cpus_per_task, max_queued, sbatch = ["..."] — the Slurm
//                launcher's settings (harness/slurm.h; used with
//                [sweep] launcher = "slurm" or --launcher slurm)
//   [quality]    seeds, target_loss, eval_every, steps, eval_batches — every
//                point trained on `seeds` seeds (its runs; seed = the point's
//                debug.seed + run index) with validation every `eval_every`
//                steps, and when it first reached `target_loss` (issue 58)
//   [published]  source, hardware, gpus, [[published.rows]] — the figures a
//                publication reports for points of this sweep
//                (recipes/published/, harness/published.h); not swept
//
// Resolution order of one point: base file < [overrides] < warmup/measure
// steps < grid (or include) values < stack rows 1..k.
//
// Error policy: anything wrong with the spec (syntax, an unknown key on an
// axis, a value of the wrong type or one the trainer rejects on its own, an
// empty grid, a bad world size) is an InputError with one line naming the
// spec file and line. A value that is fine alone but impossible in a given
// combination (a batch that does not divide, degrees that do not multiply
// to the world size) makes that point infeasible with a reason instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/slurm.h"
#include "planner/plan.h"
#include "trainer/config/job_config.h"

namespace ctitan {

// One config key set from the spec: the text is the value in CLI spelling
// ("true", "0.0003", "a,b"), `where` is "spec.toml:12" for messages.
struct Assignment {
  std::string key, text, where;
};

// A condition of an [[exclude]] rule: the key's resolved value is one of
// `alternatives` (or, for key "world_size", the world size is).
struct Condition {
  std::string key, where;
  std::vector<std::string> alternatives;  // CLI spelling
};

struct StackRow {
  std::string name;
  std::vector<Assignment> sets;
};

struct SweepAxis {
  std::string key, where;
  std::vector<std::string> values;  // CLI spelling, in spec order
};

struct IncludeRow {
  std::vector<Assignment> sets;
  std::vector<int> world_sizes;  // empty: the spec's world_sizes
};

// One row of a published table: the point it describes (its [[stack]] row
// by name and/or settings the point's resolved config has) and the figures.
struct PublishedRowSpec {
  std::string where;                 // "spec.toml:31", the row's line
  std::string label;                 // as the publication names it; default: stack name + settings
  std::string stack;                 // a [[stack]] name ("" when the spec has none)
  std::vector<Assignment> point;     // settings that pick the point among the rest
  int gpus = 0;                      // its world size; 0: the table's
  double tps = 0;                    // tokens/s per GPU (0 with tflops)
  // Or the publication's achieved teraFLOP/s per GPU, counted by the
  // table's flops_formula: the loader converts it to tokens/s per GPU.
  std::optional<double> tflops;
  // The row's model where ctitan's trainer has none (another framework's
  // GPT): the planner's shape keys (`ctitan plan --model.KEY`: family,
  // dim, n_heads, ...) over the table's `model`; model.n_layers stays the
  // point's trainer key.
  std::vector<Assignment> model;
  std::optional<double> mem_gib;     // peak memory per GPU, GiB
  std::optional<double> mfu_pct;     // against the bf16 dense peak
};

struct PublishedSpec {
  std::string where;     // the [published] table's line
  std::string source;    // where the figures were published (file, commit, table)
  std::string hardware;  // a hardware spec name (recipes/hardware/NAME.toml)
  int gpus = 0;          // the world size of the rows that do not set their own
  // The software that measured the rows: "torchtitan" (default), "ctitan"
  // or "megatron" (Megatron-LM as of Narayanan et al. 2021). The planner
  // models its rules where they differ from ctitan's own (op-level
  // activation checkpointing's saved tensors; Megatron's unfused attention,
  // blocking data-parallel all-reduce, pipeline scatter/gather).
  std::string framework = "torchtitan";
  // How the rows' `tflops` were counted: "megatron" (Narayanan et al.
  // 2021, Eq. 3: 96·B·s·l·h²·(1 + s/6h + V/16lh) per iteration, the
  // recomputed forward included). "": rows give tps.
  std::string flops_formula;
  std::vector<Assignment> model;  // shape keys every row's model starts from
  std::vector<PublishedRowSpec> rows;
  // The row describes a model of its own (another framework's; ctitan's
  // trainer builds only its registry's).
  bool names_own_model(const PublishedRowSpec& row) const { return !model.empty() || !row.model.empty(); }
};

// [quality]: does a recipe still train as well. Each point runs once per
// seed (the seeds are its repeats: run r has debug.seed = the point's seed
// + r, which draws its initial weights, its data order and, on the markov
// dataset, the chain; every chain has the same entropy), validating every
// eval_every steps, and records when its validation loss first reached
// target_loss (summary.json's quality; common/quality.h).
struct QualitySpec {
  std::string where;         // the [quality] table's line
  int seeds = 1;             // runs per point, each its own seed
  double target_loss = 0;    // validation.target_loss; 0: curves and final losses only
  int64_t eval_every = 0;    // validation.freq (validation.enable = true)
  int64_t steps = 0;         // training.steps, the budget; 0: the recipe's
  int64_t eval_batches = 0;  // validation.steps per pass; 0: the recipe's
};

struct SweepSpec {
  std::string path;       // as given
  std::string text;       // the spec file's bytes (stored with the sweep)
  std::string name;       // [sweep] name, default: the file's stem
  std::string base_path;  // resolved against the spec's folder
  std::vector<int> world_sizes{1};
  int repeats = 1;
  double timeout_s = 1800;
  double memory_budget_gb = 0;  // 0: this machine's MemTotal
  std::string hardware;         // [sweep] hardware (or --hardware); "": this machine's spec
  // [sweep] plan_profile: profiled run directories (resolved against the
  // spec's folder) the planner measures with, as `ctitan plan --profile`:
  // a single-process run first, then multi-rank runs. Empty: analytic.
  std::vector<std::string> plan_profile;
  std::string launcher = "local";  // [sweep] launcher (or --launcher): local, slurm
  SlurmOptions slurm;              // [slurm] (flags of `ctitan sweep` override it)
  std::vector<Assignment> overrides;  // [overrides] + warmup/measure steps
  std::vector<SweepAxis> grid;
  std::vector<std::vector<Condition>> exclude;  // a point matching every condition of a rule is dropped
  std::vector<IncludeRow> include;
  std::vector<StackRow> stack;
  std::optional<PublishedSpec> published;  // recipes/published/ specs only
  std::optional<QualitySpec> quality;      // [quality]: seeds and a target loss
  // [report] stack: the order techniques stack in the report's chain, each
  // "KEY" (a two-valued [grid] axis) or "KEY=VALUE"; with where it was written.
  std::vector<std::pair<std::string, std::string>> report_stack;
};

// Limits every spec is held to (docs/sweeps.md): a larger grid is refused
// before it is expanded, with its size in the message.
inline constexpr double kMaxSweepPoints = 20000;
inline constexpr double kMaxTimeoutS = 30.0 * 24 * 3600;
inline constexpr double kMaxMemoryBudgetGb = 1e6;
inline constexpr size_t kMaxSweepNameLength = 100;

// A sweep name names a folder inside <db>.runs: letters, digits, '.', '_',
// '-', not starting with '.', at most kMaxSweepNameLength. Throws InputError.
void check_sweep_name(const std::string& name);

// Reads and checks a spec (see the error policy above).
SweepSpec load_sweep_spec(const std::string& path);
SweepSpec parse_sweep_spec(const std::string& text, const std::string& path);

struct SweepPoint {
  std::vector<Assignment> sets;  // what differs from the base: grid/include values, stack rows
  std::string label;             // "compile.enable=true training.local_batch_size=2 stack=2:+compile"
  int world_size = 1;
  int stack_index = 0;           // 1-based row of [[stack]]; 0 without stacks
  JobConfig config;              // resolved (job.dump_folder is set per run)
  std::string config_toml;       // to_toml(config)
  std::string config_hash;       // hash of the canonical config alone
  std::string key;               // point key: canonical config + world size + build id
  std::string infeasible;        // why it cannot run here; empty = it can
  // The planner's prediction (planner/plan.h) on point_hardware(); absent
  // when predict() rejects the layout (its message is then in `infeasible`).
  // tps_per_device 0: throughput not predicted (a stand-in spec, memory only).
  std::optional<Prediction> prediction;
  int plan_index = 0;  // its place in plan_sweep's (spec) order, kept when the points are reordered
  // A sweep that learns as it runs (harness/sweep_learn.h): tokens/s per
  // device as the spec predicted it before the sweep measured anything;
  // the measured points `prediction` was refitted on (0: the spec as
  // written); its 80 % interval (tokens/s per device), once there is one.
  std::optional<double> prior_tps;
  int learned_from = 0;
  std::optional<std::pair<double, double>> tps_interval;
};

// What a machine can hold: total bytes for all ranks of one point on the
// CPU; on GPUs (training.device cuda, or auto where LibTorch sees GPUs) a
// world size is a GPU count, at most `gpus`, and each rank must fit in one
// GPU's memory.
struct DeviceBudget {
  int64_t memory_bytes = 0;
  std::string source;  // "MemTotal" or "memory_budget_gb"
  int gpus = 0;                   // GPUs LibTorch sees on this node
  int64_t gpu_memory_bytes = 0;   // the smallest of their memories (memory_budget_gb when set)
  std::string gpu_name;           // the first GPU's name
  std::string hardware;           // the spec's `hardware` ("": chosen per point by point_hardware())
  std::vector<std::string> plan_profile;  // the spec's plan_profile
};
DeviceBudget device_budget(const SweepSpec& spec);

// The planner's hardware spec a point is predicted on: budget.hardware when
// set; else, for a point on GPUs, the spec gpu_spec_name() finds for the
// GPU (none found: h100_sxm's figures as a stand-in with this GPU's memory,
// trusted for memory only — tps_per_device is then 0); else "cpu".
// InputError for a `hardware` load_hardware() does not know.
HardwareSpec point_hardware(const DeviceBudget& budget, bool on_gpu);
// The spec name for a GPU as LibTorch names it ("NVIDIA H100 80GB HBM3" →
// h100_sxm, "NVIDIA A100-SXM4-40GB" → a100_40gb, "AMD Instinct MI300X" →
// mi300x, ...) by substring rules; "" when none applies.
std::string gpu_spec_name(const std::string& gpu_name, int64_t memory_bytes);

// Expands the spec into points (grid × stack rows × world sizes, minus
// excluded ones, plus included ones), in spec order; duplicates (same key)
// are kept once. Every point is resolved, predicted (SweepPoint::prediction)
// and checked for feasibility.
std::vector<SweepPoint> plan_sweep(const SweepSpec& spec, const DeviceBudget& budget);
// The same for runs of another build's trainer (its BuildIdentity::id).
std::vector<SweepPoint> plan_sweep(const SweepSpec& spec, const DeviceBudget& budget, const std::string& build_id);
// `ctitan sweep`'s run order: the fastest points first — descending
// predicted throughput of the whole point (tps_per_device x world size);
// points without a predicted throughput after them; ties in spec order
// (a stable sort, so a rerun visits the points in the same order).
void order_by_prediction(std::vector<SweepPoint>& points);

// --- the pieces plan_sweep is made of (tested on their own) ---------------

// The config as the point key sees it: every key whose resolved value
// differs from JobConfig's default, sorted, one "key = value" per line,
// after dropping keys that do not change what is measured (where output
// goes, labels, how long to wait for peers): keys_outside_the_key().
std::string canonical_config(const JobConfig& cfg);
// Keys reset to their default before hashing.
const std::vector<std::string>& keys_outside_the_key();

// 16 hex digits of SHA-1("ctitan-point-v2", build id, world size, canonical
// config): the same measurement by the same build (BuildIdentity::id), so a
// run is reused — resumed, or shared with another sweep — only by that build.
std::string point_key(const JobConfig& cfg, int world_size, const std::string& build_id);
std::string config_hash(const JobConfig& cfg);

// Why `cfg` cannot run on `world_size` ranks here ("" when it can). Rules,
// in this order, every failing one reported ("; "-joined): degrees multiply
// to the world size; heads / KV heads / layers / sequence / batch divisible
// as TP, PP, CP and data parallelism need; TP/PP/CP not in this build;
// techniques this device or build lacks; the planner's predicted memory
// per rank over `budget` (on the CPU: per rank x world size over the
// host's memory; on GPUs: per rank over one GPU's), the figure and the
// spec in the reason; predict()'s own InputError when no rule above fired.
// `prediction` null: predict() threw `prediction_error`.
std::string infeasibility(const JobConfig& cfg, int world_size, const DeviceBudget& budget,
                          const Prediction* prediction, const std::string& prediction_error);
// The same, predicting on point_hardware() itself.
std::string infeasibility(const JobConfig& cfg, int world_size, const DeviceBudget& budget);

// On GPUs a world size is a GPU count of this node: device cuda, or auto
// where LibTorch sees GPUs.
bool on_gpu(const JobConfig& cfg, const DeviceBudget& budget);

// What a point is planned with: point_hardware()'s spec, and with [sweep]
// plan_profile the spec and compute measured from those runs (as `ctitan
// plan --profile` plans).
struct ResolvedHardware {
  HardwareSpec spec;
  bool stand_in = false;  // another GPU's figures: only the memory prediction counts
  std::shared_ptr<const MeasuredUnits> units;  // [sweep] plan_profile's measured compute
};
ResolvedHardware point_planning(const DeviceBudget& budget, bool on_gpu);
// predict() of `cfg` at `world_size` on `hw` (a stand-in predicts memory only).
Prediction predict_on(const JobConfig& cfg, int world_size, const ResolvedHardware& hw);

// The planner's prediction for `cfg` at `world_size` on point_hardware()
// (the point's device decides GPU or CPU). InputError (predict()'s one
// line) when the layout does not fit the model.
Prediction predict_point(const JobConfig& cfg, int world_size, const DeviceBudget& budget);

}  // namespace ctitan
