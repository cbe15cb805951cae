// From a SweepSpec to the points of a sweep: expansion (grid × stack rows ×
// world sizes, exclude, include), resolution through the trainer's own config
// code, the point key, and the feasibility rules.
#include <c10/util/hash.h>  // c10::sha1: a stable digest without another dependency

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "common/errors.h"
#include "trainer/parallel/context_parallel.h"
#include "trainer/parallel/pipeline.h"
#include "common/build_identity.h"
#include "profiling/gpu_info.h"
#include "harness/sweep_spec.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/config_registry.h"
#include "trainer/dist/mesh.h"
#include "trainer/kernels/fused_ops.h"  // fused_kernels_available
#include "trainer/model/llama_args.h"

namespace ctitan {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
// What a rank holds beyond tensors: LibTorch, the allocator's slack, the
// data loader (measured: ~450 MiB RSS above mem_peak for debugmodel).
constexpr int64_t kRankOverheadBytes = 512ll << 20;

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / static_cast<double>(kGiB));
  return buf;
}

std::string strip_prefix(std::string s) {
  for (const char* p : {"config error: ", "sweep spec error: "})
    if (s.rfind(p, 0) == 0) s = s.substr(std::string(p).size());
  return s;
}

void apply(JobConfig& cfg, const std::vector<Assignment>& sets, config::Origins& origins) {
  for (const Assignment& a : sets) {
    config::set_from_string(cfg, *config::find_field(a.key), a.text, a.where);
    origins[a.key] = a.where;
  }
}

// The trainer's own checks of a resolved config, short of running it:
// validate(), the flavor, and the entries train() rejects.
void check(const JobConfig& cfg, const config::Origins& origins) {
  config::validate_with_origins(cfg, origins);
  const auto at = [&](const std::string& key) {
    auto it = origins.find(key);
    return it == origins.end() ? std::string() : it->second + ": ";
  };
  try {
    llama3_flavor(cfg.model.flavor);
  } catch (const InputError& e) {
    throw InputError(at("model.flavor") + e.what());
  }
  for (const auto& c : cfg.compile.components)
    if (c != "model" && c != "loss")
      throw InputError(at("compile.components") + "compile.components entry '" + c +
                       "' is unknown; use \"model\" and/or \"loss\"");
  for (const auto& c : cfg.model.converters)
    if (c != "quantize.linear.float8" && c != "float8")
      throw InputError(at("model.converters") + "model.converters entry '" + c +
                       "' is unknown; ctitan has \"quantize.linear.float8\"");
}

bool matches(const std::vector<Condition>& rule, const JobConfig& cfg, int world_size) {
  for (const Condition& c : rule) {
    if (c.key == "world_size") {
      if (std::find(c.alternatives.begin(), c.alternatives.end(), std::to_string(world_size)) == c.alternatives.end())
        return false;
      continue;
    }
    const config::FieldSpec& f = *config::find_field(c.key);
    bool any = false;
    for (const std::string& alt : c.alternatives) {
      JobConfig probe;
      config::set_from_string(probe, f, alt, c.where);
      any = any || f.get(probe) == f.get(cfg);
    }
    if (!any) return false;
  }
  return true;
}

std::string label_of(const std::vector<Assignment>& sets) {
  std::string out;
  for (const Assignment& a : sets) out += (out.empty() ? "" : " ") + a.key + "=" + (a.text.empty() ? "[]" : a.text);
  return out;
}

bool float8_on(const JobConfig& cfg) { return !cfg.model.converters.empty(); }

}  // namespace

const std::vector<std::string>& keys_outside_the_key() {
  // Where output goes, what it is called, how long to wait for peers: none
  // of these changes a step's work or its timing.
  static const std::vector<std::string> keys = {
      "job.config_file",           "job.dump_folder",           "job.description",
      "job.print_config",          "metrics.disable_color_printing", "metrics.save_tb_folder",
      "profiling.save_traces_folder", "profiling.save_memory_snapshot_folder", "checkpoint.folder",
      "comm.save_traces_folder",   "comm.save_traces_file_prefix", "comm.init_timeout_seconds",
      "comm.train_timeout_seconds"};
  return keys;
}

std::string canonical_config(const JobConfig& cfg) {
  static const JobConfig defaults;
  const auto& skip = keys_outside_the_key();
  std::vector<std::string> lines;
  for (const config::FieldSpec& f : config::registry()) {
    if (std::find(skip.begin(), skip.end(), f.key) != skip.end()) continue;
    const config::Value v = f.get(cfg);
    if (v == f.get(defaults)) continue;
    const std::string text = config::render_value(v);
    lines.push_back(f.key + " = " + (text.empty() ? "unset" : text));
  }
  // Sorted, and only what differs from the defaults: a key added to the
  // registry later (at its default) or a reordered registry keeps every key.
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::string config_hash(const JobConfig& cfg) { return c10::sha1("ctitan-config-v1\n" + canonical_config(cfg)).str().substr(0, 16); }

std::string point_key(const JobConfig& cfg, int world_size, const std::string& build_id) {
  return c10::sha1("ctitan-point-v2\nbuild = " + build_id + "\nworld_size = " + std::to_string(world_size) +
                   "\n" + canonical_config(cfg))
      .str()
      .substr(0, 16);
}

int64_t predicted_rank_bytes(const JobConfig& cfg, int world_size) {
  const LlamaArgs a = llama3_flavor(cfg.model.flavor);
  MeshShape shape;
  try {
    shape = resolve_mesh_shape(cfg.parallelism, world_size);
  } catch (const InputError&) {
    shape.dp_shard = 1;  // an infeasible layout: predict the unsharded rank
  }
  const double params = static_cast<double>(count_params(a).total);
  // FSDP shards over dp_shard x cp.
  const double state = params * 16 / static_cast<double>(shape.dp_shard * shape.cp * shape.tp * shape.pp);
  // Activations kept for backward, per layer (B batch, S sequence, D model
  // dim, F SwiGLU hidden): norm inputs, fused QKV, attention output,
  // residuals (≈ 6·D + 2·kv_dim) and gate|up plus silu·mul (3·F).
  const double elem = cfg.training.mixed_precision_param == "float32" ? 4 : 2;
  const double B = static_cast<double>(cfg.training.local_batch_size);
  const double S = static_cast<double>(cfg.training.seq_len) / static_cast<double>(shape.cp);
  const double L = std::ceil(static_cast<double>(a.n_layers) / static_cast<double>(shape.pp));
  // Under TP the heads' and the FFN's activations split over tp; the norm
  // inputs and residuals too with sequence parallelism (Korthikanti et al.).
  const double tp = static_cast<double>(shape.tp);
  const double seq_split = cfg.parallelism.enable_sequence_parallel ? tp : 1.0;
  const double layer =
      B * S * (static_cast<double>(4 * a.dim) / seq_split + static_cast<double>(2 * a.dim + 2 * a.kv_dim() + 3 * a.ffn_hidden_dim()) / tp) * elem;
  const double layer_input = B * S * static_cast<double>(a.dim) * elem / seq_split;
  double kept_layers = L;  // activation checkpointing "none"
  const auto& ac = cfg.activation_checkpoint;
  if (ac.mode == "full") {
    kept_layers = 0;
  } else if (ac.mode == "selective" && ac.selective_ac_option == "op") {
    kept_layers = L / 2;
  } else if (ac.mode == "selective") {
    kept_layers = L - std::floor(L / std::max(1.0, std::atof(ac.selective_ac_option.c_str())));
  }
  // Recomputed layers keep their input; one layer is live during backward.
  const double activations = kept_layers * layer + (L - kept_layers) * layer_input + (kept_layers < L ? layer : 0);
  // Logits and their gradient: this rank's vocab columns under loss parallelism.
  const double vocab_split = cfg.parallelism.disable_loss_parallel ? 1.0 : tp;
  const double logits = B * S * static_cast<double>(a.vocab_size) * elem * 2 / vocab_split;
  return static_cast<int64_t>(state + activations + logits) + kRankOverheadBytes;
}

DeviceBudget device_budget(const SweepSpec& spec) {
  DeviceBudget b;
  b.memory_bytes = INT64_MAX;
  b.source = "unknown (no /proc/meminfo)";
  if (spec.memory_budget_gb > 0) {
    b.memory_bytes = static_cast<int64_t>(spec.memory_budget_gb * static_cast<double>(kGiB));
    b.source = "memory_budget_gb";
  } else {
    std::ifstream in("/proc/meminfo");
    std::string name;
    int64_t kb = 0;
    while (in >> name >> kb) {
      if (name == "MemTotal:") {
        b.memory_bytes = kb * 1024;
        b.source = "MemTotal";
        break;
      }
      in.ignore(256, '\n');
    }
  }
  const GpuInventory gpus = gpu_inventory();
  b.gpus = static_cast<int>(gpus.devices.size());
  for (const GpuDevice& g : gpus.devices)
    if (b.gpu_memory_bytes == 0 || g.memory_bytes < b.gpu_memory_bytes) b.gpu_memory_bytes = g.memory_bytes;
  if (b.gpus > 0) b.gpu_name = gpus.devices.front().name;
  if (b.gpus > 0 && spec.memory_budget_gb > 0) b.gpu_memory_bytes = b.memory_bytes;
  return b;
}

std::string infeasibility(const JobConfig& cfg, int world_size, const DeviceBudget& budget) {
  std::vector<std::string> why;
  const auto& p = cfg.parallelism;
  MeshShape shape;
  try {
    shape = resolve_mesh_shape(p, world_size);
  } catch (const InputError& e) {
    why.push_back(e.what());
    shape = MeshShape{};
    shape.tp = p.tensor_parallel_degree, shape.pp = p.pipeline_parallel_degree, shape.cp = p.context_parallel_degree;
  }
  const LlamaArgs a = llama3_flavor(cfg.model.flavor);
  const auto& t = cfg.training;
  const auto need = [&](bool ok, const std::string& what) {
    if (!ok) why.push_back(what);
  };
  const std::string tp = std::to_string(shape.tp), pp = std::to_string(shape.pp), cp = std::to_string(shape.cp);
  if (shape.tp > 1) {
    need(a.n_heads % shape.tp == 0, "n_heads " + std::to_string(a.n_heads) + " is not divisible by tp " + tp);
    need(a.n_kv_heads % shape.tp == 0, "n_kv_heads " + std::to_string(a.n_kv_heads) + " is not divisible by tp " + tp);
    need(a.ffn_hidden_dim() % shape.tp == 0,
         "ffn hidden dim " + std::to_string(a.ffn_hidden_dim()) + " is not divisible by tp " + tp);
    need(a.vocab_size % shape.tp == 0, "vocab_size " + std::to_string(a.vocab_size) + " is not divisible by tp " + tp);
    need(!p.enable_sequence_parallel || t.seq_len % shape.tp == 0,
         "seq_len " + std::to_string(t.seq_len) + " is not divisible by tp " + tp + " (sequence parallelism)");
    need(!p.enable_async_tensor_parallel || p.enable_sequence_parallel,
         "async TP needs sequence parallelism (enable_sequence_parallel = false)");
  }
  // The trainer's own checks, where they need no processes.
  const auto trainer_says = [&](const std::function<void()>& check) {
    try {
      check();
    } catch (const InputError& e) {
      why.push_back(e.what());
    }
  };
  if (shape.pp > 1) {
    const bool whole_microbatches = t.local_batch_size % p.pipeline_parallel_microbatch_size == 0;
    need(whole_microbatches, "local_batch_size " + std::to_string(t.local_batch_size) +
                                 " is not divisible by the pipeline microbatch size " +
                                 std::to_string(p.pipeline_parallel_microbatch_size));
    // The trainer's own planning: the schedule's stages per rank, the split
    // into pp x v stages, the schedule for these micro-batches (or the CSV).
    trainer_says([&] {
      const std::string& name = p.pipeline_parallel_schedule;
      const bool csv = !p.pipeline_parallel_schedule_csv.empty();
      check_pipeline_schedule(name, csv);
      const int64_t v = plan_pipeline_split(a, p, shape.pp).stages_per_rank;
      if (!whole_microbatches) return;
      const int64_t m = t.local_batch_size / p.pipeline_parallel_microbatch_size;
      if (csv) {
        load_pipeline_csv(p.pipeline_parallel_schedule_csv, name, shape.pp, v, m);
      } else {
        build_pipeline_schedule(name, shape.pp, v, m);
      }
    });
  }
  if (shape.cp > 1) {  // TorchTitan's head-tail load balancing splits the sequence into 2·cp chunks
    trainer_says([&] {
      check_context_parallel(p.context_parallel_rotate_method, p.context_parallel_load_balancer, shape.cp, t.seq_len);
    });
    need(shape.tp == 1 || !p.enable_sequence_parallel || (t.seq_len / shape.cp) % shape.tp == 0,
         "seq_len / cp = " + std::to_string(t.seq_len / shape.cp) + " is not divisible by tp " + tp +
             " (sequence parallelism)");
  }
  const int64_t dp = shape.dp_replicate * shape.dp_shard;
  need(t.global_batch_size <= 0 || t.global_batch_size % (t.local_batch_size * dp) == 0,
       "global_batch_size " + std::to_string(t.global_batch_size) + " is not a multiple of local_batch_size x dp = " +
           std::to_string(t.local_batch_size) + " x " + std::to_string(dp));
  // On GPUs a world size is a GPU count on this node (several nodes come with Slurm).
  const std::string& dev = cfg.training.device;
  const bool on_gpu = dev == "cuda" || (dev == "auto" && budget.gpus > 0);
  if (dev == "cuda" && budget.gpus == 0)
    why.push_back("training.device = cuda but LibTorch sees no GPU on this node");
  else if (on_gpu)
    need(world_size <= budget.gpus, "needs " + std::to_string(world_size) + " GPUs; this node has " +
                                        std::to_string(budget.gpus) + " (" + budget.gpu_name + ")");
  need(on_gpu || !cfg.compile.enable || fused_kernels_available(),
       "compile.enable: ctitan's fused kernels need AVX-512 and this CPU runs ATen at " + at::get_cpu_capability() +
           " (the run would measure the eager ops)");
  need(!(float8_on(cfg) && shape.dp_shard > 1 && cfg.float8.enable_fsdp_float8_all_gather &&
         cfg.float8.recipe_name != "tensorwise"),
       "the float8 FSDP all-gather needs recipe_name \"tensorwise\", got \"" + cfg.float8.recipe_name + "\"");
  const int64_t per_rank = predicted_rank_bytes(cfg, world_size);
  const double total = static_cast<double>(per_rank) * world_size;
  if (on_gpu && budget.gpus > 0)
    need(per_rank <= budget.gpu_memory_bytes,
         "predicted memory " + gib(static_cast<double>(per_rank)) + " per rank > " +
             gib(static_cast<double>(budget.gpu_memory_bytes)) + " per GPU (" +
             (budget.source == "memory_budget_gb" ? budget.source : budget.gpu_name) + ")");
  else if (!on_gpu)
    need(total <= static_cast<double>(budget.memory_bytes),
         "predicted memory " + gib(static_cast<double>(per_rank)) + " per rank x " + std::to_string(world_size) +
             " > " + gib(static_cast<double>(budget.memory_bytes)) + " (" + budget.source + ")");
  std::string out;
  for (const auto& w : why) out += (out.empty() ? "" : "; ") + w;
  return out;
}

std::vector<SweepPoint> plan_sweep(const SweepSpec& spec, const DeviceBudget& budget) {
  return plan_sweep(spec, budget, this_build().id);  // the trainer this binary launches
}

std::vector<SweepPoint> plan_sweep(const SweepSpec& spec, const DeviceBudget& budget, const std::string& build_id) {
  JobConfig base;
  config::Origins base_origins;
  config::load_toml_into(base, spec.base_path, &base_origins);
  apply(base, spec.overrides, base_origins);
  check(base, base_origins);

  // Where a point's values come from, so that a value no combination
  // accepts is reported as a spec error rather than a column of infeasibles.
  struct Source {
    std::string where, what;
    int points = 0, rejected = 0;
    std::string first_error;
  };
  std::vector<Source> sources;
  std::vector<std::vector<int>> axis_source(spec.grid.size());
  for (size_t i = 0; i < spec.grid.size(); ++i)
    for (const auto& v : spec.grid[i].values) {
      axis_source[i].push_back(static_cast<int>(sources.size()));
      sources.push_back({spec.grid[i].where, "grid value " + spec.grid[i].key + " = " + (v.empty() ? "[]" : v), 0, 0, ""});
    }
  const int first_stack_source = static_cast<int>(sources.size());
  for (const auto& row : spec.stack) sources.push_back({row.sets.empty() ? spec.path : row.sets[0].where,
                                                        "[[stack]] row '" + row.name + "'", 0, 0, ""});

  std::vector<SweepPoint> points;
  std::set<std::string> seen;
  const auto add = [&](std::vector<Assignment> sets, std::string label, int ws, int stack_index,
                       const std::vector<int>& from, bool explicit_point) {
    SweepPoint pt;
    pt.config = base;
    config::Origins origins = base_origins;
    apply(pt.config, sets, origins);  // a value of the wrong type throws: a spec error
    if (!explicit_point)
      for (const auto& rule : spec.exclude)
        if (matches(rule, pt.config, ws)) return;
    std::string rejected;
    try {
      check(pt.config, origins);
    } catch (const InputError& e) {
      if (explicit_point) throw InputError("sweep spec error: [[include]] row: " + strip_prefix(e.what()));
      rejected = strip_prefix(e.what());
    }
    for (int s : from) {
      ++sources[s].points;
      if (!rejected.empty() && sources[s].rejected++ == 0) sources[s].first_error = rejected;
    }
    pt.sets = std::move(sets);
    pt.label = std::move(label);
    pt.world_size = ws;
    pt.stack_index = stack_index;
    pt.config_toml = to_toml(pt.config);
    pt.config_hash = config_hash(pt.config);
    pt.key = point_key(pt.config, ws, build_id);
    pt.infeasible = rejected.empty() ? infeasibility(pt.config, ws, budget) : "the trainer rejects it: " + rejected;
    if (seen.insert(pt.key).second) points.push_back(std::move(pt));
  };

  for (int ws : spec.world_sizes) {
    std::vector<size_t> idx(spec.grid.size(), 0);
    while (true) {
      std::vector<Assignment> combo;
      std::vector<int> from;
      for (size_t i = 0; i < spec.grid.size(); ++i) {
        combo.push_back({spec.grid[i].key, spec.grid[i].values[idx[i]], spec.grid[i].where});
        from.push_back(axis_source[i][idx[i]]);
      }
      const std::string label = label_of(combo);
      if (spec.stack.empty()) add(combo, label, ws, 0, from, false);
      std::vector<Assignment> stacked = combo;
      for (size_t k = 0; k < spec.stack.size(); ++k) {
        stacked.insert(stacked.end(), spec.stack[k].sets.begin(), spec.stack[k].sets.end());
        from.push_back(first_stack_source + static_cast<int>(k));
        add(stacked, label + (label.empty() ? "" : " ") + "stack=" + std::to_string(k + 1) + ":" + spec.stack[k].name,
            ws, static_cast<int>(k + 1), from, false);
      }
      size_t i = spec.grid.size();  // odometer: the last axis turns fastest
      while (i > 0 && ++idx[i - 1] == spec.grid[i - 1].values.size()) idx[--i] = 0;
      if (i == 0) break;
    }
  }
  for (const IncludeRow& row : spec.include)
    for (int ws : row.world_sizes.empty() ? spec.world_sizes : row.world_sizes)
      add(row.sets, label_of(row.sets), ws, 0, {}, true);

  for (const Source& s : sources) {
    if (s.points == 0 || s.rejected < s.points) continue;
    std::string why = s.first_error;
    if (why.rfind(s.where + ": ", 0) == 0) why = why.substr(s.where.size() + 2);  // said once is enough
    throw InputError("sweep spec error: " + s.where + ": " + s.what + " is rejected in every point: " + why);
  }
  return points;
}

}  // namespace ctitan
