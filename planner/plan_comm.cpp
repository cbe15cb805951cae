// The communication of one rank's step, mesh dimension by mesh dimension:
// ring collectives (bandwidth and latency of the link the group crosses),
// and what of each the neighbouring compute hides.
#include "planner/plan_comm.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace ctitan::planner_detail {
namespace {

int64_t stride_of(const MeshShape& shape, const std::string& dim) {
  if (dim == "tp") return 1;
  if (dim == "cp") return shape.tp;
  if (dim == "fsdp" || dim == "dp_shard") return shape.tp * shape.cp;
  if (dim == "dp_replicate") return shape.tp * shape.cp * shape.dp_shard;
  return shape.tp * shape.cp * shape.dp_shard * shape.dp_replicate;  // pp
}

// A dimension whose traffic repeats every local batch: `bytes`, `seconds`
// and `exposed_s` of one local batch, its report line of the step's
// `accumulation` local batches.
DimComm each_local_batch(const char* dim, std::string what, const Link& link, double bytes, double seconds,
                         double exposed_s, const RankStep& step) {
  return {.line = {.dim = dim,
                   .what = std::move(what),
                   .link = link.name,
                   .bytes = bytes * step.accumulation,
                   .seconds = seconds * step.accumulation,
                   .exposed_s = exposed_s * step.accumulation},
          .exposed_s = exposed_s};
}

// A dimension that communicates once per step, after the last local batch.
DimComm once_per_step(const char* dim, std::string what, const Link& link, double bytes, double seconds,
                      double exposed_s) {
  return {.line = {.dim = dim,
                   .what = std::move(what),
                   .link = link.name,
                   .bytes = bytes,
                   .seconds = seconds,
                   .exposed_s = exposed_s},
          .exposed_s = exposed_s,
          .per_local_batch = false};
}

}  // namespace

int64_t Network::members_per_node(const std::string& dim, int64_t ranks) const {
  const int64_t stride = stride_of(shape, dim);
  if (stride >= devices_per_node) return 1;
  return std::max<int64_t>(1, std::min<int64_t>(ranks, devices_per_node / stride));
}

Link Network::link_for(const std::string& dim, int64_t ranks, bool collective) const {
  if (stride_of(shape, dim) * ranks <= devices_per_node) return hw.intra_node;
  Link link = hw.inter_node;
  // TP, CP and EP: the group's members on a node drive its NICs together.
  // Data parallelism (FSDP, DDP) keeps one NIC's bandwidth per rank: the
  // shipped GPU specs' constants were fitted to its rows that way (docs/planner.md).
  const bool model_parallel = dim == "tp" || dim == "cp" || dim == "ep";
  const int64_t nics = collective && model_parallel ? members_per_node(dim, ranks) : 1;
  if (nics > 1) {
    link.bandwidth = std::min(hw.intra_node.bandwidth, static_cast<double>(nics) * hw.inter_node.bandwidth);
    link.name += " (" + std::to_string(nics) + " NICs per node)";
  }
  return link;
}

double Network::overlapped(double exposed, double seconds) const { return std::max(exposed, (1 - hides) * seconds); }

double ring_s(double bytes, int64_t ranks, const Link& link, double comm_eff, double factor) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double group = static_cast<double>(ranks);
  return factor * ((group - 1) / group * bytes / (link.bandwidth * comm_eff) + (group - 1) * link.latency_s);
}

std::optional<DimComm> fsdp_comm(const Env& env, const Network& net, const RankStep& step) {
  const MeshShape& shape = env.shape;
  const int64_t fsdp = shape.dp_shard * shape.cp;
  if (fsdp <= 1) return std::nullopt;
  const RankLayout& rank = step.layout;
  const Link link = net.link_for("fsdp", fsdp);
  const bool f8_gather = env.float8 && env.cfg.float8.enable_fsdp_float8_all_gather;
  const double block_bytes = static_cast<double>(rank.block_unit_elems) * (f8_gather ? 1.0 : env.elem_bytes);
  // What the units gather (under EP the experts of this rank only): the
  // dry run's count where it has one, else this rank's storage x fsdp.
  const int64_t all = rank.gathered_elems > 0 ? rank.gathered_elems : rank.param_elems * fsdp;
  const double other =
      static_cast<double>(std::max<int64_t>(0, all - rank.block_unit_elems * rank.layers)) * env.elem_bytes;
  const double gathered = block_bytes * static_cast<double>(rank.layers) + other;
  const std::string& reshard_after_forward = env.cfg.parallelism.fsdp_reshard_after_forward;
  const bool reshard = reshard_after_forward == "always" || (reshard_after_forward == "default" && shape.pp == 1);
  const double gather_s = ring_s(gathered, fsdp, link, net.comm_eff);
  const double gather_again_s = reshard ? gather_s : 0;
  const double reduce_scatter_s = ring_s(static_cast<double>(all) * 4, fsdp, link, net.comm_eff);  // fp32 gradients
  const double forward_compute = step.forward_s * step.microbatches;
  const double backward_compute = step.backward_s * step.microbatches;
  const double per_unit = gather_s / std::max(1.0, step.units);
  // The first unit's gather and the last unit's reduce-scatter wait; the
  // rest hides behind compute. Never more than all of it.
  const double total_s = gather_s + gather_again_s + reduce_scatter_s;
  const double exposed = net.overlapped(
      std::min(total_s, per_unit + std::max(0.0, gather_s - net.overlap * forward_compute) +
                            std::max(0.0, gather_again_s + reduce_scatter_s - net.overlap * backward_compute) +
                            reduce_scatter_s / std::max(1.0, step.units)),
      total_s);
  return each_local_batch(shape.cp > 1 ? "fsdp" : "dp_shard", "all-gather + reduce-scatter", link,
                          gathered * (reshard ? 2 : 1) + static_cast<double>(all) * 4, total_s, exposed, step);
}

std::optional<DimComm> replicate_comm(const Env& env, const Network& net, const RankStep& step) {
  const MeshShape& shape = env.shape;
  if (shape.dp_replicate <= 1) return std::nullopt;
  const Link link = net.link_for("dp_replicate", shape.dp_replicate);
  // Megatron-LM's local DDP all-reduces its gradient buffer (the params'
  // dtype without --accumulate-allreduce-grads-in-fp32) once, after the
  // last micro-batch's backward: nothing hides it.
  const bool after_last = env.rules.allreduce_after_last_microbatch;
  const double bytes = static_cast<double>(step.layout.param_elems) * (after_last ? env.elem_bytes : 4.0);
  const double all_reduce_s = ring_s(bytes, shape.dp_replicate, link, net.comm_eff, 2.0);
  const double exposed =
      after_last ? all_reduce_s
                 : net.overlapped(std::max(all_reduce_s / std::max(1.0, step.units),
                                           all_reduce_s - net.overlap * step.backward_s * step.microbatches),
                                  all_reduce_s);
  return once_per_step("dp_replicate", "all-reduce", link, 2 * bytes, all_reduce_s, exposed);
}

std::optional<DimComm> tied_embedding_comm(const Env& env, const Network& net) {
  const MeshShape& shape = env.shape;
  if (!env.rules.tied_embedding_across_stages || shape.pp <= 1) return std::nullopt;
  // Megatron-LM's GPT ties the word embedding to the output layer: the
  // first and the last stage each hold it and all-reduce its gradient
  // (their vocabulary shard) between them after the backward.
  const Link link = net.link_for("pp", shape.pp, false);
  const double bytes = static_cast<double>(env.model.vocab_size) / static_cast<double>(shape.tp) *
                       static_cast<double>(env.model.dim) * env.elem_bytes;
  const double all_reduce_s = ring_s(bytes, 2, link, net.comm_eff, 2.0);
  return once_per_step("pp", "tied embedding gradient all-reduce (first and last stage)", link, bytes, all_reduce_s,
                       all_reduce_s);
}

std::optional<DimComm> tp_comm(const Env& env, const Network& net, const RankStep& step, const UnitCost& block) {
  const MeshShape& shape = env.shape;
  if (shape.tp <= 1) return std::nullopt;
  const Link link = net.link_for("tp", shape.tp);
  const bool sp = env.cfg.parallelism.enable_sequence_parallel;
  const double one = ring_s(block.tp_bytes, shape.tp, link, net.comm_eff, sp ? 1.0 : 2.0);
  // A recomputed block's forward runs its collectives again (half of the
  // block's: the forward's).
  const int64_t model_layers = env.model.n_layers;
  const double again =
      model_layers > 0 ? 0.5 * static_cast<double>(step.recomputed_layers) / static_cast<double>(model_layers) : 0;
  const double per_block = one * block.tp_collectives * (1 + again);
  const double layers = static_cast<double>(step.layout.layers);
  const double total = per_block * layers * step.microbatches;
  double exposed = total;
  if (env.cfg.parallelism.enable_async_tensor_parallel)  // overlapped with the GEMMs it feeds
    exposed = net.overlapped(
        std::max(0.0, total - net.overlap * (block.gemm_f + block.gemm_b) * layers * step.microbatches), total);
  return each_local_batch("tp", sp ? "all-gather + reduce-scatter (sequence parallel)" : "all-reduce", link,
                          block.tp_bytes * block.tp_collectives * (1 + again) * layers * step.microbatches, total,
                          exposed, step);
}

std::optional<DimComm> cp_comm(const Env& env, const Network& net, const RankStep& step, const UnitCost& block) {
  const MeshShape& shape = env.shape;
  if (shape.cp <= 1) return std::nullopt;
  // allgather is a collective; the ring passes K/V to one neighbour.
  const Link link = net.link_for("cp", shape.cp, env.cfg.parallelism.context_parallel_rotate_method == "allgather");
  const double layers = static_cast<double>(step.layout.layers);
  const double moved = block.cp_bytes * static_cast<double>(shape.cp - 1);  // every other rank's K/V comes by
  const double seconds =
      (moved / (link.bandwidth * net.comm_eff) + 3 * static_cast<double>(shape.cp - 1) * link.latency_s) * layers *
      step.microbatches;
  // allgather gathers K and V before the attention and reduce-scatters
  // their gradients after it: it blocks. The ring (alltoall) passes the
  // next block while the current one is attended.
  const std::string& method = env.cfg.parallelism.context_parallel_rotate_method;
  const bool blocking = method == "allgather";
  const double exposed = blocking ? seconds
                                  : net.overlapped(std::max(0.0, seconds - net.overlap * (block.attn_f + block.attn_b) *
                                                                               layers * step.microbatches),
                                                   seconds);
  return each_local_batch("cp", method + " K/V exchange", link, moved * layers * step.microbatches, seconds, exposed,
                          step);
}

std::optional<DimComm> ep_comm(const Env& env, const Network& net, const RankStep& step, const ModelArgs& args,
                               const ActivationCheckpointPolicy& ac) {
  const MeshShape& shape = env.shape;
  if (shape.ep <= 1 || step.layout.moe_layers <= 0) return std::nullopt;
  // Expert parallelism: per MoE layer the routed rows (k copies of each
  // token this rank routes: its sequence part under SP when ep spans tp,
  // the tp group's tokens under ETP) go to their experts' ranks and come
  // back, forward and backward (again in a full-AC recomputation), plus
  // the counts' exchange before each dispatch. A balanced load: (ep−1)/ep
  // of the rows leave the rank. The all-to-alls block (exposed in full).
  // The group is ep consecutive ranks (stride tp with ETP).
  const double T = step.tokens;
  const bool etp = shape.etp > 1;
  const double routed = (etp || shape.tp == 1 || !env.cfg.parallelism.enable_sequence_parallel)
                            ? T * (etp ? static_cast<double>(shape.tp) : 1.0)
                            : T / static_cast<double>(shape.tp);
  const double rows_bytes =
      routed * static_cast<double>(args.moe.top_k) * static_cast<double>(env.model.dim) * env.elem_bytes;
  const double ranks = static_cast<double>(shape.ep);
  // Across nodes a rank's rows for its own node's members stay on the
  // intra-node link and only the rest take its NIC, both at once.
  const int64_t stride = etp ? shape.tp : 1;
  const bool across = stride * shape.ep > net.devices_per_node;
  const Link& link = across ? net.hw.inter_node : net.hw.intra_node;
  const double near =
      across ? static_cast<double>(std::max<int64_t>(1, std::min<int64_t>(shape.ep, net.devices_per_node / stride)))
             : ranks;
  const double one = std::max(rows_bytes * (ranks - near) / ranks / (link.bandwidth * net.comm_eff),
                              rows_bytes * (near - 1) / ranks / (net.hw.intra_node.bandwidth * net.comm_eff)) +
                     (ranks - 1) * link.latency_s;
  const double recomputed = ac.mode == ActivationCheckpointPolicy::Mode::kFull ? 2 : 0;
  const double exchanges = 4 + recomputed, counts = (1 + recomputed / 2) * (ranks - 1) * link.latency_s;
  const double layers = static_cast<double>(step.layout.moe_layers);
  const double seconds = (exchanges * one + counts) * layers * step.microbatches;
  DimComm comm = each_local_batch("ep", "all-to-all token dispatch and combine", link,
                                  exchanges * rows_bytes * (ranks - 1) / ranks * layers * step.microbatches, seconds,
                                  seconds, step);
  comm.note = "EP " + std::to_string(shape.ep) +
              ": the all-to-alls assume a balanced routing (every rank "
              "receives the rows it sends); an imbalance "
              "of x (moe_ep_imbalance) makes the busiest rank's experts work x "
              "times the mean";
  return comm;
}

PipelineHandover pipeline_handover(const Env& env, const Network& net, double T) {
  const MeshShape& shape = env.shape;
  const Link link = net.link_for("pp", shape.pp, false);
  const double activation = T * static_cast<double>(env.model.dim) * env.elem_bytes;
  // Megatron-LM's scatter/gather: across nodes each TP rank sends 1/tp of
  // the (TP-replicated) activation and the receivers all-gather it over
  // NVLink.
  const bool scatter = env.rules.pipeline_scatter_gather && shape.tp > 1 &&
                       net.shape.world() > net.devices_per_node && link == net.hw.inter_node;
  const double seconds = scatter ? activation / static_cast<double>(shape.tp) / (link.bandwidth * net.comm_eff) +
                                       link.latency_s + ring_s(activation, shape.tp, net.hw.intra_node, net.comm_eff)
                                 : activation / (link.bandwidth * net.comm_eff) + link.latency_s;
  return {link, activation, seconds};
}

CommDim world_reductions(const Network& net) {
  const Link link = net.link_for("pp", net.shape.pp, false);
  const double seconds =
      (net.shape.world() > 1 ? 3 * std::log2(static_cast<double>(net.shape.world())) : 0) * link.latency_s;
  return {"world", "loss, gradient-norm and metrics all-reduces", link.name, 0.0, seconds, seconds};
}

}  // namespace ctitan::planner_detail
