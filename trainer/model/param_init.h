// Deterministic parameter init that any shard or pipeline stage can compute
// on its own: TorchTitan's Llama 3 init rules per FQN, drawn from a
// counter-based generator.
//
// Every element's value depends only on (seed, FQN, its linear index in the
// parameter's *global* row-major shape), never on which process fills it or
// in what order. So a dim-0 FSDP shard, a dim-1 tensor-parallel shard, a
// shard of a shard or a later pipeline stage each fill their own box and hold
// exactly the values the single-process model holds at those coordinates.
//
// How: Philox4x32-10 (ATen's at::Philox4_32) keyed with a 64-bit hash of
// (seed, FQN), counter = global element index / 2 (one 128-bit block per
// element pair), gives 53 uniform bits per element; the inverse normal CDF
// (torch.nn.init.trunc_normal_'s transform, via Cephes' ndtri) turns them
// into a normal or truncated normal in double precision, which is then
// rounded once to the output dtype.
//
// Thread safety: the functions are pure apart from writing `out`; they
// split a box over at::get_num_threads() threads.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "trainer/model/model_args.h"
#include "trainer/model/param_spec.h"

namespace ctitan {

// One parameter's init distribution. kNormal and kTruncatedNormal have mean 0;
// kTruncatedNormal cuts the normal N(0, std²) at the absolute bounds [lo, hi]
// (TorchTitan's trunc_normal_(std, a=lo, b=hi)).
struct ParamInitRule {
  enum class Kind { kNormal, kTruncatedNormal, kOnes, kUniform };  // kUniform: U(lo, hi)
  Kind kind = Kind::kNormal;
  double std = 1.0;
  double lo = 0.0, hi = 0.0;
};

// TorchTitan's init_weights (Llama 3, Qwen3, the MoE layer) as a rule per FQN:
//   tok_embeddings.weight                          normal(0, 1)
//   output.weight                                  trunc_normal(dim^-0.5, ±3 std)
//   *norm.weight                                   ones
//   layers.L.attention.w{q,k,v}, feed_forward.w1   trunc_normal(0.02, ±2)
//   layers.L.attention.wo, feed_forward.w{2,3}     trunc_normal(0.02/sqrt(2(L+1)), ±2) with
//                                                  depth_init, else 0.02/sqrt(2·n_layers)
//   layers.L.attention.{q,k}_norm                  ones
//   layers.L.moe.experts.w1, shared_experts.w1     trunc_normal(0.02, ±2)
//   layers.L.moe.experts.w{2,3}, router.gate,
//     shared_experts.w{2,3}                        as wo (depth-scaled)
//   tok_embeddings.weight, tied to the output      as output.weight
// GPT-OSS (depth_init_all: every layer weight depth-scaled, as its
// TorchTitan init_weights):
//   layers.L.attention.w{q,k,v,o}.bias, sinks,
//     moe.experts.b{1,2,3}                         as wo (depth-scaled)
//   layers.L.moe.router.gate.bias                  U(±1/sqrt(dim)): nn.Linear's own
//                                                  (TorchTitan leaves it)
// Throws std::invalid_argument for an FQN the models do not have.
ParamInitRule model_init_rule(const std::string& fqn, const ModelArgs& args);

// The Philox key of a parameter: a 64-bit hash of (seed, FQN).
uint64_t param_init_key(uint64_t seed, const std::string& fqn);

// Fills `out` with the box of a parameter of shape `global_shape` that starts
// at `box_offset` (one offset per dimension; out's sizes are the box's
// extents). out may be any floating dtype, any CPU/CUDA layout (a
// non-contiguous view is filled through a contiguous CPU copy); a meta
// tensor returns at once. Throws c10::Error when the box does not fit in
// global_shape or the dimension counts differ.
void init_box(at::Tensor out, const ParamInitRule& rule, uint64_t key, c10::IntArrayRef global_shape,
              c10::IntArrayRef box_offset);

// init_box with model_init_rule(fqn, args) and param_init_key(seed, fqn).
void init_param_box(at::Tensor out, const std::string& fqn, c10::IntArrayRef global_shape,
                    c10::IntArrayRef box_offset, const ModelArgs& args, uint64_t seed);

// Initialises a rank's storage of one parameter from its spec: the box is
// filled by init_param_box, padding (FSDP's rows past the end) is zeroed.
// `storage` has spec.shape.
void init_param_storage(at::Tensor storage, const ParamSpec& spec, const ModelArgs& args, uint64_t seed);

}  // namespace ctitan
