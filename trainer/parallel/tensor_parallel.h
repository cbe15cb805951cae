// Tensor parallelism's communication regions (Megatron-LM's mappings, the
// ones TorchTitan's ColwiseParallel / RowwiseParallel / SequenceParallel
// place on the module boundaries), as autograd functions over the
// communicator of the tp group — real on Gloo, the same code on NCCL.
//
// Without sequence parallelism the activations between blocks are whole on
// every tp rank:
//   copy_to_tp      forward identity,   backward all-reduce   (before a column-wise GEMM)
//   reduce_from_tp  forward all-reduce, backward identity     (after a row-wise GEMM)
// With sequence parallelism they are sharded along the sequence (dim `dim`):
//   gather_from_sp  forward all-gather, backward reduce-scatter (before a column-wise GEMM)
//   scatter_to_sp   forward reduce-scatter, backward all-gather (after a row-wise GEMM)
//
// Shapes: gather_from_sp takes [..., S/tp, ...] and returns [..., S, ...]
// with rank r's part at [r·S/tp, (r+1)·S/tp); scatter_to_sp the reverse,
// summing over the ranks. Sums are in the tensor's dtype (the communicator
// widens what a backend cannot reduce).
//
// column_parallel_linear / row_parallel_linear put them around at::linear:
// a column-wise weight holds rows [r·O/tp, (r+1)·O/tp) of the whole [O, I]
// weight, a row-wise one columns [r·I/tp, (r+1)·I/tp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "trainer/dist/comm.h"
#include "trainer/model/llama_args.h"
#include "trainer/model/param_spec.h"

namespace ctitan {

// TorchTitan's tensor-parallel plan for Llama 3 on the placement plan, as
// rank r of tp: tok_embeddings row-wise (vocab rows, Shard(0)); per block
// wq, wk, wv, w1, w3 column-wise (Shard(0): their output features) and wo,
// w2 row-wise (Shard(1): their input features); the norms replicated;
// output column-wise (vocab rows, Shard(0)). InputError, one line naming
// the numbers, when tp does not divide the heads, the KV heads, the FFN
// width or the vocabulary (check_tensor_parallel_degree).
std::vector<ParamSpec> tensor_parallel_plan(std::vector<ParamSpec> specs, int64_t tp, int64_t r);
void check_tensor_parallel_degree(const LlamaArgs& args, int64_t tp);

at::Tensor copy_to_tp(const at::Tensor& x, Communicator& tp);
at::Tensor reduce_from_tp(const at::Tensor& x, Communicator& tp);
at::Tensor gather_from_sp(const at::Tensor& x, Communicator& tp, int64_t dim);
at::Tensor scatter_to_sp(const at::Tensor& x, Communicator& tp, int64_t dim);

// y_shard = x · W_shardᵀ with x whole (or sequence-sharded along seq_dim when
// sequence_parallel): the output is this rank's slice of the features.
at::Tensor column_parallel_linear(const at::Tensor& x, const at::Tensor& w_shard, Communicator& tp,
                                  bool sequence_parallel, int64_t seq_dim = 1);
// y = Σ_r x_shard_r · W_shard_rᵀ: the input is this rank's slice of the
// features; the output whole (or sequence-sharded when sequence_parallel).
at::Tensor row_parallel_linear(const at::Tensor& x_shard, const at::Tensor& w_shard, Communicator& tp,
                               bool sequence_parallel, int64_t seq_dim = 1);

}  // namespace ctitan
