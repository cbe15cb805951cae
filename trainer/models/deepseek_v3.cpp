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
#include "trainer/models/deepseek_v3.h"

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

std::string deepseek_v3_hf_type(const ModelArgs&) { return "deepseek_v3"; }

}  // namespace

const ModelFamily& deepseek_v3_family() {
  static const ModelFamily f{"deepseek_v3",
                             "DeepSeek-V3 (multi-head latent attention, YaRN, dense then MoE layers with shared experts)",
                             &deepseek_v3_flavor_names, &deepseek_v3_flavor, &deepseek_v3_refuses,
                             &deepseek_v3_hf_type};
  return f;
}

}  // namespace ctitan
