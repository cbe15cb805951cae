// The decoder-only Transformer every family builds (TorchTitan's Llama 3,
// Qwen3 and DeepSeek-V3 definitions) over one model part and its local
// parameter shapes. It composes: the part's parameters (ParamStore), one
// Attention kind (attention.h), the dense or MoE feed-forward of each block
// (feed_forward.h), and the operations both run through (block_ops.h: the
// layout's TP regions, float8, RoPE, attention kernels). It knows no
// parallelism: a layout acts through the seams it is given (layout.h).
//
// Legend: B batch, S sequence, D model dim, H query heads, K kv heads,
// Dh head dim, F ffn hidden dim, V vocab.
//
// A model part is the embedding or not, a range of TransformerBlocks with
// their global indices (layers.7.* keeps its name in a later pipeline
// stage), and the head (norm, output, loss) or not; the whole model is one
// part. The forward works on the weights' local shapes: heads, KV heads and
// the FFN width come from the weight tensors (view(B, S, -1, Dh)), never
// from the global sizes, so a tensor-parallel shard runs the same code.
//
// Parameters live in a ParamStore (param_store.h): flat fp32 master and
// gradient buffers, or per-unit buffers for FSDP. The names are TorchTitan's
// FQNs (layers.3.attention.wq.weight, ...); wq|wk|wv and w1|w3 are laid out
// next to each other, so each layer runs one QKV matmul and one gate/up
// matmul over views of the same memory.
//
// Not thread-safe. Forward/backward follow LibTorch's autograd rules.
#pragma once

#include <torch/torch.h>

#include <utility>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/float8/float8_gemms.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/attention.h"
#include "trainer/model/block_ops.h"
#include "trainer/model/feed_forward.h"
#include "trainer/model/layer_weights.h"
#include "trainer/model/layout.h"
#include "trainer/model/model_args.h"
#include "trainer/model/model_part.h"
#include "trainer/model/param_store.h"
#include "trainer/model/techniques.h"

namespace ctitan {

class Transformer {
 public:
  // Every buffer lives on `device` (meta: shapes only, nothing allocated).
  // `storage`: flat buffers, or unit buffers for FSDP (no master: the
  // shards hold it; see ParamStore). `layout` (model/layout.h; built by
  // trainer/parallel/layout_seams.h's parallel_layout): under tensor
  // parallelism the store holds this rank's shards of TorchTitan's plan
  // and forward runs the plan's communication regions; under expert
  // parallelism the store holds this rank's routed experts and the MoE
  // layers dispatch their tokens over the ep group. The seams' plan throws
  // InputError when tp does not divide the heads, KV heads, FFN width or
  // vocabulary, or when async TP is asked for without sequence parallelism.
  // Under context parallelism (layout.cp) the model sees its cp rank's
  // tokens of every sequence (cp_shard), RoPE rotates them by their
  // positions and attention runs over the cp group; InputError for a bad
  // method or balancer. `techniques` (techniques.h): activation
  // checkpointing, compile, Float8 and the split backward, fixed for the
  // model's life; InputError for a Float8 filter entry that matches no
  // linear.
  Transformer(const ModelArgs& args, at::ScalarType compute_dtype, int64_t max_seq_len,
         c10::Device device = c10::Device(c10::kCPU), ModelPart part = {},
         ParamStore::Storage storage = ParamStore::Storage::kFlat, ParallelLayout layout = {},
         const ModelTechniques& techniques = {});
  // Several model parts in one store (the pipeline stages one rank holds
  // under the interleaved and V schedules), in the given order; a layer in
  // two parts is an InputError.
  Transformer(const ModelArgs& args, at::ScalarType compute_dtype, int64_t max_seq_len, c10::Device device,
         const std::vector<ModelPart>& parts, ParamStore::Storage storage = ParamStore::Storage::kFlat,
         ParallelLayout layout = {}, const ModelTechniques& techniques = {});

  // TorchTitan's init_weights, flat storage. Every value is a function of
  // (seed, FQN, global element index) only (param_init.h), so a shard or a
  // pipeline stage that initialises its own box gets the same values.
  void init_weights(uint64_t seed);

  // The whole model (a part with embedding and head): tokens/labels int64
  // [B,S] (under TP every rank of the tp group passes the same batch).
  // Returns the mean cross-entropy (fp32 scalar).
  at::Tensor forward_loss(const at::Tensor& tokens, const at::Tensor& labels);
  // Logits [B,S,V] in the compute dtype (under TP gathered on every rank).
  at::Tensor forward_logits(const at::Tensor& tokens);
  // Unit u of units() on its input: the embedding on tokens, a block on the
  // hidden state, the head on the hidden state and labels (→ the loss).
  at::Tensor run_unit(size_t u, const at::Tensor& input, const at::Tensor& labels);

  // --- stages, for the unit runner that runs backward unit by unit ----
  at::Tensor embed(const at::Tensor& tokens);                 // [B,S,D]
  at::Tensor block(int64_t layer, const at::Tensor& h);       // global layer index, with the AC policy
  at::Tensor head_loss(const at::Tensor& h, const at::Tensor& labels);  // norm, output, loss

  // --- the batch ----------------------------------------------------------
  // block_causal attention (documents.h): the documents of the sequences the
  // next forwards run on — this rank's rows (and, under CP, its positions),
  // int64 [B, S] starts. Undefined, or every sample one document: causal.
  // A block captures them at forward, so an activation-checkpointing
  // recomputation in a later backward uses its own micro-batch's.
  void set_documents(const at::Tensor& starts);
  // CP with the ptrr balancer: this batch's blocks of each rank
  // (ptrr_assignment), before its forward.
  void set_ptrr_blocks(std::vector<std::vector<int64_t>> blocks) { ops_.set_ptrr_blocks(std::move(blocks)); }
  // Off: forwards route without counting (validation, probes).
  void set_expert_counting(bool on) { count_experts_ = on; }
  bool expert_counting() const { return count_experts_; }

  // --- MoE ----------------------------------------------------------------
  // Global indices of the local MoE layers, and each one's layer (its
  // expert bias, counts and EP's received rows).
  bool has_moe() const { return !moe_.empty(); }
  std::vector<int64_t> moe_layers() const;
  MoeLayer& moe_layer(int64_t layer) { return moe_.at(layer); }

  // --- Float8 ---------------------------------------------------------------
  // The GEMMs that run in float8 (float8().gemms()), FSDP's float8 weights.
  Float8Gemms& float8() { return ops_.float8(); }
  const Float8Gemms& float8() const { return ops_.float8(); }
  // Float8 quantisation error per float8 GEMM unit on `tokens`: SQNR (dB) of
  // its float8 output against the same GEMM in the compute dtype. A no-grad
  // forward, run at log steps only. Empty without float8.
  Float8Gemms::Sqnr float8_sqnr(const at::Tensor& tokens);
  // Model FLOPs per token of the GEMMs that run in float8, over the whole
  // weights (global shapes) of this rank's layers (a pipeline stage's
  // only): 6 per weight element (forward, input and weight gradients), 4
  // under rowwise_with_gw_hp (its weight gradient stays in high precision).
  double float8_flops_per_token() const;

  // --- what the model is ----------------------------------------------------
  const ActivationCheckpointPolicy& activation_checkpointing() const { return ac_policy_; }
  // Whether the fused kernels run the block ops (compile_model on a device
  // that has them).
  bool fused_model() const { return ops_.fused_model(); }
  std::string techniques() const;  // one line: which kernels and converters run
  const ContextParallelOptions& context_parallel() const { return ops_.cp(); }
  const TensorParallelOptions& tensor_parallel() const { return ops_.tp(); }
  const ExpertParallelOptions& expert_parallel() const { return ops_.ep(); }

  // Parameter units, TorchTitan's fully_shard units, in forward order:
  // tok_embeddings, one per TransformerBlock, norm + output (as the part
  // has them). Each is a contiguous range of the store's layout.
  using Unit = ParamStore::Unit;
  const std::vector<Unit>& units() const { return store_.units(); }

  const ModelArgs& args() const { return args_; }
  const std::vector<ModelPart>& parts() const { return parts_.parts; }
  bool has_embedding() const { return parts_.has_embedding(); }
  bool has_head() const { return parts_.has_head(); }
  // Whether this is the whole model (one part with embedding and head).
  bool whole() const { return parts_.parts.size() == 1 && has_embedding() && has_head(); }
  // Part k's units: [first, second) of units().
  std::pair<size_t, size_t> part_units(size_t k) const {
    return {parts_.stage_units.at(k), parts_.stage_units.at(k + 1)};
  }
  at::ScalarType compute_dtype() const { return store_.compute_dtype(); }
  c10::Device device() const { return store_.device(); }
  ParamStore& store() { return store_; }
  const ParamStore& store() const { return store_; }
  const std::vector<ParamSlot>& slots() const { return store_.slots(); }

 private:
  // Where the parts' layers and units are: the blocks in part order, and
  // for each unit its layer or the embedding / head.
  struct PartIndex {
    static constexpr int64_t kEmbeddingUnit = -1, kHeadUnit = -2;
    PartIndex(const ModelArgs& args, const std::vector<ModelPart>& parts);  // InputError: a layer in two parts
    std::vector<ModelPart> parts;      // resolved
    std::vector<int64_t> layer_ids;    // global index of each local block, in part order
    std::vector<int64_t> local_of;     // global layer → index into layer_ids (-1: not here)
    std::vector<int64_t> unit_layer;   // per unit: its global layer, or kEmbeddingUnit / kHeadUnit
    std::vector<size_t> stage_units;   // part k's units are [stage_units[k], stage_units[k+1])
    bool has_embedding() const;
    bool has_head() const;
  };
  // The compute views of the part's parameters (undefined where the part
  // has no embedding / head).
  struct Weights {
    at::Tensor tok_embeddings, norm, output;
    std::vector<LayerWeights> layers;  // local index (layer_ids order)
  };

  at::Tensor hidden_states(const at::Tensor& tokens);  // the last block's output
  // The final norm and the output GEMM on the last block's output h: this
  // rank's vocab columns under TP.
  at::Tensor local_logits(const at::Tensor& h) const;
  at::Tensor block_forward(int64_t layer, const LayerWeights& w, at::Tensor h, const at::Tensor& docs,
                           OpCache* cache = nullptr, bool recompute = false);
  const LayerWeights& layer_weights(int64_t layer) const;  // by global index
  void bind_weights();
  // Which GEMMs run in float8 (Float8Options' filter over every linear).
  static Float8Gemms choose_float8(const ModelArgs& args, const PartIndex& parts, const ParamStore& store,
                                   const Attention& attention, const std::optional<Float8Options>& options);

  ModelArgs args_;
  PartIndex parts_;
  ParamStore store_;
  std::unique_ptr<Attention> attention_;  // GQA or MLA
  BlockOps ops_;
  Weights weights_;
  std::map<int64_t, MoeLayer> moe_;  // by global layer
  ActivationCheckpointPolicy ac_policy_;
  double head_norm_eps_ = 0;     // the final norm's eps
  at::Tensor docs_;              // set_documents: the next forwards' starts (undefined: causal)
  bool count_experts_ = true;
};

}  // namespace ctitan
