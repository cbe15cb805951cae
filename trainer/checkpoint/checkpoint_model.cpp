#include "trainer/checkpoint/checkpoint_model.h"

#include "common/printable.h"
#include "trainer/checkpoint/checkpoint_metadata.h"
#include "trainer/model/transformer.h"

namespace ctitan {

ModelDescription describe_model(const ModelArgs& a, const std::string& flavor) {
  ModelDescription d;
  const auto add = [&d](const char* key, nlohmann::json v) { d.emplace_back(key, std::move(v)); };
  add("name", a.family);
  add("flavor", flavor);
  add("n_layers", a.n_layers);
  add("moe_num_experts", a.moe.num_experts);
  add("moe_top_k", a.moe.top_k);
  add("dim", a.dim);
  add("n_heads", a.n_heads);
  add("n_kv_heads", a.n_kv_heads);
  add("head_dim", a.head_dim());
  add("vocab_size", a.vocab_size);
  add("ffn_hidden_dim", a.ffn_hidden_dim());
  add("n_dense_layers", a.n_dense_layers);
  add("moe_hidden_dim", a.moe.hidden_dim);
  add("moe_num_shared_experts", a.moe.num_shared_experts);
  add("moe_score_func", a.moe.score_func);
  add("moe_route_norm", a.moe.route_norm);
  add("moe_route_scale", a.moe.route_scale);
  add("moe_score_before_experts", a.moe.score_before_experts);
  add("moe_n_expert_groups", a.moe.n_expert_groups);
  add("moe_n_limited_groups", a.moe.n_limited_groups);
  add("q_lora_rank", a.mla.q_lora_rank);
  add("kv_lora_rank", a.mla.kv_lora_rank);
  add("qk_nope_head_dim", a.mla.qk_nope_head_dim);
  add("qk_rope_head_dim", a.mla.qk_rope_head_dim);
  add("v_head_dim", a.mla.v_head_dim);
  add("mla_mscale", a.mla.mscale);
  add("qk_norm", a.qk_norm);
  add("tie_embeddings", a.tie_embeddings);
  add("norm_eps", a.norm_eps);
  add("final_norm_eps_of_dtype", a.final_norm_eps_of_dtype);
  add("rope_theta", a.rope_theta);
  add("rope_half_split", a.rope_half_split);
  add("rope_scaling", a.rope_scaling.enabled);
  add("rope_scaling_factor", a.rope_scaling.factor);
  add("rope_low_freq_factor", a.rope_scaling.low_freq_factor);
  add("rope_high_freq_factor", a.rope_scaling.high_freq_factor);
  add("rope_original_max_position_embeddings", a.rope_scaling.original_max_position_embeddings);
  add("yarn", a.yarn.enabled);
  add("yarn_original_seq_len", a.yarn.original_seq_len);
  add("yarn_factor", a.yarn.factor);
  add("yarn_beta_fast", a.yarn.beta_fast);
  add("yarn_beta_slow", a.yarn.beta_slow);
  return d;
}

nlohmann::json to_json(const ModelDescription& d) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, value] : d) j[key] = value;
  return j;
}

std::string first_model_difference(const nlohmann::json& saved, const ModelDescription& run) {
  if (!saved.is_object()) return "";
  std::string flavor;
  for (const auto& [key, value] : run)
    if (key == "flavor" && value.is_string()) flavor = value.get<std::string>();
  for (const auto& [key, value] : run) {
    const auto it = saved.find(key);
    if (it == saved.end() || *it == value) continue;
    // The keys a run sets in [model]; the rest come with the flavor.
    const bool config_key =
        key == "name" || key == "flavor" || key == "n_layers" || key == "moe_num_experts" || key == "moe_top_k";
    return (config_key ? "model." : "") + key + " = " + message_text(it->dump(), 80) + ", this run's " +
           (config_key ? std::string("config") : "model.flavor \"" + message_text(flavor) + "\"") + " has " +
           message_text(value.dump(), 80);
  }
  return "";
}

std::vector<std::pair<std::string, std::vector<int64_t>>> checkpoint_tensor_shapes(const ModelArgs& args) {
  const std::vector<ParamSpec> specs = model_param_specs(args, ModelPart{});
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const ParamSpec& s : specs) out.emplace_back("model." + s.name, s.global_shape);
  for (int64_t l = 0; l < args.n_layers; ++l)
    if (args.moe_layer(l))
      out.emplace_back("model.layers." + std::to_string(l) + ".moe.expert_bias", std::vector<int64_t>{args.moe.num_experts});
  for (const char* state : {"optimizer.exp_avg.", "optimizer.exp_avg_sq."})
    for (const ParamSpec& s : specs) out.emplace_back(state + s.name, s.global_shape);
  out.emplace_back("optimizer.step", std::vector<int64_t>{});
  return out;
}

CheckpointModel checkpoint_model(const ModelArgs& args, const std::string& flavor) {
  return {describe_model(args, flavor), checkpoint_tensor_shapes(args)};
}

}  // namespace ctitan
