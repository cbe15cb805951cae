// One block's GEMMs as one rank runs them, read from the parameters the
// model allocates and from tensor parallelism's placement plan over them —
// the trainer's model_param_specs and tensor_parallel_plan for its
// families, Megatron's for GPT (ModelDesc::block_param_specs /
// tensor_parallel_plan) — rather than re-derived from the model's
// arguments field by field.
//
// Every weight of two or more dimensions is a GEMM: out_features x
// in_features over M = T tokens. Its split under TP is its placement over
// tp: Shard(0) column-wise (this rank computes out_features / tp of the
// outputs), Shard(1) row-wise (in_features / tp of the reduction),
// Replicate() whole. A routed expert's tensor ([E, out, in], expert
// parallelism's unit) is a grouped GEMM: E problems of T·top_k/E rows each
// (a balanced load), whole under TP as the plan keeps it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/model_desc.h"

namespace ctitan {

enum class GemmSplit { kColumn, kRow, kReplicated, kGrouped };
const char* split_name(GemmSplit split);  // "column", "row", "replicated", "grouped"

struct BlockGemm {
  std::string param;  // the weight's FQN
  GemmSplit split = GemmSplit::kReplicated;
  double out_features = 0, in_features = 0;  // this rank's N and K (of one group)
  double groups = 1;                         // grouped: one problem per routed expert
  double m_mult = 1;                         // grouped: rows per problem over the block's tokens (top_k / E)
  // The module's output projection (wo, w2, Megatron's linear_proj and
  // linear_fc2): row-wise under the plan, an expert's read as the FFN it is
  // (TorchTitan gives shared and, with ETP, routed experts the dense FFN's
  // placements). Op-level checkpointing recomputes these.
  bool output_projection = false;
  // Float8 converts the Linears TP splits; the replicated low-rank,
  // router and shared-expert projections and the grouped experts stay in
  // the compute dtype.
  bool fp8() const { return split == GemmSplit::kColumn || split == GemmSplit::kRow; }
};

// The GEMMs of a dense block (moe_layer false) or an MoE block of `model`
// on one rank of tp, in forward order: the model's parameter order, except
// that each module's output projection runs after its other projections
// (a routed expert's w2 follows w3, though the experts list w1, w2, w3).
std::vector<BlockGemm> block_gemms(const ModelDesc& model, bool moe_layer, int64_t tp);

}  // namespace ctitan
