// A decoder-only transformer, as the planner sees it: every model family
// of the registry (trainer/models/registry.h: llama3, qwen3 with its MoE flavors,
// deepseek_v3 with multi-head latent attention and shared experts) through
// its flavors and the MoE keys, and --model.dim/n_layers/n_heads/
// n_kv_heads/ffn_hidden/vocab_size for any other dense Llama-style shape.
// A block the trainer does not build is described by its structure
// (gated_mlp, layer_norm, max_positions below): Megatron-LM's GPT-2/3
// block (4·D GELU MLP, LayerNorms and biases, learned positions, untied
// head; `--model.family gpt`) for checking other trainers' published
// results. Either way the planner reads a block's parameters as ParamSpecs
// and TP's placement plan over them (block_param_specs,
// tensor_parallel_plan), never a family's name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainer/config/job_config.h"
#include "trainer/model/model_args.h"
#include "trainer/model/param_spec.h"

namespace ctitan {

struct ModelDesc {
  std::string name;          // "llama3 8B", "custom"
  std::string family = "llama3";  // a registry family, or "gpt" (its name in tables and on the command line)
  int64_t dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, ffn_hidden = 0, vocab_size = 0;
  // The block's structure; the trainer builds RMSNorm, SwiGLU, RoPE blocks.
  bool gated_mlp = true;      // SwiGLU (w1, w3, w2); false: a GELU MLP (fc1, fc2)
  bool layer_norm = false;    // LayerNorms with biases and biased Linears (GPT-2/3); false: RMSNorm, no biases
  int64_t max_positions = 0;  // learned position embeddings of a GPT block (0: none)
  // The registry's args for a flavor (MoE, MLA, QK-norm, tying); a custom
  // llama3 shape builds them from the fields above (trainer_args()).
  std::optional<ModelArgs> flavor_args;

  // Whether ctitan's trainer builds this block (then trainer_args() is its
  // model); otherwise it is Megatron-Core's GPT block (planner/megatron_gpt.h).
  bool trainer_builds() const { return gated_mlp && !layer_norm; }
  int64_t head_dim() const { return dim / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
  // Parameters: total and the token embedding (TorchTitan's exclusion).
  int64_t params() const;
  int64_t embedding_params() const;
  // TorchTitan's MFU numerator: 6·(N − N_emb) + 12·L·H·Dh·S, with N the
  // active parameters of an MoE model and MLA's own head dims (the
  // trainer's flops_per_token).
  double flops_per_token(int64_t seq_len) const;
  // The ModelArgs the trainer builds (trainer_builds() only).
  ModelArgs trainer_args() const;
  // One block's whole parameters, in forward order (the trainer's
  // model_param_specs of a dense or an MoE layer, or Megatron's GPT block),
  // and TP's placement plan over them as rank r of tp (the trainer's
  // tensor_parallel_plan, or Megatron's).
  std::vector<ParamSpec> block_param_specs(bool moe_layer) const;
  std::vector<ParamSpec> tensor_parallel_plan(std::vector<ParamSpec> specs, int64_t tp, int64_t r) const;
};

// The FLOPs per token Megatron-LM counts (Narayanan et al. 2021, Eq. 3:
// 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) per iteration of B sequences of s
// tokens): forward, backward and the full-AC recomputed forward of the
// GEMMs and of attention over all s keys, and the logits.
double megatron_flops_per_token(const ModelDesc& m, int64_t seq_len);

// n_layers > 0 replaces the flavor's layer count (model.n_layers).
ModelDesc model_from_flavor(const std::string& flavor, int64_t n_layers = 0);
// Any family's flavor with the run's model keys (n_layers and the MoE keys).
ModelDesc model_from_config(const ModelSection& model);
// "--model.dim" style overrides on top of a preset: key without the
// "model." prefix (dim, n_layers, n_heads, n_kv_heads, ffn_hidden,
// vocab_size, family, max_positions). Throws InputError for an unknown key
// or a value that is not a positive integer.
void override_model(ModelDesc& m, const std::string& key, const std::string& value);
// Once every override is applied (in any order): dim divisible by n_heads,
// n_heads by n_kv_heads; else InputError.
void check_model_shape(const ModelDesc& m);
// One line: "llama3 8B: dim 4096, 32 layers, 32 heads (8 kv), ffn 14336, vocab 128256, 8.03 B parameters"
std::string describe(const ModelDesc& m);

}  // namespace ctitan
