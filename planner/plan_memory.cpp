// Per-rank memory beyond the optimizer's state: activations kept for
// backward in Korthikanti et al.'s form (per layer, per token, the tensors
// autograd saves, split by TP and by sequence parallelism, cut by CP, per
// activation-checkpointing mode), the logits and their fp32 loss copies,
// FSDP's gathered units and gradient buffers, TP's gathered activations,
// allocator slack.
#include <algorithm>
#include <utility>

#include "common/errors.h"
#include "planner/plan_internal.h"

namespace ctitan::planner_detail {

MemoryBreakdown activation_memory(const ModelDesc& m, const JobConfig& cfg, const MeshShape& shape,
                                  const HardwareSpec& hw, const RankLayout& rank, double T,
                                  const ActivationCheckpointPolicy& ac, double elem, bool widened_gemm,
                                  const FrameworkRules& rules, const RankPipeline* pipe, MemoryBreakdown mem) {
  const double t = static_cast<double>(shape.tp), D = static_cast<double>(m.dim);
  const double H = static_cast<double>(m.n_heads), K = static_cast<double>(m.n_kv_heads);
  const ModelArgs a = m.family == "gpt" ? ModelArgs{} : m.trainer_args();
  const double Dh = static_cast<double>(m.family == "gpt" ? m.head_dim() : a.head_dim());
  const double V = static_cast<double>(m.vocab_size);
  // The FFN's hidden width per token on this rank: an MoE layer's top_k
  // routed experts and its shared experts (replicated over tp), averaged
  // with the dense layers in the model's proportion.
  double F = static_cast<double>(m.ffn_hidden) / t;
  if (a.moe.num_experts > 0 && m.n_layers > 0) {
    const double w = static_cast<double>(a.n_moe_layers()) / static_cast<double>(m.n_layers);
    const double hm = static_cast<double>(a.moe.hidden_dim);
    F = (1 - w) * F + w * (static_cast<double>(a.moe.top_k) * hm + static_cast<double>(a.moe.num_shared_experts) * hm);
  }
  // Attention widths per token on this rank: q, k, v (after projection)
  // and the output; MLA's q/k heads are nope + rope wide, v its own, plus
  // the low-rank latents (replicated).
  double qkv_width = (H + 2 * K) * Dh / t, out_width = H * Dh / t, latent = 0;
  if (a.is_mla()) {
    const double qk = static_cast<double>(a.mla.qk_nope_head_dim + a.mla.qk_rope_head_dim);
    const double v = static_cast<double>(a.mla.v_head_dim);
    qkv_width = H * (2 * qk + v) / t;
    out_width = H * v / t;
    latent = static_cast<double>(a.mla.kv_lora_rank + a.mla.qk_rope_head_dim + a.mla.q_lora_rank);
  }
  const bool sp = shape.tp > 1 && cfg.parallelism.enable_sequence_parallel;
  const double seq_part = sp ? t : 1.0;
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
  const double attn = out_width * elem + H / t * 4;
  const double mlp = (m.gated_mlp() ? 3 : 2) * F * elem;
  const double full_block = (norm_io + gemm_inputs + qkv + attn + mlp) * hw.eff.activation_factor;
  const double block_input = D / seq_part * elem;
  // Op-level checkpointing keeps the outputs of every other GEMM (aten.mm:
  // the first, third, ...; the count starts again in each block) and the
  // attention's. ctitan's GEMMs are qkv (kept), wo, gate|up (kept), w2.
  // TorchTitan's are wq (kept), wk, wv (kept), wo, w1 (kept), w3, w2 (kept):
  // q and v, the gate and the block's output (partial sums, whole under TP).
  // MLA and MoE blocks: ctitan's rule.
  const bool unfused = rules.unfused_projections && !a.is_mla() && a.moe.num_experts == 0;
  const double op_block = unfused ? block_input + (out_width + K * Dh / t + F + D) * elem + attn
                                  : block_input + (qkv_width + 2 * F) * elem + attn;

  // Saved per token of layer l (counted from the rank's first layer, as
  // the trainer's and TorchTitan's per-rank checkpointing counters do).
  bool any_checkpointed = false;
  const auto kept_layer = [&](int64_t l) {
    if (ac.mode == ActivationCheckpointPolicy::Mode::kNone) return full_block;
    if (ac.mode == ActivationCheckpointPolicy::Mode::kSelectiveOp) return any_checkpointed = true, op_block;
    if (ac.checkpoints_layer(l)) return any_checkpointed = true, block_input;
    return full_block;
  };
  // The logits per token where the rank has the head. TorchTitan (the GPU
  // rows): the logits, their fp32 copy for the loss and its fp32 gradient;
  // under torch.compile of the loss (compile.components holds "loss") one
  // fused reduction reads the logits and its backward writes the gradient
  // in their dtype: no fp32 copy of either. ctitan on a CPU: the logits
  // and their gradient in the logits' dtype; its chunked loss forms no fp32
  // copy of the whole (trainer/model/cross_entropy.h).
  const bool loss_parallel = shape.tp > 1 && !cfg.parallelism.disable_loss_parallel;
  const double v_rank = loss_parallel ? V / t : V;
  const auto& comps = cfg.compile.components;
  const bool fused_loss = cfg.compile.enable && std::find(comps.begin(), comps.end(), "loss") != comps.end();
  const double logits_per_token = v_rank * (hw.kind == "cpu" || fused_loss ? 2 * elem : elem + 4 + 4);
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
  double cp_buffers = 0;
  if (shape.cp > 1) {
    const double c = static_cast<double>(shape.cp);
    const bool tt = rules.cp_repeats_kv_heads;
    const double q = H / t * Dh, kv = (tt ? H : K) / t * Dh;
    const bool gather = cfg.parallelism.context_parallel_rotate_method == "allgather";
    const double blocks = gather ? c : 2;
    if (tt)
      cp_buffers = T * (blocks * 2 * kv * elem + (q + 2 * kv) * 4 + 2 * 2 * kv * 4 + (q + 2 * kv) * elem);
    else if (gather)
      cp_buffers = T * blocks * 2 * kv * elem * 2;
    else
      cp_buffers = T * (2 * 2 * kv * (elem + 4) + q * 4);
  }
  if (!pipe) {
    double kept = 0;
    for (int64_t l = 0; l < rank.layers; ++l) kept += kept_layer(l);
    mem.activations = T * (kept + (any_checkpointed ? full_block : 0));
    if (rank.embedding) mem.activations += T * D * elem;
    if (rank.head) mem.logits = T * logits_per_token;
    mem.communication += std::max(0.0, cp_buffers - mem.logits);
  } else {
    // A pipeline rank: replay its actions. A micro-batch's saved tensors
    // (and on the head's stage its logits) live from its forward to its
    // backward (to its weight pass where the backward is split); a stage's
    // FSDP units stay gathered from its first forward and its unsharded
    // gradients accumulate from its first backward, both until its last
    // backward where release_after_last_backward. A backward adds one
    // recomputed block and CP's buffers. The peak is the largest sum.
    const RankPipeline& pp = *pipe;
    const size_t n = pp.stages.size();
    std::vector<double> stash(n, 0), head_logits(n, 0);
    int64_t local_layer = 0;
    for (size_t i = 0; i < n; ++i) {
      const ModelPart& part = pp.stages[i].second;
      for (int64_t l = 0; l < part.n_layers; ++l) stash[i] += T * kept_layer(local_layer++);
      if (part.embedding) stash[i] += T * D * elem;
      if (part.head) head_logits[i] = T * logits_per_token;
    }
    const double recompute = any_checkpointed ? T * full_block : 0;
    const auto local = [&](int64_t stage) {
      for (size_t i = 0; i < n; ++i)
        if (pp.stages[i].first == stage) return i;
      throw InputError("pipeline rank runs stage " + std::to_string(stage) + " it does not hold");
    };
    struct At {
      double total = -1, stash = 0, logits = 0, params = 0, grads = 0, recompute = 0, cp = 0;
    } now, peak;
    const auto consider = [&](double rec, double cp) {
      const double total = now.stash + now.logits + now.params + now.grads + rec + cp;
      if (total > peak.total) peak = now, peak.total = total, peak.recompute = rec, peak.cp = cp;
    };
    std::vector<bool> gathered(n, false);
    std::vector<int64_t> weight_passes(n, 0);
    using Kind = PipelineAction::Kind;
    for (const PipelineAction& a : pp.actions) {
      const size_t i = local(a.stage);
      if (a.kind == Kind::kForward) {
        if (!gathered[i]) gathered[i] = true, now.params += pp.gathered_bytes[i];
        now.stash += stash[i];
        now.logits += head_logits[i];
        consider(0, 0);
        continue;
      }
      if (a.kind != Kind::kBackwardWeight) {
        now.logits -= head_logits[i];  // the loss's backward runs first
        consider(recompute, cp_buffers);
        if (a.kind == Kind::kBackwardInput) continue;
      }
      if (weight_passes[i]++ == 0) now.grads += pp.unsharded_grad_bytes[i];
      now.stash -= stash[i];
      consider(a.kind == Kind::kBackwardWeight ? 0 : recompute, 0);
      if (pp.release_after_last_backward && weight_passes[i] == pp.microbatches)
        now.grads -= pp.unsharded_grad_bytes[i], now.params -= pp.gathered_bytes[i];
    }
    mem.activations = peak.stash + peak.recompute;
    mem.logits = peak.logits;
    mem.parameters += peak.params;
    mem.gradients += peak.grads;
    mem.communication += peak.cp;
  }
  // A CPU without AVX-512 multiplies bf16 on fp32 copies of both operands
  // and an fp32 output (trainer/model/gemm.cpp), freed when the GEMM returns:
  // the largest such GEMM adds its copies at the peak. The output head's
  // (T·V·4 + T·D·4 + V·D·4) where this rank has it, else the FFN's gate|up.
  if (widened_gemm && elem == 2 && !float8) {
    const double f = 2 * F;  // (F is this rank's width already)
    double widest = T * D * 4 + f * D * 4 + T * f * 4;
    if (rank.head) {
      const double v = shape.tp > 1 ? V / t : V;  // the output GEMM's shard, whether or not the loss is parallel
      widest = std::max(widest, T * v * 4 + T * D * 4 + v * D * 4);
    }
    mem.logits += widest;
  }
  // Communication buffers: FSDP's current and prefetched units (compute
  // dtype) and one unit's fp32 gradient before its reduce-scatter; TP's
  // gathered activations (CP's buffers are above).
  const int64_t fsdp = shape.dp_shard * shape.cp;
  if (fsdp > 1) {
    const double unit = static_cast<double>(rank.largest_unit_elems);
    mem.communication += unit * (2 * elem + 4);
  } else {
    mem.communication += static_cast<double>(rank.param_elems) * elem;  // the compute-dtype gradients before the fp32 update
  }
  if (shape.tp > 1) mem.communication += 2 * T * D * elem;
  const double live = mem.parameters + mem.gradients + mem.optimizer + mem.activations + mem.logits + mem.communication;
  mem.overhead = live * hw.eff.memory_overhead + hw.eff.memory_fixed_bytes;
  mem.total = live + mem.overhead;
  return mem;
}

MemoryBreakdown activation_memory(const ModelDesc& m, const JobConfig& cfg, const MeshShape& shape,
                                  const HardwareSpec& hw, const RankLayout& rank, double T,
                                  const ActivationCheckpointPolicy& ac, double elem, bool widened_gemm,
                                  const std::string& framework, const RankPipeline* pipe, MemoryBreakdown mem) {
  return activation_memory(m, cfg, shape, hw, rank, T, ac, elem, widened_gemm, framework_rules(framework), pipe,
                           std::move(mem));
}

}  // namespace ctitan::planner_detail
