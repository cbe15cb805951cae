// Per-rank memory beyond the optimizer's state: activations kept for
// backward in Korthikanti et al.'s form (per layer, per token, the tensors
// autograd saves, split by TP and by sequence parallelism, cut by CP, per
// activation-checkpointing mode), the logits and their fp32 loss copies,
// FSDP's gathered units and gradient buffers, TP's gathered activations,
// allocator slack.
#include <algorithm>

#include "planner/plan_internal.h"

namespace ctitan::planner_detail {

MemoryBreakdown activation_memory(const ModelDesc& m, const JobConfig& cfg, const MeshShape& shape,
                                  const HardwareSpec& hw, const RankLayout& rank, double T, int64_t micro,
                                  const ActivationCheckpointPolicy& ac, double elem, bool widened_gemm,
                                  const std::string& framework, int64_t stages_per_rank, MemoryBreakdown mem) {
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
  const bool unfused = framework == "torchtitan" && !a.is_mla() && a.moe.num_experts == 0;
  const double op_block = unfused ? block_input + (out_width + K * Dh / t + F + D) * elem + attn
                                  : block_input + (qkv_width + 2 * F) * elem + attn;

  // Micro-batches alive at once on this rank: every one under GPipe and
  // looped BFS (all forwards first), at most the pipeline depth otherwise.
  // The interleaved schedules run (v − 1)·pp + 2·(pp − 1) forward chunks
  // (one stage, a 1/v of the rank's layers, of one micro-batch) before the
  // first rank's first backward, (v − 1)·pp + pp − 1 for the zero-bubble
  // one, and one more before it frees any (trainer/parallel/pipeline.cpp,
  // as torch.distributed.pipelining): in whole-rank units, chunks / v.
  double in_flight = 1;
  if (shape.pp > 1) {
    const std::string& s = cfg.parallelism.pipeline_parallel_schedule;
    const double m = static_cast<double>(micro), p = static_cast<double>(shape.pp);
    const double v = static_cast<double>(std::max<int64_t>(1, stages_per_rank));
    if (s == "GPipe" || s == "LoopedBFS")
      in_flight = m;
    else if ((s == "Interleaved1F1B" || s == "InterleavedZeroBubble") && v > 1)
      in_flight = std::min(m * v, (v - 1) * p + (s == "Interleaved1F1B" ? 2 : 1) * (p - 1) + 1) / v;
    else
      in_flight = std::min(m, p);
  }
  double kept = 0;
  bool any_checkpointed = false;
  for (int64_t l = 0; l < rank.layers; ++l) {
    if (ac.mode == ActivationCheckpointPolicy::Mode::kNone) {
      kept += full_block;
    } else if (ac.mode == ActivationCheckpointPolicy::Mode::kSelectiveOp) {
      kept += op_block;
      any_checkpointed = true;
    } else if (ac.checkpoints_layer(l)) {
      kept += block_input;
      any_checkpointed = true;
    } else {
      kept += full_block;
    }
  }
  mem.activations = T * (kept * in_flight + (any_checkpointed ? full_block : 0));
  if (rank.head) {
    const bool loss_parallel = shape.tp > 1 && !cfg.parallelism.disable_loss_parallel;
    const double v = loss_parallel ? V / t : V;
    // TorchTitan (the GPU rows): the logits, their fp32 copy for the loss and
    // its fp32 gradient; under torch.compile of the loss (compile.components
    // holds "loss") one fused reduction reads the logits and its backward
    // writes the gradient in their dtype: no fp32 copy of either. ctitan on a
    // CPU: the logits and their gradient in the logits' dtype; its chunked
    // loss forms no fp32 copy of the whole (trainer/model/cross_entropy.h).
    const auto& comps = cfg.compile.components;
    const bool fused_loss = cfg.compile.enable && std::find(comps.begin(), comps.end(), "loss") != comps.end();
    mem.logits = T * v * (hw.kind == "cpu" || fused_loss ? 2 * elem : elem + 4 + 4) * in_flight;
  }
  // A CPU without AVX-512 multiplies bf16 on fp32 copies of both operands
  // and an fp32 output (trainer/model/gemm.cpp), freed when the GEMM returns:
  // the largest such GEMM adds its copies at the peak. The output head's
  // (T·V·4 + T·D·4 + V·D·4) where this rank has it, else the FFN's gate|up.
  if (widened_gemm && elem == 2 && !float8) {
    const double f = 2 * F;  // (F is this rank's width already)
    double widest = T * D * 4 + f * D * 4 + T * f * 4;
    if (rank.head) {
      const double v = shape.tp > 1 ? V / t : V;
      widest = std::max(widest, T * v * 4 + T * D * 4 + v * D * 4);
    }
    mem.logits += widest;
  }
  if (rank.embedding) mem.activations += T * D * elem * in_flight;
  // Communication buffers: FSDP's current and prefetched units (compute
  // dtype) and one unit's fp32 gradient before its reduce-scatter; TP's
  // gathered activations; context parallelism's K/V blocks.
  const int64_t fsdp = shape.dp_shard * shape.cp;
  if (fsdp > 1) {
    const double unit = static_cast<double>(rank.largest_unit_elems);
    mem.communication += unit * (2 * elem + 4);
  } else {
    mem.communication += static_cast<double>(rank.param_elems) * elem;  // the compute-dtype gradients before the fp32 update
  }
  if (shape.tp > 1) mem.communication += 2 * T * D * elem;
  if (shape.cp > 1) mem.communication += 2 * T * 2 * K * Dh / t * elem;
  const double live = mem.parameters + mem.gradients + mem.optimizer + mem.activations + mem.logits + mem.communication;
  mem.overhead = live * hw.eff.memory_overhead + hw.eff.memory_fixed_bytes;
  mem.total = live + mem.overhead;
  return mem;
}

}  // namespace ctitan::planner_detail
