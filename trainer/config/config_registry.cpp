// The table itself. A new TorchTitan key is one `field(...)` line here (plus
// its member in job_config.h); parsing, CLI, to_toml and --help follow.
#include "trainer/config/config_registry.h"

#include <algorithm>
#include <unordered_map>

namespace ctitan::config {
namespace {

constexpr Support kFull = Support::kFull;
constexpr Support kDefaultOnly = Support::kDefaultOnly;
constexpr Support kInert = Support::kInert;

// Binds `key` to cfg.*sec.*mem; the member's C++ type picks the Value type.
template <typename S, typename T>
FieldSpec field(const char* key, S JobConfig::*sec, T S::*mem, const char* help,
                Support support = kFull) {
  FieldSpec f;
  f.key = key;
  f.help = help;
  f.support = support;
  f.get = [sec, mem](const JobConfig& c) { return Value(std::in_place_type<T>, (c.*sec).*mem); };
  f.set = [sec, mem](JobConfig& c, const Value& v) { (c.*sec).*mem = std::get<T>(v); };
  return f;
}

using C = JobConfig;

// [<section>.dataloader]: torch.utils.data.DataLoader's knobs, placed after
// the section's last key (so the TOML table follows its parent).
void add_dataloader_keys(std::vector<FieldSpec>& r, const std::string& section,
                         DataLoaderSection JobConfig::*sec) {
  const std::string p = section + ".dataloader.";
  const std::vector<FieldSpec> keys = {
      field((p + "num_workers").c_str(), sec, &DataLoaderSection::num_workers, "DataLoader worker processes",
            kInert),
      field((p + "persistent_workers").c_str(), sec, &DataLoaderSection::persistent_workers,
            "keep DataLoader workers alive", kInert),
      field((p + "pin_memory").c_str(), sec, &DataLoaderSection::pin_memory, "DataLoader pinned memory", kInert),
      field((p + "prefetch_factor").c_str(), sec, &DataLoaderSection::prefetch_factor,
            "batches prefetched per worker", kInert)};
  auto last = std::find_if(r.rbegin(), r.rend(), [&](const FieldSpec& f) { return f.section() == section; });
  r.insert(last.base(), keys.begin(), keys.end());
}

std::vector<FieldSpec> build_registry() {
  std::vector<FieldSpec> r = {
      // [job]
      field("job.config_file", &C::job, &JobSection::config_file, "TOML recipe to load"),
      field("job.dump_folder", &C::job, &JobSection::dump_folder, "run directory"),
      field("job.description", &C::job, &JobSection::description, "free-text description"),
      field("job.print_config", &C::job, &JobSection::print_config,
            "print the resolved config as TOML and exit"),
      field("job.save_config_file", &C::job, &JobSection::save_config_file,
            "ctitan always writes config.toml to the run directory", kDefaultOnly),
      field("job.custom_config_module", &C::job, &JobSection::custom_config_module,
            "Python config extension module", kDefaultOnly),
      // [profiling]
      field("profiling.enable_profiling", &C::profiling, &ProfilingSection::enable_profiling,
            "write Chrome/Perfetto traces"),
      field("profiling.save_traces_folder", &C::profiling, &ProfilingSection::save_traces_folder,
            "trace folder, relative to job.dump_folder"),
      field("profiling.profile_freq", &C::profiling, &ProfilingSection::profile_freq,
            "steps between profiling cycles"),
      field("profiling.profiler_active", &C::profiling, &ProfilingSection::profiler_active,
            "active steps per profiling cycle"),
      field("profiling.profiler_warmup", &C::profiling, &ProfilingSection::profiler_warmup,
            "warmup steps before the active steps"),
      field("profiling.enable_memory_snapshot", &C::profiling,
            &ProfilingSection::enable_memory_snapshot, "dump memory snapshots"),
      field("profiling.save_memory_snapshot_folder", &C::profiling,
            &ProfilingSection::save_memory_snapshot_folder, "memory snapshot folder"),
      field("profiling.enable_cupti", &C::profiling, &ProfilingSection::enable_cupti,
            "CUDA: CUPTI kernel records every step (communication split, exposed comm); "
            "false turns the tracer off (ctitan's key)"),
      // [metrics]
      field("metrics.log_freq", &C::metrics, &MetricsSection::log_freq,
            "steps between metric logs"),
      field("metrics.enable_tensorboard", &C::metrics, &MetricsSection::enable_tensorboard,
            "write TensorBoard event files to dump_folder/save_tb_folder/<%Y%m%d-%H%M>"),
      field("metrics.disable_color_printing", &C::metrics, &MetricsSection::disable_color_printing,
            "plain console output"),
      field("metrics.save_tb_folder", &C::metrics, &MetricsSection::save_tb_folder,
            "TensorBoard folder, under job.dump_folder"),
      field("metrics.save_for_all_ranks", &C::metrics, &MetricsSection::save_for_all_ranks,
            "TensorBoard: every rank writes its own rank_<r> folder, not only rank 0"),
      field("metrics.enable_wandb", &C::metrics, &MetricsSection::enable_wandb,
            "log to Weights & Biases", kInert),
      field("metrics.peak_tflops", &C::metrics, &MetricsSection::peak_tflops,
            "peak TFLOPs per device for MFU; 0 = measure (CPU) / table (GPU)"),
      field("metrics.warmup_steps", &C::metrics, &MetricsSection::warmup_steps,
            "steps left out of summary.json statistics"),
      field("metrics.rank_timing", &C::metrics, &MetricsSection::rank_timing,
            "gather every rank's step, data and exposed-communication time at log steps for the straggler "
            "figures (multi-rank runs; ctitan's key)"),
      // [model]
      field("model.name", &C::model, &ModelSection::name, "model family"),
      field("model.flavor", &C::model, &ModelSection::flavor, "model size (debugmodel, 8B, ...)"),
      field("model.n_layers", &C::model, &ModelSection::n_layers,
            "replace the flavor's layer count (0 = the flavor's; ctitan's key)"),
      field("model.moe_num_experts", &C::model, &ModelSection::moe_num_experts,
            "replace an MoE flavor's routed experts per layer (0 = the flavor's; ctitan's key)"),
      field("model.moe_top_k", &C::model, &ModelSection::moe_top_k,
            "replace an MoE flavor's experts per token (0 = the flavor's; ctitan's key)"),
      field("model.moe_load_balance_coeff", &C::model, &ModelSection::moe_load_balance_coeff,
            "replace an MoE flavor's load_balance_coeff (-1 = the flavor's, 0 = no expert-bias update; ctitan's key)"),
      field("model.attn_type", &C::model, &ModelSection::attn_type,
            "TorchTitan's attention type: sdpa | flex | varlen (empty: the flavor's)"),
      field("model.attn_mask_type", &C::model, &ModelSection::attn_mask_type,
            "causal | block_causal (document masks; needs flex or varlen; empty: the flavor's)"),
      field("model.hf_assets_path", &C::model, &ModelSection::hf_assets_path,
            "folder holding tokenizer.json"),
      field("model.converters", &C::model, &ModelSection::converters,
            "comma list of model converters, e.g. quantize.linear.float8"),
      field("model.print_after_conversion", &C::model, &ModelSection::print_after_conversion,
            "print the model after converters", kInert),
      field("model.tokenizer_path", &C::model, &ModelSection::tokenizer_path,
            "deprecated in TorchTitan; use model.hf_assets_path", kDefaultOnly),
      // [optimizer]
      field("optimizer.name", &C::optimizer, &OptimizerSection::name, "AdamW | Adam"),
      field("optimizer.lr", &C::optimizer, &OptimizerSection::lr, "peak learning rate"),
      field("optimizer.beta1", &C::optimizer, &OptimizerSection::beta1, "Adam beta1"),
      field("optimizer.beta2", &C::optimizer, &OptimizerSection::beta2, "Adam beta2"),
      field("optimizer.eps", &C::optimizer, &OptimizerSection::eps, "Adam epsilon"),
      field("optimizer.weight_decay", &C::optimizer, &OptimizerSection::weight_decay,
            "decoupled weight decay"),
      field("optimizer.implementation", &C::optimizer, &OptimizerSection::implementation,
            "for_loop | foreach | fused"),
      field("optimizer.early_step_in_backward", &C::optimizer,
            &OptimizerSection::early_step_in_backward, "step the optimizer inside backward", kDefaultOnly),
      // [lr_scheduler]
      field("lr_scheduler.warmup_steps", &C::lr_scheduler, &LrSchedulerSection::warmup_steps,
            "linear warmup steps"),
      field("lr_scheduler.total_steps", &C::lr_scheduler, &LrSchedulerSection::total_steps,
            "steps the schedule spans; unset = training.steps"),
      field("lr_scheduler.decay_ratio", &C::lr_scheduler, &LrSchedulerSection::decay_ratio,
            "fraction of steps spent decaying (WSD); unset = decay right after warmup"),
      field("lr_scheduler.decay_type", &C::lr_scheduler, &LrSchedulerSection::decay_type,
            "linear | sqrt | cosine"),
      field("lr_scheduler.min_lr_factor", &C::lr_scheduler, &LrSchedulerSection::min_lr_factor,
            "final lr as a fraction of optimizer.lr"),
      // [training]
      field("training.dataset", &C::training, &TrainingSection::dataset,
            "synthetic | markov | text | bin | c4 | c4_test | c4_validation (C4 from disk)"),
      field("training.dataset_path", &C::training, &TrainingSection::dataset_path,
            "data file or folder for text, bin and C4 (.json / .json.gz) datasets"),
      field("training.local_batch_size", &C::training, &TrainingSection::local_batch_size,
            "sequences per rank per step"),
      field("training.global_batch_size", &C::training, &TrainingSection::global_batch_size,
            "-1 = local_batch_size x data-parallel degree; larger = gradient accumulation"),
      field("training.seq_len", &C::training, &TrainingSection::seq_len, "tokens per sequence"),
      field("training.max_norm", &C::training, &TrainingSection::max_norm,
            "gradient clipping norm"),
      field("training.steps", &C::training, &TrainingSection::steps, "training steps"),
      field("training.enable_cpu_offload", &C::training, &TrainingSection::enable_cpu_offload,
            "offload FSDP params/grads/optimizer state to CPU", kDefaultOnly),
      field("training.device", &C::training, &TrainingSection::device,
            "auto (CUDA when a GPU is seen, else CPU) | cpu | cuda | meta (dry run: shapes only)"),
      field("training.mixed_precision_param", &C::training, &TrainingSection::mixed_precision_param,
            "bfloat16 | float32"),
      field("training.mixed_precision_reduce", &C::training,
            &TrainingSection::mixed_precision_reduce,
            "float32 (TorchTitan's only value: gradients are reduced in float32)"),
      field("training.gc_freq", &C::training, &TrainingSection::gc_freq,
            "TorchTitan's Python GC interval", kInert),
      field("training.dtype", &C::training, &TrainingSection::dtype,
            "full-bf16 training without fp32 master weights", kDefaultOnly),
      field("training.gc_debug", &C::training, &TrainingSection::gc_debug,
            "Python GC debugging", kInert),
      // [parallelism]
      field("parallelism.data_parallel_replicate_degree", &C::parallelism,
            &ParallelismSection::data_parallel_replicate_degree, "DDP / HSDP replicas"),
      field("parallelism.enable_compiled_autograd", &C::parallelism,
            &ParallelismSection::enable_compiled_autograd, "compiled autograd", kInert),
      field("parallelism.data_parallel_shard_degree", &C::parallelism,
            &ParallelismSection::data_parallel_shard_degree, "FSDP shards; -1 = leftover ranks"),
      field("parallelism.fsdp_reshard_after_forward", &C::parallelism,
            &ParallelismSection::fsdp_reshard_after_forward, "default | always | never"),
      field("parallelism.tensor_parallel_degree", &C::parallelism,
            &ParallelismSection::tensor_parallel_degree, "tensor parallel degree"),
      field("parallelism.disable_loss_parallel", &C::parallelism,
            &ParallelismSection::disable_loss_parallel, "no loss parallel under TP"),
      field("parallelism.enable_async_tensor_parallel", &C::parallelism,
            &ParallelismSection::enable_async_tensor_parallel, "async TP"),
      field("parallelism.enable_sequence_parallel", &C::parallelism,
            &ParallelismSection::enable_sequence_parallel, "TP shards the activations along the sequence"),
      field("parallelism.pipeline_parallel_degree", &C::parallelism,
            &ParallelismSection::pipeline_parallel_degree, "pipeline stages (ranks)"),
      field("parallelism.pipeline_parallel_split_points", &C::parallelism,
            &ParallelismSection::pipeline_parallel_split_points,
            "comma list of modules starting a stage, e.g. layers.4"),
      field("parallelism.module_fqns_per_model_part", &C::parallelism,
            &ParallelismSection::module_fqns_per_model_part,
            "modules of each pipeline stage: TOML [[\"tok_embeddings\", \"layers.0\"], ...]; CLI: parts by "
            "commas, modules by spaces"),
      field("parallelism.pipeline_parallel_layers_per_stage", &C::parallelism,
            &ParallelismSection::pipeline_parallel_layers_per_stage, "-1 = inferred"),
      field("parallelism.pipeline_parallel_schedule", &C::parallelism,
            &ParallelismSection::pipeline_parallel_schedule, "1F1B, GPipe, Interleaved1F1B, ..."),
      field("parallelism.pipeline_parallel_microbatch_size", &C::parallelism,
            &ParallelismSection::pipeline_parallel_microbatch_size, "sequences per microbatch"),
      field("parallelism.context_parallel_degree", &C::parallelism,
            &ParallelismSection::context_parallel_degree, "context parallel degree"),
      field("parallelism.context_parallel_rotate_method", &C::parallelism,
            &ParallelismSection::context_parallel_rotate_method, "allgather | alltoall"),
      field("parallelism.expert_parallel_degree", &C::parallelism,
            &ParallelismSection::expert_parallel_degree,
            "routed experts sharded over this many ranks, borrowed from dp_shard x cp (x tp when etp = 1)"),
      field("parallelism.pipeline_parallel_first_stage_less_layers", &C::parallelism,
            &ParallelismSection::pipeline_parallel_first_stage_less_layers,
            "layers the embedding counts as in the pipeline split"),
      field("parallelism.pipeline_parallel_last_stage_less_layers", &C::parallelism,
            &ParallelismSection::pipeline_parallel_last_stage_less_layers,
            "layers norm + output count as in the pipeline split"),
      field("parallelism.pipeline_parallel_schedule_csv", &C::parallelism,
            &ParallelismSection::pipeline_parallel_schedule_csv,
            "CSV pipeline schedule (with pipeline_parallel_schedule = \"PipelineScheduleSingle\")"),
      field("parallelism.pipeline_parallel_expert_parallel_overlap", &C::parallelism,
            &ParallelismSection::pipeline_parallel_expert_parallel_overlap,
            "DualPipeV's EP overlap; ctitan has no DualPipeV schedule", kInert),
      field("parallelism.context_parallel_load_balancer", &C::parallelism,
            &ParallelismSection::context_parallel_load_balancer,
            "headtail (2·cp chunks, rank r holds r and 2·cp-1-r) | ptrr (block_causal: blocks dealt by "
            "document length; flex attention) | none"),
      field("parallelism.expert_tensor_parallel_degree", &C::parallelism,
            &ParallelismSection::expert_tensor_parallel_degree,
            "1 (ep spans tp) or tensor_parallel_degree (experts' hidden dim over tp)"),
      field("parallelism.expert_parallel_comm_backend", &C::parallelism,
            &ParallelismSection::expert_parallel_comm_backend, "EP all-to-all backend",
            kDefaultOnly),
      // [checkpoint]
      field("checkpoint.enable", &C::checkpoint, &CheckpointSection::enable, "save checkpoints"),
      field("checkpoint.folder", &C::checkpoint, &CheckpointSection::folder,
            "checkpoint folder, relative to job.dump_folder"),
      field("checkpoint.interval", &C::checkpoint, &CheckpointSection::interval,
            "steps between checkpoints"),
      field("checkpoint.initial_load_path", &C::checkpoint, &CheckpointSection::initial_load_path,
            "checkpoint to start from"),
      field("checkpoint.initial_load_model_only", &C::checkpoint,
            &CheckpointSection::initial_load_model_only, "load only the model initially"),
      field("checkpoint.last_save_model_only", &C::checkpoint,
            &CheckpointSection::last_save_model_only, "final save holds only the model"),
      field("checkpoint.export_dtype", &C::checkpoint, &CheckpointSection::export_dtype,
            "float16 | bfloat16 | float32", kInert),
      field("checkpoint.async_mode", &C::checkpoint, &CheckpointSection::async_mode,
            "disabled | async | async_with_pinned_mem"),
      field("checkpoint.keep_latest_k", &C::checkpoint, &CheckpointSection::keep_latest_k,
            "checkpoints kept; 0 = all"),
      field("checkpoint.load_step", &C::checkpoint, &CheckpointSection::load_step,
            "step to load; -1 = latest"),
      field("checkpoint.exclude_from_loading", &C::checkpoint,
            &CheckpointSection::exclude_from_loading, "comma list of state keys not loaded"),
      field("checkpoint.enable_first_step_checkpoint", &C::checkpoint,
            &CheckpointSection::enable_first_step_checkpoint, "also save after step 1"),
      field("checkpoint.initial_load_in_hf", &C::checkpoint, &CheckpointSection::initial_load_in_hf,
            "start from a Hugging Face checkpoint of the model's family (Llama 3, Qwen3, DeepSeek-V3: safetensors + "
            "config.json in initial_load_path, else "
            "model.hf_assets_path) when the checkpoint folder has no step to resume; weights only, any layout"),
      field("checkpoint.initial_load_in_hf_quantized", &C::checkpoint,
            &CheckpointSection::initial_load_in_hf_quantized, "load quantized HF safetensors",
            kDefaultOnly),
      field("checkpoint.last_save_in_hf", &C::checkpoint, &CheckpointSection::last_save_in_hf,
            "write the last step's checkpoint (step-<N>) as Hugging Face safetensors + config.json in "
            "export_dtype, loadable by transformers (LlamaForCausalLM, Qwen3ForCausalLM, ...)"),
      field("checkpoint.create_seed_checkpoint", &C::checkpoint,
            &CheckpointSection::create_seed_checkpoint,
            "write the step-0 checkpoint and exit (ctitan's init is per parameter: a parallel run needs none)"),
      field("checkpoint.load_only", &C::checkpoint, &CheckpointSection::load_only,
            "load as usual, never save"),
      field("checkpoint.enable_ft_dataloader_checkpoints", &C::checkpoint,
            &CheckpointSection::enable_ft_dataloader_checkpoints,
            "TorchFT dataloader state; no fault tolerance in ctitan", kInert),
      // [activation_checkpoint]
      field("activation_checkpoint.mode", &C::activation_checkpoint,
            &ActivationCheckpointSection::mode, "none | full | selective"),
      field("activation_checkpoint.selective_ac_option", &C::activation_checkpoint,
            &ActivationCheckpointSection::selective_ac_option,
            "\"N\" = every Nth layer, \"op\" = op-level policy"),
      field("activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns",
            &C::activation_checkpoint,
            &ActivationCheckpointSection::per_op_sac_force_recompute_mm_shapes_by_fqns,
            "MoE router GEMMs op-level SAC recomputes by shape; ctitan's op policy chooses by op", kInert),
      field("activation_checkpoint.early_stop", &C::activation_checkpoint,
            &ActivationCheckpointSection::early_stop, "stop recompute early", kDefaultOnly),
      field("activation_checkpoint.memory_budget", &C::activation_checkpoint,
            &ActivationCheckpointSection::memory_budget,
            "for TorchTitan's memory_budget mode, which ctitan lacks", kInert),
      field("activation_checkpoint.visualize_memory_budget_pareto", &C::activation_checkpoint,
            &ActivationCheckpointSection::visualize_memory_budget_pareto, "memory budget SVG",
            kDefaultOnly),
      field("activation_checkpoint.preserve_rng_state", &C::activation_checkpoint,
            &ActivationCheckpointSection::preserve_rng_state, "stash RNG state in recompute", kInert),
      field("activation_checkpoint.determinism_check", &C::activation_checkpoint,
            &ActivationCheckpointSection::determinism_check, "recompute determinism check",
            kDefaultOnly),
      field("activation_checkpoint.debug", &C::activation_checkpoint,
            &ActivationCheckpointSection::debug, "AC debug capture", kDefaultOnly),
      // [compile]
      field("compile.enable", &C::compile, &CompileSection::enable,
            "use ctitan's fused kernels (TorchTitan: torch.compile)"),
      field("compile.components", &C::compile, &CompileSection::components,
            "comma list: model, loss"),
      field("compile.backend", &C::compile, &CompileSection::backend,
            "torch.compile backend; no effect in ctitan", kInert),
      // [quantize.linear.float8]
      field("quantize.linear.float8.enable_fsdp_float8_all_gather", &C::float8,
            &Float8Section::enable_fsdp_float8_all_gather, "all-gather FSDP weights in float8"),
      field("quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp", &C::float8,
            &Float8Section::precompute_float8_dynamic_scale_for_fsdp,
            "one all-reduce for all float8 scales"),
      field("quantize.linear.float8.recipe_name", &C::float8, &Float8Section::recipe_name,
            "tensorwise | rowwise | rowwise_with_gw_hp"),
      field("quantize.linear.float8.filter_fqns", &C::float8, &Float8Section::filter_fqns,
            "comma list of modules kept in high precision"),
      field("quantize.linear.float8.emulate", &C::float8, &Float8Section::emulate,
            "emulate float8 matmuls"),
      // [quantize.linear.mx], [quantize.grouped_mm.*]
      field("quantize.linear.mx.mxfp8_dim1_cast_kernel_choice", &C::mx,
            &MxLinearSection::mxfp8_dim1_cast_kernel_choice, "MX cast kernel", kInert),
      field("quantize.linear.mx.recipe_name", &C::mx, &MxLinearSection::recipe_name, "MX recipe", kInert),
      field("quantize.linear.mx.filter_fqns", &C::mx, &MxLinearSection::filter_fqns,
            "modules kept in high precision under MX", kInert),
      field("quantize.grouped_mm.float8.fqns", &C::grouped_mm, &GroupedMmSection::float8_fqns,
            "MoE grouped GEMMs in float8", kInert),
      field("quantize.grouped_mm.mx.recipe_name", &C::grouped_mm, &GroupedMmSection::mx_recipe_name,
            "MX recipe for MoE grouped GEMMs", kInert),
      field("quantize.grouped_mm.mx.fqns", &C::grouped_mm, &GroupedMmSection::mx_fqns,
            "MoE grouped GEMMs in MX", kInert),
      // [comm]
      field("comm.init_timeout_seconds", &C::comm, &CommSection::init_timeout_seconds,
            "collective timeout until the first step ends"),
      field("comm.train_timeout_seconds", &C::comm, &CommSection::train_timeout_seconds,
            "collective timeout afterwards"),
      field("comm.trace_buf_size", &C::comm, &CommSection::trace_buf_size,
            "flight recorder buffer size"),
      field("comm.save_traces_folder", &C::comm, &CommSection::save_traces_folder,
            "flight recorder dumps, relative to job.dump_folder"),
      field("comm.save_traces_file_prefix", &C::comm, &CommSection::save_traces_file_prefix,
            "flight recorder file prefix (<prefix><rank>.json)"),
      field("comm.mode", &C::comm, &CommSection::mode,
            "default | fake_backend (dry run of rank 0 of NGPU ranks on the meta device)"),
      field("comm.cuda_backend", &C::comm, &CommSection::cuda_backend,
            "ctitan: nccl | gloo (CUDA tensors' collectives on Gloo through host memory; ranks may share a GPU)"),
      // [memory_estimation]
      field("memory_estimation.enable", &C::memory_estimation, &MemoryEstimationSection::enable,
            "TorchTitan's FSDP memory estimator", kDefaultOnly),
      field("memory_estimation.disable_fake_mode", &C::memory_estimation,
            &MemoryEstimationSection::disable_fake_mode, "estimator option", kInert),
      // [fault_tolerance]
      field("fault_tolerance.enable", &C::fault_tolerance, &FaultToleranceSection::enable,
            "TorchFT integration", kDefaultOnly),
      field("fault_tolerance.process_group", &C::fault_tolerance,
            &FaultToleranceSection::process_group, "TorchFT option", kInert),
      field("fault_tolerance.process_group_timeout_ms", &C::fault_tolerance,
            &FaultToleranceSection::process_group_timeout_ms, "TorchFT option", kInert),
      field("fault_tolerance.replica_id", &C::fault_tolerance, &FaultToleranceSection::replica_id,
            "TorchFT option", kInert),
      field("fault_tolerance.group_size", &C::fault_tolerance, &FaultToleranceSection::group_size,
            "TorchFT option", kInert),
      field("fault_tolerance.min_replica_size", &C::fault_tolerance,
            &FaultToleranceSection::min_replica_size, "TorchFT option", kInert),
      field("fault_tolerance.semi_sync_method", &C::fault_tolerance,
            &FaultToleranceSection::semi_sync_method, "TorchFT option", kInert),
      // [experimental]
      field("experimental.custom_import", &C::experimental, &ExperimentalSection::custom_import,
            "Python module import", kDefaultOnly),
      field("experimental.custom_args_module", &C::experimental,
            &ExperimentalSection::custom_args_module, "Python config extension", kDefaultOnly),
      // [validation]
      field("validation.enable", &C::validation, &ValidationSection::enable,
            "periodic no-grad validation loss (and perplexity)"),
      field("validation.dataset", &C::validation, &ValidationSection::dataset,
            "c4_validation | c4 | c4_test | text | bin | markov | synthetic"),
      field("validation.dataset_path", &C::validation, &ValidationSection::dataset_path,
            "validation data file or folder"),
      field("validation.local_batch_size", &C::validation, &ValidationSection::local_batch_size,
            "validation sequences per rank per batch"),
      field("validation.seq_len", &C::validation, &ValidationSection::seq_len, "validation tokens per sequence"),
      field("validation.freq", &C::validation, &ValidationSection::freq,
            "validate at step 1 and every freq steps"),
      field("validation.steps", &C::validation, &ValidationSection::steps,
            "batches per validation pass; -1 = the whole set once"),
      field("validation.target_loss", &C::validation, &ValidationSection::target_loss,
            "validation loss whose first crossing summary.json's quality reports, in tokens and seconds "
            "(0 = none; ctitan's key)"),
      // [debug]
      field("debug.seed", &C::debug, &DebugSection::seed, "base RNG seed"),
      field("debug.deterministic", &C::debug, &DebugSection::deterministic,
            "deterministic algorithms"),
      field("debug.deterministic_warn_only", &C::debug, &DebugSection::deterministic_warn_only,
            "warn instead of failing on nondeterministic ops"),
      field("debug.moe_force_load_balance", &C::debug, &DebugSection::moe_force_load_balance,
            "MoE debugging: route tokens to experts round-robin"),
      field("debug.slow_rank", &C::debug, &DebugSection::slow_rank,
            "the rank debug.step_delay_ms, step_slowdown and data_stall_ms slow down; -1 = every rank (ctitan's key)"),
      field("debug.step_delay_ms", &C::debug, &DebugSection::step_delay_ms,
            "a known straggler: sleep this long at the start of every step (0 = off; ctitan's key)"),
      field("debug.step_slowdown", &C::debug, &DebugSection::step_slowdown,
            "a known slowdown: after each step's work, sleep this share of it, e.g. 0.1 for 10 % (0 = off; "
            "ctitan's key)"),
      field("debug.data_stall_ms", &C::debug, &DebugSection::data_stall_ms,
            "a known data stall: sleep this long in every batch fetch (0 = off; ctitan's key)"),
  };
  add_dataloader_keys(r, "training", &C::training_dataloader);
  add_dataloader_keys(r, "validation", &C::validation_dataloader);
  const auto& why = unsupported_reasons();
  for (FieldSpec& f : r) {
    if (auto it = why.find(f.key); it != why.end()) f.why = it->second;
    if (f.key == "checkpoint.export_dtype")
      f.has_effect = [](const JobConfig& c) { return c.checkpoint.last_save_in_hf; };
    if (f.key == "optimizer.implementation") f.aliases = {{"for-loop", "for_loop"}};
    if (f.key == "parallelism.context_parallel_load_balancer") f.aliases = {{"None", "none"}};  // TorchTitan's None
  }
  return r;
}

}  // namespace

const std::vector<FieldSpec>& registry() {
  static const std::vector<FieldSpec> r = build_registry();
  return r;
}

const FieldSpec* find_field(const std::string& key) {
  static const std::unordered_map<std::string, const FieldSpec*> index = [] {
    std::unordered_map<std::string, const FieldSpec*> m;
    for (const FieldSpec& f : registry()) m.emplace(f.key, &f);
    return m;
  }();
  auto it = index.find(key);
  return it == index.end() ? nullptr : it->second;
}

bool is_section(const std::string& prefix) {
  for (const FieldSpec& f : registry()) {
    if (f.key.size() > prefix.size() && f.key.compare(0, prefix.size(), prefix) == 0 &&
        f.key[prefix.size()] == '.') {
      return true;
    }
  }
  return false;
}

}  // namespace ctitan::config
