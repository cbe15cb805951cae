// Internal to the planner: what one rank computes, unit by unit (a
// TransformerBlock, the embedding, the norm and output head), and what each
// pipeline stage costs per micro-batch. predict() (plan.cpp) composes these
// with the communication of plan_comm.h.
//
// Legend: T tokens of one micro-batch on this rank, S sequence length,
// D model dim, H attention heads, K KV heads, Dh head dim, F FFN hidden
// width, V vocabulary; M x N x K a GEMM's output rows, output features and
// reduced dimension.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/plan_internal.h"

namespace ctitan::planner_detail {

// Seconds of one unit for T tokens of this rank, and what it communicates.
struct UnitCost {
  double gemm_f = 0, gemm_b = 0, attn_f = 0, attn_b = 0, elem_f = 0, elem_b = 0, cast = 0;
  double kernels_f = 0, kernels_b = 0;
  double row_gemm_f = 0;  // wo and w2: what op-level checkpointing recomputes
  double tp_bytes = 0;    // TP activations moved (forward + backward), per collective buffer
  int tp_collectives = 0;
  double cp_bytes = 0;  // K/V moved by context parallelism (forward + backward)
  double f() const { return gemm_f + attn_f + elem_f; }
  double b() const { return gemm_b + attn_b + elem_b; }
};

// The units of one rank's model: a dense and an MoE TransformerBlock (the
// dense one again where the model has no MoE layer), the head and the
// embedding.
struct UnitCosts {
  UnitCost dense_block, moe_block, head, embedding;
};

// The units from the analytic model, for T tokens.
UnitCosts analytic_unit_costs(const Env& env, const ModelArgs& args, double T);

// Each class of each unit rescaled to what the profiled runs measured
// (ctitan plan --profile): their measurement times this recipe's analytic
// cost over the profiled run's. Says so in `prediction` (compute_source, a note).
void rescale_to_measured(UnitCosts& units, const MeasuredUnits& measured, const Env& env, double T, int world_size,
                         Prediction& prediction);

// (1 − moe_share)·dense + moe_share·moe, field by field (the collectives'
// count is the same in both): the mean block of a model with MoE layers.
UnitCost mean_block(const UnitCost& dense, const UnitCost& moe, double moe_share);

UnitTimes unit_times(const UnitCost& cost);

// Every pipeline stage's forward and backward per micro-batch (the
// recomputation of checkpointed blocks runs inside the backward).
struct StageCosts {
  std::vector<double> forward, backward, recompute;
  int64_t recomputed_layers = 0;  // whose whole forward (its TP collectives with it) runs again
};
StageCosts stage_costs(const Layout& layout, const ModelArgs& args, const ActivationCheckpointPolicy& ac,
                       const UnitCosts& units);

// The pipeline rank with the most compute per micro-batch, and that compute.
struct BusiestRank {
  int64_t rank = 0;
  double forward_s = 0, backward_s = 0, recompute_s = 0;
};
BusiestRank busiest_rank(const StageCosts& stages, int64_t pp, int64_t stages_per_rank, const std::string& schedule);

}  // namespace ctitan::planner_detail
