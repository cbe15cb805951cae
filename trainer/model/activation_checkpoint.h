// Activation checkpointing for LibTorch's C++ API, which has no
// torch.utils.checkpoint.
//
// checkpoint(fn, inputs) runs fn(inputs) without autograd, keeping only the
// inputs; backward re-runs fn with autograd on detached copies (CPU RNG state
// restored to what it was at forward) and back-propagates through that graph.
// The recomputation is the same sequence of ops on the same values, so the
// gradients equal those without checkpointing bit for bit (deterministic
// kernels, same thread count). `fn` must be a pure function of `inputs` and
// of state that lives at least until backward.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace ctitan {

using CheckpointedFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

at::Tensor checkpoint(CheckpointedFn fn, const std::vector<at::Tensor>& inputs);

// TorchTitan's [activation_checkpoint]: which TransformerBlocks to wrap.
struct ActivationCheckpointPolicy {
  enum class Mode { kNone, kFull, kSelectiveLayer, kSelectiveOp } mode = Mode::kNone;
  int64_t every = 1;  // selective layer: every Nth block
  // Throws InputError for unknown modes and selective_ac_option "0"/garbage.
  static ActivationCheckpointPolicy parse(const std::string& mode, const std::string& selective_ac_option);
  // TorchTitan counts wrapped blocks from 1: with option "2", blocks 1, 3, 5…
  // (0-based layer ids) are checkpointed.
  bool checkpoints_layer(int64_t layer) const;
  std::string describe() const;
};

// Per-op selective checkpointing ("op"): inside a checkpointed block, the
// outputs of chosen ops are kept at forward and reused by the recomputation
// (which still builds their autograd nodes), everything else is recomputed.
// Record at forward (autograd off), replay in backward (autograd on).
struct OpCache {
  std::vector<at::Tensor> saved;
  size_t next = 0;
};

// at::linear(x, w) [*, in] × [out, in]; with a cache and `save`, its output is
// kept at forward and reused when recomputing.
at::Tensor cached_linear(OpCache* cache, bool save, const at::Tensor& x, const at::Tensor& w);

// Causal attention q,k,v [B,H,S,Dh] (same head counts) through ATen's CPU
// flash kernel; with a cache, output and log-sum-exp are kept and reused.
at::Tensor cached_causal_attention(OpCache* cache, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

}  // namespace ctitan
