// What GPT-OSS adds to causal attention (TorchTitan's gpt_oss Attention over
// flex attention's masks): a sliding window and attention sinks.
//
// - Window w > 0: query row i sees keys j with i − w < j ≤ i (w − 1 earlier
//   keys and itself; TorchTitan's sliding_window_mask_mod), composed with
//   the causal or the block_causal (documents.h) mask.
// - Sinks: each query head h has a learned logit sinks[h] that joins the
//   softmax as one more column whose value row is 0:
//     o_i = Σ_j exp(s_ij) v_j / (exp(sinks[h]) + Σ_j exp(s_ij)),
//   which is TorchTitan's o · σ(lse − sinks[h]). The sink's gradient is
//   −Σ_i p_sink,i · Σ_d dO_i∘O_i over the head's rows.
//
// Legend: B batch, H query heads, G kv heads (G | H), Lq queries, Lk keys,
// Dh head dim, Dv value head dim.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace ctitan {

struct AttentionExtras {
  int64_t window = 0;  // > 0: the sliding window
  at::Tensor sinks;    // [H] (this rank's heads), or undefined
  bool any() const { return window > 0 || sinks.defined(); }
};

// The eager chain, on any device and dtype, differentiable in q, k, v and
// the sinks: scores (fp32) = scale · q·kᵀ, hidden keys −inf, the sink
// column appended, softmax, the sink column dropped, times v; returned in
// q's dtype. q [B,H,Lq,Dh] at global positions qpos [Lq]; k [B,G,Lk,Dh],
// v [B,G,Lk,Dv] at kpos [Lk]; `starts` int64 [B,Lq] (documents of the
// queries) or undefined. Key j is visible to query i when kpos_j ≤ qpos_i,
// within the window, and at or after the query's document start. The
// reference the CPU kernel (fused_causal_attention) and context
// parallelism are tested against, and the path where neither runs.
at::Tensor sink_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& qpos,
                                 const at::Tensor& kpos, const at::Tensor& starts, const AttentionExtras& extras,
                                 std::optional<double> scale = std::nullopt);

// The same with queries and keys at positions 0..S-1 (one process).
at::Tensor sink_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& starts, const AttentionExtras& extras,
                                 std::optional<double> scale = std::nullopt);

// Visible pairs of a causal S-token sequence under a window w (0: none):
// Σ_i min(i + 1, w). The attention work a windowed layer does.
double window_visible_pairs(int64_t S, int64_t window);

}  // namespace ctitan
