// Which keys a query sees: the one rule every masked attention path builds
// its mask from (the eager sink/window chain, ATen's CPU flash path, context
// parallelism's chunk pairs, the documents' SDPA).
//
// A key at global position k is visible to the query at position q when
//   first(q) ≤ k ≤ q,   first(q) = max(q − window + 1 (window > 0),
//                                      the query's document start (documents.h)),
// i.e. causal, within GPT-OSS's sliding window (sink_attention.h) and inside
// the query's document (block_causal).
//
// Legend: B batch, Lq queries, Lk keys.
#pragma once

#include <ATen/ATen.h>

namespace ctitan {

// first(q) int64 [B, Lq] (with `starts_q` int64 [B, Lq], the documents'
// starts of the queries) or [1, Lq] (without), for queries at qpos [Lq];
// window ≤ 0: no window. On starts_q's device when defined, else qpos's.
at::Tensor first_visible_key(const at::Tensor& qpos, const at::Tensor& starts_q, int64_t window);

// Visible (bool) [B or 1, Lq, Lk] of keys at kpos [Lk] for queries at qpos
// whose first visible keys are `first` (first_visible_key).
at::Tensor visible_keys(const at::Tensor& first, const at::Tensor& qpos, const at::Tensor& kpos);

// The same as an additive mask [B or 1, 1, Lq, Lk] in `dtype`: 0 visible,
// −inf hidden (what SDPA and the flash kernels take).
at::Tensor additive_attention_mask(const at::Tensor& first, const at::Tensor& qpos, const at::Tensor& kpos,
                                   at::ScalarType dtype);

}  // namespace ctitan
