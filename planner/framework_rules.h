// Whose training loop a plan follows (PlanRequest::framework): what each
// framework does differently from ctitan's trainer, as data. The planner
// looks the rules up once per plan and asks them; it never compares the
// framework's name.
#pragma once

#include <string>

namespace ctitan {

struct FrameworkRules {
  std::string name;
  // Attention is unfused (Megatron-LM, 2021): QKᵀ and PV are batched GEMMs
  // over all S keys, the backward is their two gradients (2x the forward,
  // no recomputation of the scores), and the T x S scores go through memory
  // even where the device has flash attention.
  bool unfused_attention = false;
  // Bias-GELU, bias-dropout-add and the layer norm are fused by default,
  // as torch.compile fuses them (Megatron-LM).
  bool fused_elementwise = false;
  // The data-parallel all-reduce moves the compute-dtype gradient buffer
  // once, after the last micro-batch's backward, none of it hidden
  // (Megatron-LM's local DDP); else fp32 gradients against the backward.
  bool allreduce_after_last_microbatch = false;
  // The word embedding is tied to the output layer: the first and last
  // pipeline stage all-reduce its gradient between them (Megatron-LM's GPT).
  bool tied_embedding_across_stages = false;
  // Pipeline sends across nodes are split over the TP ranks and
  // all-gathered inside the node (Megatron-LM's scatter/gather).
  bool pipeline_scatter_gather = false;
  // Under PP with FSDP, a stage's gradients accumulate unsharded (fp32) over
  // its micro-batches and its last backward reduce-scatters them and
  // reshards the stage (TorchTitan's torch.distributed.pipelining); ctitan
  // reduce-scatters every micro-batch's and keeps the stage gathered.
  bool pipeline_syncs_on_last_backward = false;
  // Op-level activation checkpointing saves the outputs of unfused wq, wk,
  // wv, w1, w3 projections (every second aten.mm; TorchTitan) instead of
  // ctitan's fused qkv and gate|up. Dense GQA blocks only.
  bool unfused_projections = false;
  // Context parallelism repeats K and V to every local head and holds
  // torch's ring attention backward buffers (TorchTitan); ctitan moves the
  // KV heads only.
  bool cp_repeats_kv_heads = false;
};

// The rules of "ctitan", "torchtitan" or "megatron"; throws InputError for
// any other name.
const FrameworkRules& framework_rules(const std::string& framework);

}  // namespace ctitan
