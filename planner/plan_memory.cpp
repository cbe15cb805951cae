// Per-rank memory beyond the optimizer's state: activations kept for
// backward in Korthikanti et al.'s form (per layer, per token, the tensors
// autograd saves, split by TP and by sequence parallelism, cut by CP, per
// activation-checkpointing mode), the logits and their fp32 loss copies,
// FSDP's gathered units and gradient buffers, TP's gathered activations,
// allocator slack. Under PP each rank's actions are replayed for its peak.
//
// Legend: T tokens of one micro-batch on this rank, D model dim, H
// attention heads, K KV heads, Dh head dim, F the FFN's hidden width per
// token on this rank, V vocabulary.
#include <algorithm>
#include <utility>

#include "common/errors.h"
#include "planner/plan_internal.h"

namespace ctitan::planner_detail {
namespace {

ModelArgs args_of(const ModelDesc& model) { return model.trainer_builds() ? model.trainer_args() : ModelArgs{}; }

double head_dim_of(const ModelDesc& model, const ModelArgs& args) {
  return static_cast<double>(model.trainer_builds() ? args.head_dim() : model.head_dim());
}

// Bytes per token of one block on this rank, per activation-checkpointing
// mode.
struct BlockActivations {
  double full_block = 0;   // nothing checkpointed (activation_factor applied)
  double block_input = 0;  // a checkpointed block: its input only
  double op_block = 0;     // op-level checkpointing: what its policy saves
  double ffn_width = 0;    // F: an MoE layer's top_k routed and its shared
                           // experts, averaged with the dense layers
};

BlockActivations block_activations(const ModelDesc& model, const JobConfig& cfg, const MeshShape& shape,
                                   const HardwareSpec& hw, double elem, const FrameworkRules& rules) {
  const double tp = static_cast<double>(shape.tp), D = static_cast<double>(model.dim);
  const double H = static_cast<double>(model.n_heads), K = static_cast<double>(model.n_kv_heads);
  const ModelArgs args = args_of(model);
  const double Dh = head_dim_of(model, args);
  // The FFN's hidden width per token on this rank: an MoE layer's top_k
  // routed experts and its shared experts (replicated over tp), averaged
  // with the dense layers in the model's proportion.
  double F = static_cast<double>(model.ffn_hidden) / tp;
  if (args.moe.num_experts > 0 && model.n_layers > 0) {
    const double moe_share = static_cast<double>(args.n_moe_layers()) / static_cast<double>(model.n_layers);
    const double expert_hidden = static_cast<double>(args.moe.hidden_dim);
    F = (1 - moe_share) * F + moe_share * (static_cast<double>(args.moe.top_k) * expert_hidden +
                                           static_cast<double>(args.moe.num_shared_experts) * expert_hidden);
  }
  // Attention widths per token on this rank: q, k, v (after projection)
  // and the output; MLA's q/k heads are nope + rope wide, v its own, plus
  // the low-rank latents (replicated).
  double qkv_width = (H + 2 * K) * Dh / tp, out_width = H * Dh / tp, latent = 0;
  if (args.is_mla()) {
    const double qk_dim = static_cast<double>(args.mla.qk_nope_head_dim + args.mla.qk_rope_head_dim);
    const double v_dim = static_cast<double>(args.mla.v_head_dim);
    qkv_width = H * (2 * qk_dim + v_dim) / tp;
    out_width = H * v_dim / tp;
    latent = static_cast<double>(args.mla.kv_lora_rank + args.mla.qk_rope_head_dim + args.mla.q_lora_rank);
  }
  const bool sp = shape.tp > 1 && cfg.parallelism.enable_sequence_parallel;
  const double seq_part = sp ? tp : 1.0;
  const bool float8 = !cfg.model.converters.empty();
  const double gemm_in = float8 ? 1.0 : elem;  // Float8 keeps its GEMM inputs in fp8
  // Saved per token of one block (bytes): the two norms' inputs and the
  // residual (3·D, sequence-parallel), the GEMM inputs (the norm outputs
  // 2·D, gathered under SP so split by TP only in the heads' and FFN's
  // parts), q/k/v after the projection and after RoPE, the attention output
  // and its log-sum-exp, the MLP's hidden activations (gate, up, product).
  const double norm_io = 3 * D / seq_part * elem;
  const double gemm_inputs = 2 * D * gemm_in + (out_width + F + latent) * gemm_in;
  const double qkv = 2 * (qkv_width + latent) * elem;
  const double attn = out_width * elem + H / tp * 4;
  const double mlp = (model.gated_mlp ? 3 : 2) * F * elem;
  BlockActivations sizes;
  sizes.ffn_width = F;
  sizes.full_block = (norm_io + gemm_inputs + qkv + attn + mlp) * hw.eff.activation_factor;
  sizes.block_input = D / seq_part * elem;
  // Op-level checkpointing keeps the outputs of every other GEMM (aten.mm:
  // the first, third, ...; the count starts again in each block) and the
  // attention's. ctitan's GEMMs are qkv (kept), wo, gate|up (kept), w2.
  // Unfused projections (FrameworkRules; TorchTitan's) are wq (kept), wk,
  // wv (kept), wo, w1 (kept), w3, w2 (kept): q and v, the gate and the
  // block's output (partial sums, whole under TP). MLA and MoE blocks:
  // ctitan's rule.
  const bool unfused = rules.unfused_projections && !args.is_mla() && args.moe.num_experts == 0;
  sizes.op_block = unfused ? sizes.block_input + (out_width + K * Dh / tp + F + D) * elem + attn
                           : sizes.block_input + (qkv_width + 2 * F) * elem + attn;
  return sizes;
}

// Saved per token of layer `layer` (counted from the rank's first layer, as
// the trainer's and TorchTitan's per-rank checkpointing counters do);
// `checkpointed` turns true where the layer is checkpointed (a backward
// then recomputes one block).
double kept_per_token(const ActivationCheckpointPolicy& ac, const BlockActivations& sizes, int64_t layer,
                      bool& checkpointed) {
  using Mode = ActivationCheckpointPolicy::Mode;
  if (ac.mode == Mode::kNone) return sizes.full_block;
  if (ac.mode == Mode::kSelectiveOp) return checkpointed = true, sizes.op_block;
  if (ac.checkpoints_layer(layer)) return checkpointed = true, sizes.block_input;
  return sizes.full_block;
}

// The logits per token where the rank has the head. TorchTitan (the GPU
// rows): the logits, their fp32 copy for the loss and its fp32 gradient;
// under torch.compile of the loss (compile.components holds "loss") one
// fused reduction reads the logits and its backward writes the gradient
// in their dtype: no fp32 copy of either. ctitan on a CPU: the logits
// and their gradient in the logits' dtype; its chunked loss forms no fp32
// copy of the whole (trainer/model/cross_entropy.h).
double logits_per_token(const ModelDesc& model, const JobConfig& cfg, const MeshShape& shape, const HardwareSpec& hw,
                        double elem) {
  const double V = static_cast<double>(model.vocab_size);
  const bool loss_parallel = shape.tp > 1 && !cfg.parallelism.disable_loss_parallel;
  const double vocab = loss_parallel ? V / static_cast<double>(shape.tp) : V;
  const auto& components = cfg.compile.components;
  const bool fused_loss =
      cfg.compile.enable && std::find(components.begin(), components.end(), "loss") != components.end();
  return vocab * (hw.kind == "cpu" || fused_loss ? 2 * elem : elem + 4 + 4);
}

// Context parallelism's attention buffers, alive in a block's attention
// backward only, so never beside the head's logits (their backward ran
// first). TorchTitan repeats K and V to every local head before SDPA
// (repeat_kv, torchtitan/models/llama/model.py at 9dec370), and torch's
// ring attention backward (_templated_ring_attention_backward) holds the
// K/V blocks (allgather: every rank's at once; the ring: the current and
// the next), fp32 dQ, dK and dV, the fp32 dK/dV block it passes on and
// the one it receives, and one call's dQ, dK, dV. ctitan
// (trainer/parallel/context_parallel.cpp) moves the KV heads only:
// allgather holds every rank's K/V and then their gradients before the
// reduce-scatter; its ring the block, its fp32 dK/dV sums, both received
// anew, and the fp32 dQ.
double cp_buffer_bytes(const ModelDesc& model, const JobConfig& cfg, const MeshShape& shape,
                       const FrameworkRules& rules, double T, double elem) {
  if (shape.cp <= 1) return 0;
  const double tp = static_cast<double>(shape.tp), cp = static_cast<double>(shape.cp);
  const double H = static_cast<double>(model.n_heads), K = static_cast<double>(model.n_kv_heads);
  const double Dh = head_dim_of(model, args_of(model));
  const bool repeated = rules.cp_repeats_kv_heads;
  const double q_width = H / tp * Dh, kv_width = (repeated ? H : K) / tp * Dh;
  const bool gather = cfg.parallelism.context_parallel_rotate_method == "allgather";
  const double blocks = gather ? cp : 2;
  if (repeated)
    return T * (blocks * 2 * kv_width * elem + (q_width + 2 * kv_width) * 4 + 2 * 2 * kv_width * 4 +
                (q_width + 2 * kv_width) * elem);
  if (gather) return T * blocks * 2 * kv_width * elem * 2;
  return T * (2 * 2 * kv_width * (elem + 4) + q_width * 4);
}

// What a pipeline rank holds besides its state at its peak.
struct PipelinePeak {
  double total = -1, stash = 0, logits = 0, params = 0, grads = 0, recompute = 0, cp = 0;
};

// A pipeline rank: replay its actions. A micro-batch's saved tensors (and
// on the head's stage its logits) live from its forward to its backward
// (to its weight pass where the backward is split); a stage's FSDP units
// stay gathered from its first forward and its unsharded gradients
// accumulate from its first backward, both until its last backward where
// release_after_last_backward. A backward adds one recomputed block and
// CP's buffers. The peak is the largest sum. stash, head_logits: per local
// stage, one micro-batch's.
PipelinePeak replay_pipeline(const RankPipeline& pipe, const std::vector<double>& stash,
                             const std::vector<double>& head_logits, double recompute, double cp_buffers) {
  const size_t stage_count = pipe.stages.size();
  const auto local = [&](int64_t stage) {
    for (size_t i = 0; i < stage_count; ++i)
      if (pipe.stages[i].first == stage) return i;
    throw InputError("pipeline rank runs stage " + std::to_string(stage) + " it does not hold");
  };
  PipelinePeak now, peak;
  const auto consider = [&](double recomputed, double cp) {
    const double total = now.stash + now.logits + now.params + now.grads + recomputed + cp;
    if (total > peak.total) peak = now, peak.total = total, peak.recompute = recomputed, peak.cp = cp;
  };
  std::vector<bool> gathered(stage_count, false);
  std::vector<int64_t> weight_passes(stage_count, 0);
  using Kind = PipelineAction::Kind;
  for (const PipelineAction& action : pipe.actions) {
    const size_t i = local(action.stage);
    if (action.kind == Kind::kForward) {
      if (!gathered[i]) gathered[i] = true, now.params += pipe.gathered_bytes[i];
      now.stash += stash[i];
      now.logits += head_logits[i];
      consider(0, 0);
      continue;
    }
    if (action.kind != Kind::kBackwardWeight) {
      now.logits -= head_logits[i];  // the loss's backward runs first
      consider(recompute, cp_buffers);
      if (action.kind == Kind::kBackwardInput) continue;
    }
    if (weight_passes[i]++ == 0) now.grads += pipe.unsharded_grad_bytes[i];
    now.stash -= stash[i];
    consider(action.kind == Kind::kBackwardWeight ? 0 : recompute, 0);
    if (pipe.release_after_last_backward && weight_passes[i] == pipe.microbatches)
      now.grads -= pipe.unsharded_grad_bytes[i], now.params -= pipe.gathered_bytes[i];
  }
  return peak;
}

// A CPU without AVX-512 multiplies bf16 on fp32 copies of both operands
// and an fp32 output (trainer/model/gemm.cpp), freed when the GEMM returns:
// the largest such GEMM adds its copies at the peak. The output head's
// (T·V·4 + T·D·4 + V·D·4) where this rank has it, else the FFN's gate|up.
double widest_widened_gemm(const ModelDesc& model, const MeshShape& shape, const RankLayout& rank, double F, double T) {
  const double D = static_cast<double>(model.dim), V = static_cast<double>(model.vocab_size);
  const double gate_up = 2 * F;  // (F is this rank's width already)
  double widest = T * D * 4 + gate_up * D * 4 + T * gate_up * 4;
  if (rank.head) {
    // The output GEMM's shard, whether or not the loss is parallel.
    const double vocab = shape.tp > 1 ? V / static_cast<double>(shape.tp) : V;
    widest = std::max(widest, T * vocab * 4 + T * D * 4 + vocab * D * 4);
  }
  return widest;
}

// Communication buffers: FSDP's current and prefetched units (compute
// dtype) and one unit's fp32 gradient before its reduce-scatter, or the
// compute-dtype gradients before the fp32 update without FSDP; TP's
// gathered activations (CP's buffers are counted with the activations).
double communication_buffer_bytes(const ModelDesc& model, const MeshShape& shape, const RankLayout& rank, double T,
                                  double elem, double already) {
  double bytes = already;
  if (shape.dp_shard * shape.cp > 1) bytes += static_cast<double>(rank.largest_unit_elems) * (2 * elem + 4);
  else bytes += static_cast<double>(rank.param_elems) * elem;
  if (shape.tp > 1) bytes += 2 * T * static_cast<double>(model.dim) * elem;
  return bytes;
}

// Every stage of a pipeline rank: its actions, its stages, and what each
// holds besides the activations (see peak_rank_memory).
RankPipeline rank_pipeline(const Env& env, const Layout& layout, const RankLayout& rank,
                           const PipelineSchedule& schedule, int64_t pp_rank, int64_t microbatches) {
  const JobConfig& cfg = env.cfg;
  const int64_t fsdp = env.shape.dp_shard * env.shape.cp;
  RankPipeline pipe;
  pipe.actions = schedule.actions[static_cast<size_t>(pp_rank)];
  pipe.microbatches = microbatches;
  for (int64_t stage : schedule.stages_of(pp_rank))
    pipe.stages.emplace_back(stage, layout.stages[static_cast<size_t>(stage)]);
  // Each stage's share of the rank's gathered units: its blocks and head,
  // the embedding (the rest) on the stage that has it.
  const size_t stage_count = pipe.stages.size();
  std::vector<double> stage_elems(stage_count, 0);
  double named = 0;
  for (size_t i = 0; i < stage_count; ++i) {
    const ModelPart& part = pipe.stages[i].second;
    stage_elems[i] = static_cast<double>(rank.block_unit_elems * part.n_layers + (part.head ? rank.head_elems : 0));
    named += stage_elems[i];
  }
  const double local = static_cast<double>(rank.param_elems);
  const double all =
      rank.gathered_elems > 0 ? static_cast<double>(rank.gathered_elems) : local * static_cast<double>(fsdp);
  const double rest = std::max(0.0, all - named);
  size_t rest_at = 0;
  for (size_t i = 0; i < stage_count; ++i)
    if (pipe.stages[i].second.embedding) rest_at = i;
  stage_elems[rest_at] += rest;
  const double scale = named + rest > 0 ? all / (named + rest) : 0;
  const bool f8_gather = env.float8 && cfg.float8.enable_fsdp_float8_all_gather;
  const bool keep = fsdp > 1 && cfg.parallelism.fsdp_reshard_after_forward != "always";
  const bool accumulate = fsdp > 1 && env.rules.pipeline_syncs_on_last_backward && microbatches > 1;
  for (size_t i = 0; i < stage_count; ++i) {
    pipe.gathered_bytes.push_back(keep ? stage_elems[i] * scale * (f8_gather ? 1.0 : env.elem_bytes) : 0);
    pipe.unsharded_grad_bytes.push_back(accumulate ? stage_elems[i] * scale * 4 : 0);
  }
  pipe.release_after_last_backward = env.rules.pipeline_syncs_on_last_backward;
  return pipe;
}

}  // namespace

MemoryBreakdown activation_memory(const ModelDesc& model, const JobConfig& cfg, const MeshShape& shape,
                                  const HardwareSpec& hw, const RankLayout& rank, double T,
                                  const ActivationCheckpointPolicy& ac, double elem, bool widened_gemm,
                                  const FrameworkRules& rules, const RankPipeline* pipe, MemoryBreakdown mem) {
  const double D = static_cast<double>(model.dim);
  const BlockActivations sizes = block_activations(model, cfg, shape, hw, elem, rules);
  const double per_token_logits = logits_per_token(model, cfg, shape, hw, elem);
  const double cp_buffers = cp_buffer_bytes(model, cfg, shape, rules, T, elem);
  bool any_checkpointed = false;
  if (!pipe) {
    double kept = 0;
    for (int64_t layer = 0; layer < rank.layers; ++layer) kept += kept_per_token(ac, sizes, layer, any_checkpointed);
    mem.activations = T * (kept + (any_checkpointed ? sizes.full_block : 0));
    if (rank.embedding) mem.activations += T * D * elem;
    if (rank.head) mem.logits = T * per_token_logits;
    mem.communication += std::max(0.0, cp_buffers - mem.logits);
  } else {
    const size_t stage_count = pipe->stages.size();
    std::vector<double> stash(stage_count, 0), head_logits(stage_count, 0);
    int64_t local_layer = 0;
    for (size_t i = 0; i < stage_count; ++i) {
      const ModelPart& part = pipe->stages[i].second;
      for (int64_t layer = 0; layer < part.n_layers; ++layer)
        stash[i] += T * kept_per_token(ac, sizes, local_layer++, any_checkpointed);
      if (part.embedding) stash[i] += T * D * elem;
      if (part.head) head_logits[i] = T * per_token_logits;
    }
    const double recompute = any_checkpointed ? T * sizes.full_block : 0;
    const PipelinePeak peak = replay_pipeline(*pipe, stash, head_logits, recompute, cp_buffers);
    mem.activations = peak.stash + peak.recompute;
    mem.logits = peak.logits;
    mem.parameters += peak.params;
    mem.gradients += peak.grads;
    mem.communication += peak.cp;
  }
  const bool float8 = !cfg.model.converters.empty();
  if (widened_gemm && elem == 2 && !float8) mem.logits += widest_widened_gemm(model, shape, rank, sizes.ffn_width, T);
  mem.communication = communication_buffer_bytes(model, shape, rank, T, elem, mem.communication);
  const double live = mem.parameters + mem.gradients + mem.optimizer + mem.activations + mem.logits + mem.communication;
  mem.overhead = live * hw.eff.memory_overhead + hw.eff.memory_fixed_bytes;
  mem.total = live + mem.overhead;
  return mem;
}

MemoryBreakdown activation_memory(const ModelDesc& model, const JobConfig& cfg, const MeshShape& shape,
                                  const HardwareSpec& hw, const RankLayout& rank, double T,
                                  const ActivationCheckpointPolicy& ac, double elem, bool widened_gemm,
                                  const std::string& framework, const RankPipeline* pipe, MemoryBreakdown mem) {
  return activation_memory(model, cfg, shape, hw, rank, T, ac, elem, widened_gemm, framework_rules(framework), pipe,
                           std::move(mem));
}

MemoryBreakdown peak_rank_memory(const Env& env, const Layout& layout, const PipelineSchedule& schedule,
                                 const ActivationCheckpointPolicy& ac, double T, int64_t microbatches,
                                 bool widened_gemm) {
  const MeshShape& shape = env.shape;
  const bool fp32 = env.cfg.training.mixed_precision_param == "float32";
  MemoryBreakdown peak;
  peak.layout_source = layout.source;
  peak.total = -1;
  for (int64_t pp_rank = 0; pp_rank < shape.pp; ++pp_rank) {
    const RankLayout& rank = layout.ranks[static_cast<size_t>(pp_rank)];
    // The state: fp32 master and its compute copy, fp32 gradients, AdamW.
    MemoryBreakdown mem;
    mem.layout_source = peak.layout_source;
    const double local = static_cast<double>(rank.param_elems);
    mem.parameters = local * 4 + (fp32 ? 0 : local * env.elem_bytes);
    mem.gradients = local * 4;
    mem.optimizer =
        static_cast<double>(rank.state_bytes) - mem.parameters + (fp32 ? 0 : local * env.elem_bytes) - mem.gradients;
    RankPipeline pipe;
    if (shape.pp > 1) pipe = rank_pipeline(env, layout, rank, schedule, pp_rank, microbatches);
    mem = activation_memory(env.model, env.cfg, shape, env.hw, rank, T, ac, env.elem_bytes, widened_gemm, env.rules,
                            shape.pp > 1 ? &pipe : nullptr, std::move(mem));
    if (mem.total > peak.total) peak = std::move(mem);
  }
  return peak;
}

}  // namespace ctitan::planner_detail
