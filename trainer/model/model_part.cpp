#include "trainer/model/model_part.h"

#include <string>

#include "common/errors.h"

namespace ctitan {

ModelPart ModelPart::resolved(const ModelArgs& args) const {
  ModelPart p = *this;
  if (p.n_layers < 0) p.n_layers = args.n_layers - p.first_layer;
  if (p.first_layer < 0 || p.n_layers < 0 || p.first_layer + p.n_layers > args.n_layers)
    throw InputError("model part: layers " + std::to_string(first_layer) + " .. " +
                     std::to_string(first_layer + p.n_layers - 1) + " do not fit a model of " +
                     std::to_string(args.n_layers) + " layers");
  if (!p.embedding && !p.head && p.n_layers == 0) throw InputError("model part: holds no embedding, layer or head");
  return p;
}

std::vector<ParamSpec> model_param_specs(const ModelArgs& args, const std::vector<ModelPart>& parts) {
  std::vector<ParamSpec> specs;
  for (const ModelPart& part : parts) {
    std::vector<ParamSpec> more = model_param_specs(args, part);
    specs.insert(specs.end(), more.begin(), more.end());
  }
  return specs;
}

std::vector<ParamSpec> model_param_specs(const ModelArgs& args, const ModelPart& part_in) {
  const ModelPart part = part_in.resolved(args);
  const int64_t d = args.dim, hd = args.head_dim(), f = args.ffn_hidden_dim();
  std::vector<ParamSpec> specs;
  if (part.embedding) specs.push_back(whole_param("tok_embeddings.weight", {args.vocab_size, d}));
  for (int64_t l = part.first_layer; l < part.first_layer + part.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    if (args.is_mla()) {  // DeepSeek-V3's names and shapes
      const MlaArgs& m = args.mla;
      const int64_t H = args.n_heads, qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
      if (m.q_lora_rank > 0) {
        specs.push_back(whole_param(p + "attention.wq_a.weight", {m.q_lora_rank, d}));
        specs.push_back(whole_param(p + "attention.q_norm.weight", {m.q_lora_rank}));
        specs.push_back(whole_param(p + "attention.wq_b.weight", {H * qk, m.q_lora_rank}));
      } else {
        specs.push_back(whole_param(p + "attention.wq.weight", {H * qk, d}));
      }
      specs.push_back(whole_param(p + "attention.wkv_a.weight", {m.kv_lora_rank + m.qk_rope_head_dim, d}));
      specs.push_back(whole_param(p + "attention.kv_norm.weight", {m.kv_lora_rank}));
      specs.push_back(whole_param(p + "attention.wkv_b.weight", {H * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank}));
      specs.push_back(whole_param(p + "attention.wo.weight", {d, H * m.v_head_dim}));
    } else {
      // wq,wk,wv adjacent → one [(H+2K)Dh, D] view; w1,w3 adjacent → one [2F, D] view.
      specs.push_back(whole_param(p + "attention.wq.weight", {args.n_heads * hd, d}));
      specs.push_back(whole_param(p + "attention.wk.weight", {args.kv_dim(), d}));
      specs.push_back(whole_param(p + "attention.wv.weight", {args.kv_dim(), d}));
      specs.push_back(whole_param(p + "attention.wo.weight", {d, args.n_heads * hd}));
      if (args.attention_bias) {  // bq, bk, bv adjacent → one [(H+2K)Dh] view
        specs.push_back(whole_param(p + "attention.wq.bias", {args.n_heads * hd}));
        specs.push_back(whole_param(p + "attention.wk.bias", {args.kv_dim()}));
        specs.push_back(whole_param(p + "attention.wv.bias", {args.kv_dim()}));
        specs.push_back(whole_param(p + "attention.wo.bias", {d}));
      }
      if (args.attention_sinks) specs.push_back(whole_param(p + "attention.sinks", {args.n_heads}));
    }
    if (args.qk_norm) {
      specs.push_back(whole_param(p + "attention.q_norm.weight", {hd}));
      specs.push_back(whole_param(p + "attention.k_norm.weight", {hd}));
    }
    if (args.moe_layer(l)) {
      const MoeArgs& m = args.moe;
      const int64_t E = m.num_experts, hm = m.hidden_dim, sh = m.num_shared_experts * m.hidden_dim;
      specs.push_back(whole_param(p + "moe.router.gate.weight", {E, d}));
      specs.push_back(whole_param(p + "moe.experts.w1", {E, hm, d}));
      specs.push_back(whole_param(p + "moe.experts.w2", {E, d, hm}));
      specs.push_back(whole_param(p + "moe.experts.w3", {E, hm, d}));
      if (m.gate_bias) specs.push_back(whole_param(p + "moe.router.gate.bias", {E}));
      if (m.expert_biases) {
        specs.push_back(whole_param(p + "moe.experts.b1", {E, hm}));
        specs.push_back(whole_param(p + "moe.experts.b2", {E, d}));
        specs.push_back(whole_param(p + "moe.experts.b3", {E, hm}));
      }
      if (sh > 0) {
        specs.push_back(whole_param(p + "moe.shared_experts.w1.weight", {sh, d}));
        specs.push_back(whole_param(p + "moe.shared_experts.w3.weight", {sh, d}));
        specs.push_back(whole_param(p + "moe.shared_experts.w2.weight", {d, sh}));
      }
    } else {
      specs.push_back(whole_param(p + "feed_forward.w1.weight", {f, d}));
      specs.push_back(whole_param(p + "feed_forward.w3.weight", {f, d}));
      specs.push_back(whole_param(p + "feed_forward.w2.weight", {d, f}));
    }
    specs.push_back(whole_param(p + "attention_norm.weight", {d}));
    specs.push_back(whole_param(p + "ffn_norm.weight", {d}));
  }
  if (part.head) {
    specs.push_back(whole_param("norm.weight", {d}));
    if (!args.tie_embeddings) specs.push_back(whole_param("output.weight", {args.vocab_size, d}));
  }
  return specs;
}

}  // namespace ctitan
