// Why ctitan does not act on a TorchTitan key, and the start-up warnings
// for inert keys set to something other than their default. The reasons are
// the registry's `why` (config_registry.cpp attaches them by key), the text
// of check_unsupported's errors and of docs/trainer.md's table.
#include <map>
#include <string>
#include <vector>

#include "trainer/config/config_loader.h"
#include "trainer/config/config_registry.h"

namespace ctitan::config {
namespace {

const char* kNoMoe =
    "ctitan's MoE grouped GEMMs run in the compute dtype (no float8 or MX grouped GEMM), and its selective AC "
    "chooses by op, not by GEMM shape";
const char* kNoDeepEp =
    "ctitan's expert-parallel dispatch is its communicator's all_to_all_v (TorchTitan's \"standard\"); there is "
    "no DeepEP kernel";
const char* kNoTorchFt = "ctitan has no TorchFT fault tolerance (fault_tolerance.enable must stay false)";
const char* kNoMx = "MX (mxfp8) linears are not implemented: model.converters accepts only quantize.linear.float8";
const char* kPinned = "ctitan stages every batch through pinned memory on CUDA (and needs none on CPU)";
const char* kNoWorkers =
    "ctitan's data loader runs inside the training process: there are no DataLoader worker processes";

}  // namespace

const std::map<std::string, std::string>& unsupported_reasons() {
  static const std::map<std::string, std::string> why = {
      // accepted at the default only
      {"job.save_config_file", "ctitan always writes the resolved config to config.toml in job.dump_folder"},
      {"job.custom_config_module", "ctitan has no Python config extensions; `ctitan train --help` lists its keys"},
      {"model.tokenizer_path", "deprecated in TorchTitan: put tokenizer.json in model.hf_assets_path"},
      {"optimizer.early_step_in_backward",
       "ctitan steps AdamW once after backward over the flat gradient buffer, which gradient clipping needs"},
      {"training.enable_cpu_offload",
       "FSDP CPU offload is not implemented: shard wider (parallelism.data_parallel_shard_degree) or use "
       "activation_checkpoint.mode"},
      {"training.dtype",
       "full-bf16 training (no float32 master weights) is not implemented: parameters, gradients and AdamW state "
       "stay float32; training.mixed_precision_param = \"bfloat16\" (the default) runs forward and backward in bf16"},
      {"parallelism.expert_parallel_comm_backend", kNoDeepEp},
      {"checkpoint.initial_load_in_hf_quantized", "quantized Hugging Face checkpoints are not loaded"},
      {"activation_checkpoint.early_stop", "ctitan recomputes a checkpointed layer whole"},
      {"activation_checkpoint.visualize_memory_budget_pareto",
       "activation_checkpoint.mode = \"memory_budget\" is not implemented"},
      {"activation_checkpoint.determinism_check",
       "no runtime recomputation check: the tests compare checkpointed gradients with plain ones bit for bit"},
      {"activation_checkpoint.debug", "no activation-checkpointing debug capture"},
      {"memory_estimation.enable",
       "TorchTitan's FSDP memory estimator is not implemented: the dry run (--comm.mode fake_backend, NGPU=N) "
       "builds rank 0's model on the meta device and prints its memory"},
      {"fault_tolerance.enable", "ctitan has no TorchFT fault tolerance"},
      {"experimental.custom_import", "ctitan loads no Python modules"},
      {"experimental.custom_args_module", "ctitan loads no Python modules"},
      // accepted with any value, no effect
      {"metrics.enable_wandb", "ctitan does not log to Weights & Biases (use TensorBoard: metrics.enable_tensorboard)"},
      {"model.print_after_conversion",
       "ctitan prints no module tree; its start-up line names the techniques the converters applied"},
      {"training.gc_freq", "a Python garbage-collection interval: C++ frees a tensor when its last reference goes"},
      {"training.gc_debug", "a Python garbage-collection option: C++ frees a tensor when its last reference goes"},
      {"training.dataloader.num_workers", kNoWorkers},
      {"training.dataloader.persistent_workers", kNoWorkers},
      {"training.dataloader.pin_memory", kPinned},
      {"training.dataloader.prefetch_factor", kNoWorkers},
      {"parallelism.enable_compiled_autograd",
       "compiled autograd belongs to torch.compile; ctitan's backward is ATen autograd (compile.enable selects its "
       "fused kernels)"},
      {"parallelism.pipeline_parallel_expert_parallel_overlap",
       "DualPipeV's overlap of expert-parallel all-to-alls with compute; ctitan has no DualPipeV schedule"},
      {"checkpoint.export_dtype",
       "ctitan's own checkpoints keep the training dtype; export_dtype applies to the Hugging Face export "
       "(checkpoint.last_save_in_hf)"},
      {"checkpoint.enable_ft_dataloader_checkpoints", kNoTorchFt},
      {"activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", kNoMoe},
      {"activation_checkpoint.memory_budget",
       "activation_checkpoint.mode = \"memory_budget\" is not implemented (use full or selective)"},
      {"activation_checkpoint.preserve_rng_state",
       "the Llama model draws no random numbers (no dropout), so recomputation is exact either way"},
      {"compile.backend",
       "ctitan's compile is its own fused kernels, not torch.compile: there is no backend to choose"},
      {"quantize.linear.mx.mxfp8_dim1_cast_kernel_choice", kNoMx},
      {"quantize.linear.mx.recipe_name", kNoMx},
      {"quantize.linear.mx.filter_fqns", kNoMx},
      {"quantize.grouped_mm.float8.fqns", kNoMoe},
      {"quantize.grouped_mm.mx.recipe_name", kNoMoe},
      {"quantize.grouped_mm.mx.fqns", kNoMoe},
      {"memory_estimation.disable_fake_mode",
       "an option of TorchTitan's memory estimator, which ctitan lacks (memory_estimation.enable must stay false)"},
      {"fault_tolerance.process_group", kNoTorchFt},
      {"fault_tolerance.process_group_timeout_ms", kNoTorchFt},
      {"fault_tolerance.replica_id", kNoTorchFt},
      {"fault_tolerance.group_size", kNoTorchFt},
      {"fault_tolerance.min_replica_size", kNoTorchFt},
      {"fault_tolerance.semi_sync_method", kNoTorchFt},
      {"validation.dataloader.num_workers", kNoWorkers},
      {"validation.dataloader.persistent_workers", kNoWorkers},
      {"validation.dataloader.pin_memory", kPinned},
      {"validation.dataloader.prefetch_factor", kNoWorkers},
  };
  return why;
}

}  // namespace ctitan::config

namespace ctitan {

std::vector<std::string> config_warnings(const JobConfig& cfg) {
  static const JobConfig defaults;
  std::vector<std::string> lines;
  for (const config::FieldSpec& f : config::registry()) {
    if (f.support != config::Support::kInert) continue;
    const config::Value v = f.get(cfg);
    if (v == f.get(defaults) || (f.has_effect && f.has_effect(cfg))) continue;
    std::string line = "ctitan: warning: ";
    line += f.key;
    line += " = ";
    line += config::render_value(v);
    line += " has no effect: ";
    line += f.why;
    lines.push_back(line);
  }
  return lines;
}

}  // namespace ctitan
