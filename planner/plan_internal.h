// Internal to the planner: the pieces predict() assembles (plan.cpp), the
// dry-run layout (plan_layout.cpp), memory (plan_memory.cpp) and the
// pipeline simulation (plan_pipeline.cpp); one rank's compute and
// communication are plan_compute.h and plan_comm.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/framework_rules.h"
#include "planner/plan.h"
#include "trainer/distributed/mesh.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/model_part.h"
#include "trainer/parallel/pipeline.h"

namespace ctitan::planner_detail {

// What every part of a plan depends on: the recipe, the model, the mesh,
// whose training loop, and one rank's rates on the spec (plan.cpp, rank_env).
struct Env {
  const ModelDesc& model;
  const JobConfig& cfg;
  const HardwareSpec& hw;
  const FrameworkRules& rules;  // whose training loop (PlanRequest::framework)
  MeshShape shape;
  double elem_bytes = 2;      // compute dtype
  double peak_flops = 0;      // GEMM FLOP/s of one rank in the compute dtype
  double fp8_peak_flops = 0;  // 0: float8 GEMMs run at `peak_flops` (emulated)
  double bandwidth = 0;       // memory bytes/s of one rank
  double overhead_mult = 1;   // cpu: ranks beyond the cores queue for them
  // cpu: the probe's GEMM rate by size for this rank (RankRates::gemm_by_size;
  // empty: the spec's gemm_half_size law)
  std::vector<std::pair<double, double>> gemm_by_size = {};
  bool float8 = false, compiled = false;
  double attn_density = 1;  // block_causal: the attention work over causal's
};

// One pipeline rank's share of the model as the trainer lays it out.
struct RankLayout {
  int64_t param_elems = 0;       // fp32 master elements (storage, padding included)
  int64_t state_bytes = 0;       // master + gradients + AdamW state
  int64_t layers = 0;            // TransformerBlocks on this rank
  int64_t moe_layers = 0;        // of which MoE layers
  bool embedding = false, head = false;
  int64_t largest_unit_elems = 0;  // one FSDP unit gathered (this TP rank's shard), elements
  int64_t block_unit_elems = 0;    // one TransformerBlock gathered, elements
  int64_t head_elems = 0;          // norm + output gathered, elements
  int64_t gathered_elems = 0;      // every unit gathered (under EP: this rank's experts only), elements
};

struct Layout {
  std::vector<RankLayout> ranks;  // one per pp rank
  std::vector<ModelPart> stages;  // every pipeline stage, in stage order
  int64_t stages_per_rank = 1;
  std::string source;             // "dry-run layout (meta device)" or why derived
};

// The trainer's layout: parallelize_model on the meta device for the first
// rank of every pipeline coordinate (a model the trainer builds); derived
// from the parameter count for Megatron's GPT.
// Throws InputError for a layout the trainer refuses.
Layout plan_layout(const ModelDesc& m, const JobConfig& cfg, const MeshShape& shape);

// Seconds per step of each rank when its stages cost stage_forward_s[s]
// forward and stage_backward_s[s] backward per micro-batch (s the global
// stage), under the trainer's named schedule (its action lists), with
// `p2p_s` per activation hand-over. share < 1: the ranks outnumber the
// processors (cores / ranks, a CPU's), the costs are planned at that share,
// and the ranks running at a moment share every processor (processor
// sharing). Returns {step time, busy time of the busiest rank}.
struct PipelineSim {
  double step_s = 0, busy_s = 0;
};
PipelineSim simulate_pipeline(const JobConfig& cfg, const MeshShape& shape, int64_t stages_per_rank,
                              int64_t microbatches, const std::vector<double>& stage_forward_s,
                              const std::vector<double>& stage_backward_s, double p2p_s, double share = 1);
// The same over a schedule already built (planned_schedule).
PipelineSim simulate_pipeline(const PipelineSchedule& sched, const std::vector<double>& stage_forward_s,
                              const std::vector<double>& stage_backward_s, double p2p_s, double share = 1);

// The schedule the trainer runs for this config: the named one, or the
// CSV's (pipeline_parallel_schedule_csv).
PipelineSchedule planned_schedule(const JobConfig& cfg, int64_t pp, int64_t stages_per_rank, int64_t microbatches);

// One pipeline rank as its memory moves over a step: its actions in run
// order, its stages, and what each stage holds besides the activations.
struct RankPipeline {
  std::vector<PipelineAction> actions;  // in run order
  std::vector<std::pair<int64_t, ModelPart>> stages;  // (global stage, part), local order
  std::vector<double> gathered_bytes;   // per local stage: its FSDP units kept gathered, from its first forward
  std::vector<double> unsharded_grad_bytes;  // per local stage: gradients accumulated unsharded, from its first backward
  // torch.distributed.pipelining's last backward of a stage reduce-scatters
  // and reshards it (TorchTitan): both of the above are freed then. ctitan
  // keeps a stage gathered to the step's end.
  bool release_after_last_backward = false;
  int64_t microbatches = 1;
};

// Activations, logits, communication buffers and overhead on top of the
// state already in `mem` (parameters, gradients, optimizer); sets total.
// T: tokens of one micro-batch on this rank.
// widened_gemm: bf16 GEMMs run on fp32 copies of their operands (a CPU
// without AVX-512, PlanRequest::bf16_gemm_widened).
// pipe: a pipeline rank (pp > 1): the peak is found by replaying its
// actions (each micro-batch's saved tensors from its forward to its
// backward, each stage's gathered parameters and unsharded gradients), and
// parameters and gradients get what is held at that moment.
// rules: whose training loop (framework_rules); the string form looks them up.
MemoryBreakdown activation_memory(const ModelDesc& model, const JobConfig& cfg, const MeshShape& shape,
                                  const HardwareSpec& hw, const RankLayout& rank, double T,
                                  const ActivationCheckpointPolicy& ac, double elem, bool widened_gemm,
                                  const FrameworkRules& rules, const RankPipeline* pipe, MemoryBreakdown mem);
MemoryBreakdown activation_memory(const ModelDesc& model, const JobConfig& cfg, const MeshShape& shape,
                                  const HardwareSpec& hw, const RankLayout& rank, double T,
                                  const ActivationCheckpointPolicy& ac, double elem, bool widened_gemm,
                                  const std::string& framework, const RankPipeline* pipe, MemoryBreakdown mem);

// The largest pipeline rank's memory (every rank is planned: its state from
// the dry-run layout, then activation_memory, replaying its actions of
// `schedule` under PP). T: tokens of one micro-batch on a rank.
MemoryBreakdown peak_rank_memory(const Env& env, const Layout& layout, const PipelineSchedule& schedule,
                                 const ActivationCheckpointPolicy& ac, double T, int64_t microbatches,
                                 bool widened_gemm);

}  // namespace ctitan::planner_detail
