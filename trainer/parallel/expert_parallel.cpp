#include "trainer/parallel/expert_parallel.h"

#include <torch/autograd.h>

#include <algorithm>

#include "common/errors.h"
#include "trainer/parallel/exposed_comm.h"

namespace ctitan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor exchanged(const at::Tensor& x, Communicator& comm, const std::vector<int64_t>& out_splits,
                     const std::vector<int64_t>& in_splits) {
  int64_t rows = 0;
  for (int64_t n : out_splits) rows += n;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape[0] = rows;
  at::Tensor out = at::empty(shape, x.options());
  wait_exposed(comm.all_to_all_v(out, x.contiguous(), out_splits, in_splits), comm);
  return out;
}

// The communicator travels to backward as its address: the ep group
// outlives every graph built over it (the mesh owns it for the whole run).
class AllToAllRows : public torch::autograd::Function<AllToAllRows> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* comm,
                            std::vector<int64_t> out_splits, std::vector<int64_t> in_splits) {
    ctx->saved_data["comm"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(comm));
    ctx->saved_data["out"] = out_splits;
    ctx->saved_data["in"] = in_splits;
    return exchanged(x, *comm, out_splits, in_splits);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto& comm = *reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["comm"].toInt()));
    // The transposed exchange: what came from rank s goes back to it.
    const at::Tensor gx = exchanged(g[0], comm, ctx->saved_data["in"].toIntVector(),
                                    ctx->saved_data["out"].toIntVector());
    return {gx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_to_all_rows(const at::Tensor& x, Communicator& comm, const std::vector<int64_t>& out_splits,
                           const std::vector<int64_t>& in_splits) {
  return AllToAllRows::apply(x, &comm, out_splits, in_splits);
}

EpRoute ep_route(const at::Tensor& counts, Communicator& ep) {
  const int64_t P = ep.size(), E = counts.numel();
  if (E % P != 0)
    throw InputError("expert parallelism: " + std::to_string(E) + " experts do not divide over ep " +
                     std::to_string(P) + "; set parallelism.expert_parallel_degree to a divisor of num_experts");
  const int64_t L = E / P;
  // The counts are host-side plans (splits, permutation), so they are
  // exchanged as CPU tensors (over Gloo also in a CUDA run).
  const at::Tensor sent = counts.to(at::kCPU).to(at::kLong).contiguous();
  at::Tensor got = at::empty({P * L}, sent.options());
  wait_exposed(ep.all_to_all(got, sent), ep);  // got[s·L + e]: rows rank s sends to my local expert e
  const int64_t* c = sent.data_ptr<int64_t>();
  const int64_t* g = got.data_ptr<int64_t>();
  EpRoute r;
  r.send_rows.assign(static_cast<size_t>(P), 0);
  r.recv_rows.assign(static_cast<size_t>(P), 0);
  std::vector<int64_t> start(static_cast<size_t>(P * L));  // offset of block (s, e) in the received rows
  int64_t at_row = 0;
  for (int64_t s = 0; s < P; ++s) {
    for (int64_t e = 0; e < L; ++e) {
      r.send_rows[static_cast<size_t>(s)] += c[s * L + e];
      r.recv_rows[static_cast<size_t>(s)] += g[s * L + e];
      start[static_cast<size_t>(s * L + e)] = at_row;
      at_row += g[s * L + e];
    }
  }
  r.local_counts = got.view({P, L}).sum(0).to(counts.device());
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(at_row));
  for (int64_t e = 0; e < L; ++e)
    for (int64_t s = 0; s < P; ++s)
      for (int64_t i = 0; i < g[s * L + e]; ++i) order.push_back(start[static_cast<size_t>(s * L + e)] + i);
  r.order = at::tensor(order, at::kLong).to(counts.device());
  r.inverse = at::empty_like(r.order).index_put_({r.order}, at::arange(at_row, r.order.options()));
  return r;
}

at::Tensor ep_dispatch(const at::Tensor& rows, const EpRoute& route, Communicator& ep) {
  return all_to_all_rows(rows, ep, route.recv_rows, route.send_rows).index({route.order});
}

at::Tensor ep_combine(const at::Tensor& rows, const EpRoute& route, Communicator& ep) {
  return all_to_all_rows(rows.index({route.inverse}), ep, route.send_rows, route.recv_rows);
}

void check_expert_parallel(const ModelArgs& args, int64_t ep, bool etp, int64_t tp, bool sequence_parallel) {
  if (ep <= 1) return;
  const std::string key = "parallelism.expert_parallel_degree " + std::to_string(ep);
  const int64_t E = args.moe.num_experts;
  if (E == 0) throw InputError(key + " shards routed experts, and this model has none; use 1 (or an MoE flavor)");
  if (E % ep != 0)
    throw InputError(key + " does not divide the " + std::to_string(E) + " routed experts per layer; choose a "
                     "divisor of " + std::to_string(E));
  if (tp > 1 && !etp && !sequence_parallel)
    throw InputError(key + " spans the tp ranks (expert_tensor_parallel_degree 1), which route their own sequence "
                     "parts: it needs parallelism.enable_sequence_parallel = true");
  if (tp > 1 && etp && args.moe.hidden_dim % tp != 0)
    throw InputError("parallelism.expert_tensor_parallel_degree " + std::to_string(tp) +
                     " does not divide the experts' hidden width " + std::to_string(args.moe.hidden_dim) +
                     "; use expert_tensor_parallel_degree = 1");
}

bool is_routed_expert(const std::string& name) {
  static const std::string kExperts = ".moe.experts.";
  const auto at = name.rfind(kExperts);
  if (at == std::string::npos || at + kExperts.size() + 2 != name.size()) return false;
  const char kind = name[name.size() - 2], index = name.back();
  return (kind == 'w' || kind == 'b') && (index == '1' || index == '2' || index == '3');
}

std::vector<ParamSpec> expert_parallel_plan(std::vector<ParamSpec> specs, const ExpertParallelOptions& ep,
                                            int64_t tp_size, int64_t tp_rank) {
  if (!ep.on()) return specs;
  for (ParamSpec& s : specs) {
    if (!is_routed_expert(s.name)) continue;
    auto& pl = s.placements;
    pl.erase(std::remove_if(pl.begin(), pl.end(), [](const Placement& p) { return p.mesh_dim == "tp"; }), pl.end());
    s = shard_even(std::move(s), "ep", ep.size(), ep.rank(), 0);
    // ETP: w1, w3 [E, Hm, D] by their output rows, w2 [E, D, Hm] by its
    // input columns; the biases b1, b3 [E, Hm] with their rows, b2 [E, D]
    // whole on every tp rank.
    if (ep.etp && tp_size > 1) {
      const bool bias = s.name[s.name.size() - 2] == 'b', w2 = s.name.back() == '2';
      s = bias && w2 ? replicate(std::move(s), "tp", tp_size)
                     : shard_even(std::move(s), "tp", tp_size, tp_rank, bias ? 1 : (w2 ? 2 : 1));
    }
  }
  return specs;
}

}  // namespace ctitan
