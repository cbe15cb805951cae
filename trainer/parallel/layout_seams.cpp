#include "trainer/parallel/layout_seams.h"

#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "trainer/parallel/context_parallel.h"
#include "trainer/parallel/expert_parallel.h"
#include "trainer/parallel/tensor_parallel.h"

namespace ctitan {
namespace {

class Seams final : public LayoutSeams {
 public:
  std::vector<ParamSpec> plan(const ModelArgs& args, std::vector<ParamSpec> specs, const TensorParallelOptions& tp,
                              const ExpertParallelOptions& ep) const override {
    check_expert_parallel(args, ep.size(), ep.etp, tp.size(), tp.sequence_parallel);
    if (!tp.on()) return expert_parallel_plan(std::move(specs), ep, 1, 0);
    check_tensor_parallel_degree(args, tp.size());
    if (tp.async && !tp.sequence_parallel)
      throw InputError("parallelism.enable_async_tensor_parallel pipelines the sequence-parallel all-gather and "
                       "reduce-scatter; it needs parallelism.enable_sequence_parallel = true");
    return expert_parallel_plan(tensor_parallel_plan(std::move(specs), tp.size(), tp.rank()), ep, tp.size(),
                                tp.rank());
  }

  at::Tensor copy_to_tp(const at::Tensor& x, Communicator& tp) const override { return ctitan::copy_to_tp(x, tp); }
  at::Tensor reduce_from_tp(const at::Tensor& x, Communicator& tp) const override {
    return ctitan::reduce_from_tp(x, tp);
  }
  at::Tensor gather_from_sp(const at::Tensor& x, Communicator& tp, int64_t dim) const override {
    return ctitan::gather_from_sp(x, tp, dim);
  }
  at::Tensor scatter_to_sp(const at::Tensor& x, Communicator& tp, int64_t dim) const override {
    return ctitan::scatter_to_sp(x, tp, dim);
  }
  at::Tensor gather_from_tp(const at::Tensor& x, Communicator& tp, int64_t dim) const override {
    return ctitan::gather_from_tp(x, tp, dim);
  }
  at::Tensor vocab_parallel_embedding(const at::Tensor& weight_shard, const at::Tensor& tokens, Communicator& tp,
                                      bool sequence_parallel) const override {
    return ctitan::vocab_parallel_embedding(weight_shard, tokens, tp, sequence_parallel);
  }
  at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits_shard, const at::Tensor& labels,
                                          Communicator& tp) const override {
    return ctitan::vocab_parallel_cross_entropy(logits_shard, labels, tp);
  }
  at::Tensor async_gather_linear(const at::Tensor& x_shard, const at::Tensor& w_shard, Communicator& tp,
                                 int64_t chunks) const override {
    return ctitan::async_gather_linear(x_shard, w_shard, tp, chunks);
  }
  at::Tensor async_linear_scatter(const at::Tensor& x, const at::Tensor& w_shard, Communicator& tp,
                                  int64_t chunks) const override {
    return ctitan::async_linear_scatter(x, w_shard, tp, chunks);
  }

  void check_context_parallel(const ContextParallelOptions& cp) const override {
    ctitan::check_context_parallel(cp.rotate_method, cp.load_balancer, 1, 0);
  }
  at::Tensor cp_positions(const ContextParallelOptions& cp, int64_t rank, int64_t seq_len) const override {
    return ctitan::cp_positions(cp.load_balancer, cp.size(), rank, seq_len, cp.ptrr_blocks);
  }
  at::Tensor context_parallel_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& positions, const ContextParallelOptions& cp,
                                        std::optional<double> scale, const at::Tensor& starts,
                                        const AttentionExtras& extras) const override {
    return ctitan::context_parallel_attention(q, k, v, positions, cp, scale, starts, extras);
  }

  at::Tensor exchange_tokens(const at::Tensor& rows, const at::Tensor& counts, const ExpertsFn& experts,
                             Communicator& ep, int64_t* received) const override {
    const EpRoute route = ep_route(counts, ep);
    if (received)
      for (int64_t n : route.recv_rows) *received += n;
    return ep_combine(experts(ep_dispatch(rows, route, ep), route.local_counts), route, ep);
  }
};

}  // namespace

std::shared_ptr<const LayoutSeams> parallel_seams() {
  static const std::shared_ptr<const LayoutSeams> seams = std::make_shared<Seams>();
  return seams;
}

ParallelLayout parallel_layout(TensorParallelOptions tp, ExpertParallelOptions ep, ContextParallelOptions cp) {
  return ParallelLayout{tp, ep, std::move(cp), parallel_seams()};
}

}  // namespace ctitan
