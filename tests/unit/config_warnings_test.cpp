// Every TorchTitan v0.2.2 key is registered, and none is silently ignored:
// a key ctitan does not act on carries a reason, is listed in
// docs/trainer.md, and (set to a non-default value) yields exactly one
// start-up warning naming it — or, when a user would count on it, an error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/errors.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/config_registry.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

using config::FieldSpec;
using config::Support;
using config::Value;

// Every field of every dataclass in TorchTitan v0.2.2's
// torchtitan/config/job_config.py (nested dataclasses as dotted sections).
const std::vector<std::string> kTorchTitanKeys = {
    "job.config_file",
    "job.dump_folder",
    "job.description",
    "job.print_config",
    "job.save_config_file",
    "job.custom_config_module",
    "profiling.enable_profiling",
    "profiling.save_traces_folder",
    "profiling.profile_freq",
    "profiling.profiler_active",
    "profiling.profiler_warmup",
    "profiling.enable_memory_snapshot",
    "profiling.save_memory_snapshot_folder",
    "metrics.log_freq",
    "metrics.enable_tensorboard",
    "metrics.disable_color_printing",
    "metrics.save_tb_folder",
    "metrics.save_for_all_ranks",
    "metrics.enable_wandb",
    "model.name",
    "model.flavor",
    "model.hf_assets_path",
    "model.tokenizer_path",
    "model.converters",
    "model.print_after_conversion",
    "optimizer.name",
    "optimizer.lr",
    "optimizer.beta1",
    "optimizer.beta2",
    "optimizer.eps",
    "optimizer.weight_decay",
    "optimizer.implementation",
    "optimizer.early_step_in_backward",
    "lr_scheduler.warmup_steps",
    "lr_scheduler.total_steps",
    "lr_scheduler.decay_ratio",
    "lr_scheduler.decay_type",
    "lr_scheduler.min_lr_factor",
    "training.dataset",
    "training.dataset_path",
    "training.local_batch_size",
    "training.global_batch_size",
    "training.seq_len",
    "training.max_norm",
    "training.steps",
    "training.enable_cpu_offload",
    "training.dtype",
    "training.mixed_precision_param",
    "training.mixed_precision_reduce",
    "training.gc_freq",
    "training.gc_debug",
    "training.dataloader.num_workers",
    "training.dataloader.persistent_workers",
    "training.dataloader.pin_memory",
    "training.dataloader.prefetch_factor",
    "parallelism.data_parallel_replicate_degree",
    "parallelism.data_parallel_shard_degree",
    "parallelism.fsdp_reshard_after_forward",
    "parallelism.tensor_parallel_degree",
    "parallelism.disable_loss_parallel",
    "parallelism.enable_async_tensor_parallel",
    "parallelism.pipeline_parallel_degree",
    "parallelism.module_fqns_per_model_part",
    "parallelism.pipeline_parallel_first_stage_less_layers",
    "parallelism.pipeline_parallel_last_stage_less_layers",
    "parallelism.pipeline_parallel_layers_per_stage",
    "parallelism.pipeline_parallel_schedule",
    "parallelism.pipeline_parallel_schedule_csv",
    "parallelism.pipeline_parallel_microbatch_size",
    "parallelism.pipeline_parallel_expert_parallel_overlap",
    "parallelism.context_parallel_degree",
    "parallelism.context_parallel_load_balancer",
    "parallelism.context_parallel_rotate_method",
    "parallelism.expert_parallel_degree",
    "parallelism.expert_tensor_parallel_degree",
    "parallelism.expert_parallel_comm_backend",
    "checkpoint.enable",
    "checkpoint.enable_ft_dataloader_checkpoints",
    "checkpoint.folder",
    "checkpoint.interval",
    "checkpoint.initial_load_path",
    "checkpoint.initial_load_model_only",
    "checkpoint.initial_load_in_hf",
    "checkpoint.initial_load_in_hf_quantized",
    "checkpoint.last_save_model_only",
    "checkpoint.last_save_in_hf",
    "checkpoint.export_dtype",
    "checkpoint.async_mode",
    "checkpoint.keep_latest_k",
    "checkpoint.load_step",
    "checkpoint.exclude_from_loading",
    "checkpoint.enable_first_step_checkpoint",
    "checkpoint.create_seed_checkpoint",
    "checkpoint.load_only",
    "activation_checkpoint.mode",
    "activation_checkpoint.selective_ac_option",
    "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns",
    "activation_checkpoint.early_stop",
    "activation_checkpoint.memory_budget",
    "activation_checkpoint.visualize_memory_budget_pareto",
    "activation_checkpoint.preserve_rng_state",
    "activation_checkpoint.determinism_check",
    "activation_checkpoint.debug",
    "compile.enable",
    "compile.components",
    "compile.backend",
    "quantize.linear.float8.enable_fsdp_float8_all_gather",
    "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp",
    "quantize.linear.float8.recipe_name",
    "quantize.linear.float8.filter_fqns",
    "quantize.linear.float8.emulate",
    "quantize.linear.mx.mxfp8_dim1_cast_kernel_choice",
    "quantize.linear.mx.recipe_name",
    "quantize.linear.mx.filter_fqns",
    "quantize.grouped_mm.float8.fqns",
    "quantize.grouped_mm.mx.recipe_name",
    "quantize.grouped_mm.mx.fqns",
    "comm.init_timeout_seconds",
    "comm.train_timeout_seconds",
    "comm.trace_buf_size",
    "comm.save_traces_folder",
    "comm.save_traces_file_prefix",
    "comm.mode",
    "memory_estimation.enable",
    "memory_estimation.disable_fake_mode",
    "fault_tolerance.enable",
    "fault_tolerance.process_group",
    "fault_tolerance.process_group_timeout_ms",
    "fault_tolerance.replica_id",
    "fault_tolerance.group_size",
    "fault_tolerance.min_replica_size",
    "fault_tolerance.semi_sync_method",
    "experimental.custom_import",
    "experimental.custom_args_module",
    "validation.enable",
    "validation.dataset",
    "validation.dataset_path",
    "validation.local_batch_size",
    "validation.seq_len",
    "validation.freq",
    "validation.steps",
    "validation.dataloader.num_workers",
    "validation.dataloader.persistent_workers",
    "validation.dataloader.pin_memory",
    "validation.dataloader.prefetch_factor",
    "debug.seed",
    "debug.deterministic",
    "debug.deterministic_warn_only",
    "debug.moe_force_load_balance",
};

// A value of the key's type other than `v`.
Value other_than(const Value& v) {
  if (auto* b = std::get_if<bool>(&v)) return !*b;
  if (auto* i = std::get_if<int64_t>(&v)) return *i + 3;
  if (auto* d = std::get_if<double>(&v)) return *d + 0.25;
  if (auto* s = std::get_if<std::string>(&v)) return *s + "x";
  if (auto* l = std::get_if<std::vector<std::string>>(&v)) {
    auto out = *l;
    out.push_back("x");
    return out;
  }
  if (auto* oi = std::get_if<std::optional<int64_t>>(&v)) return std::optional<int64_t>(oi->value_or(0) + 3);
  const auto& od = std::get<std::optional<double>>(v);
  return std::optional<double>(od.value_or(0.0) + 0.25);
}

TEST(ConfigKeys, EveryTorchTitanKeyIsRegistered) {
  std::vector<std::string> missing;
  for (const std::string& key : kTorchTitanKeys)
    if (!config::find_field(key)) missing.push_back(key);
  EXPECT_TRUE(missing.empty()) << "not registered: " << ::testing::PrintToString(missing);
}

TEST(ConfigKeys, EveryKeyNotActedOnHasAReason) {
  for (const FieldSpec& f : config::registry()) {
    if (f.support != Support::kFull) {
      EXPECT_FALSE(f.why.empty()) << f.key << " is not implemented but has no reason (config_warnings.cpp)";
    }
  }
  for (const auto& [key, why] : config::unsupported_reasons()) {
    const FieldSpec* f = config::find_field(key);
    EXPECT_NE(f, nullptr) << "a reason for '" << key << "', which is not a key";
    if (f) {
      EXPECT_NE(f->support, Support::kFull) << key << " is implemented: remove its reason from config_warnings.cpp";
    }
  }
}

TEST(ConfigWarnings, DefaultsYieldNone) {
  EXPECT_TRUE(config_warnings(JobConfig{}).empty()) << ::testing::PrintToString(config_warnings(JobConfig{}));
}

TEST(ConfigWarnings, NonDefaultInertKeyYieldsOneLineNamingIt) {
  JobConfig c;
  apply_override(c, "training.gc_freq", "10");
  const auto lines = config_warnings(c);
  ASSERT_EQ(lines.size(), 1u) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines[0],
            "ctitan: warning: training.gc_freq = 10 has no effect: a Python garbage-collection interval: C++ frees "
            "a tensor when its last reference goes");

  JobConfig w;
  apply_override(w, "metrics.enable_wandb", "true");
  ASSERT_EQ(config_warnings(w).size(), 1u);
  EXPECT_EQ(config_warnings(w)[0],
            "ctitan: warning: metrics.enable_wandb = true has no effect: ctitan does not log to Weights & Biases "
            "(use TensorBoard: metrics.enable_tensorboard)");
}

// Each inert key alone, at a value other than its default: one line, naming it.
TEST(ConfigWarnings, EveryInertKeyWarnsExactlyOnce) {
  const JobConfig defaults;
  int inert = 0;
  for (const FieldSpec& f : config::registry()) {
    if (f.support != Support::kInert) continue;
    ++inert;
    JobConfig c;
    f.set(c, other_than(f.get(defaults)));
    const auto lines = config_warnings(c);
    if (f.has_effect && f.has_effect(c)) continue;
    ASSERT_EQ(lines.size(), 1u) << f.key << ": " << ::testing::PrintToString(lines);
    EXPECT_EQ(lines[0].rfind("ctitan: warning: " + f.key + " = ", 0), 0u) << lines[0];
    EXPECT_NE(lines[0].find(" has no effect: " + f.why), std::string::npos) << lines[0];
    EXPECT_EQ(lines[0].find('\n'), std::string::npos) << lines[0];
  }
  EXPECT_GT(inert, 20);
}

TEST(ConfigWarnings, ExportDtypeWarnsOnlyWithoutAHuggingFaceExport) {
  JobConfig c;
  c.checkpoint.export_dtype = "bfloat16";
  ASSERT_EQ(config_warnings(c).size(), 1u);
  EXPECT_NE(config_warnings(c)[0].find("checkpoint.export_dtype = \"bfloat16\""), std::string::npos);
  c.checkpoint.last_save_in_hf = true;
  EXPECT_TRUE(config_warnings(c).empty());
}

// Keys a user counts on are refused with the reason (and what to use instead).
TEST(ConfigKeys, DefaultOnlyKeysAreRefusedWithTheReason) {
  const JobConfig defaults;
  for (const FieldSpec& f : config::registry()) {
    if (f.support != Support::kDefaultOnly) continue;
    JobConfig bad;
    f.set(bad, other_than(f.get(defaults)));
    try {
      validate(bad);
      ADD_FAILURE() << f.key << " accepted a non-default value";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(f.key + " is not supported by ctitan: " + f.why), std::string::npos)
          << e.what();
    }
  }
}

TEST(ConfigKeys, NewTorchTitanKeysParseAndRoundTrip) {
  const fs::path path = fs::path(::testing::TempDir()) / ("keys_" + std::to_string(::getpid()) + ".toml");
  {
    std::ofstream out(path);
    out << "[lr_scheduler]\ntotal_steps = 120\n[training.dataloader]\nnum_workers = 4\nprefetch_factor = 2\n"
           "[quantize.linear.mx]\nrecipe_name = \"mxfp8_cutlass\"\n[quantize.grouped_mm.float8]\nfqns = "
           "[\"experts\"]\n[validation.dataloader]\npin_memory = true\n";
  }
  const JobConfig c = load_toml_file(path.string());
  EXPECT_EQ(c.lr_scheduler.total_steps, std::optional<int64_t>(120));
  EXPECT_EQ(c.training_dataloader.num_workers, 4);
  EXPECT_EQ(c.training_dataloader.prefetch_factor, std::optional<int64_t>(2));
  EXPECT_EQ(c.mx.recipe_name, "mxfp8_cutlass");
  EXPECT_EQ(c.grouped_mm.float8_fqns, std::vector<std::string>{"experts"});
  EXPECT_TRUE(c.validation_dataloader.pin_memory);
  {
    std::ofstream out(path);
    out << to_toml(c);
  }
  EXPECT_TRUE(configs_equal(load_toml_file(path.string()), c));
  EXPECT_NE(to_toml(JobConfig{}).find("# total_steps is unset"), std::string::npos);
  JobConfig d = c;
  apply_override(d, "lr_scheduler.total_steps", "none");
  EXPECT_FALSE(d.lr_scheduler.total_steps.has_value());
  fs::remove(path);
}

// docs/trainer.md's table lists exactly the keys ctitan accepts without
// acting on them or accepts only at their default, each with its reason.
TEST(ConfigKeys, DocsTableListsEveryKeyNotActedOn) {
  const char* src = std::getenv("CTITAN_SOURCE_DIR");
  if (!src) GTEST_SKIP() << "CTITAN_SOURCE_DIR is unset; cannot locate docs/";
  std::ifstream in(fs::path(src) / "docs" / "trainer.md");
  ASSERT_TRUE(in) << "docs/trainer.md";
  std::set<std::string> rows;
  std::string line;
  bool in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("### TorchTitan keys ctitan accepts but does not act on", 0) == 0) in_table = true;
    else if (in_table && line.rfind("#", 0) == 0) break;
    if (!in_table || line.rfind("| `", 0) != 0) continue;
    rows.insert(line);
  }
  std::string expected;
  std::set<std::string> want;
  for (const FieldSpec& f : config::registry()) {
    if (f.support == Support::kFull) continue;
    std::string row = "| `" + f.key + "` | " + (f.support == Support::kInert ? "no effect (warning)" : "default only") +
                      " | " + f.why + " |";
    want.insert(row);
    expected += row + "\n";
  }
  EXPECT_EQ(rows, want) << "update the table in docs/trainer.md to:\n" << expected;
}

}  // namespace
}  // namespace ctitan
