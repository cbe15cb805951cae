// What every sub-layer of a TransformerBlock (attention, feed-forward, MoE)
// and the head run their math through, set once when the model is built:
// the GEMMs inside the layout's tensor-parallel regions (column-wise,
// row-wise, async TP), float8 or not per GEMM, the norms, RoPE (and CP's
// positions), and the attention kernels for document masks.
//
// A GEMM is named by its layer and unit ("layers.3.attention.wq|wk|wv";
// layer −1: "output"): the name decides whether it runs in float8
// (Float8Gemms) and is what the SQNR probe reports.
//
// Not thread-safe; the caches (CP's RoPE rows, varlen's cumulative starts)
// are per batch.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/float8/float8_gemms.h"
#include "trainer/kernels/documents.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/layout.h"
#include "trainer/model/model_args.h"
#include "trainer/model/techniques.h"

namespace ctitan {

class BlockOps {
 public:
  // `freqs_cis`: the attention's RoPE rotations for positions
  // 0..max_seq_len-1. `float8`: the GEMMs the model chose. InputError for a
  // bad CP method or balancer (the layout's seams check it).
  BlockOps(const ModelArgs& args, c10::Device device, at::ScalarType compute_dtype, ParallelLayout layout,
           const ModelTechniques& techniques, at::Tensor freqs_cis, Float8Gemms float8);

  // --- GEMMs ---------------------------------------------------------
  // Whether GEMM (layer, unit) runs in float8.
  bool in_float8(int64_t layer, const char* unit) const;
  // x·wᵀ: float8_linear for a float8 GEMM (`tp`: how the operands are split
  // under TP, so the scales come from the whole tensors' amax), else the
  // compute dtype (deferring dW under the split backward).
  at::Tensor linear(const at::Tensor& x, const at::Tensor& w, int64_t layer, const char* unit,
                    Float8TpSharding tp = {}) const;
  // Tensor parallelism's regions around a column-wise GEMM (x whole or
  // sequence-sharded in, this rank's output features out) and a row-wise
  // one (this rank's input features in; out whole or sequence-sharded);
  // plain GEMMs without TP. `cache`: op-AC (column-wise GEMMs only).
  at::Tensor column_gemm(const at::Tensor& x, const at::Tensor& w, int64_t layer, const char* unit,
                         OpCache* cache) const;
  at::Tensor row_gemm(const at::Tensor& x, const at::Tensor& w, int64_t layer, const char* unit) const;
  // x as a column-wise GEMM takes it: gathered over the sequence (SP) or
  // entering the tp region.
  at::Tensor tp_input(const at::Tensor& x) const;

  // --- weights every tp rank holds whole -------------------------------
  // A weight applied to this rank's part of the work (norms under SP, q/k
  // norms over its heads, experts under SP): its gradient is summed over
  // tp in backward.
  at::Tensor tp_summed(const at::Tensor& w, bool partial) const;
  // A replicated norm weight as the block uses it (summed under SP).
  at::Tensor norm_weight(const at::Tensor& w) const { return tp_summed(w, tp_.sequence_parallel); }
  // eps: the model's norm_eps unless given.
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, std::optional<double> eps = std::nullopt) const;

  // --- positions and attention -------------------------------------------
  // x [B,S,n,Dh] rotated (in fp32) by the rows of its positions.
  at::Tensor apply_rope(const at::Tensor& x, at::ScalarType out_dtype) const;
  // RoPE rotations for S local tokens: rows 0..S-1, or under CP the rows of
  // this rank's positions (cp_positions()).
  const at::Tensor& rope_table(int64_t S) const;
  const at::Tensor& cp_positions() const { return cp_positions_; }
  int64_t max_seq_len() const { return freqs_cis_.size(0); }
  // block_causal attention of q [B,H,S,Dh], k/v [B,G,S,Dv] under the starts
  // `docs`: CUDA's varlen flash where it takes the shapes, else the fused
  // CPU kernel (compile), else SDPA with the document mask.
  at::Tensor document_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& docs,
                                std::optional<double> scale = std::nullopt) const;
  // Attention with a sliding window and/or sinks (sink_attention.h), under
  // the documents `docs` (undefined: causal): CP's gathered keys, else the
  // fused CPU kernel (compile) where it runs the shapes, else the eager
  // chain. q [B,H,S,Dh], k/v [B,G,S,Dh].
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& docs,
                       const AttentionExtras& extras) const;
  // CP with the ptrr balancer: this batch's blocks of each rank
  // (ptrr_assignment), before its forward.
  void set_ptrr_blocks(std::vector<std::vector<int64_t>> blocks);

  const ModelArgs& args() const { return args_; }
  const TensorParallelOptions& tp() const { return tp_; }
  const ExpertParallelOptions& ep() const { return ep_; }
  const ContextParallelOptions& cp() const { return cp_; }
  // The layout's seams (a logic error when a parallelism is on without them).
  const LayoutSeams& seams() const;
  // Whether the fused kernels run the block ops / the loss (compile on a
  // device that has them).
  bool fused_model() const { return fused_model_; }
  bool fused_loss() const { return fused_loss_; }
  bool split_backward() const { return split_backward_; }
  at::ScalarType compute_dtype() const { return compute_dtype_; }
  at::ScalarType attention_dtype() const { return attention_dtype_; }  // q/k/v for SDPA
  Float8Gemms& float8() { return float8_; }
  const Float8Gemms& float8() const { return float8_; }

 private:
  ModelArgs args_;
  at::ScalarType compute_dtype_, attention_dtype_;
  TensorParallelOptions tp_;
  ExpertParallelOptions ep_;
  ContextParallelOptions cp_;
  std::shared_ptr<const LayoutSeams> seams_;  // null: one process
  bool fused_model_ = false, fused_loss_ = false, split_backward_ = false;
  Float8Gemms float8_;
  at::Tensor freqs_cis_;                        // complex64 [S_max, rope_dim/2]
  mutable at::Tensor cp_positions_, cp_freqs_;  // for the local length cp_positions_.size(0)
  mutable at::Tensor varlen_of_;                // the starts varlen_ describes
  mutable VarlenDocuments varlen_;              // CUDA's varlen flash: cumulative starts of varlen_of_
};

}  // namespace ctitan
