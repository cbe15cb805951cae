// Sweep specs (recipes/sweeps/*.toml) and the plan they expand into: every
// point (one resolved trainer config at one world size), its stable key, and
// whether it can run here — with the reason when it cannot.
//
// A spec (docs/sweeps.md has the full reference):
//   [sweep]      name, base (trainer TOML, relative to the spec), world_sizes,
//                repeats, timeout_s, warmup_steps, measure_steps, memory_budget_gb
//   [overrides]  section.key = value             — every point
//   [grid]       section.key = [v1, v2, ...]     — crossed, first axis slowest
//   [[exclude]]  section.key = v | [v..], world_size = n | [n..]  — drop matches
//   [[include]]  section.key = v, world_size = n | [n..]          — add one point
//   [[stack]]    name = "+compile", section.key = v — cumulative rows applied
//                to every grid point (TorchTitan's stacked-optimization tables)
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
#include <string>
#include <vector>

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

struct SweepSpec {
  std::string path;       // as given
  std::string text;       // the spec file's bytes (stored with the sweep)
  std::string name;       // [sweep] name, default: the file's stem
  std::string base_path;  // resolved against the spec's folder
  std::vector<int> world_sizes{1};
  int repeats = 1;
  double timeout_s = 1800;
  double memory_budget_gb = 0;  // 0: this machine's MemTotal
  std::vector<Assignment> overrides;  // [overrides] + warmup/measure steps
  std::vector<SweepAxis> grid;
  std::vector<std::vector<Condition>> exclude;  // a point matching every condition of a rule is dropped
  std::vector<IncludeRow> include;
  std::vector<StackRow> stack;
};

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
};
DeviceBudget device_budget(const SweepSpec& spec);

// Expands the spec into points (grid × stack rows × world sizes, minus
// excluded ones, plus included ones), in run order; duplicates (same key)
// are kept once. Every point is resolved and checked for feasibility.
std::vector<SweepPoint> plan_sweep(const SweepSpec& spec, const DeviceBudget& budget);
// The same for runs of another build's trainer (its BuildIdentity::id).
std::vector<SweepPoint> plan_sweep(const SweepSpec& spec, const DeviceBudget& budget, const std::string& build_id);

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
// techniques this device or build lacks; predicted memory over `budget`.
std::string infeasibility(const JobConfig& cfg, int world_size, const DeviceBudget& budget);

// Predicted peak bytes of one rank: params·16 B / dp_shard (fp32 weight,
// gradient, Adam m and v) + activations + logits + a fixed runtime overhead.
int64_t predicted_rank_bytes(const JobConfig& cfg, int world_size);

}  // namespace ctitan
