// Qwen3 as TorchTitan v0.2.2 defines it: GQA with a decoupled head_dim
// (128 in every flavor), an RMSNorm over head_dim on q and k before RoPE
// (QK-norm), RoPE θ 1e6 in HF's rotate_half layout without Llama 3.1
// scaling, norm eps 1e-6, the small flavors' output tied to the embedding,
// and in the MoE flavors every layer an MoE (softmax router, route_norm,
// top-8, no shared experts, scores applied after the experts). Hugging
// Face: Qwen3ForCausalLM / Qwen3MoeForCausalLM, as TorchTitan's
// Qwen3StateDictAdapter.
#include "trainer/models/qwen3.h"

#include <map>
#include <nlohmann/json.hpp>

#include "trainer/models/hf_config.h"

namespace ctitan {

namespace {

ModelArgs dense(int64_t vocab, int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads, int64_t hidden,
                bool tied, double theta = 1e6) {
  ModelArgs a;
  a.family = "qwen3";
  a.vocab_size = vocab;
  a.dim = dim;
  a.n_layers = layers;
  a.n_heads = heads;
  a.n_kv_heads = kv_heads;
  a.head_dim_size = 128;
  a.ffn_hidden = hidden;
  a.norm_eps = 1e-6;
  a.rope_theta = theta;
  a.rope_scaling.enabled = false;
  a.rope_half_split = true;
  a.qk_norm = true;
  a.tie_embeddings = tied;
  return a;
}

ModelArgs moe(ModelArgs a, int64_t experts, int64_t top_k, int64_t inter_dim) {
  a.moe.num_experts = experts;
  a.moe.num_shared_experts = 0;
  a.moe.top_k = top_k;
  a.moe.hidden_dim = inter_dim;
  a.moe.score_func = "softmax";
  a.moe.route_norm = true;
  a.moe.route_scale = 1.0;
  a.moe.score_before_experts = false;
  a.moe.load_balance_coeff = 1e-3;  // MoEArgs' default
  return a;
}

// ctitan's own, for tests: Qwen3's structure at a size that trains in
// milliseconds (head_dim 16 decoupled from dim/heads = 8; 4 experts, top 2).
ModelArgs tiny(bool with_moe) {
  ModelArgs a = dense(64, 32, 2, 4, 2, 64, false);
  a.head_dim_size = 16;
  return with_moe ? moe(a, 4, 2, 16) : a;
}

const FlavorTable& flavors() {
  static const FlavorTable table = {
      {"tiny", tiny(false)},
      {"tiny_moe", tiny(true)},
      {"debugmodel", dense(2048, 256, 8, 16, 8, 3072, true)},
      {"0.6B", dense(151936, 1024, 28, 16, 8, 3072, true)},
      {"1.7B", dense(151936, 2048, 28, 16, 8, 6144, true)},
      {"4B", dense(151936, 2560, 36, 32, 8, 9728, true)},
      {"8B", dense(151936, 4096, 36, 32, 8, 12288, false)},
      {"14B", dense(151936, 5120, 40, 40, 8, 17408, false)},
      {"32B", dense(151936, 5120, 64, 64, 8, 25600, false)},
      {"debugmodel_moe", moe(dense(2048, 256, 8, 16, 8, 3072, false), 64, 8, 768)},
      {"30B-A3B", moe(dense(151936, 2048, 48, 32, 4, 6144, false), 128, 8, 768)},
      {"235B-A22B", moe(dense(151936, 4096, 94, 64, 4, 12288, false, 5e6), 128, 8, 1536)},
  };
  return table;
}

std::vector<std::string> qwen3_flavor_names() { return flavor_names(flavors()); }
ModelArgs qwen3_flavor(const std::string& flavor) { return find_flavor(flavors(), "qwen3", flavor); }

std::string qwen3_refuses(const ModelArgs& a, const ModelLayout& l) {
  // A tied output is one tensor with the embedding: ctitan keeps it in the
  // flat store, so the embedding and the head must stay in one rank's
  // whole model (no FSDP units, which CP also uses, no pipeline stages).
  if (a.tie_embeddings && (l.dp_shard * l.cp > 1 || l.pp > 1))
    return "model qwen3 with a tied output (flavors debugmodel, 0.6B, 1.7B, 4B) runs without FSDP, context and "
           "pipeline parallelism in ctitan; set parallelism.data_parallel_shard_degree, context_parallel_degree and "
           "pipeline_parallel_degree to 1 (DDP and TP run), or pick an untied flavor (8B, 14B, 32B, debugmodel_moe)";
  return attention_refuses_context_parallel(a, l, /*flex_with_cp=*/false);
}

// Hugging Face: RoPE is rotate_half already (no permutation); the QK-norms
// are self_attn.q_norm / k_norm.
std::string qwen3_hf_type(const ModelArgs& a) { return a.moe.num_experts > 0 ? "qwen3_moe" : "qwen3"; }
std::string qwen3_hf_architecture(const ModelArgs& a) {
  return a.moe.num_experts > 0 ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM";
}

// Qwen3Config / Qwen3MoeConfig: RoPE without scaling.
void qwen3_hf_write_config(const ModelArgs& args, int64_t, nlohmann::json& c) {
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", args.rope_theta}};
  c["max_position_embeddings"] = 40960;  // Qwen3's released configs
  c["use_sliding_window"] = false;
  c["sliding_window"] = nullptr;
  c["max_window_layers"] = args.n_layers;
  if (args.moe.num_experts == 0) return;
  c["num_experts"] = args.moe.num_experts;
  c["num_experts_per_tok"] = args.moe.top_k;
  c["moe_intermediate_size"] = args.moe.hidden_dim;
  c["norm_topk_prob"] = args.moe.route_norm;
  c["decoder_sparse_step"] = 1;
  c["mlp_only_layers"] = nlohmann::json::array();
  c["output_router_logits"] = false;
  c["router_aux_loss_coef"] = 0.001;
}

HfAdapter qwen3_hf() {
  HfAdapter hf;
  hf.layer_names = {{"attention.wk.weight", "self_attn.k_proj.weight"},
                    {"attention.wv.weight", "self_attn.v_proj.weight"},
                    {"attention.q_norm.weight", "self_attn.q_norm.weight"},
                    {"attention.k_norm.weight", "self_attn.k_norm.weight"}};
  hf.model_type = &qwen3_hf_type;
  hf.architecture = &qwen3_hf_architecture;
  hf.write_config = &qwen3_hf_write_config;
  hf.check_config = &check_gqa_config;
  return hf;
}

}  // namespace

const ModelFamily& qwen3_family() {
  static const ModelFamily f{"qwen3", "Qwen3 dense and MoE (QK-norm, head_dim 128, RoPE θ 1e6, top-k experts)",
                             &qwen3_flavor_names, &qwen3_flavor, &qwen3_refuses, qwen3_hf()};
  return f;
}

}  // namespace ctitan
