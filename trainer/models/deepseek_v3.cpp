// DeepSeek-V3 as TorchTitan v0.2.2 defines it (deepseekv3_args):
// - attention: MLA (model_args.h MlaArgs): kv_lora_rank 512, q/k heads of
//   128 + 64 (RoPE part) and v heads of 128; the large flavors put q through
//   a rank-1536 bottleneck with its own RMSNorm;
// - RoPE θ 1e4 on the 64-wide part, interleaved pairs, YaRN (factor 40,
//   β 32/1, original length 4096) active only past 4096 tokens, where the
//   softmax scale also grows by (0.1·mscale·ln 40 + 1)²;
// - norm eps 1e-5, but the final norm's is torch.finfo(dtype).eps (TorchTitan
//   builds it as nn.RMSNorm(dim) without eps);
// - the first n_dense_layers layers dense, the rest MoE with shared experts,
//   softmax routing (671B: sigmoid with route_norm), group-limited routing
//   and route_scale in 236B/671B, the aux-loss-free bias (coeff 1e-3).
// debugmodel_flex_attn, 16B, 236B and 671B use TorchTitan's flex attention
// with block_causal document masks.
//
// Hugging Face (DeepseekV3ForCausalLM, as TorchTitan's
// DeepSeekV3StateDictAdapter): wq_a/q_norm/wq_b → q_a_proj/q_a_layernorm/
// q_b_proj, wkv_a/kv_norm/wkv_b → kv_a_proj_with_mqa/kv_a_layernorm/
// kv_b_proj, shared experts → mlp.shared_experts.*, and the expert bias →
// mlp.gate.e_score_correction_bias (fp32); RoPE stays interleaved
// (config.json: rope_interleave = true). transformers applies YaRN whenever
// config.json names it, TorchTitan only past original_seq_len: an export
// names it only when the run used it.
#include "trainer/models/deepseek_v3.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/printable.h"
#include "trainer/models/hf_config.h"

namespace ctitan {

namespace {

struct Shape {
  int64_t vocab, dim, inter, moe_inter, layers, dense_layers, heads, q_lora;
  double mscale;
  int64_t experts, shared, top_k, groups, limited;
  const char* score_func;
  bool route_norm;
  double route_scale;
  bool block_causal;
};

ModelArgs deepseek(const Shape& s) {
  ModelArgs a;
  a.family = "deepseek_v3";
  a.vocab_size = s.vocab;
  a.dim = s.dim;
  a.n_layers = s.layers;
  a.n_dense_layers = s.dense_layers;
  a.n_heads = s.heads;
  a.n_kv_heads = s.heads;
  a.ffn_hidden = s.inter;
  a.norm_eps = 1e-5;
  a.final_norm_eps_of_dtype = true;
  a.rope_theta = 10000.0;
  a.rope_scaling.enabled = false;
  a.mla = MlaArgs{s.q_lora, 512, 128, 64, 128, s.mscale};
  a.yarn = YarnArgs{true, 4096, 40.0, 32.0, 1.0};
  a.moe.num_experts = s.experts;
  a.moe.num_shared_experts = s.shared;
  a.moe.top_k = s.top_k;
  a.moe.hidden_dim = s.moe_inter;
  a.moe.score_func = s.score_func;
  a.moe.route_norm = s.route_norm;
  a.moe.route_scale = s.route_scale;
  a.moe.score_before_experts = false;
  a.moe.n_expert_groups = s.groups;
  a.moe.n_limited_groups = s.limited;
  a.moe.load_balance_coeff = 1e-3;
  if (s.block_causal) {
    a.attn_type = "flex";
    a.attn_mask_type = "block_causal";
  }
  return a;
}

// ctitan's own, for tests: every path of the large flavors at a size that
// trains in milliseconds — the low-rank q with its norm, YaRN active past 32
// tokens, sigmoid routing with route_norm, route_scale 2.5 and groups (the
// best 1 of 2 groups of 2 experts), a shared expert, one dense layer first.
ModelArgs tiny() {
  ModelArgs a = deepseek({64, 32, 64, 16, 3, 1, 2, 16, 1.0, 4, 1, 2, 2, 1, "sigmoid", true, 2.5, false});
  a.mla = MlaArgs{16, 16, 8, 8, 8, 1.0};
  a.yarn = YarnArgs{true, 32, 4.0, 32.0, 1.0};
  return a;
}

const FlavorTable& flavors() {
  static const FlavorTable table = {
      {"tiny", tiny()},
      {"debugmodel", deepseek({2048, 256, 1024, 256, 6, 1, 16, 0, 0.70, 8, 2, 3, 0, 0, "softmax", false, 1.0, false})},
      {"debugmodel_flex_attn",
       deepseek({2048, 256, 1024, 256, 6, 1, 16, 0, 0.70, 8, 2, 3, 0, 0, "softmax", false, 1.0, true})},
      {"16B", deepseek({102400, 2048, 10944, 1408, 27, 1, 16, 0, 0.70, 64, 2, 6, 0, 0, "softmax", false, 1.0, true})},
      {"236B",
       deepseek({102400, 5120, 12288, 1536, 60, 1, 128, 1536, 1.0, 160, 2, 6, 8, 3, "softmax", false, 16.0, true})},
      {"671B",
       deepseek({129280, 7168, 18432, 2048, 61, 3, 128, 1536, 1.0, 256, 1, 8, 8, 4, "sigmoid", true, 2.5, true})},
  };
  return table;
}

std::vector<std::string> deepseek_v3_flavor_names() { return flavor_names(flavors()); }
ModelArgs deepseek_v3_flavor(const std::string& flavor) { return find_flavor(flavors(), "deepseek_v3", flavor); }

std::string deepseek_v3_refuses(const ModelArgs& a, const ModelLayout& l) {
  return attention_refuses_context_parallel(a, l, /*flex_with_cp=*/false);
}

// transformers' DeepseekV3 routes by sigmoid scores only; TorchTitan's
// debugmodel, 16B and 236B route by softmax: their weights would give other
// logits there.
std::string deepseek_v3_hf_refuses(const ModelArgs& args) {
  if (args.moe.num_experts == 0 || args.moe.score_func == "sigmoid") return "";
  return "Hugging Face checkpoints of model.name \"deepseek_v3\": this flavor routes by " + args.moe.score_func +
         " scores, but transformers' DeepseekV3 always routes by sigmoid, so the same weights would give "
         "other logits there; use a sigmoid-routed flavor (671B) or set checkpoint.initial_load_in_hf and "
         "last_save_in_hf to false (ctitan's own checkpoint format)";
}

std::string deepseek_v3_hf_type(const ModelArgs&) { return "deepseek_v3"; }
std::string deepseek_v3_hf_architecture(const ModelArgs&) { return "DeepseekV3ForCausalLM"; }

// DeepseekV3Config.
void deepseek_v3_hf_write_config(const ModelArgs& args, int64_t seq_len, nlohmann::json& c) {
  const MlaArgs& m = args.mla;
  c.erase("head_dim");  // transformers derives it (the RoPE part)
  c["q_lora_rank"] = m.q_lora_rank > 0 ? nlohmann::json(m.q_lora_rank) : nlohmann::json(nullptr);
  c["kv_lora_rank"] = m.kv_lora_rank;
  c["qk_nope_head_dim"] = m.qk_nope_head_dim;
  c["qk_rope_head_dim"] = m.qk_rope_head_dim;
  c["v_head_dim"] = m.v_head_dim;
  c["rope_interleave"] = true;  // ctitan's (TorchTitan's) complex RoPE pairs
  c["first_k_dense_replace"] = args.n_dense_layers;
  c["moe_intermediate_size"] = args.moe.hidden_dim;
  c["n_routed_experts"] = args.moe.num_experts;
  c["n_shared_experts"] = args.moe.num_shared_experts;
  c["num_experts_per_tok"] = args.moe.top_k;
  c["n_group"] = std::max<int64_t>(args.moe.n_expert_groups, 1);
  c["topk_group"] = args.moe.n_expert_groups > 1 ? args.moe.n_limited_groups : 1;
  c["routed_scaling_factor"] = args.moe.route_scale;
  c["norm_topk_prob"] = args.moe.route_norm;
  c["num_nextn_predict_layers"] = 0;
  // YaRN as the run computed it: TorchTitan (and ctitan) scale only when
  // the run's sequence is longer than original_seq_len, transformers
  // whenever config.json names YaRN; so it is named only then.
  const YarnArgs& y = args.yarn;
  if (y.enabled && (seq_len == 0 || seq_len > y.original_seq_len)) {
    c["rope_parameters"] = {{"rope_type", "yarn"},
                            {"rope_theta", args.rope_theta},
                            {"factor", y.factor},
                            {"original_max_position_embeddings", y.original_seq_len},
                            {"beta_fast", y.beta_fast},
                            {"beta_slow", y.beta_slow},
                            {"mscale", m.mscale},
                            {"mscale_all_dim", m.mscale}};
    c["max_position_embeddings"] = static_cast<int64_t>(static_cast<double>(y.original_seq_len) * y.factor);
  } else {
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", args.rope_theta}};
    c["max_position_embeddings"] = y.enabled ? y.original_seq_len : std::max<int64_t>(seq_len, 1);
  }
  c["rope_scaling"] = c["rope_parameters"];
}

// head_dim is the RoPE part in DeepseekV3Config; the routing and YaRN show
// in no tensor's shape. The multi-token-prediction layers
// (num_nextn_predict_layers) follow the last layer: readers skip them.
int64_t deepseek_v3_hf_check_config(const HfConfigCheck& config, const ModelArgs& args) {
  const nlohmann::json& c = config.json();
  const MlaArgs& m = args.mla;
  config.integer("kv_lora_rank", m.kv_lora_rank);
  if (c.contains("q_lora_rank") && !(c["q_lora_rank"].is_null() && m.q_lora_rank == 0))
    config.integer("q_lora_rank", m.q_lora_rank);
  config.integer("qk_nope_head_dim", m.qk_nope_head_dim);
  config.integer("qk_rope_head_dim", m.qk_rope_head_dim);
  config.integer("v_head_dim", m.v_head_dim);
  config.integer("first_k_dense_replace", args.n_dense_layers);
  config.integer("n_shared_experts", args.moe.num_shared_experts);
  config.integer("n_group", std::max<int64_t>(args.moe.n_expert_groups, 1));
  config.integer("topk_group", args.moe.n_expert_groups > 1 ? args.moe.n_limited_groups : 1);
  if (c.contains("routed_scaling_factor"))
    config.real(c["routed_scaling_factor"], "routed_scaling_factor", args.moe.route_scale);
  if (c.contains("rope_interleave") && c["rope_interleave"] != true)
    config.fail("rope_interleave = " + message_text(c["rope_interleave"].dump()) +
                ", but ctitan (as TorchTitan) reads DeepSeek-V3 weights whose RoPE rotates interleaved pairs; "
                "convert the checkpoint or set rope_interleave to true if its weights are interleaved");
  if (const nlohmann::json* y = hf_yarn_of(c)) {
    if (!args.yarn.enabled)
      config.fail(std::string("the checkpoint uses YaRN RoPE scaling and this flavor does not") +
                  HfConfigCheck::kOtherModel);
    check_hf_yarn(config, *y, args.yarn);
    if (y->contains("mscale_all_dim")) config.real((*y)["mscale_all_dim"], "rope_parameters.mscale_all_dim", m.mscale);
  }
  if (c.contains("num_nextn_predict_layers") && c["num_nextn_predict_layers"].is_number_integer())
    return std::max<int64_t>(c["num_nextn_predict_layers"].get<int64_t>(), 0);
  return 0;
}

HfAdapter deepseek_v3_hf() {
  HfAdapter hf;
  hf.layer_names = {{"attention.wq_a.weight", "self_attn.q_a_proj.weight"},
                    {"attention.q_norm.weight", "self_attn.q_a_layernorm.weight"},
                    {"attention.wq_b.weight", "self_attn.q_b_proj.weight"},
                    {"attention.wkv_a.weight", "self_attn.kv_a_proj_with_mqa.weight"},
                    {"attention.kv_norm.weight", "self_attn.kv_a_layernorm.weight"},
                    {"attention.wkv_b.weight", "self_attn.kv_b_proj.weight"},
                    {"moe.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
                    {"moe.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
                    {"moe.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
                    {"moe.expert_bias", "mlp.gate.e_score_correction_bias"}};
  hf.rope_interleaved = true;
  hf.expert_bias = true;
  hf.refuses = &deepseek_v3_hf_refuses;
  hf.model_type = &deepseek_v3_hf_type;
  hf.architecture = &deepseek_v3_hf_architecture;
  hf.write_config = &deepseek_v3_hf_write_config;
  hf.check_config = &deepseek_v3_hf_check_config;
  return hf;
}

}  // namespace

const ModelFamily& deepseek_v3_family() {
  static const ModelFamily f{"deepseek_v3",
                             "DeepSeek-V3 (multi-head latent attention, YaRN, dense then MoE layers with shared experts)",
                             &deepseek_v3_flavor_names, &deepseek_v3_flavor, &deepseek_v3_refuses,
                             deepseek_v3_hf()};
  return f;
}

}  // namespace ctitan
