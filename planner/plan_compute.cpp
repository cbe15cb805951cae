// One rank's compute: each unit's GEMMs, attention, element-wise traffic and
// kernel launches (analytic, or rescaled to a profiled run's measurement),
// then every pipeline stage's forward and backward per micro-batch. The
// legend of the single-letter shapes is in plan_compute.h.
#include "planner/plan_compute.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "planner/block_gemms.h"

namespace ctitan::planner_detail {
namespace {

// A GEMM's seconds: at the probed rate of its smallest dimension where the
// machine's probe measured sizes (a cpu), else at the peak times the
// saturation x / (x + gemm_half_size) of its smallest dimension x.
double gemm_s(const Env& env, double M, double N, double K, bool fp8) {
  const double smallest = std::min({M, N, K});
  const double flops = 2 * M * N * K;
  if (!env.gemm_by_size.empty() && !(fp8 && env.fp8_peak_flops > 0))
    return flops / (gemm_rate_at(env.gemm_by_size, smallest) * env.hw.eff.gemm);
  const double saturation = smallest / (smallest + env.hw.eff.gemm_half_size);
  if (fp8 && env.fp8_peak_flops > 0) return flops / (env.fp8_peak_flops * env.hw.eff.fp8_gemm * saturation);
  return flops / (env.peak_flops * env.hw.eff.gemm * saturation);
}

// The block's shapes: its GEMMs (planner/block_gemms.h: from the
// parameters and TP's placements), attention (grouped-query, or
// DeepSeek-V3's multi-head latent attention) and the element-wise traffic
// around them (a dense FFN, SwiGLU or GELU, or an MoE layer's routed and
// shared experts).
struct BlockShape {
  std::vector<BlockGemm> gemms;
  double heads = 0, qk_dim = 0,
         v_dim = 0;    // attention: this rank's heads, q/k and v head dims
  double kv_cp = 0;    // K and V elements per token that context parallelism moves
  double attn_io = 0;  // element-wise traffic of the attention part per token
  double ffn_io = 0;   // of the FFN part
};

// Attention's head dims and traffic: MLA's (q through its low-rank latent
// where it has one, the KV latent, their up-projections) or GQA's.
void add_attention_traffic(BlockShape& block, const ModelDesc& model, const ModelArgs& args, double tp) {
  const double H = static_cast<double>(model.n_heads), K = static_cast<double>(model.n_kv_heads);
  if (args.is_mla()) {
    const MlaArgs& mla = args.mla;
    const double qk_dim = static_cast<double>(mla.qk_nope_head_dim + mla.qk_rope_head_dim);
    const double v_dim = static_cast<double>(mla.v_head_dim);
    const double kv_a_dim = static_cast<double>(mla.kv_lora_rank + mla.qk_rope_head_dim);
    block.qk_dim = qk_dim;
    block.v_dim = v_dim;
    block.kv_cp = H * (qk_dim + v_dim) / tp;
    block.attn_io = H * (4 * qk_dim + 3 * v_dim) / tp + 2 * (kv_a_dim + static_cast<double>(mla.q_lora_rank));
  } else {
    const double Dh = static_cast<double>(model.trainer_builds() ? args.head_dim() : model.head_dim());
    block.qk_dim = block.v_dim = Dh;
    block.kv_cp = 2 * K * Dh / tp;
    block.attn_io = (4 * H + 6 * K) * Dh / tp;
  }
}

// The FFN's traffic: an MoE layer's SwiGLU over the routed and shared
// hidden states and its tokens permuted to their experts and combined back
// (k copies of D each way), or the dense FFN's SwiGLU (GELU) product.
void add_ffn_traffic(BlockShape& block, const ModelDesc& model, const ModelArgs& args, double tp, bool moe_layer) {
  if (moe_layer) {
    const MoeArgs& moe = args.moe;
    const double top_k = static_cast<double>(moe.top_k), expert_hidden = static_cast<double>(moe.hidden_dim);
    const double shared_hidden = static_cast<double>(moe.num_shared_experts) * expert_hidden;
    block.ffn_io = 3 * (top_k * expert_hidden + shared_hidden) + 4 * top_k * static_cast<double>(model.dim);
  } else {
    block.ffn_io = (model.gated_mlp ? 3 : 2) * static_cast<double>(model.ffn_hidden) / tp;
  }
}

BlockShape block_shape(const Env& env, bool moe_layer) {
  const ModelDesc& model = env.model;
  const double tp = static_cast<double>(env.shape.tp);
  const ModelArgs args = model.trainer_builds() ? model.trainer_args() : ModelArgs{};
  BlockShape block;
  block.gemms = block_gemms(model, moe_layer, env.shape.tp);
  block.heads = static_cast<double>(model.n_heads) / tp;
  add_attention_traffic(block, model, args, tp);
  add_ffn_traffic(block, model, args, tp, moe_layer);
  return block;
}

// The block's GEMMs, forward and backward, and Float8's scaling casts.
// Float8 recipes (torchao): tensorwise runs all three GEMMs in fp8;
// rowwise scales per row, casts twice as much (both layouts of each
// operand) and keeps the weight gradient in bf16 ("rowwise_with_gw_hp" too).
void add_gemm_costs(UnitCost& cost, const Env& env, const std::vector<BlockGemm>& gemms, double T) {
  const bool rowwise = env.float8 && env.cfg.float8.recipe_name.rfind("rowwise", 0) == 0;
  for (const BlockGemm& gemm : gemms) {
    const bool fp8 = env.float8 && gemm.fp8();
    const double M = T * gemm.m_mult;
    const double forward = gemm.groups * gemm_s(env, M, gemm.out_features, gemm.in_features, fp8);
    cost.gemm_f += forward;
    // Input and weight gradients: the same FLOPs and shapes as the forward.
    cost.gemm_b += fp8 && rowwise ? forward + gemm.groups * gemm_s(env, M, gemm.out_features, gemm.in_features, false)
                                  : 2 * forward;
    if (gemm.output_projection) cost.row_gemm_f += forward;
    if (fp8) {
      // Scaling: amax, scale and cast of the input and weight in forward
      // (read 2, write 1, read again for amax), of the output gradient in
      // backward; fused into neighbours under compile.
      const double bytes =
          (5 * (T * gemm.in_features + gemm.in_features * gemm.out_features) + 5 * T * gemm.out_features) *
          (rowwise ? 2 : 1);
      cost.cast += bytes * (env.compiled ? env.hw.eff.fused_traffic : 1.0) / env.bandwidth;
    }
  }
}

// Causal flash attention: QKᵀ and PV over S/2 keys on average (CP's load
// balancing keeps every rank's share equal); backward recomputes the scores
// (2.5x the forward). block_causal: only the pairs inside documents
// (env.attn_density of them). An unfused attention (FrameworkRules) runs
// QKᵀ and PV as batched GEMMs over all S keys (the causal mask applied to
// the full scores), its backward their two gradients each.
void add_attention_cost(UnitCost& cost, const Env& env, const BlockShape& block, double T) {
  const double tp = static_cast<double>(env.shape.tp);
  const double S = static_cast<double>(env.cfg.training.seq_len);
  const double H = block.heads * tp, Dh = block.qk_dim;
  const bool unfused = env.rules.unfused_attention;
  const double keys = unfused ? S : S / 2;
  const double attn_flops = 2 * T * keys * (H / tp) * (block.qk_dim + block.v_dim) * env.attn_density;
  const double attn_eff = env.hw.eff.attention * Dh / (Dh + env.hw.eff.gemm_half_size / 4);
  cost.attn_f = attn_flops / (env.peak_flops * attn_eff);
  cost.attn_b = (unfused ? 2.0 : 2.5) * cost.attn_f;
  // Without flash attention the T x S scores of each head go through memory:
  // written by QKᵀ, read and written by the softmax (and its dropout), read
  // by PV — 12 bytes per score forward, twice that backward.
  if (!env.hw.flash_attention || unfused) cost.elem_f += 3 * T * S * (H / tp) * 4 / env.bandwidth;
}

UnitCost block_cost(const Env& env, double T, bool moe_layer) {
  const double tp = static_cast<double>(env.shape.tp), D = static_cast<double>(env.model.dim);
  const bool sp = env.shape.tp > 1 && env.cfg.parallelism.enable_sequence_parallel;
  const BlockShape block = block_shape(env, moe_layer);
  UnitCost cost;
  add_gemm_costs(cost, env, block.gemms, T);
  add_attention_cost(cost, env, block, T);
  // Element-wise traffic per token: two norms and two residual adds over D
  // (split by TP under sequence parallelism), RoPE and layout copies of
  // q/k/v, the SwiGLU (or GELU) product. Fused element-wise ops (compile,
  // or the framework's own fusions) move fused_traffic of it.
  const double seq_part = sp ? tp : 1.0;
  const double per_token = 10 * D / seq_part + block.attn_io + block.ffn_io;
  const bool fused = env.compiled || env.rules.fused_elementwise;
  const double traffic = fused ? env.hw.eff.fused_traffic : 1.0;
  cost.elem_f += T * per_token * env.elem_bytes * traffic / (env.bandwidth * env.hw.eff.memory);
  cost.elem_b += 2 * cost.elem_f;
  const double kernels = fused ? 10 : 25;
  // An MoE layer adds routing (softmax/sigmoid, top-k, sort, gather,
  // scatter, the bias) and its grouped GEMMs' launches.
  const double moe_kernels = moe_layer ? 12 : 0;
  double fp8_gemms = 0;
  for (const BlockGemm& gemm : block.gemms) fp8_gemms += gemm.fp8() ? 1 : 0;
  cost.kernels_f = (kernels + moe_kernels + (env.float8 ? (env.compiled ? 2 : 6) * fp8_gemms : 0)) *
                   env.hw.eff.kernel_overhead_s * env.overhead_mult;
  if (env.shape.tp > 1 && env.cfg.parallelism.enable_async_tensor_parallel && !env.float8)  // each TP GEMM in tp chunks
    cost.kernels_f += 4 * static_cast<double>(env.shape.tp - 1) * 2 * env.hw.eff.kernel_overhead_s * env.overhead_mult;
  cost.kernels_b = 2 * cost.kernels_f;
  if (env.shape.tp > 1) {  // per block: 2 gathers + 2 scatters (SP) or 2 all-reduces, each way
    cost.tp_bytes = T * D * env.elem_bytes;
    cost.tp_collectives = sp ? 8 : 4;
  }
  if (env.shape.cp > 1)
    cost.cp_bytes = 3 * T * block.kv_cp * env.elem_bytes;  // K,V forward; K,V and their grads backward
  return cost;
}

// This rank's share of the vocabulary: split by TP under loss parallelism.
double vocab_of_rank(const Env& env) {
  const double V = static_cast<double>(env.model.vocab_size);
  const bool loss_parallel = env.shape.tp > 1 && !env.cfg.parallelism.disable_loss_parallel;
  return loss_parallel ? V / static_cast<double>(env.shape.tp) : V;
}

UnitCost head_cost(const Env& env, double T) {
  const double D = static_cast<double>(env.model.dim);
  const double vocab = vocab_of_rank(env);
  UnitCost cost;
  cost.gemm_f = gemm_s(env, T, vocab, D,
                       false);  // the output projection stays in the compute dtype
  cost.gemm_b = 2 * cost.gemm_f;
  // Logits to fp32, log-softmax, loss and its gradient: ~20 bytes per logit.
  cost.elem_f = T * vocab * 8 / (env.bandwidth * env.hw.eff.memory);
  cost.elem_b = T * vocab * 12 / (env.bandwidth * env.hw.eff.memory);
  cost.kernels_f = 8 * env.hw.eff.kernel_overhead_s * env.overhead_mult;
  cost.kernels_b = 2 * cost.kernels_f;
  return cost;
}

// The embedding's lookup and its gradient's scatter: traffic and launches.
UnitCost embedding_cost(const Env& env, double T) {
  UnitCost cost;
  cost.elem_f = T * static_cast<double>(env.model.dim) * env.elem_bytes * 2 / (env.bandwidth * env.hw.eff.memory);
  cost.elem_b = 2 * cost.elem_f;
  cost.kernels_f = 2 * env.hw.eff.kernel_overhead_s * env.overhead_mult;
  cost.kernels_b = 2 * cost.kernels_f;
  return cost;
}

// One point of a class's size curve: where a unit's working set (tokens
// per micro-batch times the width it carries) was `size`, the profiled run
// measured `measured` where the analytic model planned `planned`.
struct CurvePoint {
  double size, measured, planned;
};

// measured / planned at `size`: interpolated in log size between the points
// around it, the nearest point's outside them; 1 where no point planned the
// class (it keeps its analytic time).
double size_ratio(std::vector<CurvePoint> points, double size) {
  points.erase(std::remove_if(points.begin(), points.end(),
                              [](const CurvePoint& point) { return point.planned <= 0 || point.size <= 0; }),
               points.end());
  if (points.empty()) return 1;
  std::sort(points.begin(), points.end(), [](const CurvePoint& x, const CurvePoint& y) { return x.size < y.size; });
  const auto ratio = [](const CurvePoint& point) { return std::max(point.measured, 1e-12) / point.planned; };
  if (points.size() == 1 || size <= points.front().size) return ratio(points.front());
  if (size >= points.back().size) return ratio(points.back());
  size_t i = 1;
  while (points[i].size < size) ++i;
  const CurvePoint &below = points[i - 1], &above = points[i];
  const double weight = std::log(size / below.size) / std::log(above.size / below.size);
  return std::exp((1 - weight) * std::log(ratio(below)) + weight * std::log(ratio(above)));
}

// cost's classes scaled to what the profiled runs measured where the
// analytic model planned their units (`unit` picks block, head or embedding
// from a run), at this recipe's working set `size` (the profiled runs':
// their tokens per micro-batch times `width`), times `factor`.
template <class Pick>
void rescale_unit(UnitCost& cost, const MeasuredUnits& measured, Pick unit, double size, double width, double factor) {
  const auto rescale = [&](double& value, double UnitTimes::*field) {
    std::vector<CurvePoint> points{
        {measured.tokens * width, unit(measured, false).*field, unit(measured, true).*field}};
    for (const MeasuredShape& shape : measured.shapes)
      points.push_back({shape.tokens * width, unit(shape, false).*field, unit(shape, true).*field});
    if (points.front().size <= 0) points.front().size = 1;  // one size only: its ratio
    value *= factor * size_ratio(points, size);
  };
  const double gemm_before = cost.gemm_f;
  rescale(cost.gemm_f, &UnitTimes::gemm_f);
  if (gemm_before > 0) cost.row_gemm_f *= cost.gemm_f / gemm_before;
  rescale(cost.gemm_b, &UnitTimes::gemm_b);
  rescale(cost.attn_f, &UnitTimes::attn_f);
  rescale(cost.attn_b, &UnitTimes::attn_b);
  rescale(cost.elem_f, &UnitTimes::elem_f);
  rescale(cost.elem_b, &UnitTimes::elem_b);
  rescale(cost.kernels_f, &UnitTimes::fixed_f);
  rescale(cost.kernels_b, &UnitTimes::fixed_b);
}

}  // namespace

UnitCosts analytic_unit_costs(const Env& env, const ModelArgs& args, double T) {
  UnitCosts units;
  units.dense_block = block_cost(env, T, false);
  units.head = head_cost(env, T);
  units.moe_block = args.moe.num_experts > 0 ? block_cost(env, T, true) : units.dense_block;
  units.embedding = embedding_cost(env, T);
  return units;
}

void rescale_to_measured(UnitCosts& units, const MeasuredUnits& measured, const Env& env, double T, int world_size,
                         Prediction& prediction) {
  const double corun = world_size > 1 ? measured.corun : 1.0;
  const auto block = [](const auto& run, bool planned) -> const UnitTimes& {
    return planned ? run.planned_block : run.block;
  };
  const auto head = [](const auto& run, bool planned) -> const UnitTimes& {
    return planned ? run.planned_head : run.head;
  };
  const auto embedding = [](const auto& run, bool planned) -> const UnitTimes& {
    return planned ? run.planned_embedding : run.embedding;
  };
  // The working set: a block's and the embedding's activations (tokens x
  // dim), the head's logits (tokens x its vocabulary shard).
  const double D = static_cast<double>(env.model.dim);
  rescale_unit(units.dense_block, measured, block, T * D, measured.dim, corun);
  rescale_unit(units.moe_block, measured, block, T * D, measured.dim, corun);
  rescale_unit(units.head, measured, head, T * vocab_of_rank(env), measured.vocab, corun);
  rescale_unit(units.embedding, measured, embedding, T * D, measured.dim, corun);
  prediction.compute_source = "measured (" + measured.run_dir + ")";
  std::string corun_note;
  if (world_size > 1 && !measured.corun_run_dir.empty()) {
    char factor[64];
    std::snprintf(factor, sizeof factor, "%.2f", measured.corun);
    corun_note = ", x" + std::string(factor) + " for ranks side by side (measured in " + measured.corun_run_dir + ")";
  }
  prediction.notes.push_back("compute measured in " + measured.run_dir +
                             " and scaled to this recipe by the analytic model's "
                             "ratios" +
                             corun_note +
                             "; communication (on the spec's link: fitted where multi-rank runs were "
                             "profiled, see the calibration line), the pipeline schedule and memory "
                             "are analytic");
}

UnitCost mean_block(const UnitCost& dense, const UnitCost& moe, double moe_share) {
  const auto mix = [moe_share](double x, double y) { return (1 - moe_share) * x + moe_share * y; };
  UnitCost mean = dense;
  mean.gemm_f = mix(dense.gemm_f, moe.gemm_f);
  mean.gemm_b = mix(dense.gemm_b, moe.gemm_b);
  mean.attn_f = mix(dense.attn_f, moe.attn_f);
  mean.attn_b = mix(dense.attn_b, moe.attn_b);
  mean.elem_f = mix(dense.elem_f, moe.elem_f);
  mean.elem_b = mix(dense.elem_b, moe.elem_b);
  mean.cast = mix(dense.cast, moe.cast);
  mean.kernels_f = mix(dense.kernels_f, moe.kernels_f);
  mean.kernels_b = mix(dense.kernels_b, moe.kernels_b);
  mean.row_gemm_f = mix(dense.row_gemm_f, moe.row_gemm_f);
  return mean;
}

UnitTimes unit_times(const UnitCost& cost) {
  return {cost.gemm_f, cost.gemm_b, cost.attn_f, cost.attn_b, cost.elem_f, cost.elem_b, cost.kernels_f, cost.kernels_b};
}

StageCosts stage_costs(const Layout& layout, const ModelArgs& args, const ActivationCheckpointPolicy& ac,
                       const UnitCosts& units) {
  using Mode = ActivationCheckpointPolicy::Mode;
  const UnitCost &embedding = units.embedding, &head = units.head;
  StageCosts stages;
  for (const ModelPart& part : layout.stages) {
    double forward = 0, backward = 0, recompute = 0;
    if (part.embedding) forward += embedding.f() + embedding.kernels_f, backward += embedding.b() + embedding.kernels_b;
    for (int64_t layer = part.first_layer; layer < part.first_layer + part.n_layers; ++layer) {
      const UnitCost& block = args.moe_layer(layer) ? units.moe_block : units.dense_block;
      forward += block.f() + block.cast + block.kernels_f;
      backward += block.b() + block.cast + block.kernels_b;
      if (ac.mode == Mode::kSelectiveOp) recompute += block.row_gemm_f + block.elem_f + block.kernels_f;
      else if (ac.mode != Mode::kNone && ac.checkpoints_layer(layer))
        recompute += block.f() + block.cast + block.kernels_f, ++stages.recomputed_layers;
    }
    if (part.head) forward += head.f() + head.kernels_f, backward += head.b() + head.kernels_b;
    stages.forward.push_back(forward);
    stages.backward.push_back(backward + recompute);
    stages.recompute.push_back(recompute);
  }
  return stages;
}

BusiestRank busiest_rank(const StageCosts& stages, int64_t pp, int64_t stages_per_rank, const std::string& schedule) {
  // ZBVZeroBubble places stages in a V (rank r holds r and 2·pp−1−r), the
  // other schedules round-robin.
  const bool v_style = stages_per_rank == 2 && schedule == "ZBVZeroBubble";
  BusiestRank busiest;
  for (int64_t rank = 0; rank < pp; ++rank) {
    double forward = 0, backward = 0, recompute = 0;
    for (size_t s = 0; s < stages.forward.size(); ++s) {
      const int64_t stage = static_cast<int64_t>(s);
      const int64_t owner = v_style ? (stage < pp ? stage : 2 * pp - 1 - stage) : stage % pp;
      if (owner == rank) forward += stages.forward[s], backward += stages.backward[s], recompute += stages.recompute[s];
    }
    if (forward + backward > busiest.forward_s + busiest.backward_s) busiest = {rank, forward, backward, recompute};
  }
  return busiest;
}

}  // namespace ctitan::planner_detail
