// JobConfig: the resolved training configuration, in TorchTitan v0.2.x names.
//
// Every field below is one TOML key `[section] key` and one CLI option
// `--section.key`. Defaults follow TorchTitan unless a comment says otherwise.
// The loader (config_loader.h) fills a JobConfig from a TOML file plus CLI
// overrides and validates it; nothing else writes to it after that.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/metrics_defaults.h"

namespace ctitan {

struct JobSection {
  std::string config_file;                  // set from --job.config_file
  std::string dump_folder = "./outputs";    // the run directory
  std::string description = "ctitan job";
  bool print_config = false;                // print resolved TOML and exit
  // TorchTitan keys ctitan accepts only at their default (see config_registry).
  std::string save_config_file;             // ctitan always writes config.toml
  std::string custom_config_module;
};

struct ProfilingSection {
  bool enable_profiling = false;
  std::string save_traces_folder = "profile_traces";
  int64_t profile_freq = 10;
  int64_t profiler_active = 1;
  int64_t profiler_warmup = 3;
  bool enable_memory_snapshot = false;
  std::string save_memory_snapshot_folder = "memory_snapshot";
  bool enable_cupti = true;  // ctitan's: CUDA steps' kernel records (comm split); false measures its cost
};

struct MetricsSection {
  int64_t log_freq = 10;
  bool enable_tensorboard = false;
  bool disable_color_printing = false;
  std::string save_tb_folder = "tb";
  bool save_for_all_ranks = false;
  bool enable_wandb = false;
  // ctitan: peak TFLOPs per device for MFU; 0 = measure (CPU) / table (GPU).
  double peak_tflops = 0.0;
  // ctitan: steps excluded from summary.json's steady-state statistics.
  int64_t warmup_steps = kDefaultMetricsWarmupSteps;
  // ctitan: every rank's step, data and exposed-communication time, gathered
  // at log steps (one small all-gather; multi-rank runs only).
  bool rank_timing = true;
};

struct ModelSection {
  std::string name = "llama3";
  std::string flavor = "debugmodel";
  int64_t n_layers = 0;  // ctitan's: > 0 replaces the flavor's layer count
  // ctitan's MoE overrides (trainer/models/registry.h FlavorOverrides): > 0 / >= 0 replace the flavor's.
  int64_t moe_num_experts = 0;
  int64_t moe_top_k = 0;
  double moe_load_balance_coeff = -1;
  // TorchTitan's model args attn_type / attn_mask_type as keys; empty: the flavor's.
  std::string attn_type;
  std::string attn_mask_type;
  std::string hf_assets_path;               // folder holding tokenizer.json
  std::vector<std::string> converters;      // e.g. ["quantize.linear.float8"]
  bool print_after_conversion = false;
  std::string tokenizer_path;               // deprecated in TorchTitan; default only
};

struct OptimizerSection {
  std::string name = "AdamW";
  double lr = 8e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  std::string implementation = "fused";     // for_loop | foreach | fused
  bool early_step_in_backward = false;
};

struct LrSchedulerSection {
  int64_t warmup_steps = 200;
  std::optional<int64_t> total_steps;       // schedule length; unset: training.steps
  std::optional<double> decay_ratio;        // unset: decay right after warmup
  std::string decay_type = "linear";        // linear | sqrt | cosine
  double min_lr_factor = 0.0;
};

struct TrainingSection {
  // synthetic | markov | text (txt/jsonl, .gz) | bin | c4, c4_test, c4_validation (C4 from disk)
  std::string dataset = "synthetic";
  std::string dataset_path;
  int64_t local_batch_size = 8;
  int64_t global_batch_size = -1;           // -1: local × data-parallel degree
  int64_t seq_len = 2048;
  double max_norm = 1.0;
  int64_t steps = 10000;
  bool enable_cpu_offload = false;
  std::string mixed_precision_param = "bfloat16";   // bfloat16 | float32
  std::string mixed_precision_reduce = "float32";
  int64_t gc_freq = 50;                     // Python GC knob: inert
  std::string dtype = "float32";            // full-bf16 training: default only
  bool gc_debug = false;                    // Python GC knob: inert
  // ctitan: auto (CUDA when LibTorch sees a GPU, else CPU) | cpu | cuda | meta (dry run)
  std::string device = "auto";
};

// [training.dataloader], [validation.dataloader]: torch.utils.data.DataLoader
// knobs; ctitan's loader runs in the training process, so all are inert.
struct DataLoaderSection {
  int64_t num_workers = 0;
  bool persistent_workers = false;
  bool pin_memory = false;
  std::optional<int64_t> prefetch_factor;
};

struct ParallelismSection {
  int64_t data_parallel_replicate_degree = 1;
  bool enable_compiled_autograd = false;
  int64_t data_parallel_shard_degree = -1;
  std::string fsdp_reshard_after_forward = "default";  // default|always|never
  int64_t tensor_parallel_degree = 1;
  bool disable_loss_parallel = false;
  bool enable_async_tensor_parallel = false;
  bool enable_sequence_parallel = true;  // ctitan key: TorchTitan's TP plan always shards the sequence
  int64_t pipeline_parallel_degree = 1;
  std::vector<std::string> pipeline_parallel_split_points;  // TorchTitan's older key: modules starting a stage
  // TorchTitan's list[list[str]]: each part's modules; here each part is one
  // string of space-separated modules ("tok_embeddings layers.0").
  std::vector<std::string> module_fqns_per_model_part;
  int64_t pipeline_parallel_layers_per_stage = -1;
  std::string pipeline_parallel_schedule = "1F1B";
  int64_t pipeline_parallel_microbatch_size = 1;
  int64_t context_parallel_degree = 1;
  std::string context_parallel_rotate_method = "allgather";
  int64_t expert_parallel_degree = 1;
  // TorchTitan keys below: accepted at their default only (dense Llama, no
  // MoE), except where config_registry says inert or the key is implemented.
  int64_t pipeline_parallel_first_stage_less_layers = 1;
  int64_t pipeline_parallel_last_stage_less_layers = 1;
  std::string pipeline_parallel_schedule_csv;
  bool pipeline_parallel_expert_parallel_overlap = true;
  std::string context_parallel_load_balancer = "headtail";
  int64_t expert_tensor_parallel_degree = 1;
  std::string expert_parallel_comm_backend = "standard";
};

struct CheckpointSection {
  bool enable = false;
  std::string folder = "checkpoint";        // relative to job.dump_folder
  int64_t interval = 500;
  std::string initial_load_path;
  bool initial_load_model_only = true;
  bool last_save_model_only = true;
  std::string export_dtype = "float32";
  std::string async_mode = "disabled";
  int64_t keep_latest_k = 10;
  int64_t load_step = -1;
  std::vector<std::string> exclude_from_loading;
  bool enable_first_step_checkpoint = false;
  bool initial_load_in_hf = false;
  bool initial_load_in_hf_quantized = false;
  bool last_save_in_hf = false;
  bool create_seed_checkpoint = false;
  bool load_only = false;                   // load as usual, never save
  bool enable_ft_dataloader_checkpoints = true;  // fault tolerance: inert
};

struct ActivationCheckpointSection {
  std::string mode = "none";                // none | full | selective
  std::string selective_ac_option = "2";    // "N" or "op"
  // TorchTitan keys: MoE / memory_budget / debugging knobs (see registry).
  std::vector<std::string> per_op_sac_force_recompute_mm_shapes_by_fqns = {
      "moe.router.gate"};
  bool early_stop = false;
  double memory_budget = 0.5;
  bool visualize_memory_budget_pareto = false;
  // TorchTitan's default is true; ctitan keeps false (run hashes stay put):
  // the model draws no random numbers, so the key is inert either way.
  bool preserve_rng_state = false;
  std::string determinism_check = "default";
  bool debug = false;
};

struct CompileSection {
  bool enable = false;
  std::vector<std::string> components = {"model", "loss"};
  std::string backend = "inductor";         // torch.compile backend: inert
};

struct Float8Section {                      // [quantize.linear.float8]
  bool enable_fsdp_float8_all_gather = false;
  bool precompute_float8_dynamic_scale_for_fsdp = false;
  std::string recipe_name = "tensorwise";   // tensorwise|rowwise|rowwise_with_gw_hp
  std::vector<std::string> filter_fqns = {"output"};
  bool emulate = false;
};

// [quantize.linear.mx] and [quantize.grouped_mm.*]: MX formats and MoE
// grouped GEMMs, which ctitan lacks (their converters are rejected): inert.
struct MxLinearSection {
  std::string mxfp8_dim1_cast_kernel_choice = "triton";
  std::string recipe_name = "mxfp8_cublas";
  std::vector<std::string> filter_fqns = {"output"};
};

struct GroupedMmSection {
  std::vector<std::string> float8_fqns;     // quantize.grouped_mm.float8.fqns
  std::string mx_recipe_name = "mxfp8";     // quantize.grouped_mm.mx.recipe_name
  std::vector<std::string> mx_fqns;         // quantize.grouped_mm.mx.fqns
};

struct CommSection {
  int64_t init_timeout_seconds = 300;
  int64_t train_timeout_seconds = 100;
  int64_t trace_buf_size = 20000;
  std::string save_traces_folder = "comm_traces";  // flight recorder: inert
  std::string save_traces_file_prefix = "rank_";
  std::string mode = "default";             // default | fake_backend (dry run, NGPU ranks)
  std::string cuda_backend = "nccl";        // ctitan: nccl | gloo (staged through host memory; ranks may share a GPU)
};

struct DebugSection {
  int64_t seed = 0;
  bool deterministic = false;
  bool deterministic_warn_only = false;
  bool moe_force_load_balance = false;      // MoE: round-robin routing (debugging)
  // ctitan's known slowdowns, off by default: for checking the straggler
  // figures, the goodput split and the gate's power against a known answer.
  int64_t slow_rank = -1;                   // the rank the delays below apply to; -1: every rank
  double step_delay_ms = 0;                 // sleep this long at the start of each step
  double step_slowdown = 0;                 // then sleep this share of the step's own work
  double data_stall_ms = 0;                 // sleep this long in each batch fetch
};

// Sections ctitan does not implement. They exist so that a TorchTitan recipe
// parses: the switch (`enable`) must stay off, the other keys are inert.
struct MemoryEstimationSection {
  bool enable = false;
  bool disable_fake_mode = false;
};

struct FaultToleranceSection {             // TorchFT
  bool enable = false;
  std::string process_group = "gloo";
  int64_t process_group_timeout_ms = 10000;
  int64_t replica_id = 0;
  int64_t group_size = 0;
  int64_t min_replica_size = 1;
  std::string semi_sync_method;             // TorchTitan: None
};

struct ExperimentalSection {
  std::string custom_import;
  std::string custom_args_module;
};

struct ValidationSection {                 // periodic validation loss
  bool enable = false;
  std::string dataset = "c4_validation";
  std::string dataset_path;
  int64_t local_batch_size = 8;
  int64_t seq_len = 2048;
  int64_t freq = 10;
  int64_t steps = -1;
  // ctitan's key: the validation loss whose first crossing summary.json's
  // `quality` reports (tokens and time to target); 0 = none.
  double target_loss = 0;
};

struct JobConfig {
  JobSection job;
  ProfilingSection profiling;
  MetricsSection metrics;
  ModelSection model;
  OptimizerSection optimizer;
  LrSchedulerSection lr_scheduler;
  TrainingSection training;
  DataLoaderSection training_dataloader;    // [training.dataloader]
  ParallelismSection parallelism;
  CheckpointSection checkpoint;
  ActivationCheckpointSection activation_checkpoint;
  CompileSection compile;
  Float8Section float8;
  MxLinearSection mx;                       // [quantize.linear.mx]
  GroupedMmSection grouped_mm;              // [quantize.grouped_mm.float8], [quantize.grouped_mm.mx]
  CommSection comm;
  DebugSection debug;
  MemoryEstimationSection memory_estimation;
  FaultToleranceSection fault_tolerance;
  ExperimentalSection experimental;
  ValidationSection validation;
  DataLoaderSection validation_dataloader;  // [validation.dataloader]
};

}  // namespace ctitan
