// Documents in packed sequences: TorchTitan's block_causal attention
// (attn_mask_type = "block_causal", its get_document_mask_mod and
// create_varlen_metadata_for_document). The packer concatenates documents,
// each ending with the tokenizer's EOS; a window of seq_len tokens holds
// pieces of several. A document ends with its EOS (included) and the next
// starts right after it, so token i may attend to token j when j <= i and
// no EOS lies in [j, i): j >= start(i), where start(i) is one past the last
// EOS before i (0 if none).
//
// ctitan carries a batch's documents as those starts, int64 [B, S], computed
// from the batch's input tokens wherever the batch is (every rank, every
// micro-batch and every data position sees the same tokens TorchTitan's
// mask sees); under context parallelism a rank keeps the starts of its own
// query positions (global positions, cp_shard).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

namespace ctitan {

// start[b, i] = 1 + the last position p < i with tokens[b, p] == eos_id,
// else 0; int64 [B, S] on tokens' device. eos_id < 0: zeros (one document).
at::Tensor document_starts(const at::Tensor& tokens, int64_t eos_id);

// True when every row of `starts` is 0: each sample is one document, and
// block_causal is exactly causal.
bool single_document(const at::Tensor& starts);

// Visible pairs under the documents over those under causal attention:
// Σ (i − start_i + 1) / Σ (i + 1), in (0, 1]; the attention work
// block_causal does relative to causal.
double document_attention_fraction(const at::Tensor& starts);

// Packed C4-like documents, the stated assumption where a batch's own are
// not at hand (benchmarks, the planner): lengths log-normal with C4's mean
// of 427 tokens (Dodge et al. 2021, "Documenting C4": 156B tokens in 365M
// documents) and median 230 (σ 1.11, assumed: the distribution is
// right-skewed), packed as the loader packs them — each row starts inside a
// document. Starts int64 [B, S], a function of `seed`.
at::Tensor c4_like_document_starts(int64_t B, int64_t S, uint64_t seed);
// document_attention_fraction of 8 such rows of S tokens.
double c4_like_attention_density(int64_t S);

// Additive mask (0 visible, −inf hidden) [B, 1, Lq, Lk] in `dtype` for
// queries at global positions qpos [Lq] whose documents start at
// starts_q [B, Lq] and keys at kpos [Lk]: start <= kpos <= qpos.
at::Tensor document_mask(const at::Tensor& starts_q, const at::Tensor& qpos, const at::Tensor& kpos,
                         at::ScalarType dtype);

// Block-causal attention through ATen's SDPA with document_mask: q [B,H,S,Dh],
// k/v [B,G,S,Dv] (G | H), softmax scale `scale` (default 1/sqrt(Dh)). The
// reference path for devices and dtypes without a kernel that skips the
// masked blocks (fused_causal_attention with starts).
at::Tensor document_attention_sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& starts, std::optional<double> scale = std::nullopt);

// CUDA: ATen's variable-length flash attention (FlashAttention-2's varlen
// kernel, TorchTitan's varlen_attn), which runs each document as its own
// causal sequence: no masked block is computed. The batch's documents as
// the kernel takes them — cumulative starts over the flattened [B·S]
// tokens (int32 [documents + 1], on the starts' device) and the longest.
struct VarlenDocuments {
  at::Tensor cu_seqlens;
  int64_t max_len = 0;
};
VarlenDocuments varlen_documents(const at::Tensor& starts);
// Empty when document_attention_varlen runs q/k/v, else why not (one phrase).
std::string varlen_refuses(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
// Block-causal attention q [B,H,S,Dh], k/v [B,G,S,Dh] (rows contiguous, as
// the model lays them out) through the varlen kernel; returns [B,H,S,Dh]
// (a view of [B,S,H,Dh] memory). Backward: ATen's varlen flash backward.
at::Tensor document_attention_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const VarlenDocuments& docs, std::optional<double> scale = std::nullopt);

}  // namespace ctitan
