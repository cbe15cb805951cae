#include "trainer/model/model_args.h"

#include "common/errors.h"

namespace ctitan {

int64_t ModelArgs::ffn_hidden_dim() const {
  if (ffn_hidden) return *ffn_hidden;
  int64_t hidden = 4 * dim;
  hidden = static_cast<int64_t>(2 * hidden / 3);
  if (ffn_dim_multiplier) hidden = static_cast<int64_t>(*ffn_dim_multiplier * hidden);
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

ParamCounts count_params(const ModelArgs& a) {
  const int64_t d = a.dim, hd = a.head_dim(), q = a.n_heads * hd, kv = a.n_kv_heads * hd;
  int64_t attention = d * q + 2 * d * kv + q * d + (a.qk_norm ? 2 * hd : 0) +
                      (a.attention_bias ? q + 2 * kv + d : 0) + (a.attention_sinks ? a.n_heads : 0);
  if (a.is_mla()) {
    const MlaArgs& m = a.mla;
    const int64_t H = a.n_heads, qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
    const int64_t wq = m.q_lora_rank > 0 ? d * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * H * qk : d * H * qk;
    attention = wq + d * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank +
                m.kv_lora_rank * H * (m.qk_nope_head_dim + m.v_head_dim) + H * m.v_head_dim * d;
  }
  const int64_t dense_ffn = 3 * d * a.ffn_hidden_dim();
  const MoeArgs& m = a.moe;
  const int64_t shared_expert = 3 * d * m.hidden_dim;
  const int64_t expert = shared_expert + (m.expert_biases ? 2 * m.hidden_dim + d : 0);
  const int64_t router = m.num_experts * d + (m.gate_bias ? m.num_experts : 0);
  const int64_t moe_ffn = router + m.num_experts * expert + m.num_shared_experts * shared_expert;
  const int64_t norms = 2 * d;
  const int64_t n_moe = a.n_moe_layers(), n_dense = a.n_layers - n_moe;
  ParamCounts c;
  c.embedding = a.vocab_size * d;
  c.total = c.embedding + a.n_layers * (attention + norms) + n_dense * dense_ffn + n_moe * moe_ffn + d +
            (a.tie_embeddings ? 0 : a.vocab_size * d);
  c.active = c.total - n_moe * (m.num_experts - m.top_k) * expert;
  return c;
}

double flops_per_token(const ModelArgs& a, int64_t seq_len) {
  // As TorchTitan's get_moe_model_nparams_and_flops: a tied output matrix
  // is counted once, as the embedding, so its GEMM is not counted.
  const ParamCounts c = count_params(a);
  if (a.is_mla()) {
    const int64_t head_dims = a.mla.qk_nope_head_dim + a.mla.qk_rope_head_dim + a.mla.v_head_dim;
    return 6.0 * static_cast<double>(c.active - c.embedding) +
           6.0 * a.n_layers * a.n_heads * head_dims * static_cast<double>(seq_len);
  }
  return 6.0 * static_cast<double>(c.active - c.embedding) +
         12.0 * a.n_layers * a.n_heads * a.head_dim() * static_cast<double>(seq_len);
}

}  // namespace ctitan
