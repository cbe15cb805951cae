// A TransformerBlock's feed-forward: the dense SwiGLU (fused w1|w3, then
// w2), or an MoE layer, which owns its state across steps: the
// aux-loss-free expert bias, the tokens routed to each expert since they
// were last taken, and (expert parallelism) the rows this rank's experts
// received. Both run through BlockOps (TP regions, float8, EP's seam).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/block_ops.h"
#include "trainer/model/moe.h"

namespace ctitan {

// The dense SwiGLU on x [B,S,D] (normed): w2(silu(w1 x) · w3 x).
at::Tensor dense_feed_forward(const BlockOps& ops, int64_t layer, const at::Tensor& w13, const at::Tensor& w2,
                              const at::Tensor& x, OpCache* cache);

class MoeLayer {
 public:
  MoeLayer(const MoeArgs& args, c10::Device device);

  // The layer on x [B,S,D] (normed; this rank's sequence part under SP).
  // `count`: add the routing to the counts (off for a recomputation under
  // activation checkpointing, validation and probes).
  at::Tensor forward(const BlockOps& ops, const MoeWeights& w, const at::Tensor& x, bool count);

  // fp32 [E], zeros at start, selection only (moe.h update_expert_bias).
  at::Tensor& bias() { return bias_; }
  // int64 [E]: tokens routed to each expert since the last call.
  at::Tensor take_counts();
  // Expert parallelism: the routed rows this rank's experts received since
  // the last call.
  int64_t take_received();

 private:
  MoeArgs args_;
  at::Tensor bias_, counts_;
  int64_t received_ = 0;
};

}  // namespace ctitan
