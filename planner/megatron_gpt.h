// Megatron-LM's GPT (Megatron-Core's GPTModel as its published GPT-2/3
// runs configure it), which ctitan's trainer does not build, described the
// way the trainer describes its own models: the parameters as ParamSpecs
// (model/param_spec.h) and tensor parallelism as a placement plan over
// them. The planner reads both exactly as it reads the trainer's
// model_param_specs and tensor_parallel_plan, so a GPT block's GEMMs come
// from the same derivation (planner/block_gemms.h).
//
// The block: input_layernorm, self_attention.linear_qkv (one fused
// projection), linear_proj, pre_mlp_layernorm, mlp.linear_fc1, linear_fc2
// (a GELU MLP; fc1 is [2F, D] where the MLP is gated). LayerNorms carry a
// bias and every Linear one (GPT-2/3's add_bias_linear) when the model
// uses LayerNorm; RMSNorm models have neither.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/model/param_spec.h"

namespace ctitan {

struct ModelDesc;

// Layers [first_layer, first_layer + n_layers), with the embeddings
// (word, and learned positions when max_positions > 0) and the head
// (final norm and the untied output layer) where asked, in forward order.
std::vector<ParamSpec> megatron_gpt_param_specs(const ModelDesc& model, bool embedding, int64_t first_layer,
                                                int64_t n_layers, bool head);

// Megatron-Core's tensor parallelism as rank r of tp: ColumnParallelLinear
// (linear_qkv, linear_fc1, their biases; the output layer; the vocab-
// parallel word embedding) Shard(0), RowParallelLinear (linear_proj,
// linear_fc2) Shard(1) with its bias replicated, everything else
// Replicate(). tp = 1: unchanged.
std::vector<ParamSpec> megatron_gpt_tensor_parallel_plan(std::vector<ParamSpec> specs, int64_t tp, int64_t r);

}  // namespace ctitan
