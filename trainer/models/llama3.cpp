// Llama 3 (TorchTitan's torchtitan/models/llama3): flavors, refusals and
// the Hugging Face adapter (LlamaForCausalLM, as TorchTitan's
// Llama3StateDictAdapter). "125M" and "tiny" are ctitan's own (benchmarking,
// golden tests).
#include "trainer/models/llama3.h"

#include <map>
#include <nlohmann/json.hpp>

#include "trainer/models/hf_config.h"

namespace ctitan {

namespace {

ModelArgs make(int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads, int64_t vocab,
               int64_t multiple_of, std::optional<double> ffn_mult) {
  ModelArgs a;
  a.dim = dim;
  a.n_layers = layers;
  a.n_heads = heads;
  a.n_kv_heads = kv_heads;
  a.vocab_size = vocab;
  a.multiple_of = multiple_of;
  a.ffn_dim_multiplier = ffn_mult;
  return a;
}

// TorchTitan's *_flex_attn / *_varlen_attn flavors: the causal twin with
// document masks.
ModelArgs with_attention(ModelArgs a, const char* attn_type) {
  a.attn_type = attn_type;
  a.attn_mask_type = "block_causal";
  return a;
}

const FlavorTable& flavors() {
  static const FlavorTable table = {
      {"tiny", make(32, 2, 4, 2, 64, 16, std::nullopt)},
      {"debugmodel", make(256, 6, 16, 16, 2048, 256, std::nullopt)},
      {"debugmodel_flex_attn", with_attention(make(256, 6, 16, 16, 2048, 256, std::nullopt), "flex")},
      {"debugmodel_varlen_attn", with_attention(make(256, 6, 16, 16, 2048, 256, std::nullopt), "varlen")},
      {"125M", make(768, 12, 12, 4, 32000, 256, std::nullopt)},
      {"8B", make(4096, 32, 32, 8, 128256, 1024, 1.3)},
      {"8B_flex", with_attention(make(4096, 32, 32, 8, 128256, 1024, 1.3), "flex")},
      {"8B_varlen", with_attention(make(4096, 32, 32, 8, 128256, 1024, 1.3), "varlen")},
      {"70B", make(8192, 80, 64, 8, 128256, 4096, 1.3)},
      {"405B", make(16384, 126, 128, 8, 128256, 4096, 1.2)},
  };
  return table;
}

}  // namespace

std::vector<std::string> llama3_flavor_names() { return flavor_names(flavors()); }

ModelArgs llama3_flavor(const std::string& flavor, int64_t n_layers) {
  ModelArgs a = find_flavor(flavors(), "llama3", flavor);
  if (n_layers > 0) a.n_layers = n_layers;
  return a;
}

namespace {

// TorchTitan's Llama 3 runs CP under flex attention (document masks too),
// not under varlen.
std::string llama3_refuses(const ModelArgs& a, const ModelLayout& l) {
  return attention_refuses_context_parallel(a, l, /*flex_with_cp=*/true);
}
ModelArgs llama3_any(const std::string& flavor) { return llama3_flavor(flavor); }

// Hugging Face: ctitan's RoPE rotates the pairs (x[2i], x[2i+1]) of a head,
// transformers' rotate_half pairs x[i] with x[i + Dh/2], so the rows of wq
// and wk are permuted inside every head (the adapter's _permute).
std::string llama3_hf_type(const ModelArgs&) { return "llama"; }
std::string llama3_hf_architecture(const ModelArgs&) { return "LlamaForCausalLM"; }

// LlamaConfig: ctitan (like TorchTitan) always applies Llama 3.1's frequency scaling.
void llama3_hf_write_config(const ModelArgs& args, int64_t, nlohmann::json& c) {
  const RopeScaling& r = args.rope_scaling;
  c["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", r.factor},
                       {"low_freq_factor", r.low_freq_factor},
                       {"high_freq_factor", r.high_freq_factor},
                       {"original_max_position_embeddings", r.original_max_position_embeddings}};
  c["rope_parameters"] = c["rope_scaling"];
  c["rope_parameters"]["rope_theta"] = args.rope_theta;
  c["max_position_embeddings"] = 131072;  // TorchTitan's TransformerModelArgs.max_seq_len
  c["mlp_bias"] = false;
}

HfAdapter llama3_hf() {
  HfAdapter hf;
  hf.layer_names = {{"attention.wk.weight", "self_attn.k_proj.weight"},
                    {"attention.wv.weight", "self_attn.v_proj.weight"}};
  hf.model_type = &llama3_hf_type;
  hf.architecture = &llama3_hf_architecture;
  hf.write_config = &llama3_hf_write_config;
  hf.check_config = &check_gqa_config;
  return hf;
}

}  // namespace

const ModelFamily& llama3_family() {
  static const ModelFamily f{"llama3", "Llama 3 / 3.1 (GQA, SwiGLU, RoPE with Llama 3.1 scaling)",
                             &llama3_flavor_names, &llama3_any, &llama3_refuses, llama3_hf()};
  return f;
}

}  // namespace ctitan
