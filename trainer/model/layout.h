// The layout a model part runs under, as the model sees it, and the seams
// where a parallelism acts on its forward.
//
// The model knows no parallelism (TorchTitan parallelizes a model that
// knows none of them): it holds the layout's description — which groups,
// which options — and calls LayoutSeams at the few points where a layout
// must act: the tensor-parallel regions around its GEMMs, the embedding
// and the loss (TP + SP), the attention exchange (CP's K/V), the token
// dispatch and combine (EP), and the placement of its parameters. The
// implementation lives in trainer/parallel/ (layout_seams.h:
// parallel_layout() installs it); model/ includes nothing from there. A
// single-process model needs no seams.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/distributed/comm.h"
#include "trainer/kernels/sink_attention.h"
#include "trainer/model/model_args.h"
#include "trainer/model/param_spec.h"

namespace ctitan {

// How a model part runs under tensor parallelism (parallelism.* keys;
// trainer/parallel/tensor_parallel.h has the regions).
struct TensorParallelOptions {
  Communicator* group = nullptr;  // the mesh's tp group; null or size 1: no TP
  // Activations between the blocks (and the norms' inputs) sharded along
  // the sequence: all-gather before the column-wise GEMMs, reduce-scatter
  // after the row-wise ones. TorchTitan's plan always does this
  // (parallelism.enable_sequence_parallel, a ctitan key, turns it off to
  // measure what it saves).
  bool sequence_parallel = true;
  // The loss over vocab-sharded logits, never gathered
  // (parallelism.disable_loss_parallel turns it off).
  bool loss_parallel = true;
  // parallelism.enable_async_tensor_parallel: the all-gather + GEMM and
  // GEMM + reduce-scatter pairs run micro-pipelined. Needs sequence
  // parallelism (the pattern it decomposes).
  bool async = false;
  int64_t size() const { return group ? group->size() : 1; }
  int64_t rank() const { return group ? group->rank() : 0; }
  bool on() const { return size() > 1; }
  std::string describe() const;  // "TP 2 (sequence parallel, loss parallel, async)"
};

// How a model part runs under context parallelism (context_parallel_*
// keys; trainer/parallel/context_parallel.h has the exchange).
struct ContextParallelOptions {
  Communicator* group = nullptr;           // the mesh's cp group; null or size 1: off
  std::string rotate_method = "allgather";  // allgather | alltoall
  std::string load_balancer = "headtail";   // headtail | none | ptrr
  // ptrr: this batch's blocks of each rank (ascending block indices), set
  // by the caller per batch (ptrr_assignment) before the forward.
  std::vector<std::vector<int64_t>> ptrr_blocks;
  bool on() const { return group != nullptr && group->size() > 1; }
  int64_t size() const { return on() ? group->size() : 1; }
  int64_t rank() const { return on() ? group->rank() : 0; }
  std::string describe() const;  // "CP 2 (allgather, headtail)"
};

// How a model part's routed experts are laid out (TorchTitan v0.2.2's
// ExpertParallel / ExpertTensorParallel; trainer/parallel/expert_parallel.h
// has the dispatch): rank p of the ep group holds experts
// [p·E/ep, (p+1)·E/ep) of every MoE layer (Shard(0) over "ep"). With
// expert_tensor_parallel_degree 1 the ep group spans tp (each tp rank
// routes its sequence part and owns other experts); with etp = tp the ep
// group leaves tp out and every tp rank holds a slice of each local
// expert's hidden dimension (w1, w3 Shard(1), w2 Shard(2) over tp): the
// tokens are gathered over tp, dispatched over ep, and the experts' partial
// sums reduced over tp. The router and the shared experts keep the
// block's layout.
struct ExpertParallelOptions {
  Communicator* group = nullptr;  // the mesh's "ep" group; null or size 1: experts whole on every rank
  bool etp = false;               // expert_tensor_parallel_degree = tp > 1
  int64_t size() const { return group ? group->size() : 1; }
  int64_t rank() const { return group ? group->rank() : 0; }
  bool on() const { return size() > 1; }
};

// The seams: one function per point where a layout acts, each the
// parallelism's own (trainer/parallel/*.h documents each one's semantics
// under the same name). Stateless: the options and groups are arguments.
class LayoutSeams {
 public:
  virtual ~LayoutSeams() = default;

  // --- placement: the part's whole-tensor specs → this rank's shards (the
  // TP plan, then the experts over ep), with each plan's checks (InputError).
  virtual std::vector<ParamSpec> plan(const ModelArgs& args, std::vector<ParamSpec> specs,
                                      const TensorParallelOptions& tp, const ExpertParallelOptions& ep) const = 0;

  // --- tensor (and sequence) parallelism's regions over the tp group.
  virtual at::Tensor copy_to_tp(const at::Tensor& x, Communicator& tp) const = 0;
  virtual at::Tensor reduce_from_tp(const at::Tensor& x, Communicator& tp) const = 0;
  virtual at::Tensor gather_from_sp(const at::Tensor& x, Communicator& tp, int64_t dim) const = 0;
  virtual at::Tensor scatter_to_sp(const at::Tensor& x, Communicator& tp, int64_t dim) const = 0;
  virtual at::Tensor gather_from_tp(const at::Tensor& x, Communicator& tp, int64_t dim) const = 0;
  virtual at::Tensor vocab_parallel_embedding(const at::Tensor& weight_shard, const at::Tensor& tokens,
                                              Communicator& tp, bool sequence_parallel) const = 0;
  virtual at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits_shard, const at::Tensor& labels,
                                                  Communicator& tp) const = 0;
  virtual at::Tensor async_gather_linear(const at::Tensor& x_shard, const at::Tensor& w_shard, Communicator& tp,
                                         int64_t chunks) const = 0;
  virtual at::Tensor async_linear_scatter(const at::Tensor& x, const at::Tensor& w_shard, Communicator& tp,
                                          int64_t chunks) const = 0;

  // --- context parallelism: the options' own check (seq_len is the
  // caller's), this rank's token positions, and attention over the group.
  virtual void check_context_parallel(const ContextParallelOptions& cp) const = 0;
  virtual at::Tensor cp_positions(const ContextParallelOptions& cp, int64_t rank, int64_t seq_len) const = 0;
  // `extras`: a sliding window and sinks (sink_attention.h).
  virtual at::Tensor context_parallel_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                const at::Tensor& positions, const ContextParallelOptions& cp,
                                                std::optional<double> scale, const at::Tensor& starts,
                                                const AttentionExtras& extras = {}) const = 0;

  // --- expert parallelism: sends each routed row (rows sorted by global
  // expert, counts [E] per expert) to its expert's rank over `ep`, runs
  // `experts` on the rows this rank received (expert-major, with the rows
  // per local expert), and returns each output to its row's rank, in the
  // rows' order. `received`, when given, gains the rows this rank's
  // experts received.
  using ExpertsFn = std::function<at::Tensor(const at::Tensor& rows, const at::Tensor& local_counts)>;
  virtual at::Tensor exchange_tokens(const at::Tensor& rows, const at::Tensor& counts, const ExpertsFn& experts,
                                     Communicator& ep, int64_t* received) const = 0;
};

// Expert parallelism as the MoE layer sees it: the ep group and the seams
// that exchange tokens over it.
struct ExpertDispatch {
  Communicator& group;
  const LayoutSeams& seams;
};

// Everything a model part is told of its layout: the options of each
// parallelism and the seams that act on them (parallel_layout() in
// trainer/parallel/layout_seams.h fills all of it). Default: one process.
struct ParallelLayout {
  TensorParallelOptions tp;
  ExpertParallelOptions ep;
  ContextParallelOptions cp;
  std::shared_ptr<const LayoutSeams> seams;  // needed as soon as any parallelism is on
};

}  // namespace ctitan
