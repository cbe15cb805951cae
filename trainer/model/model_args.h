// The decoder's arguments (every model family: Llama 3, Qwen3, ...) and the
// numbers derived from them (parameter counts, FLOPs per token) without
// allocating anything. A family (trainer/models/family.h) fills them from its
// flavors; Transformer (transformer.h) builds any of them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ctitan {

struct RopeScaling {  // Llama 3.1 frequency scaling
  bool enabled = true;  // false: plain θ^(-2i/Dh) frequencies (Qwen3)
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// A mixture-of-experts FFN (TorchTitan's MoEArgs): a router picks top_k of
// num_experts SwiGLU experts per token; shared experts see every token.
struct MoeArgs {
  int64_t num_experts = 0;          // 0: every layer has the dense FFN
  int64_t num_shared_experts = 0;
  int64_t top_k = 1;
  int64_t hidden_dim = 0;           // each expert's SwiGLU width (moe_inter_dim)
  std::string score_func = "softmax";  // "softmax" | "sigmoid"
  bool route_norm = false;          // renormalise the top-k scores to sum 1
  double route_scale = 1.0;
  bool score_before_experts = false;  // scale the tokens before (true) or the outputs after the experts
  int64_t n_expert_groups = 0;      // group-limited routing (DeepSeek-V3); 0: off
  int64_t n_limited_groups = 0;
  double load_balance_coeff = 0.0;  // > 0: aux-loss-free expert bias (TorchTitan's load_balance_coeff)
  bool force_load_balance = false;  // debug.moe_force_load_balance: round-robin routing
  // GPT-OSS (TorchTitan's gpt_oss MoE): the router's gate has a bias
  // (gate_bias), the routed experts' w1, w3 and w2 have biases b1 [E, Hm],
  // b3 [E, Hm], b2 [E, D], and swiglu_limit > 0 makes the experts'
  // activation GPT-OSS's clamped SwiGLU:
  //   g = min(w1·x + b1, limit), u = clamp(w3·x + b3, −limit, limit),
  //   h = g · σ(swiglu_alpha · g) · (u + 1).
  bool gate_bias = false;
  bool expert_biases = false;
  double swiglu_limit = 0.0;   // 0: silu(w1·x) · w3·x
  double swiglu_alpha = 1.702;
};

// DeepSeek-V3's multi-head latent attention (kv_lora_rank > 0; TorchTitan's
// deepseek_v3 Attention): q = wq(x), or wq_b(q_norm(wq_a(x))) with
// q_lora_rank > 0; k and v from wkv_b(kv_norm(c)) where c is the first
// kv_lora_rank columns of wkv_a(x), whose last qk_rope_head_dim columns are
// one RoPE key shared by every head. q/k heads are qk_nope + qk_rope wide, v
// heads v_head_dim. RoPE covers the qk_rope part only.
struct MlaArgs {
  int64_t q_lora_rank = 0, kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  double mscale = 1.0;  // with YaRN active: the softmax scale ×(0.1·mscale·ln(factor) + 1)²
};

// YaRN RoPE scaling (DeepSeek-V3's precompute_freqs_cis): active when the
// model's longest sequence exceeds original_seq_len; frequencies between
// the beta_fast/beta_slow correction dims are blended towards freq/factor.
//
// GPT-OSS's variant (TorchTitan's gpt_oss precompute_rope_cache, rope_factor
// / ntk_alpha = beta_slow / ntk_beta = beta_fast): applied at every length,
// the ramp's bounds not rounded, and the concentration 0.1·ln(factor) + 1
// multiplying cos and sin (so q·k by its square).
struct YarnArgs {
  bool enabled = false;
  int64_t original_seq_len = 4096;
  double factor = 40.0, beta_fast = 32.0, beta_slow = 1.0;
  bool gpt_oss = false;
  // Whether a model whose longest sequence is seq_len applies it.
  bool active(int64_t seq_len) const { return enabled && (gpt_oss ? factor > 1.0 : seq_len > original_seq_len); }
};

struct ModelArgs {
  std::string family = "llama3";  // the trainer/models/registry.h family these args belong to
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
  std::optional<int64_t> head_dim_size;  // set: head_dim decoupled from dim (Qwen3)
  bool qk_norm = false;         // RMSNorm over head_dim on q and k before RoPE (Qwen3)
  bool tie_embeddings = false;  // output projection = tok_embeddings (TorchTitan's enable_weight_tying)
  bool rope_half_split = false;  // RoPE pairs (i, i + Dh/2) (HF's rotate_half) instead of (2i, 2i+1)
  MoeArgs moe;
  int64_t n_dense_layers = 0;  // with moe: the first n layers keep the dense FFN (DeepSeek-V3)
  MlaArgs mla;                 // kv_lora_rank > 0: multi-head latent attention instead of GQA
  YarnArgs yarn;
  // DeepSeek-V3 in TorchTitan builds its final norm as nn.RMSNorm(dim)
  // without eps: torch.finfo(dtype).eps of the compute dtype (1.19e-7 in
  // fp32, 2^-7 in bf16), not norm_eps.
  bool final_norm_eps_of_dtype = false;
  // TorchTitan's attention arguments. attn_type names TorchTitan's kernel
  // ("sdpa", "flex", "varlen"); ctitan runs its own attention for all three
  // (the same math), so it decides only which combinations are allowed.
  // attn_mask_type "causal", or "block_causal": a token attends only to the
  // earlier tokens of its own document (documents end at EOS tokens,
  // documents.h), which needs attn_type flex or varlen as in TorchTitan.
  std::string attn_type = "sdpa";
  std::string attn_mask_type = "causal";
  bool block_causal() const { return attn_mask_type == "block_causal"; }
  // GPT-OSS's attention (TorchTitan's gpt_oss Attention): wq, wk, wv and wo
  // have biases; each query head h has a learned sink logit sinks[h], one
  // more column of the softmax whose value is 0 (the output is rescaled by
  // σ(lse − sinks[h])); and with sliding_window > 0 the even layers see
  // only the last sliding_window keys, themselves included (TorchTitan's
  // sliding_window_mask_mod on top of the causal or block_causal mask).
  bool attention_bias = false;
  bool attention_sinks = false;
  int64_t sliding_window = 0;
  // Every layer weight's init std shrinks with depth (GPT-OSS), not only the
  // residual-branch outputs.
  bool depth_init_all = false;
  // The window layer `layer` attends through: sliding_window on even layers, else 0 (none).
  int64_t window_of(int64_t layer) const { return sliding_window > 0 && layer % 2 == 0 ? sliding_window : 0; }

  int64_t head_dim() const { return head_dim_size ? *head_dim_size : dim / n_heads; }
  bool is_mla() const { return mla.kv_lora_rank > 0; }
  // The width RoPE rotates: the whole head, or MLA's qk_rope part.
  int64_t rope_dim() const { return is_mla() ? mla.qk_rope_head_dim : head_dim(); }
  bool moe_layer(int64_t layer) const { return moe.num_experts > 0 && layer >= n_dense_layers; }
  int64_t n_moe_layers() const { return moe.num_experts > 0 ? n_layers - n_dense_layers : 0; }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
  // TorchTitan's SwiGLU hidden size: 4d → 2/3 → ×multiplier → round up
  // (or ffn_hidden when set).
  int64_t ffn_hidden_dim() const;
};

struct ParamCounts {
  int64_t total = 0;
  int64_t embedding = 0;  // tok_embeddings only, as TorchTitan counts it
  // Parameters one token's forward touches: total minus the routed experts
  // it is not sent to (num_experts − top_k of them per MoE layer). = total
  // for a dense model.
  int64_t active = 0;
};
ParamCounts count_params(const ModelArgs& a);

// TorchTitan: 6·(N_active − N_embedding) + 6·L·H·(Dqk + Dv)·S (12·L·H·Dh·S
// where q, k and v heads are Dh wide; MLA: qk_nope + qk_rope and v_head_dim).
// As TorchTitan, a tied output matrix counts once, as the embedding: its
// GEMM is left out.
double flops_per_token(const ModelArgs& a, int64_t seq_len);

}  // namespace ctitan
