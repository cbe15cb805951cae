// Internal to the planner: the communication of one rank's step, one
// function per mesh dimension (FSDP, DDP/HSDP's replicate dimension, TP,
// CP, EP, PP's hand-overs and Megatron-LM's tied embedding), ring
// collectives on the link each group crosses. predict() (plan.cpp) adds
// them to the step in this order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "planner/plan_compute.h"

namespace ctitan::planner_detail {

// The links between ranks and how much of a collective compute can hide.
struct Network {
  const MeshShape& shape;
  const HardwareSpec& hw;
  int devices_per_node = 1;
  double comm_eff = 1;  // the spec's efficiency.comm
  double overlap = 1;   // the spec's efficiency.overlap: what neighbouring compute hides
  // On a CPU whose ranks outnumber its cores, a collective's copies and
  // sockets need a core the other ranks' compute holds: at most cores/world
  // of an overlapped collective hides. 1 on a GPU.
  double hides = 1;

  // The link a group of `ranks` along `dim` crosses (rank order pp >
  // dp_replicate > dp_shard > cp > tp): the network once it spans nodes.
  // A TP, CP or EP collective across nodes runs one ring channel per NIC
  // (NCCL), so a node whose group members each have a NIC crosses at their
  // sum, up to the intra-node link: TP 16 over two 8-GPU nodes at 8 NICs'
  // bandwidth, not one's. `collective` = false (point-to-point: a pipeline
  // handover, the CP ring's neighbour sends) and data parallelism cross at
  // one device's NIC.
  Link link_for(const std::string& dim, int64_t ranks, bool collective = true) const;
  // Members of a group along `dim` in one node (at least 1).
  int64_t members_per_node(const std::string& dim, int64_t ranks) const;
  // What of `seconds` on the wire stays exposed when compute would leave
  // `exposed`: at least the part the CPU cannot hide.
  double overlapped(double exposed, double seconds) const;
};

// A ring collective over `ranks` moving `bytes` (the gathered size) on `link`.
double ring_s(double bytes, int64_t ranks, const Link& link, double comm_eff, double factor = 1.0);

// The busiest pipeline rank's step as its communication sees it.
struct RankStep {
  const RankLayout& layout;
  double forward_s = 0, backward_s = 0;  // its stages' compute per micro-batch
  double recompute_s = 0;                // of which recomputation (inside the backward)
  int64_t microbatches = 1;              // per local batch (pipeline micro-batches)
  int64_t accumulation = 1;              // local batches per step (gradient accumulation)
  double tokens = 0;                     // T: tokens of one micro-batch on this rank
  double units = 0;                      // its FSDP units: blocks, embedding, head
  int64_t recomputed_layers = 0;         // of the model, whose forward runs again (full AC)
};

// One dimension's communication: its line of the report (per step) and what
// is exposed, per local batch (`per_local_batch`: FSDP, TP, CP, EP) or once
// per step (the data-parallel all-reduce, the tied embedding).
struct DimComm {
  CommDim line;
  double exposed_s = 0;
  bool per_local_batch = true;
  std::string note = "";  // an assumption the figures rest on, for the plan's notes
};

// FSDP (dp_shard, with cp): the units' all-gathers (again in backward when
// they reshard) and fp32 reduce-scatters, hidden by the prefetch except the
// first unit's gather and the last unit's reduce-scatter.
std::optional<DimComm> fsdp_comm(const Env& env, const Network& net, const RankStep& step);
// dp_replicate (DDP, HSDP): the gradient all-reduce against the backward,
// or once after the last micro-batch (FrameworkRules).
std::optional<DimComm> replicate_comm(const Env& env, const Network& net, const RankStep& step);
// The tied word embedding's gradient all-reduced between the first and last
// pipeline stage (FrameworkRules).
std::optional<DimComm> tied_embedding_comm(const Env& env, const Network& net);
// TP: each block's gathers and scatters (sequence parallel) or all-reduces,
// again for recomputed blocks; exposed unless async TP overlaps the GEMMs.
std::optional<DimComm> tp_comm(const Env& env, const Network& net, const RankStep& step, const UnitCost& block);
// CP: every other rank's K/V (and their gradients), blocking under
// allgather, passed during the attention by the ring.
std::optional<DimComm> cp_comm(const Env& env, const Network& net, const RankStep& step, const UnitCost& block);
// EP: the MoE layers' all-to-all token dispatch and combine, exposed.
std::optional<DimComm> ep_comm(const Env& env, const Network& net, const RankStep& step, const ModelArgs& args,
                               const ActivationCheckpointPolicy& ac);

// PP: one activation (or its gradient) handed to the neighbouring stage.
struct PipelineHandover {
  Link link;
  double bytes = 0;    // one activation of a micro-batch
  double seconds = 0;  // its hand-over, the schedule's p2p time
};
PipelineHandover pipeline_handover(const Env& env, const Network& net, double T);

// Loss, gradient-norm and metrics reductions over the world: latency-bound,
// never hidden (0 seconds on one rank).
CommDim world_reductions(const Network& net);

}  // namespace ctitan::planner_detail
