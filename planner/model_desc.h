// A decoder-only transformer, as the planner sees it: every model family
// of the registry (trainer/models/registry.h: llama3, qwen3 with its MoE flavors,
// deepseek_v3 with multi-head latent attention and shared experts) through
// its flavors and the MoE keys, and --model.dim/n_layers/n_heads/
// n_kv_heads/ffn_hidden/vocab_size for any other dense Llama-style shape;
// `gpt` is the GPT-2/3 block (4·D MLP without gate, learned positions,
// untied head) for checking other trainers' published results.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trainer/config/job_config.h"

#include "trainer/model/model_args.h"

namespace ctitan {

struct ModelDesc {
  std::string name;          // "llama3 8B", "custom"
  std::string family = "llama3";  // a registry family, or "gpt"
  int64_t dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, ffn_hidden = 0, vocab_size = 0;
  int64_t max_positions = 0;  // gpt: learned position embeddings (0: rope)
  // The registry's args for a flavor (MoE, MLA, QK-norm, tying); a custom
  // llama3 shape builds them from the fields above (trainer_args()).
  std::optional<ModelArgs> flavor_args;

  bool gated_mlp() const { return family != "gpt"; }
  int64_t head_dim() const { return dim / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
  // Parameters: total and the token embedding (TorchTitan's exclusion).
  int64_t params() const;
  int64_t embedding_params() const;
  // TorchTitan's MFU numerator: 6·(N − N_emb) + 12·L·H·Dh·S, with N the
  // active parameters of an MoE model and MLA's own head dims (the
  // trainer's flops_per_token).
  double flops_per_token(int64_t seq_len) const;
  // The ModelArgs the trainer builds (not for gpt).
  ModelArgs trainer_args() const;
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
