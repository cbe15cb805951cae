// Sinks and sliding windows through ATen's CPU flash-attention kernel
// (at::_scaled_dot_product_flash_attention_for_cpu), which takes an
// additive mask and returns its log-sum-exp: the path where ctitan's fused
// kernel does not run (no compile, or a dtype or head size it lacks), and
// the sink arithmetic context parallelism uses on its merged chunks. No
// [B, H, S, S] score matrix is kept (the eager chain, sink_attention.h,
// keeps one per layer for backward: 8 × 64 × 2048² fp32 = 8.6 GB at GPT-OSS
// debugmodel's 64 heads, batch 8, seq 2048).
//
// Sinks on a merged attention (o, lse) over all of a query's keys: one more
// logit per head whose value is 0, so o' = o · σ(lse − sink) and lse' =
// logaddexp(lse, sink). The flash backward against (o', lse') then gives
// the q/k/v gradients with the sink in the softmax; the sink's own gradient
// is −Σ_rows exp(sink − lse') · Σ dO'∘O'.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <utility>

#include "trainer/kernels/sink_attention.h"

namespace ctitan {

// (o', lse') from (o [B,H,L,Dv], lse [B,H,L]) and sinks [H] (any floating
// dtype; empty: none, (o, lse) returned). o' in o's dtype.
std::pair<at::Tensor, at::Tensor> apply_sinks(const at::Tensor& out, const at::Tensor& lse, const at::Tensor& sinks);
// d(sinks) [H] in sinks' dtype, from dO' and (o', lse').
at::Tensor sink_grad(const at::Tensor& dout, const at::Tensor& out, const at::Tensor& lse, const at::Tensor& sinks);

// Whether flash_sink_window_attention runs q (a CPU tensor of a dtype
// ATen's CPU flash kernel takes: fp32, fp64, bf16, fp16).
bool flash_sinks_run(const at::Tensor& q);

// sink_window_attention's math (queries and keys at positions 0..S-1,
// `starts` the documents or undefined) through ATen's CPU flash kernel:
// q [B,H,S,Dh], k/v [B,G,S,Dh] (G | H, expanded to H inside), the window
// and documents as one additive mask [B or 1, 1, S, S] (causal alone: the
// kernel's own is_causal), differentiable in q, k, v and the sinks.
at::Tensor flash_sink_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       const at::Tensor& starts, const AttentionExtras& extras,
                                       std::optional<double> scale = std::nullopt);

// CUDA: the same math through ATen's CUDA flash kernel (FlashAttention-2),
// whose window_size_left takes the window, so no key block outside it is
// computed, and no [B,H,S,S] scores are kept; the sinks as above. Runs q,
// k, v of varlen_refuses' kind (documents.h: CUDA, bf16/fp16, v's head size
// q's, Dh a multiple of 8 up to 256) without documents; windows with
// documents on CUDA take the eager chain (sink_window_attention).
bool cuda_flash_sinks_run(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& starts);
at::Tensor cuda_flash_sink_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const AttentionExtras& extras, std::optional<double> scale = std::nullopt);

}  // namespace ctitan
