// The mixture-of-experts FFN every MoE family shares (TorchTitan's MoE
// layer): router → top-k → tokens sorted by expert → one grouped GEMM per
// projection over all experts → unsorted and combined by the gate weights,
// plus the shared experts.
//
// Legend: T tokens (B·S flattened), D model dim, E routed experts, k top_k,
// Hm an expert's SwiGLU width.
//
// Routing is deterministic: ties among the scores go to the lower expert
// index (a stable descending sort, where torch.topk leaves the order
// unspecified), so a recomputation under activation checkpointing and every
// rank of a layout route alike.
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "trainer/model/layout.h"
#include "trainer/model/model_args.h"

namespace ctitan {

struct MoeRouting {
  at::Tensor token;    // [T·k] int64: the token of each routed row, rows sorted by expert (stable)
  at::Tensor weight;   // [T·k] fp32: its gate weight (differentiable in the router's scores)
  at::Tensor counts;   // [E] int64: rows per expert
};

// TorchTitan's TokenChoiceTopKRouter on the router's logits [T,E]:
// scores = softmax or sigmoid (fp32); the experts are chosen on scores +
// `bias` (when defined: the aux-loss-free bias, selection only), limited to
// the best n_limited_groups of n_expert_groups groups when set (a group's
// score: the sum of its two best experts' scores, as TorchTitan);
// the weights are the chosen experts' scores, renormalised when route_norm,
// times route_scale. force_load_balance routes token t to experts
// (t·k + j) mod E instead (debug.moe_force_load_balance).
MoeRouting moe_route(const at::Tensor& logits, const at::Tensor& bias, const MoeArgs& a);

// x [N, in] whose rows are grouped by expert (counts [E], summing to N)
// times each group's w[e] [out, in]ᵀ → [N, out], with autograd. One
// at::_grouped_mm call where LibTorch runs it (fp32/bf16 rows 16-byte
// aligned, CPU or CUDA), else one GEMM per non-empty group into one output;
// bf16 on a CPU without AVX-512 widened to fp32 (gemm.h).
at::Tensor grouped_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& counts);

// The experts' activation on h1 = w1·x (+ b1) and h3 = w3·x (+ b3):
// silu(h1)·h3, or GPT-OSS's clamped SwiGLU with swiglu_limit > 0
// (model_args.h MoeArgs; kernels/expert_swiglu.h). `fused`
// (compile.enable): the fused kernel, else the eager chain.
at::Tensor expert_activation(const at::Tensor& h1, const at::Tensor& h3, const MoeArgs& a, bool fused = false);

struct MoeWeights {
  at::Tensor router;           // [E, D]
  at::Tensor w1, w2, w3;       // [E, Hm, D], [E, D, Hm], [E, Hm, D]
  at::Tensor shared_w1, shared_w2, shared_w3;  // [S·Hm, D], [D, S·Hm], [S·Hm, D]; undefined without shared experts
  at::Tensor router_bias;      // [E] (gate_bias), or undefined
  at::Tensor b1, b2, b3;       // [E, Hm], [E, D], [E, Hm] (expert_biases), or undefined
};

// The layer on x [T, D] (compute dtype). `bias`: the expert bias or
// undefined. `counts_out`, when given, receives this rank's rows per expert
// [E] (before any dispatch). `ep` (expert parallelism, a group of size > 1):
// w.w1/w2/w3 hold this rank's E/ep experts (rank p: experts
// [p·E/ep, (p+1)·E/ep)); the routed rows travel to their experts' ranks and
// back through the layout's seam (LayoutSeams::exchange_tokens); router and
// shared experts are local. `received_out` (with ep): the routed rows this
// rank's experts received. `fused` (compile.enable): the experts'
// activation through the fused kernel.
at::Tensor moe_forward(const at::Tensor& x, const MoeWeights& w, const at::Tensor& bias, const MoeArgs& a,
                       at::Tensor* counts_out = nullptr, const ExpertDispatch* ep = nullptr,
                       int64_t* received_out = nullptr, bool fused = false);

// The shared experts' SwiGLU on x [T, D] (w.shared_* defined).
at::Tensor moe_shared_experts(const at::Tensor& x, const MoeWeights& w);

// TorchTitan's aux-loss-free load balancing, applied before the optimizer
// step: bias += coeff · sign(mean(counts) − counts), centred to mean 0.
// `counts`: tokens per expert summed over the data-parallel group.
void update_expert_bias(at::Tensor& bias, const at::Tensor& counts, double coeff);

// Load statistics of one step's tokens per expert: min, max and the
// coefficient of variation (std/mean, population std).
struct ExpertLoad {
  double min = 0, max = 0, cv = 0;
  // Expert parallelism: the routed rows the busiest rank of the ep group
  // received over the group's mean (1: even; 0: no EP), the MoE layers' mean.
  double ep_imbalance = 0;
};
ExpertLoad expert_load(const at::Tensor& counts);

}  // namespace ctitan
