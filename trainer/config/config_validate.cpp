// Value checks on a resolved JobConfig. Only impossible values and TorchTitan
// features ctitan lacks are rejected here; whether a model flavor exists or a
// parallel layout fits the world size is decided by the code that knows
// (model registry, device mesh).
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "common/limits.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/config_registry.h"

namespace ctitan::config {
namespace {

class Checker {
 public:
  explicit Checker(const Origins& origins) : origins_(origins) {}

  // Errors are prefixed with where `key` was set (file:line or command line).
  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    auto it = origins_.find(key);
    fail(it == origins_.end() ? "" : it->second, what);
  }

  void positive(const std::string& key, int64_t v) const {
    if (v <= 0) bad(key, key + " must be > 0, got " + std::to_string(v));
  }
  void seq_len(const std::string& key, int64_t v) const {
    positive(key, v);
    if (v > kMaxSeqLen)
      bad(key, key + " " + std::to_string(v) + " is more than " + std::to_string(kMaxSeqLen) +
                   " tokens (2^24), the longest sequence ctitan runs or plans (RoPE's float32 positions are exact "
                   "only up to 2^24); give a shorter one");
  }
  void non_negative(const std::string& key, int64_t v) const {
    if (v < 0) bad(key, key + " must be >= 0, got " + std::to_string(v));
  }
  void non_negative(const std::string& key, double v) const {
    if (!(v >= 0)) bad(key, key + " must be >= 0, got " + num(v));
  }
  void in_closed_unit(const std::string& key, double v) const {
    if (!(v >= 0 && v <= 1)) bad(key, key + " must be in [0, 1], got " + num(v));
  }
  void in_half_open_unit(const std::string& key, double v) const {
    if (!(v >= 0 && v < 1)) bad(key, key + " must be in [0, 1), got " + num(v));
  }
  void degree(const std::string& key, int64_t v, bool allow_minus_one = false) const {
    if (v >= 1 || (allow_minus_one && v == -1)) return;
    bad(key, key + " must be >= 1" + std::string(allow_minus_one ? " or -1" : "") + ", got " +
                 std::to_string(v));
  }
  void one_of(const std::string& key, const std::string& v,
              std::initializer_list<const char*> allowed) const {
    std::string list;
    for (const char* a : allowed) {
      if (v == a) return;
      if (!list.empty()) list += '|';
      list += a;
    }
    bad(key, key + " must be one of " + list + ", got " + render_value(Value(v)));
  }

  static std::string num(double v) { return render_value(Value(v)); }

 private:
  const Origins& origins_;
};

bool is_positive_integer(const std::string& s) {
  if (s.empty() || s.size() > 9) return false;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return false;
  }
  return std::stoi(s) > 0;
}

void check_training(const Checker& k, const TrainingSection& t) {
  k.positive("training.steps", t.steps);
  k.seq_len("training.seq_len", t.seq_len);
  k.positive("training.local_batch_size", t.local_batch_size);
  if (t.global_batch_size != -1 &&
      (t.global_batch_size <= 0 || t.global_batch_size % t.local_batch_size != 0)) {
    k.bad("training.global_batch_size",
          "training.global_batch_size must be -1 or a positive multiple of "
          "training.local_batch_size (" +
              std::to_string(t.local_batch_size) + "), got " + std::to_string(t.global_batch_size));
  }
  k.non_negative("training.max_norm", t.max_norm);
  k.one_of("training.mixed_precision_param", t.mixed_precision_param, {"bfloat16", "float32"});
  // Gradients are reduced in float32 (as TorchTitan, whose only value it is).
  k.one_of("training.mixed_precision_reduce", t.mixed_precision_reduce, {"float32"});
  k.one_of("training.dataset", t.dataset, {"synthetic", "markov", "text", "bin", "c4", "c4_test", "c4_validation"});
  k.one_of("training.device", t.device, {"auto", "cpu", "cuda", "meta"});
  if ((t.dataset == "text" || t.dataset == "bin") && t.dataset_path.empty()) {
    k.bad("training.dataset",
          "training.dataset_path is required when training.dataset is \"" + t.dataset + "\"");
  }
}

void check_validation(const Checker& k, const ValidationSection& v) {
  if (v.target_loss > 0 && !v.enable)
    k.bad("validation.target_loss", "validation.target_loss is reached by validation passes: set validation.enable = "
                                    "true (and validation.freq), or drop the target");
  if (!v.enable) return;
  k.one_of("validation.dataset", v.dataset,
           {"c4_validation", "c4", "c4_test", "text", "bin", "markov", "synthetic"});
  k.positive("validation.local_batch_size", v.local_batch_size);
  k.seq_len("validation.seq_len", v.seq_len);
  k.positive("validation.freq", v.freq);
  k.non_negative("validation.target_loss", v.target_loss);
  if (v.steps == 0 || v.steps < -1)
    k.bad("validation.steps", "validation.steps must be > 0, or -1 for the whole set, got " + std::to_string(v.steps));
  if (v.steps == -1 && (v.dataset == "markov" || v.dataset == "synthetic"))
    k.bad("validation.steps", "validation.steps = -1 (the whole set) needs data that ends; the " + v.dataset +
                                  " dataset does not: set validation.steps to a number of batches");
  if ((v.dataset == "text" || v.dataset == "bin") && v.dataset_path.empty())
    k.bad("validation.dataset", "validation.dataset_path is required when validation.dataset is \"" + v.dataset + "\"");
}

void check_optimizer(const Checker& k, const OptimizerSection& o, const LrSchedulerSection& s) {
  k.one_of("optimizer.name", o.name, {"AdamW", "Adam"});
  k.non_negative("optimizer.lr", o.lr);
  k.in_half_open_unit("optimizer.beta1", o.beta1);
  k.in_half_open_unit("optimizer.beta2", o.beta2);
  if (!(o.eps > 0)) k.bad("optimizer.eps", "optimizer.eps must be > 0, got " + Checker::num(o.eps));
  k.non_negative("optimizer.weight_decay", o.weight_decay);
  k.one_of("optimizer.implementation", o.implementation, {"for_loop", "foreach", "fused"});
  k.non_negative("lr_scheduler.warmup_steps", s.warmup_steps);
  if (s.total_steps) k.positive("lr_scheduler.total_steps", *s.total_steps);
  if (s.decay_ratio) k.in_closed_unit("lr_scheduler.decay_ratio", *s.decay_ratio);
  k.one_of("lr_scheduler.decay_type", s.decay_type, {"linear", "sqrt", "cosine"});
  k.in_closed_unit("lr_scheduler.min_lr_factor", s.min_lr_factor);
}

void check_parallelism(const Checker& k, const ParallelismSection& p) {
  k.degree("parallelism.data_parallel_replicate_degree", p.data_parallel_replicate_degree);
  k.degree("parallelism.data_parallel_shard_degree", p.data_parallel_shard_degree, true);
  k.degree("parallelism.tensor_parallel_degree", p.tensor_parallel_degree);
  k.degree("parallelism.pipeline_parallel_degree", p.pipeline_parallel_degree);
  k.degree("parallelism.context_parallel_degree", p.context_parallel_degree);
  k.degree("parallelism.expert_parallel_degree", p.expert_parallel_degree);
  k.positive("parallelism.pipeline_parallel_microbatch_size", p.pipeline_parallel_microbatch_size);
  k.non_negative("parallelism.pipeline_parallel_first_stage_less_layers", p.pipeline_parallel_first_stage_less_layers);
  k.non_negative("parallelism.pipeline_parallel_last_stage_less_layers", p.pipeline_parallel_last_stage_less_layers);
  k.degree("parallelism.pipeline_parallel_layers_per_stage", p.pipeline_parallel_layers_per_stage,
           true);
  k.one_of("parallelism.fsdp_reshard_after_forward", p.fsdp_reshard_after_forward,
           {"default", "always", "never"});
  k.one_of("parallelism.context_parallel_rotate_method", p.context_parallel_rotate_method,
           {"allgather", "alltoall"});
  k.one_of("parallelism.context_parallel_load_balancer", p.context_parallel_load_balancer, {"headtail", "none", "ptrr"});
}

// Hugging Face checkpoints hold weights only and, as in TorchTitan, are
// read and written only when checkpointing is on.
void check_hf_checkpoint(const Checker& k, const JobConfig& c) {
  const auto& ck = c.checkpoint;
  if (ck.last_save_in_hf && !ck.enable)
    k.bad("checkpoint.last_save_in_hf", "checkpoint.last_save_in_hf needs checkpoint.enable = true (the export is the "
                                        "last step's checkpoint); add --checkpoint.enable");
  if (ck.last_save_in_hf && !ck.last_save_model_only)
    k.bad("checkpoint.last_save_in_hf", "checkpoint.last_save_in_hf saves weights only; it needs "
                                        "checkpoint.last_save_model_only = true");
  if (!ck.initial_load_in_hf) return;
  if (!ck.enable)
    k.bad("checkpoint.initial_load_in_hf", "checkpoint.initial_load_in_hf needs checkpoint.enable = true (checkpoints "
                                           "load only when enabled); add --checkpoint.enable");
  if (!ck.initial_load_model_only)
    k.bad("checkpoint.initial_load_in_hf", "checkpoint.initial_load_in_hf loads weights only; it needs "
                                           "checkpoint.initial_load_model_only = true");
  if (ck.initial_load_path.empty() && c.model.hf_assets_path.empty())
    k.bad("checkpoint.initial_load_in_hf", "checkpoint.initial_load_in_hf needs checkpoint.initial_load_path (or "
                                           "model.hf_assets_path): the Hugging Face model folder to load");
}

void check_techniques(const Checker& k, const JobConfig& c) {
  const auto& ac = c.activation_checkpoint;
  k.one_of("activation_checkpoint.mode", ac.mode, {"none", "full", "selective"});
  if (ac.selective_ac_option != "op" && !is_positive_integer(ac.selective_ac_option)) {
    k.bad("activation_checkpoint.selective_ac_option",
          "activation_checkpoint.selective_ac_option must be \"op\" or a positive integer, got " +
              render_value(Value(ac.selective_ac_option)));
  }
  k.one_of("quantize.linear.float8.recipe_name", c.float8.recipe_name,
           {"tensorwise", "rowwise", "rowwise_with_gw_hp"});
  const auto& ck = c.checkpoint;
  k.positive("checkpoint.interval", ck.interval);
  k.non_negative("checkpoint.keep_latest_k", ck.keep_latest_k);
  if (ck.load_step < -1) {
    k.bad("checkpoint.load_step",
          "checkpoint.load_step must be >= 0 or -1, got " + std::to_string(ck.load_step));
  }
  k.one_of("checkpoint.export_dtype", ck.export_dtype, {"float16", "bfloat16", "float32"});
  k.one_of("checkpoint.async_mode", ck.async_mode, {"disabled", "async", "async_with_pinned_mem"});
  check_hf_checkpoint(k, c);
}

void check_observability(const Checker& k, const JobConfig& c) {
  k.positive("metrics.log_freq", c.metrics.log_freq);
  k.non_negative("metrics.warmup_steps", c.metrics.warmup_steps);
  k.non_negative("metrics.peak_tflops", c.metrics.peak_tflops);
  k.non_negative("debug.step_delay_ms", c.debug.step_delay_ms);
  k.non_negative("debug.step_slowdown", c.debug.step_slowdown);
  k.non_negative("debug.data_stall_ms", c.debug.data_stall_ms);
  if (c.debug.slow_rank < -1)
    k.bad("debug.slow_rank", "debug.slow_rank must be a rank (>= 0) or -1 for every rank, got " +
                                 std::to_string(c.debug.slow_rank));
  k.positive("profiling.profile_freq", c.profiling.profile_freq);
  k.positive("profiling.profiler_active", c.profiling.profiler_active);
  k.non_negative("profiling.profiler_warmup", c.profiling.profiler_warmup);
  k.positive("comm.init_timeout_seconds", c.comm.init_timeout_seconds);
  k.positive("comm.train_timeout_seconds", c.comm.train_timeout_seconds);
  k.one_of("comm.mode", c.comm.mode, {"default", "fake_backend"});
  k.one_of("comm.cuda_backend", c.comm.cuda_backend, {"nccl", "gloo"});
}

// TorchTitan keys ctitan accepts but does not implement: only the default
// keeps the run meaning what the recipe says.
void check_unsupported(const Checker& k, const JobConfig& c) {
  static const JobConfig defaults;
  for (const FieldSpec& f : registry()) {
    if (f.support != Support::kDefaultOnly) continue;
    const Value def = f.get(defaults);
    if (f.get(c) == def) continue;
    std::string what = f.key;
    what += " is not supported by ctitan: ";
    what += f.why.empty() ? f.help : f.why;
    what += "; only the default ";
    what += render_value(def);
    what += " is accepted, got ";
    what += render_value(f.get(c));
    k.bad(f.key, what);
  }
}

ModelNameCheck model_name_check = nullptr;

// model.name picks the model family: the families' registry says whether
// it is one (set_model_name_check). Without a check, validation refuses
// rather than pass every name: a program that lost the registry's object
// at link time, or validated before its static initializer ran, would
// otherwise accept "nosuch" and fail (or record a wrong family) later.
void check_model_name(const Checker& k, const std::string& name) {
  if (!model_name_check)
    throw std::logic_error(
        "config validation has no model.name check installed: link trainer/models/registry.cpp (its "
        "static initializer installs it) or call config::set_model_name_check before validating");
  const std::string error = model_name_check(name);
  if (!error.empty()) k.bad("model.name", error);
}

}  // namespace

ModelNameCheck set_model_name_check(ModelNameCheck check) {
  const ModelNameCheck previous = model_name_check;
  model_name_check = check;
  return previous;
}

void validate_with_origins(const JobConfig& cfg, const Origins& origins) {
  const Checker k(origins);
  check_model_name(k, cfg.model.name);
  // 0 keeps the flavor's layer count; the largest Llama 3 has 126.
  if (cfg.model.n_layers < 0 || cfg.model.n_layers > 4096)
    k.bad("model.n_layers", "model.n_layers must be in [0, 4096] (0 = the flavor's count), got " +
                                std::to_string(cfg.model.n_layers));
  if (cfg.model.moe_num_experts < 0 || cfg.model.moe_num_experts > 65536)
    k.bad("model.moe_num_experts", "model.moe_num_experts must be in [0, 65536] (0 = the flavor's), got " +
                                       std::to_string(cfg.model.moe_num_experts));
  if (cfg.model.moe_top_k < 0 || cfg.model.moe_top_k > 65536)
    k.bad("model.moe_top_k",
          "model.moe_top_k must be in [0, 65536] (0 = the flavor's), got " + std::to_string(cfg.model.moe_top_k));
  const double coeff = cfg.model.moe_load_balance_coeff;
  // The expert bias moves by coeff per step against routing scores in [0, 1]:
  // above 1 one update outweighs every score (TorchTitan's default is 1e-3).
  if (!std::isfinite(coeff) || (coeff < 0 && coeff != -1) || coeff > 1)
    k.bad("model.moe_load_balance_coeff", "model.moe_load_balance_coeff must be -1 (the flavor's) or in [0, 1] "
                                          "(TorchTitan's default 1e-3; the bias step per update), got " +
                                              render_value(Value(coeff)));
  check_training(k, cfg.training);
  check_validation(k, cfg.validation);
  check_optimizer(k, cfg.optimizer, cfg.lr_scheduler);
  check_parallelism(k, cfg.parallelism);
  check_techniques(k, cfg);
  check_observability(k, cfg);
  check_unsupported(k, cfg);
}

}  // namespace ctitan::config
