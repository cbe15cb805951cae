#include "planner/megatron_gpt.h"

#include <string>

#include "planner/model_desc.h"

namespace ctitan {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::vector<ParamSpec> megatron_gpt_param_specs(const ModelDesc& model, bool embedding, int64_t first_layer,
                                                int64_t n_layers, bool head) {
  const int64_t D = model.dim, qkv = (model.n_heads + 2 * model.n_kv_heads) * model.head_dim();
  const int64_t q = model.n_heads * model.head_dim();
  const int64_t fc1 = (model.gated_mlp ? 2 : 1) * model.ffn_hidden;
  const bool biases = model.layer_norm;
  std::vector<ParamSpec> specs;
  const auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    specs.push_back(whole_param(name + ".weight", {out, in}));
    if (biases) specs.push_back(whole_param(name + ".bias", {out}));
  };
  const auto norm = [&](const std::string& name) {
    specs.push_back(whole_param(name + ".weight", {D}));
    if (biases) specs.push_back(whole_param(name + ".bias", {D}));
  };
  if (embedding) {
    specs.push_back(whole_param("embedding.word_embeddings.weight", {model.vocab_size, D}));
    if (model.max_positions > 0)
      specs.push_back(whole_param("embedding.position_embeddings.weight", {model.max_positions, D}));
  }
  for (int64_t l = first_layer; l < first_layer + n_layers; ++l) {
    const std::string p = "decoder.layers." + std::to_string(l) + ".";
    norm(p + "input_layernorm");
    linear(p + "self_attention.linear_qkv", qkv, D);
    linear(p + "self_attention.linear_proj", D, q);
    norm(p + "pre_mlp_layernorm");
    linear(p + "mlp.linear_fc1", fc1, D);
    linear(p + "mlp.linear_fc2", D, model.ffn_hidden);
  }
  if (head) {
    norm("decoder.final_layernorm");
    specs.push_back(whole_param("output_layer.weight", {model.vocab_size, D}));
  }
  return specs;
}

std::vector<ParamSpec> megatron_gpt_tensor_parallel_plan(std::vector<ParamSpec> specs, int64_t tp, int64_t r) {
  for (ParamSpec& s : specs) {
    const std::string& n = s.name;
    const bool column = ends_with(n, ".linear_qkv.weight") || ends_with(n, ".linear_qkv.bias") ||
                        ends_with(n, ".linear_fc1.weight") || ends_with(n, ".linear_fc1.bias") ||
                        n == "embedding.word_embeddings.weight" || n == "output_layer.weight";
    if (column) s = shard_even(std::move(s), "tp", tp, r, 0);
    else if (ends_with(n, ".linear_proj.weight") || ends_with(n, ".linear_fc2.weight"))
      s = shard_even(std::move(s), "tp", tp, r, 1);
    else s = replicate(std::move(s), "tp", tp);
  }
  return specs;
}

}  // namespace ctitan
