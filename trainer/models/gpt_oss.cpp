// GPT-OSS as TorchTitan v0.2.2 defines it (gpt_oss/model/args.py, model.py,
// moe.py; every flavor an MoE model):
// - attention: GQA with 64 query heads and 8 KV heads of head_dim 64 at dim
//   2880 (heads × head_dim ≠ dim), biases on wq, wk, wv and wo, a learned
//   sink logit per head, and the sliding window (128 keys) on the even
//   layers, the odd ones full causal (or block_causal);
// - RoPE θ 150000 in rotate_half's layout with YaRN (factor 32, ntk_alpha 1,
//   ntk_beta 32, original length 4096) at every length, cos and sin times
//   0.1·ln 32 + 1;
// - MoE in every layer: a router with a bias, softmax scores, top-4 with
//   route_norm, no shared expert, experts with biases and the clamped
//   SwiGLU (limit 7, α 1.702), the aux-loss-free bias (coeff 1e-3);
// - norm eps 1e-5, vocabulary 201,088, the output untied;
// - init: every layer weight trunc_normal at the depth-scaled std.
// TorchTitan keeps the layers in bf16 and runs flex attention only; ctitan
// keeps fp32 masters like every family and refuses attn_type other than
// flex, as TorchTitan does. TorchTitan refuses context parallelism for
// GPT-OSS; ctitan runs it (the window as one more mask on each ring pair).
#include "trainer/models/gpt_oss.h"

#include <nlohmann/json.hpp>

#include "trainer/models/hf_config.h"

namespace ctitan {

namespace {

struct Shape {
  int64_t vocab, dim, layers, heads, kv_heads, head_dim, experts, top_k, moe_inter, window;
};

ModelArgs gpt_oss(const Shape& s) {
  ModelArgs a;
  a.family = "gpt_oss";
  a.vocab_size = s.vocab;
  a.dim = s.dim;
  a.n_layers = s.layers;
  a.n_heads = s.heads;
  a.n_kv_heads = s.kv_heads;
  a.head_dim_size = s.head_dim;
  a.ffn_hidden = s.moe_inter;  // unused: every layer is an MoE
  a.norm_eps = 1e-5;
  a.rope_theta = 150000.0;
  a.rope_scaling.enabled = false;
  a.rope_half_split = true;
  a.yarn = YarnArgs{true, 4096, 32.0, /*beta_fast = ntk_beta*/ 32.0, /*beta_slow = ntk_alpha*/ 1.0, /*gpt_oss*/ true};
  a.attention_bias = true;
  a.attention_sinks = true;
  a.sliding_window = s.window;
  a.depth_init_all = true;
  a.attn_type = "flex";
  a.attn_mask_type = "causal";
  MoeArgs& m = a.moe;
  m.num_experts = s.experts;
  m.num_shared_experts = 0;
  m.top_k = s.top_k;
  m.hidden_dim = s.moe_inter;
  m.score_func = "softmax";
  m.route_norm = true;
  m.route_scale = 1.0;
  m.score_before_experts = false;
  m.load_balance_coeff = 1e-3;
  m.gate_bias = true;
  m.expert_biases = true;
  m.swiglu_limit = 7.0;
  m.swiglu_alpha = 1.702;
  return a;
}

// ctitan's own, for tests: every GPT-OSS path at a size that trains in
// milliseconds — heads × head_dim (4 × 16) ≠ dim (48), a window of 8 on
// layer 0 of 2 (the kernel's key blocks are 16: rows skip whole blocks at
// seq_len ≥ 32), 4 experts top 2 with biases, and a SwiGLU limit low
// enough (0.05) that the clamp bites at init.
ModelArgs tiny() {
  ModelArgs a = gpt_oss({64, 48, 2, 4, 2, 16, 4, 2, 16, 8});
  a.moe.swiglu_limit = 0.05;
  return a;
}

const FlavorTable& flavors() {
  static const FlavorTable table = {
      {"tiny", tiny()},
      // debugmodel: dim 256 and 4 layers over args.py's defaults (8 experts, top 4).
      {"debugmodel", gpt_oss({201088, 256, 4, 64, 8, 64, 8, 4, 2880, 128})},
      {"20b", gpt_oss({201088, 2880, 24, 64, 8, 64, 32, 4, 2880, 128})},
      {"120b", gpt_oss({201088, 2880, 36, 64, 8, 64, 128, 4, 2880, 128})},
  };
  return table;
}

std::vector<std::string> gpt_oss_flavor_names() { return flavor_names(flavors()); }
ModelArgs gpt_oss_flavor(const std::string& flavor) { return find_flavor(flavors(), "gpt_oss", flavor); }

std::string gpt_oss_refuses(const ModelArgs& a, const ModelLayout& l) {
  if (a.attn_type != "flex")
    return "model gpt_oss runs flex attention only (TorchTitan's GptOssModelArgs: attn_type \"flex\"; its sinks and "
           "sliding window need flex's masks); set model.attn_type = \"flex\" or leave it unset";
  return "";
}

std::string gpt_oss_hf_type(const ModelArgs&) { return "gpt_oss"; }
std::string gpt_oss_hf_architecture(const ModelArgs&) { return "GptOssForCausalLM"; }

// GptOssConfig: the window per layer type, YaRN without rounding (truncate
// false) at every length, the experts' activation. (A run's aux-loss-free
// expert bias is not exported, as TorchTitan's adapter drops it:
// transformers routes without one.)
void gpt_oss_hf_write_config(const ModelArgs& a, int64_t, nlohmann::json& c) {
  c["attention_bias"] = a.attention_bias;
  c["num_local_experts"] = a.moe.num_experts;
  c["num_experts_per_tok"] = a.moe.top_k;
  c["experts_per_token"] = a.moe.top_k;
  c["router_aux_loss_coef"] = 0.0;
  c["output_router_logits"] = false;
  c["swiglu_limit"] = a.moe.swiglu_limit;
  c["swiglu_alpha"] = a.moe.swiglu_alpha;
  c["sliding_window"] = a.sliding_window;
  nlohmann::json types = nlohmann::json::array();
  for (int64_t l = 0; l < a.n_layers; ++l) types.push_back(a.window_of(l) > 0 ? "sliding_attention" : "full_attention");
  c["layer_types"] = types;
  const YarnArgs& y = a.yarn;
  c["rope_parameters"] = {{"rope_type", "yarn"},
                          {"rope_theta", a.rope_theta},
                          {"factor", y.factor},
                          {"beta_fast", y.beta_fast},
                          {"beta_slow", y.beta_slow},
                          {"truncate", false},
                          {"original_max_position_embeddings", y.original_seq_len}};
  c["rope_scaling"] = c["rope_parameters"];
  c["max_position_embeddings"] = 131072;
}

// The keys no tensor's shape shows: the window, the activation, YaRN.
int64_t gpt_oss_hf_check_config(const HfConfigCheck& config, const ModelArgs& a) {
  const nlohmann::json& c = config.json();
  check_gqa_config(config, a);
  if (c.contains("sliding_window") && !c["sliding_window"].is_null()) config.integer("sliding_window", a.sliding_window);
  if (c.contains("layer_types") && c["layer_types"].is_array() &&
      static_cast<int64_t>(c["layer_types"].size()) == a.n_layers)
    for (int64_t l = 0; l < a.n_layers; ++l) {
      const bool sliding = c["layer_types"][l] == "sliding_attention";
      if (sliding != (a.window_of(l) > 0))
        config.fail("layer_types[" + std::to_string(l) + "] = " + c["layer_types"][l].dump() + " but ctitan's gpt_oss "
                    "layer " + std::to_string(l) + " is " + (sliding ? "full" : "sliding") +
                    " attention (even layers slide, as TorchTitan)" + HfConfigCheck::kOtherModel);
    }
  if (c.contains("swiglu_limit")) config.real(c["swiglu_limit"], "swiglu_limit", a.moe.swiglu_limit);
  if (c.contains("swiglu_alpha")) config.real(c["swiglu_alpha"], "swiglu_alpha", a.moe.swiglu_alpha);
  if (const nlohmann::json* y = hf_yarn_of(c)) {
    check_hf_yarn(config, *y, a.yarn);
    if (y->contains("truncate") && (*y)["truncate"] != false)
      config.fail("rope_parameters.truncate = " + (*y)["truncate"].dump() + " but GPT-OSS's YaRN (TorchTitan's) does "
                  "not round its correction range; set it to false");
  } else {
    config.fail(std::string("the checkpoint names no YaRN RoPE scaling and GPT-OSS uses it at every length") +
                HfConfigCheck::kOtherModel);
  }
  return 0;
}

// transformers' GptOssForCausalLM names (TorchTitan's GptOssStateDictAdapter
// for unquantized weights): the router is mlp.router; the experts are
// stacked, gate_up_proj [E, D, 2Hm] interleaving w1ᵀ and w3ᵀ (gate, up,
// gate, ...), down_proj [E, Hm, D] = w2ᵀ, and their biases alike.
HfAdapter gpt_oss_hf() {
  HfAdapter hf;
  hf.layer_names = {{"attention.wk.weight", "self_attn.k_proj.weight"},
                    {"attention.wv.weight", "self_attn.v_proj.weight"},
                    {"attention.wq.bias", "self_attn.q_proj.bias"},
                    {"attention.wk.bias", "self_attn.k_proj.bias"},
                    {"attention.wv.bias", "self_attn.v_proj.bias"},
                    {"attention.wo.bias", "self_attn.o_proj.bias"},
                    {"attention.sinks", "self_attn.sinks"},
                    {"moe.router.gate.weight", "mlp.router.weight"},
                    {"moe.router.gate.bias", "mlp.router.bias"}};
  hf.layer_parts = {{"moe.experts.w1", "mlp.experts.gate_up_proj", true, 0},
                    {"moe.experts.w3", "mlp.experts.gate_up_proj", true, 1},
                    {"moe.experts.w2", "mlp.experts.down_proj", true, -1},
                    {"moe.experts.b1", "mlp.experts.gate_up_proj_bias", false, 0},
                    {"moe.experts.b3", "mlp.experts.gate_up_proj_bias", false, 1},
                    {"moe.experts.b2", "mlp.experts.down_proj_bias", false, -1}};
  hf.model_type = &gpt_oss_hf_type;
  hf.architecture = &gpt_oss_hf_architecture;
  hf.write_config = &gpt_oss_hf_write_config;
  hf.check_config = &gpt_oss_hf_check_config;
  return hf;
}

}  // namespace

const ModelFamily& gpt_oss_family() {
  static const ModelFamily f{"gpt_oss",
                             "GPT-OSS (attention sinks, alternating sliding window, biased MoE experts, clamped "
                             "SwiGLU, YaRN)",
                             &gpt_oss_flavor_names, &gpt_oss_flavor, &gpt_oss_refuses, gpt_oss_hf()};
  return f;
}

}  // namespace ctitan
