// predict(): the step of one rank, unit by unit, then the mesh's
// communication and the pipeline schedule on top. See plan.h for what each
// figure covers; the efficiencies come from the hardware spec.
#include "planner/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include "common/errors.h"
#include "planner/plan_internal.h"
#include "profiling/peak_flops.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/documents.h"
#include "trainer/parallel/context_parallel.h"
#include "trainer/parallel/pipeline.h"

namespace ctitan {
namespace {

using planner_detail::Layout;
using planner_detail::RankLayout;

struct Env {
  const ModelDesc& m;
  const JobConfig& cfg;
  const HardwareSpec& hw;
  const FrameworkRules& rules;  // whose training loop (PlanRequest::framework)
  MeshShape shape;
  double elem = 2;         // compute dtype bytes
  double peak = 0;         // GEMM FLOP/s of one rank in the compute dtype
  double fp8_peak = 0;     // 0: float8 GEMMs run at `peak` (emulated)
  double bandwidth = 0;    // memory bytes/s of one rank
  double overhead_mult = 1;  // cpu: ranks beyond the cores queue for them
  bool float8 = false, compiled = false;
  double attn_density = 1;  // block_causal: the attention work over causal's
};

double gemm_s(const Env& e, double M, double N, double K, bool fp8) {
  const double x = std::min({M, N, K});
  const double sat = x / (x + e.hw.eff.gemm_half_size);
  const double flops = 2 * M * N * K;
  if (fp8 && e.fp8_peak > 0) return flops / (e.fp8_peak * e.hw.eff.fp8_gemm * sat);
  return flops / (e.peak * e.hw.eff.gemm * sat);
}

// One TransformerBlock (or the embedding/head) for T tokens of this rank.
struct UnitCost {
  double gemm_f = 0, gemm_b = 0, attn_f = 0, attn_b = 0, elem_f = 0, elem_b = 0, cast = 0;
  double kernels_f = 0, kernels_b = 0;
  double row_gemm_f = 0;  // wo and w2: what op-level checkpointing recomputes
  double tp_bytes = 0;    // TP activations moved (forward + backward), per collective buffer
  int tp_collectives = 0;
  double cp_bytes = 0;    // K/V moved by context parallelism (forward + backward)
  double f() const { return gemm_f + attn_f + elem_f; }
  double b() const { return gemm_b + attn_b + elem_b; }
};

// One block's GEMMs: N x K weights over M = T tokens (x m_mult), `groups`
// equal grouped-GEMM problems (routed experts), `fp8` where Float8 applies.
struct BlockGemm {
  double n, k;
  bool row = false;
  bool fp8 = true;
  double m_mult = 1;
  double groups = 1;
};

// The block's shapes: attention (grouped-query, or DeepSeek-V3's
// multi-head latent attention with its low-rank projections) and the FFN
// (dense SwiGLU, or an MoE layer: router, top_k of E routed experts as one
// grouped GEMM per projection, shared experts), split by TP as ctitan
// splits them (MoE layers and MLA's low-rank projections replicated).
struct BlockShape {
  std::vector<BlockGemm> gemms;
  double heads = 0, qk_dim = 0, v_dim = 0;  // attention: this rank's heads, q/k and v head dims
  double kv_cp = 0;                          // K and V elements per token that context parallelism moves
  double attn_io = 0;                        // element-wise traffic of the attention part per token
  double ffn_io = 0;                         // of the FFN part
};

BlockShape block_shape(const Env& e, bool moe_layer) {
  const ModelDesc& m = e.m;
  const ModelArgs a = m.family == "gpt" ? ModelArgs{} : m.trainer_args();
  const double t = static_cast<double>(e.shape.tp), D = static_cast<double>(m.dim);
  const double H = static_cast<double>(m.n_heads), K = static_cast<double>(m.n_kv_heads);
  const double Dh = static_cast<double>(m.family == "gpt" ? m.head_dim() : a.head_dim());
  const double F = static_cast<double>(m.ffn_hidden);
  BlockShape s;
  s.heads = H / t;
  if (m.family == "gpt") {
    s.gemms = {{(H + 2 * K) * Dh / t, D}, {D, H * Dh / t, true}, {F / t, D}, {D, F / t, true}};
    s.qk_dim = s.v_dim = Dh;
    s.kv_cp = 2 * K * Dh / t;
    s.attn_io = (4 * H + 6 * K) * Dh / t;
    s.ffn_io = 2 * F / t;
    return s;
  }
  if (a.is_mla()) {
    const MlaArgs& l = a.mla;
    const double qk = static_cast<double>(l.qk_nope_head_dim + l.qk_rope_head_dim), v = static_cast<double>(l.v_head_dim);
    const double kv_a = static_cast<double>(l.kv_lora_rank + l.qk_rope_head_dim), kv = static_cast<double>(l.kv_lora_rank);
    if (l.q_lora_rank > 0) {
      const double q = static_cast<double>(l.q_lora_rank);
      s.gemms.push_back({q, D, false, false});
      s.gemms.push_back({H * qk / t, q});
    } else {
      s.gemms.push_back({H * qk / t, D});
    }
    s.gemms.push_back({kv_a, D, false, false});
    s.gemms.push_back({H * (qk - l.qk_rope_head_dim + v) / t, kv});
    s.gemms.push_back({D, H * v / t, true});
    s.qk_dim = qk;
    s.v_dim = v;
    s.kv_cp = H * (qk + v) / t;
    s.attn_io = H * (4 * qk + 3 * v) / t + 2 * (kv_a + static_cast<double>(l.q_lora_rank));
  } else {
    s.gemms = {{H * Dh / t, D}, {K * Dh / t, D}, {K * Dh / t, D}, {D, H * Dh / t, true}};
    s.qk_dim = s.v_dim = Dh;
    s.kv_cp = 2 * K * Dh / t;
    s.attn_io = (4 * H + 6 * K) * Dh / t;
  }
  if (moe_layer) {
    const MoeArgs& x = a.moe;
    const double E = static_cast<double>(x.num_experts), k = static_cast<double>(x.top_k);
    const double hm = static_cast<double>(x.hidden_dim), sh = static_cast<double>(x.num_shared_experts) * hm;
    // Each expert sees T·k/E tokens on average (a balanced load).
    s.gemms.push_back({E, D, false, false});
    for (int i = 0; i < 3; ++i) s.gemms.push_back({i < 2 ? hm : D, i < 2 ? D : hm, i == 2, false, k / E, E});
    if (sh > 0)
      for (int i = 0; i < 3; ++i) s.gemms.push_back({i < 2 ? sh : D, i < 2 ? D : sh, i == 2, false});
    // SwiGLU over the routed and shared hidden states; the tokens permuted
    // to their experts and combined back (k copies of D each way).
    s.ffn_io = 3 * (k * hm + sh) + 4 * k * D;
  } else {
    for (int i = 0; i < 3; ++i) s.gemms.push_back({i < 2 ? F / t : D, i < 2 ? D : F / t, i == 2});
    s.ffn_io = 3 * F / t;
  }
  return s;
}

UnitCost block_cost(const Env& e, double T, bool moe_layer) {
  const ModelDesc& m = e.m;
  const double t = static_cast<double>(e.shape.tp), D = static_cast<double>(m.dim);
  const double S = static_cast<double>(e.cfg.training.seq_len);
  const bool sp = e.shape.tp > 1 && e.cfg.parallelism.enable_sequence_parallel;
  UnitCost c;
  const BlockShape shape = block_shape(e, moe_layer);
  const std::vector<BlockGemm>& gemms = shape.gemms;
  // Float8 recipes (torchao): tensorwise runs all three GEMMs in fp8;
  // rowwise scales per row, casts twice as much (both layouts of each
  // operand) and keeps the weight gradient in bf16 ("rowwise_with_gw_hp" too).
  const bool rowwise = e.float8 && e.cfg.float8.recipe_name.rfind("rowwise", 0) == 0;
  for (const BlockGemm& g : gemms) {
    const bool fp8 = e.float8 && g.fp8;
    const double M = T * g.m_mult;
    const double fwd = g.groups * gemm_s(e, M, g.n, g.k, fp8);
    c.gemm_f += fwd;
    // Input and weight gradients: the same FLOPs and shapes as the forward.
    c.gemm_b += fp8 && rowwise ? fwd + g.groups * gemm_s(e, M, g.n, g.k, false) : 2 * fwd;
    if (g.row) c.row_gemm_f += fwd;
    if (fp8) {
      // Scaling: amax, scale and cast of the input and weight in forward
      // (read 2, write 1, read again for amax), of the output gradient in
      // backward; fused into neighbours under compile.
      const double bytes = (5 * (T * g.k + g.k * g.n) + 5 * T * g.n) * (rowwise ? 2 : 1);
      c.cast += bytes * (e.compiled ? e.hw.eff.fused_traffic : 1.0) / e.bandwidth;
    }
  }
  const double H = shape.heads * t, Dh = shape.qk_dim;
  // Causal flash attention: QKᵀ and PV over S/2 keys on average (CP's
  // load balancing keeps every rank's share equal); backward recomputes
  // the scores (2.5x the forward).
  // block_causal: only the pairs inside documents (e.attn_density of them).
  // Megatron-LM's core attention (2021) is unfused: QKᵀ and PV are batched
  // GEMMs over all S keys (the causal mask applied to the full scores) and
  // the backward is their two gradients each, no recomputation of the
  // scores.
  const double keys = e.rules.unfused_attention ? S : S / 2;
  const double attn_flops = 2 * T * keys * (H / t) * (shape.qk_dim + shape.v_dim) * e.attn_density;
  const double attn_eff = e.hw.eff.attention * Dh / (Dh + e.hw.eff.gemm_half_size / 4);
  c.attn_f = attn_flops / (e.peak * attn_eff);
  c.attn_b = (e.rules.unfused_attention ? 2.0 : 2.5) * c.attn_f;
  // Without flash attention the T x S scores of each head go through memory:
  // written by QKᵀ, read and written by the softmax (and its dropout), read
  // by PV — 12 bytes per score forward, twice that backward.
  if (!e.hw.flash_attention || e.rules.unfused_attention) c.elem_f += 3 * T * S * (H / t) * 4 / e.bandwidth;
  // Element-wise traffic per token: two norms and two residual adds over D
  // (split by TP under sequence parallelism), RoPE and layout copies of
  // q/k/v, the SwiGLU (or GELU) product.
  const double seq_part = sp ? t : 1.0;
  const double per_token = 10 * D / seq_part + shape.attn_io + shape.ffn_io;
  // Megatron-LM fuses bias + GELU, bias + dropout + residual add and the
  // layer norm (its defaults: --bias-gelu-fusion, --bias-dropout-fusion,
  // apex's FusedLayerNorm), as torch.compile fuses them.
  const bool fused = e.compiled || e.rules.fused_elementwise;
  const double traffic = fused ? e.hw.eff.fused_traffic : 1.0;
  c.elem_f += T * per_token * e.elem * traffic / (e.bandwidth * e.hw.eff.memory);
  c.elem_b += 2 * c.elem_f;
  const double kernels = fused ? 10 : 25;
  // An MoE layer adds routing (softmax/sigmoid, top-k, sort, gather,
  // scatter, the bias) and its grouped GEMMs' launches.
  const double moe_kernels = moe_layer ? 12 : 0;
  double fp8_gemms = 0;
  for (const BlockGemm& g : gemms) fp8_gemms += g.fp8 ? 1 : 0;
  c.kernels_f = (kernels + moe_kernels + (e.float8 ? (e.compiled ? 2 : 6) * fp8_gemms : 0)) *
                e.hw.eff.kernel_overhead_s * e.overhead_mult;
  if (e.shape.tp > 1 && e.cfg.parallelism.enable_async_tensor_parallel && !e.float8)  // each TP GEMM in tp chunks
    c.kernels_f += 4 * static_cast<double>(e.shape.tp - 1) * 2 * e.hw.eff.kernel_overhead_s * e.overhead_mult;
  c.kernels_b = 2 * c.kernels_f;
  if (e.shape.tp > 1) {  // per block: 2 gathers + 2 scatters (SP) or 2 all-reduces, each way
    c.tp_bytes = T * D * e.elem;
    c.tp_collectives = sp ? 8 : 4;
  }
  if (e.shape.cp > 1) c.cp_bytes = 3 * T * shape.kv_cp * e.elem;  // K,V forward; K,V and their grads backward
  return c;
}

// (1 − w)·a + w·b, field by field (the collectives' count is the same in both).
UnitCost mean_block(const UnitCost& a, const UnitCost& b, double w) {
  const auto mix = [w](double x, double y) { return (1 - w) * x + w * y; };
  UnitCost c = a;
  c.gemm_f = mix(a.gemm_f, b.gemm_f);
  c.gemm_b = mix(a.gemm_b, b.gemm_b);
  c.attn_f = mix(a.attn_f, b.attn_f);
  c.attn_b = mix(a.attn_b, b.attn_b);
  c.elem_f = mix(a.elem_f, b.elem_f);
  c.elem_b = mix(a.elem_b, b.elem_b);
  c.cast = mix(a.cast, b.cast);
  c.kernels_f = mix(a.kernels_f, b.kernels_f);
  c.kernels_b = mix(a.kernels_b, b.kernels_b);
  c.row_gemm_f = mix(a.row_gemm_f, b.row_gemm_f);
  return c;
}

ModelArgs model_args_of(const ModelDesc& m) {
  if (m.family == "gpt") return ModelArgs{};
  return m.trainer_args();
}

UnitTimes unit_times(const UnitCost& c) {
  return {c.gemm_f, c.gemm_b, c.attn_f, c.attn_b, c.elem_f, c.elem_b, c.kernels_f, c.kernels_b};
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
double size_ratio(std::vector<CurvePoint> pts, double size) {
  pts.erase(std::remove_if(pts.begin(), pts.end(), [](const CurvePoint& p) { return p.planned <= 0 || p.size <= 0; }),
            pts.end());
  if (pts.empty()) return 1;
  std::sort(pts.begin(), pts.end(), [](const CurvePoint& a, const CurvePoint& b) { return a.size < b.size; });
  const auto k = [](const CurvePoint& p) { return std::max(p.measured, 1e-12) / p.planned; };
  if (pts.size() == 1 || size <= pts.front().size) return k(pts.front());
  if (size >= pts.back().size) return k(pts.back());
  size_t i = 1;
  while (pts[i].size < size) ++i;
  const CurvePoint &a = pts[i - 1], &b = pts[i];
  const double w = std::log(size / a.size) / std::log(b.size / a.size);
  return std::exp((1 - w) * std::log(k(a)) + w * std::log(k(b)));
}

// c's classes scaled to what the profiled runs measured where the analytic
// model planned their units (`unit` picks block, head or embedding from a
// run), at this recipe's working set `size` (the profiled runs': their
// tokens per micro-batch times `width`), times `factor`.
template <class Pick>
void rescale_unit(UnitCost& c, const MeasuredUnits& mu, Pick unit, double size, double width, double factor) {
  const auto r = [&](double& x, double UnitTimes::*field) {
    std::vector<CurvePoint> pts{{mu.tokens * width, unit(mu, false).*field, unit(mu, true).*field}};
    for (const MeasuredShape& sh : mu.shapes)
      pts.push_back({sh.tokens * width, unit(sh, false).*field, unit(sh, true).*field});
    if (pts.front().size <= 0) pts.front().size = 1;  // one size only: its ratio
    x *= factor * size_ratio(pts, size);
  };
  const double g = c.gemm_f;
  r(c.gemm_f, &UnitTimes::gemm_f);
  if (g > 0) c.row_gemm_f *= c.gemm_f / g;
  r(c.gemm_b, &UnitTimes::gemm_b);
  r(c.attn_f, &UnitTimes::attn_f);
  r(c.attn_b, &UnitTimes::attn_b);
  r(c.elem_f, &UnitTimes::elem_f);
  r(c.elem_b, &UnitTimes::elem_b);
  r(c.kernels_f, &UnitTimes::fixed_f);
  r(c.kernels_b, &UnitTimes::fixed_b);
}

UnitCost head_cost(const Env& e, double T) {
  const double t = static_cast<double>(e.shape.tp), D = static_cast<double>(e.m.dim);
  const double V = static_cast<double>(e.m.vocab_size);
  const bool loss_parallel = e.shape.tp > 1 && !e.cfg.parallelism.disable_loss_parallel;
  const double v = loss_parallel ? V / t : V;
  UnitCost c;
  c.gemm_f = gemm_s(e, T, v, D, false);  // the output projection stays in the compute dtype
  c.gemm_b = 2 * c.gemm_f;
  // Logits to fp32, log-softmax, loss and its gradient: ~20 bytes per logit.
  c.elem_f = T * v * 8 / (e.bandwidth * e.hw.eff.memory);
  c.elem_b = T * v * 12 / (e.bandwidth * e.hw.eff.memory);
  c.kernels_f = 8 * e.hw.eff.kernel_overhead_s * e.overhead_mult;
  c.kernels_b = 2 * c.kernels_f;
  return c;
}

// A ring collective over n ranks moving `bytes` (the gathered size) on `link`.
double ring_s(double bytes, int64_t n, const Link& link, double comm_eff, double factor = 1.0) {
  if (n <= 1 || bytes <= 0) return 0;
  const double nn = static_cast<double>(n);
  return factor * ((nn - 1) / nn * bytes / (link.bandwidth * comm_eff) + (nn - 1) * link.latency_s);
}

int64_t stride_of(const MeshShape& s, const std::string& dim) {
  if (dim == "tp") return 1;
  if (dim == "cp") return s.tp;
  if (dim == "fsdp" || dim == "dp_shard") return s.tp * s.cp;
  if (dim == "dp_replicate") return s.tp * s.cp * s.dp_shard;
  return s.tp * s.cp * s.dp_shard * s.dp_replicate;  // pp
}

}  // namespace

RankRates rank_rates(const HardwareSpec& hw, const JobConfig& cfg, int64_t world_size) {
  RankRates r;
  const bool fp32 = cfg.training.mixed_precision_param == "float32";
  if (hw.kind == "cpu") {
    // The ranks are processes sharing the machine: each gets 1/world of
    // its GEMM rate and memory bandwidth, and dispatch queues for cores.
    r.cores = hw.cores > 0 ? hw.cores : std::max(1u, std::thread::hardware_concurrency());
    double peak = hw.peak_fp32_flops;
    if (peak <= 0) peak = resolve_cpu_peak_flops(at::kFloat, 0).flops;
    // A rank with several threads (cores / world) syncs them on every op.
    const double ranks = static_cast<double>(world_size);
    const double mt = r.cores / ranks > 1 ? hw.eff.multi_thread : 1.0;
    r.peak_flops = peak / ranks * mt;
    r.bandwidth = hw.memory_bandwidth / ranks * mt;
    r.overhead_mult = std::max(1.0, ranks / r.cores);
  } else {
    r.peak_flops = fp32 ? (hw.peak_fp32_flops > 0 ? hw.peak_fp32_flops : hw.peak_bf16_flops / 2) : hw.peak_bf16_flops;
    r.fp8_peak_flops = hw.peak_fp8_flops;
    r.bandwidth = hw.memory_bandwidth;
  }
  return r;
}

Prediction predict(const PlanRequest& req, const HardwareSpec& hw) {
  const JobConfig& cfg = req.cfg;
  const ModelDesc& m = req.model;
  if (req.world_size < 1) throw InputError("world size " + std::to_string(req.world_size) + " is not a rank count");
  const MeshShape shape = resolve_mesh_shape(cfg.parallelism, req.world_size);
  const auto& t = cfg.training;
  if (shape.tp > 1 && cfg.parallelism.enable_sequence_parallel && t.seq_len % shape.tp != 0)
    throw InputError("training.seq_len " + std::to_string(t.seq_len) + " is not divisible by tensor_parallel_degree " +
                     std::to_string(shape.tp) + " (sequence parallelism)");
  if (shape.cp > 1)
    check_context_parallel(cfg.parallelism.context_parallel_rotate_method, cfg.parallelism.context_parallel_load_balancer,
                           shape.cp, t.seq_len);
  const Layout layout = planner_detail::plan_layout(m, cfg, shape);  // the trainer's own rules refuse bad layouts here

  Prediction p;
  p.hardware = hw.name;
  p.hardware_title = hw.title;
  p.calibration = hw.calibration;
  p.model = describe(m);
  p.world_size = req.world_size;
  p.devices_per_node = req.devices_per_node > 0 ? req.devices_per_node : hw.devices_per_node;
  p.nodes = req.nodes > 0 ? req.nodes : (req.world_size + p.devices_per_node - 1) / p.devices_per_node;
  if (p.nodes * p.devices_per_node < req.world_size)
    throw InputError(std::to_string(p.nodes) + " nodes x " + std::to_string(p.devices_per_node) +
                     " devices hold fewer than the " + std::to_string(req.world_size) + " ranks of this layout");
  p.layout = shape.describe();
  p.memory.layout_source = layout.source;

  Env e{m, cfg, hw, framework_rules(req.framework), shape};
  const bool fp32 = cfg.training.mixed_precision_param == "float32";
  e.elem = fp32 ? 4 : 2;
  e.float8 = !cfg.model.converters.empty();
  e.compiled = cfg.compile.enable && std::count(cfg.compile.components.begin(), cfg.compile.components.end(), "model") > 0;
  const bool cpu = hw.kind == "cpu";
  const RankRates rates = rank_rates(hw, cfg, req.rate_world_size > 0 ? req.rate_world_size : req.world_size);
  e.peak = rates.peak_flops;
  e.fp8_peak = rates.fp8_peak_flops;
  e.bandwidth = rates.bandwidth;
  e.overhead_mult = rates.overhead_mult;
  if (cpu)
    p.notes.push_back("ranks share " + std::to_string(static_cast<int>(rates.cores)) + " cores: each gets 1/" +
                      std::to_string(req.world_size) + " of the GEMM rate");
  else if (e.float8 && e.fp8_peak <= 0)
    p.notes.push_back(hw.name + " has no fp8 tensor cores: Float8 GEMMs at the bf16 rate");
  if (e.peak <= 0 || e.bandwidth <= 0) throw InputError("hardware spec " + hw.name + " has no peak FLOP/s or memory bandwidth to plan with");
  const double mfu_peak = cpu ? e.peak * req.world_size : (fp32 ? e.peak : hw.peak_bf16_flops);

  // Batch: gradient accumulation over local batches, pipeline micro-batches inside one.
  const int64_t dp = shape.dp_replicate * shape.dp_shard;
  const int64_t accum = t.global_batch_size > 0 ? std::max<int64_t>(1, t.global_batch_size / (t.local_batch_size * dp)) : 1;
  const double S = static_cast<double>(t.seq_len);
  const int64_t mbs = shape.pp > 1 ? cfg.parallelism.pipeline_parallel_microbatch_size : t.local_batch_size;
  const int64_t micro = shape.pp > 1 ? t.local_batch_size / mbs : 1;
  const double T = static_cast<double>(mbs) * S / static_cast<double>(shape.cp);  // tokens of one (pipeline) micro-batch on a rank
  p.tokens_per_step = static_cast<double>(t.local_batch_size * dp * accum) * S;

  const ActivationCheckpointPolicy ac =
      ActivationCheckpointPolicy::parse(cfg.activation_checkpoint.mode, cfg.activation_checkpoint.selective_ac_option);
  // gpt: no trainer model (default arguments: dense, causal).
  const ModelArgs args = model_args_of(m);
  if (args.block_causal()) {
    e.attn_density = c4_like_attention_density(t.seq_len);
    p.notes.push_back("block_causal: attention does " + std::to_string(static_cast<int>(100 * e.attn_density + 0.5)) +
                      "% of causal's work at seq " + std::to_string(t.seq_len) +
                      " (assumed: packed C4-like documents, mean 427 tokens; the data's own lengths are not read)");
  }
  UnitCost dense_blk = block_cost(e, T, false), head = head_cost(e, T);
  UnitCost moe_blk = args.moe.num_experts > 0 ? block_cost(e, T, true) : dense_blk;
  if (args.moe.num_experts > 0)
    p.notes.push_back("MoE: the routed experts' grouped GEMMs are timed as dense GEMMs of each expert's share of the "
                      "tokens (a balanced load); their own efficiency is not calibrated yet (ATen's CPU grouped GEMM "
                      "reaches about a quarter of the dense GEMMs' rate: step times here are optimistic)");
  UnitCost emb;
  emb.elem_f = T * static_cast<double>(m.dim) * e.elem * 2 / (e.bandwidth * e.hw.eff.memory);
  emb.elem_b = 2 * emb.elem_f;
  emb.kernels_f = 2 * hw.eff.kernel_overhead_s * e.overhead_mult;
  emb.kernels_b = 2 * emb.kernels_f;
  if (req.measured) {
    // Measured compute: each class of each unit is what the profiled run
    // measured times what this recipe's unit costs over what the profiled
    // run's unit costs in the analytic model.
    const MeasuredUnits& mu = *req.measured;
    const double corun = req.world_size > 1 ? mu.corun : 1.0;
    const auto block = [](const auto& m, bool planned) -> const UnitTimes& { return planned ? m.planned_block : m.block; };
    const auto head_of = [](const auto& m, bool planned) -> const UnitTimes& { return planned ? m.planned_head : m.head; };
    const auto emb_of = [](const auto& m, bool planned) -> const UnitTimes& {
      return planned ? m.planned_embedding : m.embedding;
    };
    // The working set: a block's and the embedding's activations (tokens x
    // dim), the head's logits (tokens x its vocabulary shard).
    const double D = static_cast<double>(m.dim), V = static_cast<double>(m.vocab_size);
    const bool loss_parallel = shape.tp > 1 && !cfg.parallelism.disable_loss_parallel;
    const double v_rank = loss_parallel ? V / static_cast<double>(shape.tp) : V;
    rescale_unit(dense_blk, mu, block, T * D, mu.dim, corun);
    rescale_unit(moe_blk, mu, block, T * D, mu.dim, corun);
    rescale_unit(head, mu, head_of, T * v_rank, mu.vocab, corun);
    rescale_unit(emb, mu, emb_of, T * D, mu.dim, corun);
    p.compute_source = "measured (" + mu.run_dir + ")";
    std::string corun_note;
    if (req.world_size > 1 && !mu.corun_run_dir.empty()) {
      char x[64];
      std::snprintf(x, sizeof x, "%.2f", mu.corun);
      corun_note = ", x" + std::string(x) + " for ranks side by side (measured in " + mu.corun_run_dir + ")";
    }
    p.notes.push_back("compute measured in " + mu.run_dir + " and scaled to this recipe by the analytic model's "
                      "ratios" + corun_note + "; communication (on the spec's link: fitted where multi-rank runs were "
                      "profiled, see the calibration line), the pipeline schedule and memory are analytic");
  }
  p.block = unit_times(dense_blk), p.head = unit_times(head), p.embedding = unit_times(emb);
  // The mean block (MoE models: dense and MoE layers in the model's
  // proportion), for what is reported or communicated per block.
  const UnitCost blk = mean_block(dense_blk, moe_blk,
                                  m.n_layers > 0 ? static_cast<double>(args.n_moe_layers()) / static_cast<double>(m.n_layers) : 0);

  // Every stage's forward and backward per micro-batch; the recomputation
  // of checkpointed blocks runs inside the backward.
  std::vector<double> f, b;
  std::vector<double> stage_recompute;
  int64_t recomputed_layers = 0;  // whose whole forward (its TP collectives with it) runs again
  for (const ModelPart& part : layout.stages) {
    double fs = 0, bs = 0, rec = 0;
    if (part.embedding) fs += emb.f() + emb.kernels_f, bs += emb.b() + emb.kernels_b;
    for (int64_t l = part.first_layer; l < part.first_layer + part.n_layers; ++l) {
      const UnitCost& blk = args.moe_layer(l) ? moe_blk : dense_blk;
      fs += blk.f() + blk.cast + blk.kernels_f;
      bs += blk.b() + blk.cast + blk.kernels_b;
      if (ac.mode == ActivationCheckpointPolicy::Mode::kSelectiveOp)
        rec += blk.row_gemm_f + blk.elem_f + blk.kernels_f;
      else if (ac.mode != ActivationCheckpointPolicy::Mode::kNone && ac.checkpoints_layer(l))
        rec += blk.f() + blk.cast + blk.kernels_f, ++recomputed_layers;
    }
    if (part.head) fs += head.f() + head.kernels_f, bs += head.b() + head.kernels_b;
    f.push_back(fs);
    b.push_back(bs + rec);
    stage_recompute.push_back(rec);
  }
  // This rank's stages (the busiest pipeline rank).
  const int64_t P = shape.pp, v = layout.stages_per_rank;
  double rank_f = 0, rank_b = 0, rank_rec = 0;
  int64_t busiest = 0;
  for (int64_t r = 0; r < P; ++r) {
    double fr = 0, br = 0, rr = 0;
    for (size_t s = 0; s < f.size(); ++s) {
      const int64_t st = static_cast<int64_t>(s);
      const bool v_style = v == 2 && cfg.parallelism.pipeline_parallel_schedule == "ZBVZeroBubble";
      const int64_t owner = v_style ? (st < P ? st : 2 * P - 1 - st) : st % P;
      if (owner == r) fr += f[s], br += b[s], rr += stage_recompute[s];
    }
    if (fr + br > rank_f + rank_b) rank_f = fr, rank_b = br, rank_rec = rr, busiest = r;
  }
  const RankLayout& rl = layout.ranks[static_cast<size_t>(busiest)];

  // Communication per mesh dimension, per micro-batch unless said.
  TimeBreakdown& tb = p.time;
  const auto link_for = [&](const std::string& dim, int64_t n) -> const Link& {
    return stride_of(shape, dim) * n > p.devices_per_node ? hw.inter_node : hw.intra_node;
  };
  const double ce = hw.eff.comm, ov = hw.eff.overlap;
  // On a CPU whose ranks outnumber its cores, a collective's copies and
  // sockets need a core the other ranks' compute holds: at most cores/world
  // of an overlapped collective hides.
  const double hides = cpu ? std::min(1.0, rates.cores / req.world_size) : 1.0;
  const auto overlapped = [hides](double exposed, double secs) { return std::max(exposed, (1 - hides) * secs); };
  const double units = static_cast<double>(rl.layers + (rl.embedding ? 1 : 0) + (rl.head ? 1 : 0));
  double exposed_micro = 0, exposed_step = 0;
  const int64_t fsdp_n = shape.dp_shard * shape.cp;
  if (fsdp_n > 1) {
    const Link& l = link_for("fsdp", fsdp_n);
    const bool f8_gather = e.float8 && cfg.float8.enable_fsdp_float8_all_gather;
    const double block_bytes = static_cast<double>(rl.block_unit_elems) * (f8_gather ? 1.0 : e.elem);
    // What the units gather (under EP the experts of this rank only): the
    // dry run's count where it has one, else this rank's storage x fsdp.
    const int64_t all = rl.gathered_elems > 0 ? rl.gathered_elems : rl.param_elems * fsdp_n;
    const double other = static_cast<double>(std::max<int64_t>(0, all - rl.block_unit_elems * rl.layers)) * e.elem;
    const double gathered = block_bytes * static_cast<double>(rl.layers) + other;
    const bool reshard = cfg.parallelism.fsdp_reshard_after_forward == "always" ||
                         (cfg.parallelism.fsdp_reshard_after_forward == "default" && shape.pp == 1);
    const double ag = ring_s(gathered, fsdp_n, l, ce);
    const double ag_b = reshard ? ag : 0;
    const double rs = ring_s(static_cast<double>(all) * 4, fsdp_n, l, ce);  // fp32 gradients
    const double fwd_compute = rank_f * micro, bwd_compute = rank_b * micro;
    const double per_unit = ag / std::max(1.0, units);
    // The first unit's gather and the last unit's reduce-scatter wait; the
    // rest hides behind compute. Never more than all of it.
    const double exposed = overlapped(std::min(ag + ag_b + rs, per_unit + std::max(0.0, ag - ov * fwd_compute) +
                                                                   std::max(0.0, ag_b + rs - ov * bwd_compute) +
                                                                   rs / std::max(1.0, units)),
                                      ag + ag_b + rs);
    tb.comm.push_back({shape.cp > 1 ? "fsdp" : "dp_shard", "all-gather + reduce-scatter", l.name,
                       (gathered * (reshard ? 2 : 1) + static_cast<double>(all) * 4) * accum,
                       (ag + ag_b + rs) * accum, exposed * accum});
    exposed_micro += exposed;
  }
  if (shape.dp_replicate > 1) {
    const Link& l = link_for("dp_replicate", shape.dp_replicate);
    // Megatron-LM's local DDP all-reduces its gradient buffer (the params'
    // dtype without --accumulate-allreduce-grads-in-fp32) once, after the
    // last micro-batch's backward: nothing hides it.
    const double bytes = static_cast<double>(rl.param_elems) * (e.rules.allreduce_after_last_microbatch ? e.elem : 4.0);
    const double ar = ring_s(bytes, shape.dp_replicate, l, ce, 2.0);
    const double exposed = e.rules.allreduce_after_last_microbatch
                               ? ar
                               : overlapped(std::max(ar / std::max(1.0, units), ar - ov * rank_b * micro), ar);
    tb.comm.push_back({"dp_replicate", "all-reduce", l.name, 2 * bytes, ar, exposed});
    exposed_step += exposed;
  }
  if (e.rules.tied_embedding_across_stages && P > 1) {
    // Megatron-LM's GPT ties the word embedding to the output layer: the
    // first and the last stage each hold it and all-reduce its gradient
    // (their vocabulary shard) between them after the backward.
    const Link& l = link_for("pp", P);
    const double bytes = static_cast<double>(m.vocab_size) / static_cast<double>(shape.tp) *
                         static_cast<double>(m.dim) * e.elem;
    const double ar = ring_s(bytes, 2, l, ce, 2.0);
    tb.comm.push_back({"pp", "tied embedding gradient all-reduce (first and last stage)", l.name, bytes, ar, ar});
    exposed_step += ar;
  }
  if (shape.tp > 1) {
    const Link& l = link_for("tp", shape.tp);
    const bool sp = cfg.parallelism.enable_sequence_parallel;
    const double one = ring_s(blk.tp_bytes, shape.tp, l, ce, sp ? 1.0 : 2.0);
    // A recomputed block's forward runs its collectives again (half of the
    // block's: the forward's).
    const double again = m.n_layers > 0 ? 0.5 * static_cast<double>(recomputed_layers) / static_cast<double>(m.n_layers) : 0;
    const double per_block = one * blk.tp_collectives * (1 + again);
    const double layers = static_cast<double>(rl.layers);
    const double total = per_block * layers * micro;
    double exposed = total;
    if (cfg.parallelism.enable_async_tensor_parallel)  // overlapped with the GEMMs it feeds
      exposed = overlapped(std::max(0.0, total - ov * (blk.gemm_f + blk.gemm_b) * layers * micro), total);
    tb.comm.push_back({"tp", sp ? "all-gather + reduce-scatter (sequence parallel)" : "all-reduce", l.name,
                       blk.tp_bytes * blk.tp_collectives * (1 + again) * layers * micro * accum, total * accum,
                       exposed * accum});
    exposed_micro += exposed;
  }
  if (shape.cp > 1) {
    const Link& l = link_for("cp", shape.cp);
    const double layers = static_cast<double>(rl.layers);
    const double moved = blk.cp_bytes * static_cast<double>(shape.cp - 1);  // every other rank's K/V comes by
    const double secs = (moved / (l.bandwidth * ce) + 3 * static_cast<double>(shape.cp - 1) * l.latency_s) * layers * micro;
    // allgather gathers K and V before the attention and reduce-scatters
    // their gradients after it: it blocks. The ring (alltoall) passes the
    // next block while the current one is attended.
    const bool blocking = cfg.parallelism.context_parallel_rotate_method == "allgather";
    const double exposed =
        blocking ? secs : overlapped(std::max(0.0, secs - ov * (blk.attn_f + blk.attn_b) * layers * micro), secs);
    tb.comm.push_back({"cp", cfg.parallelism.context_parallel_rotate_method + " K/V exchange", l.name,
                       moved * layers * micro * accum, secs * accum, exposed * accum});
    exposed_micro += exposed;
  }
  if (shape.ep > 1 && rl.moe_layers > 0) {
    // Expert parallelism: per MoE layer the routed rows (k copies of each
    // token this rank routes: its sequence part under SP when ep spans tp,
    // the tp group's tokens under ETP) go to their experts' ranks and come
    // back, forward and backward (again in a full-AC recomputation), plus
    // the counts' exchange before each dispatch. A balanced load: (ep−1)/ep
    // of the rows leave the rank. The all-to-alls block (exposed in full).
    // The group is ep consecutive ranks (stride tp with ETP).
    const bool etp = shape.etp > 1;
    const double routed = (etp || shape.tp == 1 || !cfg.parallelism.enable_sequence_parallel)
                              ? T * (etp ? static_cast<double>(shape.tp) : 1.0)
                              : T / static_cast<double>(shape.tp);
    const double rows_bytes = routed * static_cast<double>(args.moe.top_k) * static_cast<double>(m.dim) * e.elem;
    const double n = static_cast<double>(shape.ep);
    const Link& l = (etp ? shape.tp : 1) * shape.ep > p.devices_per_node ? hw.inter_node : hw.intra_node;
    const double one = rows_bytes * (n - 1) / n / (l.bandwidth * ce) + (n - 1) * l.latency_s;
    const double recomputed = ac.mode == ActivationCheckpointPolicy::Mode::kFull ? 2 : 0;
    const double exchanges = 4 + recomputed, counts = (1 + recomputed / 2) * (n - 1) * l.latency_s;
    const double layers = static_cast<double>(rl.moe_layers);
    const double secs = (exchanges * one + counts) * layers * micro;
    tb.comm.push_back({"ep", "all-to-all token dispatch and combine", l.name,
                       exchanges * rows_bytes * (n - 1) / n * layers * micro * accum, secs * accum, secs * accum});
    exposed_micro += secs;
    p.notes.push_back("EP " + std::to_string(shape.ep) + ": the all-to-alls assume a balanced routing (every rank "
                      "receives the rows it sends); an imbalance of x (moe_ep_imbalance) makes the busiest rank's "
                      "experts work x times the mean");
  }
  double local_batch_s = (rank_f + rank_b) * static_cast<double>(micro);
  // The schedule the trainer runs: its bubble here, each rank's memory below.
  const PipelineSchedule sched = P > 1 ? planner_detail::planned_schedule(cfg, P, v, micro) : PipelineSchedule{};
  double bubble = 0;
  if (P > 1) {
    const Link& l = link_for("pp", P);
    const double act = T * static_cast<double>(m.dim) * e.elem;
    // Megatron-LM's scatter/gather: across nodes each TP rank sends 1/tp of
    // the (TP-replicated) activation and the receivers all-gather it over
    // NVLink.
    const bool scatter = e.rules.pipeline_scatter_gather && shape.tp > 1 && &l == &hw.inter_node;
    const double p2p = scatter ? act / static_cast<double>(shape.tp) / (l.bandwidth * ce) + l.latency_s +
                                     ring_s(act, shape.tp, hw.intra_node, ce)
                               : act / (l.bandwidth * ce) + l.latency_s;
    // On a CPU whose ranks outnumber its cores, a rank idle in the bubble
    // or waiting on its neighbour hands its core to the busy ones: the
    // schedule is replayed with the running ranks sharing the cores.
    const double share = cpu ? std::min(1.0, rates.cores / req.world_size) : 1.0;
    planner_detail::PipelineSim sim = planner_detail::simulate_pipeline(sched, f, b, p2p, share);
    bubble = std::max(0.0, sim.step_s - local_batch_s);
    sim.step_s = local_batch_s + bubble;
    tb.comm.push_back({"pp", "send/recv activations and gradients", l.name, 2 * act * micro * accum,
                       2 * p2p * micro * accum, 0.0});
    local_batch_s = sim.step_s;
  }
  // The optimizer and the step's fixed costs: AdamW reads and writes the
  // fp32 master, gradient and both moments, the norm reads the gradients,
  // the compute copy is refreshed.
  const double opt_bytes = static_cast<double>(rl.param_elems) * (28 + 4 + 4 + (fp32 ? 0 : 6));
  double opt_work_s = opt_bytes / (e.bandwidth * hw.eff.memory), opt_fixed_s = 30 * hw.eff.kernel_overhead_s * e.overhead_mult;
  double step_overhead_s = hw.eff.step_overhead_s * e.overhead_mult;
  p.rank_param_elems = static_cast<double>(rl.param_elems);
  p.rank_units = units;
  p.overhead_mult = e.overhead_mult;
  p.bandwidth = e.bandwidth;
  if (req.measured) {
    // Gradient accumulation, clipping and AdamW: their traffic scales with
    // this rank's parameters and bandwidth, their per-tensor host work
    // with its units and the cores it shares; so does the step's own.
    const MeasuredUnits& mu = *req.measured;
    const double om = e.overhead_mult / std::max(1e-9, mu.planned_overhead_mult) * (req.world_size > 1 ? mu.corun : 1.0);
    if (mu.planned_param_elems > 0 && e.bandwidth > 0)
      opt_work_s = mu.param_s * p.rank_param_elems / mu.planned_param_elems * mu.planned_bandwidth / e.bandwidth *
                   (req.world_size > 1 ? mu.corun : 1.0);
    if (mu.planned_units > 0) opt_fixed_s = mu.param_fixed_s * units / mu.planned_units * om;
    step_overhead_s = mu.step_fixed_s * om;
  }
  const double optimizer_s = opt_work_s + opt_fixed_s;
  // Loss, gradient norm and metrics reductions: latency-bound.
  const double small = (shape.world() > 1 ? 3 * std::log2(static_cast<double>(shape.world())) : 0) *
                       link_for("pp", P).latency_s;
  if (small > 0)  // a communication like the others: in the totals, never hidden
    tb.comm.push_back({"world", "loss, gradient-norm and metrics all-reduces", link_for("pp", P).name, 0.0, small, small});

  const double a = static_cast<double>(accum), mi = static_cast<double>(micro);
  tb.gemm = ((blk.gemm_f + blk.gemm_b) * static_cast<double>(rl.layers) + (rl.head ? head.gemm_f + head.gemm_b : 0)) * mi * a;
  tb.attention = (blk.attn_f + blk.attn_b) * static_cast<double>(rl.layers) * mi * a;
  tb.elementwise = ((blk.elem_f + blk.elem_b) * static_cast<double>(rl.layers) + (rl.head ? head.elem_f + head.elem_b : 0) +
                    (rl.embedding ? emb.elem_f + emb.elem_b : 0)) * mi * a + opt_work_s;
  tb.float8_casts = 2 * blk.cast * static_cast<double>(rl.layers) * mi * a;
  tb.recompute = rank_rec * mi * a;
  tb.kernel_overhead = ((blk.kernels_f + blk.kernels_b) * static_cast<double>(rl.layers) + head.kernels_f + head.kernels_b) * mi * a +
                       opt_fixed_s;
  tb.bubble = bubble * a;
  tb.comm_exposed = exposed_micro * a + exposed_step + small;
  tb.data = 0;
  tb.step_overhead = step_overhead_s;
  tb.step = local_batch_s * a + exposed_micro * a + exposed_step + small + optimizer_s + tb.step_overhead;

  p.tps_per_device = p.tokens_per_step / tb.step / static_cast<double>(req.world_size);
  p.tflops_per_device = m.flops_per_token(t.seq_len) * p.tps_per_device / 1e12;
  p.mfu = 100.0 * p.tflops_per_device * 1e12 / mfu_peak;

  // Memory: every pipeline rank is planned (its own stages, parameters
  // and place in the schedule); the largest is the prediction.
  const bool widened =
      hw.kind == "cpu" && (req.bf16_gemm_widened >= 0 ? req.bf16_gemm_widened > 0 : !aten_cpu_is_avx512());
  p.memory.total = -1;
  for (int64_t r = 0; r < P; ++r) {
    const RankLayout& rr = layout.ranks[static_cast<size_t>(r)];
    MemoryBreakdown mem;
    mem.layout_source = p.memory.layout_source;
    const double local = static_cast<double>(rr.param_elems);
    mem.parameters = local * 4 + (fp32 ? 0 : local * e.elem);
    mem.gradients = local * 4;
    mem.optimizer = static_cast<double>(rr.state_bytes) - mem.parameters + (fp32 ? 0 : local * e.elem) - mem.gradients;
    planner_detail::RankPipeline pipe;
    if (P > 1) {
      pipe.actions = sched.actions[static_cast<size_t>(r)];
      pipe.microbatches = micro;
      for (int64_t st : sched.stages_of(r)) pipe.stages.emplace_back(st, layout.stages[static_cast<size_t>(st)]);
      // Pipelines under FSDP: a stage keeps its parameters gathered from
      // its first forward (reshard_after_forward "default" is "never" under
      // PP, in TorchTitan and in ctitan's trainer). TorchTitan's
      // torch.distributed.pipelining syncs gradients on a stage's last
      // backward only, so the earlier ones accumulate its unsharded
      // gradients in FSDP2's fp32 reduce dtype, and that last backward
      // reduce-scatters them and reshards the stage; ctitan reduce-scatters
      // each micro-batch's into the shard and keeps the stage gathered.
      // Each stage's share of the rank's gathered units: its blocks and
      // head, the embedding (the rest) on the stage that has it.
      const size_t n = pipe.stages.size();
      std::vector<double> stage_elems(n, 0);
      double named = 0;
      for (size_t i = 0; i < n; ++i) {
        const ModelPart& part = pipe.stages[i].second;
        stage_elems[i] = static_cast<double>(rr.block_unit_elems * part.n_layers + (part.head ? rr.head_elems : 0));
        named += stage_elems[i];
      }
      const double all = rr.gathered_elems > 0 ? static_cast<double>(rr.gathered_elems) : local * static_cast<double>(fsdp_n);
      const double rest = std::max(0.0, all - named);
      size_t rest_at = 0;
      for (size_t i = 0; i < n; ++i)
        if (pipe.stages[i].second.embedding) rest_at = i;
      stage_elems[rest_at] += rest;
      const double scale = named + rest > 0 ? all / (named + rest) : 0;
      const bool f8_gather = e.float8 && cfg.float8.enable_fsdp_float8_all_gather;
      const bool keep = fsdp_n > 1 && cfg.parallelism.fsdp_reshard_after_forward != "always";
      const bool accumulate = fsdp_n > 1 && e.rules.pipeline_syncs_on_last_backward && micro > 1;
      for (size_t i = 0; i < n; ++i) {
        pipe.gathered_bytes.push_back(keep ? stage_elems[i] * scale * (f8_gather ? 1.0 : e.elem) : 0);
        pipe.unsharded_grad_bytes.push_back(accumulate ? stage_elems[i] * scale * 4 : 0);
      }
      pipe.release_after_last_backward = e.rules.pipeline_syncs_on_last_backward;
    }
    mem = planner_detail::activation_memory(e.m, cfg, shape, hw, rr, T, ac, e.elem, widened, e.rules,
                                            P > 1 ? &pipe : nullptr, std::move(mem));
    if (mem.total > p.memory.total) p.memory = std::move(mem);
  }
  p.fits = p.memory.total <= hw.memory_bytes || hw.memory_bytes <= 0;
  return p;
}

}  // namespace ctitan
