// Expert parallelism's token dispatch and combine (TorchTitan v0.2.2's
// ExpertParallel._token_dispatch / _token_combine), over one ep group.
//
// Each rank holds E/ep consecutive routed experts (rank p: experts
// [p·E/ep, (p+1)·E/ep)). After routing, a rank's rows are sorted by global
// expert with `counts[e]` rows for expert e. Dispatch:
//   1. all_to_all of the counts: rank p learns how many rows every rank
//      sends to each of its local experts;
//   2. all_to_all_v of the rows (variable splits);
//   3. a permutation from (source rank, local expert) order to expert-major
//      order, so that the grouped GEMM sees one contiguous block per local
//      expert (TorchTitan's permute; no padding is needed on the CPU).
// Combine undoes 3 and 2. Both are differentiable: the backward of an
// all_to_all_v is the transposed exchange (the splits swapped). The time
// blocked in them counts in wait_exposed's per-group ledger
// (exposed_comm.h).
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "trainer/distributed/comm.h"
#include "trainer/model/layout.h"
#include "trainer/model/model_args.h"
#include "trainer/model/param_spec.h"

namespace ctitan {

// InputError (one line: the numbers and what to do) unless `args` runs
// under expert parallelism ep with expert TP (etp: experts over tp) in a
// layout of tp ranks: the model must have routed experts, ep must divide
// them, etp needs tp to divide the expert width, and an ep spanning tp
// (etp off) needs sequence parallelism (the tp ranks must route different
// tokens). The mesh's own rules (resolve_mesh_shape) come first.
void check_expert_parallel(const ModelArgs& args, int64_t ep, bool etp, int64_t tp, bool sequence_parallel);

// Whether `name` is a routed expert's weight or bias
// (layers.N.moe.experts.w1|w2|w3|b1|b2|b3).
bool is_routed_expert(const std::string& name);

// The routed experts' placements on the (TP-planned) specs: Shard(0) over
// ep (taking the Replicate() over tp off when ep spans tp), and with ETP
// the hidden dimension over tp (tp_size, tp_rank). Unchanged when ep is
// off. InputError when ep does not divide the number of experts or tp the
// expert hidden width.
std::vector<ParamSpec> expert_parallel_plan(std::vector<ParamSpec> specs, const ExpertParallelOptions& ep,
                                            int64_t tp_size, int64_t tp_rank);

struct EpRoute {
  std::vector<int64_t> send_rows, recv_rows;  // per ep rank: rows this rank sends to / receives from it
  at::Tensor local_counts;                    // [E/ep] int64: rows per local expert after dispatch
  at::Tensor order;                           // expert-major row i = received row order[i]
  at::Tensor inverse;                         // received row j = expert-major row inverse[j]
};

// Step 1: exchanges this rank's per-expert row counts ([E] int64, E a
// multiple of ep.size()) and plans steps 2 and 3.
EpRoute ep_route(const at::Tensor& counts, Communicator& ep);
// Steps 2–3: rows [sum(counts), ...] sorted by global expert → this rank's
// received rows, expert-major ([sum(local_counts), ...]).
at::Tensor ep_dispatch(const at::Tensor& rows, const EpRoute& route, Communicator& ep);
// The reverse: expert-major outputs → this rank's rows in their dispatch order.
at::Tensor ep_combine(const at::Tensor& rows, const EpRoute& route, Communicator& ep);

// A differentiable all_to_all_v along dim 0 (Communicator::all_to_all_v).
at::Tensor all_to_all_rows(const at::Tensor& x, Communicator& comm, const std::vector<int64_t>& out_splits,
                           const std::vector<int64_t>& in_splits);

}  // namespace ctitan
