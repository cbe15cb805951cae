// One TransformerBlock's compute views of its parameters (ParamStore
// leaves): the attention's (GQA's fused wq|wk|wv, or MLA's), the dense FFN's
// fused w1|w3 and w2, or the MoE layer's, and the two norms. Undefined
// tensors are the ones the block does not have.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "trainer/model/moe.h"

namespace ctitan {

struct LayerWeights {
  at::Tensor attention_norm, wqkv, wo, ffn_norm, w13, w2;  // w13, w2: the dense FFN
  at::Tensor q_norm, k_norm;                                // qk_norm
  at::Tensor bqkv, bo, sinks;                               // attention_bias (bq|bk|bv, bo), attention_sinks
  MoeWeights moe;                                           // an MoE layer: moe.router defined
  struct Mla {  // multi-head latent attention (DeepSeek-V3): wq, or wq_a/q_norm/wq_b
    at::Tensor wq, wq_a, q_norm, wq_b, wkv_a, kv_norm, wkv_b;
  } mla;
  // The defined tensors in a fixed order (activation checkpointing's
  // inputs), and the same structure over such a list starting at in[first].
  std::vector<at::Tensor> list() const;
  LayerWeights with(const std::vector<at::Tensor>& in, size_t first) const;
};

}  // namespace ctitan
