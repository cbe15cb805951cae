// From a SweepSpec to the points of a sweep: expansion (grid × stack rows ×
// world sizes, exclude, include), resolution through the trainer's own config
// code, the point key, and the feasibility rules.
#include <c10/util/hash.h>  // c10::sha1: a stable digest without another dependency

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "common/errors.h"
#include "trainer/parallel/context_parallel.h"
#include "trainer/parallel/expert_parallel.h"
#include "trainer/parallel/pipeline.h"
#include "common/build_identity.h"
#include "profiling/gpu_info.h"
#include "harness/sweep_spec.h"
#include "planner/hardware.h"
#include "planner/model_desc.h"
#include "planner/plan.h"
#include "planner/op_costs.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/config_registry.h"
#include "trainer/distributed/mesh.h"
#include "trainer/kernels/fused_ops.h"  // fused_kernels_available
#include "trainer/models/registry.h"

namespace ctitan {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
// The spec whose figures stand in for a GPU no spec describes (memory only).
constexpr const char* kStandInGpu = "h100_sxm";

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
    model_flavor(cfg.model.name, cfg.model.flavor, cfg.model.n_layers);  // the MoE keys prune (infeasibility)
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

// A point's checkpoints live in its own run folder. The trainer saves to
// and resumes from job.dump_folder / checkpoint.folder, job.dump_folder is
// the point's run folder, and checkpoint.folder is not part of the point
// key (keys_outside_the_key): an absolute folder, or one whose ".." climbs
// out of the run folder, is shared by every point, so a point would resume
// the checkpoint another point (another lr, another batch) left there and
// be recorded ok with the other's steps. Refused when the sweep is planned,
// wherever the value came from (base recipe, [overrides], a grid, include
// or stack value). checkpoint.initial_load_path stays allowed: it is part
// of the point key and only seeds a run whose own folder holds no checkpoint.
void check_checkpoint_folder(const SweepSpec& spec, const JobConfig& cfg, const config::Origins& origins) {
  if (!cfg.checkpoint.enable) return;  // the folder is neither read nor written
  const std::filesystem::path folder(cfg.checkpoint.folder);
  const std::filesystem::path normal = folder.lexically_normal();
  std::string why;
  if (folder.has_root_directory() || folder.has_root_name())
    why = "is an absolute path";
  else if (!normal.empty() && *normal.begin() == "..")
    why = "climbs out of the run folder with '..'";
  else
    return;
  const auto it = origins.find("checkpoint.folder");
  std::string where = spec.path;
  if (it != origins.end() && !it->second.empty())
    where = it->second.rfind(spec.path + ":", 0) == 0 ? it->second : spec.path + ": base recipe " + it->second;
  throw InputError("sweep spec error: " + where + ": checkpoint.folder = \"" + cfg.checkpoint.folder + "\" " + why +
                   ", so with checkpoint.enable every point would save to and resume from one shared folder (a "
                   "point would continue another point's run and be recorded as its own); set a relative "
                   "checkpoint.folder such as \"checkpoint\", which resolves under job.dump_folder, each run's own "
                   "folder (to start every point from one checkpoint, set checkpoint.initial_load_path)");
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

ResolvedHardware resolve_hardware(const DeviceBudget& budget, bool gpu) {
  if (!budget.hardware.empty()) return {load_hardware(budget.hardware), false, nullptr};
  if (!gpu) return {load_hardware("cpu"), false, nullptr};
  if (const std::string name = gpu_spec_name(budget.gpu_name, budget.gpu_memory_bytes); !name.empty()) {
    try {
      return {load_hardware(name), false, nullptr};
    } catch (const InputError&) {  // not in this tree's recipes/hardware: the stand-in below
    }
  }
  ResolvedHardware r{load_hardware(kStandInGpu), true, nullptr};
  const std::string gpu_name = budget.gpu_name.empty() ? "an unknown GPU" : budget.gpu_name;
  r.spec.name = std::string(kStandInGpu) + " as a stand-in for ";
  r.spec.name += gpu_name;
  r.spec.title = gpu_name;
  if (budget.gpu_memory_bytes > 0) r.spec.memory_bytes = static_cast<double>(budget.gpu_memory_bytes);
  return r;
}

// Specs read once per plan: one sweep asks for the same two at most.
class HardwareCache {
 public:
  explicit HardwareCache(const DeviceBudget& budget) : budget_(budget) {}
  const ResolvedHardware& get(bool gpu) {
    std::optional<ResolvedHardware>& slot = gpu ? gpu_ : cpu_;
    if (!slot) slot = point_planning(budget_, gpu);
    return *slot;
  }

 private:
  const DeviceBudget& budget_;
  std::optional<ResolvedHardware> gpu_, cpu_;
};

}  // namespace

bool on_gpu(const JobConfig& cfg, const DeviceBudget& budget) {
  const std::string& dev = cfg.training.device;
  return dev == "cuda" || (dev == "auto" && budget.gpus > 0);
}

ResolvedHardware point_planning(const DeviceBudget& budget, bool gpu) {
  ResolvedHardware hw = resolve_hardware(budget, gpu);
  if (!budget.plan_profile.empty() && !hw.stand_in) {
    // Measured planning, as `ctitan plan --profile` does it: this
    // machine's probe, then the profiled runs.
    hw.spec = resolved_for_plan(hw.spec);
    MeasuredPlanning m = measured_planning(hw.spec, budget.plan_profile);
    hw.spec = std::move(m.spec);
    hw.units = std::move(m.units);
  }
  return hw;
}

Prediction predict_on(const JobConfig& cfg, int world_size, const ResolvedHardware& hw) {
  PlanRequest req;
  req.cfg = cfg;
  req.model = model_from_config(cfg.model);
  req.world_size = world_size;
  req.measured = hw.units;
  Prediction p = predict(req, hw.spec);
  if (hw.stand_in) {  // another GPU's speed says nothing about this one's
    p.tps_per_device = p.tflops_per_device = p.mfu = 0;
    p.time = TimeBreakdown{};
    p.notes.push_back("memory only: no hardware spec describes " + hw.spec.title + "; set [sweep] hardware");
  }
  return p;
}

namespace {

// "uncalibrated: maker's figures ..." → "uncalibrated";
// "calibrated from r.db (12 runs, ...)" → "calibrated from r.db".
std::string calibration_word(const std::string& calibration) {
  const size_t cut = std::min(calibration.find(':'), calibration.find(" ("));
  return calibration.substr(0, cut);
}

std::string predicted_on(const Prediction& p) {
  std::string out = " [predicted on ";
  out += p.hardware;
  const std::string cal = calibration_word(p.calibration);
  if (!cal.empty()) out += ", " + cal;
  return out + "]";
}

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
  b.hardware = spec.hardware;
  b.plan_profile = spec.plan_profile;
  return b;
}

std::string gpu_spec_name(const std::string& gpu_name, int64_t memory_bytes) {
  std::string n;
  for (char c : gpu_name) n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto has = [&n](const char* s) { return n.find(s) != std::string::npos; };
  if (has("h100")) return has("pcie") ? "h100_pcie" : "h100_sxm";  // SXM5 and "80GB HBM3" (NVL: PCIe card)
  if (has("h200") || has("gh200")) return "h200";
  if (has("a100"))  // "A100-SXM4-40GB", "A100-PCIE-40GB", "A100 80GB PCIe"; else by memory
    return has("40gb") || (!has("80gb") && memory_bytes > 0 && memory_bytes < (int64_t{60} << 30)) ? "a100_40gb"
                                                                                                   : "a100_80gb";
  if (has("b200")) return "b200";
  if (has("mi300x")) return "mi300x";
  return "";
}

HardwareSpec point_hardware(const DeviceBudget& budget, bool gpu) { return resolve_hardware(budget, gpu).spec; }

Prediction predict_point(const JobConfig& cfg, int world_size, const DeviceBudget& budget) {
  return predict_on(cfg, world_size, resolve_hardware(budget, on_gpu(cfg, budget)));
}

std::string infeasibility(const JobConfig& cfg, int world_size, const DeviceBudget& budget) {
  try {
    const Prediction p = predict_point(cfg, world_size, budget);
    return infeasibility(cfg, world_size, budget, &p, "");
  } catch (const InputError& e) {
    return infeasibility(cfg, world_size, budget, nullptr, strip_prefix(e.what()));
  }
}

std::string infeasibility(const JobConfig& cfg, int world_size, const DeviceBudget& budget,
                          const Prediction* prediction, const std::string& prediction_error) {
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
  // The MoE keys against the flavor (top_k above the experts, ...) prune
  // like a degree that does not divide: the point is infeasible.
  ModelArgs a;
  try {
    a = model_flavor(cfg.model);
  } catch (const InputError& e) {
    why.push_back(e.what());
    a = model_flavor(cfg.model.name, cfg.model.flavor, cfg.model.n_layers);
  }
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
  // The model family's own refusals (trainer/models/registry.h): the reason as the trainer says it.
  trainer_says([&] {
    check_model_layout(a, ModelLayout{shape.dp_replicate, shape.dp_shard, shape.cp, shape.tp, shape.pp, float8_on(cfg),
                                      p.context_parallel_load_balancer});
  });
  trainer_says([&] { check_expert_parallel(a, shape.ep, shape.etp > 1, shape.tp, p.enable_sequence_parallel); });
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
  const bool gpu = on_gpu(cfg, budget);
  if (cfg.training.device == "cuda" && budget.gpus == 0)
    why.push_back("training.device = cuda but LibTorch sees no GPU on this node");
  else if (gpu)
    need(world_size <= budget.gpus, "needs " + std::to_string(world_size) + " GPUs; this node has " +
                                        std::to_string(budget.gpus) + " (" + budget.gpu_name + ")");
  need(gpu || !cfg.compile.enable || fused_kernels_available(),
       "compile.enable: ctitan's fused kernels need AVX-512 and this CPU runs ATen at " + at::get_cpu_capability() +
           " (the run would measure the eager ops)");
  need(!(float8_on(cfg) && shape.dp_shard > 1 && cfg.float8.enable_fsdp_float8_all_gather &&
         cfg.float8.recipe_name != "tensorwise"),
       "the float8 FSDP all-gather needs recipe_name \"tensorwise\", got \"" + cfg.float8.recipe_name + "\"");
  if (prediction) {  // the planner's peak of the largest rank
    const double per_rank = prediction->memory.total;
    const double total = per_rank * world_size;
    if (gpu && budget.gpus > 0)
      need(per_rank <= static_cast<double>(budget.gpu_memory_bytes),
           "predicted memory " + gib(per_rank) + " per rank > " + gib(static_cast<double>(budget.gpu_memory_bytes)) +
               " per GPU (" + (budget.source == "memory_budget_gb" ? budget.source : budget.gpu_name) + ")" +
               predicted_on(*prediction));
    else if (!gpu)
      need(total <= static_cast<double>(budget.memory_bytes),
           "predicted memory " + gib(per_rank) + " per rank x " + std::to_string(world_size) + " > " +
               gib(static_cast<double>(budget.memory_bytes)) + " (" + budget.source + ")" + predicted_on(*prediction));
  } else if (why.empty()) {
    why.push_back(prediction_error);  // the planner's own check of the layout
  }
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
  HardwareCache hardware(budget);
  const auto add = [&](std::vector<Assignment> sets, std::string label, int ws, int stack_index,
                       const std::vector<int>& from, bool explicit_point) {
    SweepPoint pt;
    pt.config = base;
    config::Origins origins = base_origins;
    apply(pt.config, sets, origins);  // a value of the wrong type throws: a spec error
    if (!explicit_point)
      for (const auto& rule : spec.exclude)
        if (matches(rule, pt.config, ws)) return;
    check_checkpoint_folder(spec, pt.config, origins);
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
    if (!seen.insert(pt.key).second) return;
    if (!rejected.empty()) {
      pt.infeasible = "the trainer rejects it: " + rejected;
    } else {
      const ResolvedHardware& hw = hardware.get(on_gpu(pt.config, budget));  // an unknown spec: bad input
      std::string predict_error;
      try {
        pt.prediction = predict_on(pt.config, ws, hw);
      } catch (const InputError& e) {
        predict_error = strip_prefix(e.what());
      }
      pt.infeasible = infeasibility(pt.config, ws, budget, pt.prediction ? &*pt.prediction : nullptr, predict_error);
    }
    points.push_back(std::move(pt));
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
  for (size_t i = 0; i < points.size(); ++i) points[i].plan_index = static_cast<int>(i);
  return points;
}

void order_by_prediction(std::vector<SweepPoint>& points) {
  const auto speed = [](const SweepPoint& p) {
    return p.prediction ? p.prediction->tps_per_device * p.world_size : 0.0;
  };
  std::stable_sort(points.begin(), points.end(),
                   [&](const SweepPoint& a, const SweepPoint& b) { return speed(a) > speed(b); });
}

}  // namespace ctitan
