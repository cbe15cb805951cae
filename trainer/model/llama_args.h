// Llama 3 model arguments, flavors and the numbers derived from them
// (parameter counts, FLOPs per token) without allocating anything.
//
// Flavors follow TorchTitan's torchtitan/models/llama3 definitions; "125M"
// and "tiny" are ctitan's own (benchmarking and golden tests).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ctitan {

struct RopeScaling {  // Llama 3.1 frequency scaling
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct LlamaArgs {
  int64_t dim = 4096;
  int64_t n_layers = 32;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 32;
  int64_t vocab_size = 128256;
  int64_t multiple_of = 256;
  std::optional<double> ffn_dim_multiplier;
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  RopeScaling rope_scaling;
  bool depth_init = true;  // wo/w2/w3 init std 0.02/sqrt(2(layer+1))
  std::optional<int64_t> ffn_hidden;  // set: this SwiGLU hidden size (the planner's --model.ffn_hidden)

  int64_t head_dim() const { return dim / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
  // TorchTitan's SwiGLU hidden size: 4d → 2/3 → ×multiplier → round up
  // (or ffn_hidden when set).
  int64_t ffn_hidden_dim() const;
};

// Throws InputError naming the known flavors when `flavor` is unknown.
// n_layers > 0 replaces the flavor's layer count (model.n_layers: an
// 8B-shaped model that fits one GPU, say); 0 keeps it.
LlamaArgs llama3_flavor(const std::string& flavor, int64_t n_layers = 0);
std::vector<std::string> llama3_flavor_names();

struct ParamCounts {
  int64_t total = 0;
  int64_t embedding = 0;  // tok_embeddings only, as TorchTitan counts it
};
ParamCounts count_params(const LlamaArgs& a);

// TorchTitan: 6·(N − N_embedding) + 12·L·H·(D/H)·S.
double flops_per_token(const LlamaArgs& a, int64_t seq_len);

}  // namespace ctitan
