// A TransformerBlock's attention, one kind per model, chosen when the model
// is built: grouped-query attention (Llama 3, Qwen3: fused wq|wk|wv, RoPE,
// optional per-head q/k norms) or DeepSeek-V3's multi-head latent attention
// (low-rank q and kv, YaRN RoPE on a decoupled key). Each binds its weights'
// views from the store, gives the RoPE rotations it uses, and runs on the
// block's normed input through BlockOps (TP regions, float8, CP, document
// masks).
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/block_ops.h"
#include "trainer/model/layer_weights.h"
#include "trainer/model/model_args.h"
#include "trainer/model/param_store.h"

namespace ctitan {

class Attention {
 public:
  virtual ~Attention() = default;
  // The attention's weights of the layer whose FQNs start with `prefix`
  // ("layers.3."), as compute views into `store`.
  virtual void bind(ParamStore& store, const std::string& prefix, LayerWeights& w) = 0;
  // complex64 [max_seq_len, rope_dim/2] on `device` (on meta: a shape only).
  virtual at::Tensor rope_frequencies(int64_t max_seq_len, c10::Device device) const = 0;
  // The module names under "layers.N." of its GEMMs that may run in float8,
  // each group one GEMM (["attention.wq", "attention.wk", "attention.wv"]),
  // with the GEMM's unit name; and modules that stay in the compute dtype
  // (still valid filter entries).
  struct Gemm {
    std::string unit;                  // "attention.wq|wk|wv"
    std::vector<std::string> modules;  // "attention.wq", ...
  };
  virtual std::vector<Gemm> float8_gemms() const = 0;
  virtual std::vector<std::string> high_precision_modules() const = 0;
  // The block's attention on x (its normed input: whole, or this rank's
  // sequence part under SP). `docs`: block_causal starts (undefined:
  // causal). `cache`: op-level activation checkpointing.
  virtual at::Tensor forward(const BlockOps& ops, int64_t layer, const LayerWeights& w, const at::Tensor& x,
                             OpCache* cache, const at::Tensor& docs) const = 0;
};

// Precomputed RoPE rotations with Llama 3.1 scaling: complex64 [seq_len, dim/2].
at::Tensor precompute_freqs_cis(int64_t head_dim, int64_t seq_len, double theta,
                                const RopeScaling& scaling);
// DeepSeek-V3's rotations with YaRN (active past yarn.original_seq_len):
// complex64 [seq_len, rope_dim/2].
at::Tensor precompute_yarn_freqs_cis(int64_t rope_dim, int64_t seq_len, double theta, const YarnArgs& yarn);

// GQA or MLA, as args.is_mla() says.
std::unique_ptr<Attention> make_attention(const ModelArgs& args, int64_t max_seq_len);

}  // namespace ctitan
