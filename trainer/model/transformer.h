// Llama 3 (TorchTitan's definition) over one model part and its local
// parameter shapes.
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
#include <string>
#include <vector>

#include "trainer/float8/float8_linear.h"
#include "trainer/kernels/documents.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/layout.h"
#include "trainer/model/model_args.h"
#include "trainer/model/moe.h"
#include "trainer/model/param_store.h"
#include "trainer/model/techniques.h"

namespace ctitan {

// Which part of the model one rank (pipeline stage) holds.
struct ModelPart {
  bool embedding = true;    // tok_embeddings
  int64_t first_layer = 0;  // global index of the first TransformerBlock
  int64_t n_layers = -1;    // -1: through the last layer
  bool head = true;         // norm, output and the loss
  // InputError when the range does not fit args.n_layers or the part is empty.
  ModelPart resolved(const ModelArgs& args) const;
};

// The part's parameters as whole tensors (FQN, global shape), in forward
// order: the embedding, each block's wq wk wv wo w1 w3 w2 attention_norm
// ffn_norm, then norm and output. (Tensor parallelism narrows them later.)
std::vector<ParamSpec> model_param_specs(const ModelArgs& args, const ModelPart& part);
// Several parts (pipeline stages of one rank), one after the other.
std::vector<ParamSpec> model_param_specs(const ModelArgs& args, const std::vector<ModelPart>& parts);

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

  // MoE: the aux-loss-free expert bias of each local MoE layer (by global
  // layer; fp32 [E], zeros at start, selection only) and the tokens routed
  // to each expert since the last take_expert_counts() (int64 [E]; a
  // recomputation under activation checkpointing does not count again).
  bool has_moe() const { return !moe_layers_.empty(); }
  const std::vector<int64_t>& moe_layers() const { return moe_layers_; }
  at::Tensor& expert_bias(int64_t layer) { return expert_bias_.at(local_of_[layer]); }
  at::Tensor take_expert_counts(int64_t layer);
  // Expert parallelism: the routed rows this rank's experts received in
  // the layer since the last call (counted as the expert counts are).
  int64_t take_ep_received(int64_t layer) { return std::exchange(ep_received_.at(local_of_[layer]), 0); }
  // Off: forwards route without counting (validation, probes).
  void set_expert_counting(bool on) { count_experts_ = on; }
  bool expert_counting() const { return count_experts_; }

  const ActivationCheckpointPolicy& activation_checkpointing() const { return ac_policy_; }
  // Whether the fused kernels run the block ops (compile_model on a device
  // that has them).
  bool fused_model() const { return fused_model_; }
  std::string techniques() const;  // one line: which kernels and converters run

  // block_causal attention (documents.h): the documents of the sequences the
  // next forwards run on — this rank's rows (and, under CP, its positions),
  // int64 [B, S] starts. Undefined, or every sample one document: causal.
  // A block captures them at forward, so an activation-checkpointing
  // recomputation in a later backward uses its own micro-batch's.
  void set_documents(const at::Tensor& starts);
  // CP with the ptrr balancer: this batch's blocks of each rank
  // (ptrr_assignment), before its forward.
  void set_ptrr_blocks(std::vector<std::vector<int64_t>> blocks);
  const ContextParallelOptions& context_parallel() const { return cp_; }

  // The GEMMs that run in float8, each over consecutive slots (wq|wk|wv,
  // wo, w1|w3, w2, output); `name` is the SQNR/probe name.
  struct Float8Gemm {
    std::string name;            // "layers.3.attention.wq|wk|wv", "output"
    std::vector<size_t> slots;   // indices into slots(), consecutive
  };
  std::vector<Float8Gemm> float8_gemms() const;
  bool float8_tensorwise() const { return float8_ && float8_recipe_ == Float8Recipe::kTensorwise; }
  // float8_backend() of this model's GEMMs: the form its float8 weights take.
  std::string float8_gemm_backend() const { return float8_backend(device(), float8_emulate_); }
  // FSDP's float8 all-gather hands in a GEMM's weight already in float8
  // (tensorwise); forward uses it instead of quantising the weight. Cleared
  // when the unit is freed.
  void set_float8_weight(const std::string& gemm, Float8Tensor q) { float8_weights_[gemm] = std::move(q); }
  void clear_float8_weight(const std::string& gemm) { float8_weights_.erase(gemm); }
  // Float8 quantisation error per float8 GEMM unit on `tokens`: SQNR (dB) of
  // its float8 output against the same GEMM in the compute dtype. A no-grad
  // forward, run at log steps only. Empty without float8.
  std::vector<std::pair<std::string, double>> float8_sqnr(const at::Tensor& tokens);

  // --- stages, for the unit runner that runs backward unit by unit ----
  at::Tensor embed(const at::Tensor& tokens);                 // [B,S,D]
  at::Tensor block(int64_t layer, const at::Tensor& h);       // global layer index, with the AC policy
  at::Tensor head_loss(const at::Tensor& h, const at::Tensor& labels);  // norm, output, loss

  // Parameter units, TorchTitan's fully_shard units, in forward order:
  // tok_embeddings, one per TransformerBlock, norm + output (as the part
  // has them). Each is a contiguous range of the store's layout.
  using Unit = ParamStore::Unit;
  const std::vector<Unit>& units() const { return store_.units(); }

  const ModelArgs& args() const { return args_; }
  const std::vector<ModelPart>& parts() const { return parts_; }
  bool has_embedding() const {
    return std::any_of(parts_.begin(), parts_.end(), [](const ModelPart& p) { return p.embedding; });
  }
  bool has_head() const {
    return std::any_of(parts_.begin(), parts_.end(), [](const ModelPart& p) { return p.head; });
  }
  // Whether this is the whole model (one part with embedding and head).
  bool whole() const { return parts_.size() == 1 && has_embedding() && has_head(); }
  // Part k's units: [first, second) of units().
  std::pair<size_t, size_t> part_units(size_t k) const { return {stage_units_.at(k), stage_units_.at(k + 1)}; }
  const TensorParallelOptions& tensor_parallel() const { return tp_; }
  const ExpertParallelOptions& expert_parallel() const { return ep_; }
  at::ScalarType compute_dtype() const { return store_.compute_dtype(); }
  c10::Device device() const { return store_.device(); }
  ParamStore& store() { return store_; }
  const ParamStore& store() const { return store_; }
  const std::vector<ParamSlot>& slots() const { return store_.slots(); }

 private:
  struct LayerWeights {
    at::Tensor attention_norm, wqkv, wo, ffn_norm, w13, w2;  // w13, w2: the dense FFN
    at::Tensor q_norm, k_norm;                                // qk_norm
    MoeWeights moe;                                           // an MoE layer: moe.router defined
    struct Mla {  // multi-head latent attention (DeepSeek-V3): wq, or wq_a/q_norm/wq_b
      at::Tensor wq, wq_a, q_norm, wq_b, wkv_a, kv_norm, wkv_b;
    } mla;
    // The defined tensors in a fixed order (checkpoint()'s inputs), and the
    // same structure over such a list starting at in[first].
    std::vector<at::Tensor> list() const;
    LayerWeights with(const std::vector<at::Tensor>& in, size_t first) const;
  };
  // Which GEMMs of a layer (and the output projection) run in float8
  // (indexed like layers_).
  // MLA: qkv is wq (or wq_b with the low-rank q) and kv_b is wkv_b; the
  // low-rank down-projections wq_a and wkv_a stay in the compute dtype
  // (apply_float8 says why).
  struct Float8Units {
    bool qkv = false, wo = false, w13 = false, w2 = false, kv_b = false;
  };
  // at::linear, or float8_linear for a float8 unit; `layer`/`unit` name it
  // for the SQNR probe (layer −1: outside the blocks).
  // `tp`: how the operands are split under tensor parallelism (float8's
  // scales then come from the whole tensors' amax).
  at::Tensor linear(const at::Tensor& x, const at::Tensor& w, bool float8, int64_t layer, const char* unit,
                    Float8TpSharding tp = {}) const;
  // eps: args_.norm_eps unless given.
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, std::optional<double> eps = std::nullopt) const;
  at::Tensor hidden_states(const at::Tensor& tokens);  // the last block's output
  // The final norm and the output GEMM on the last block's output h: this
  // rank's vocab columns under TP.
  at::Tensor local_logits(const at::Tensor& h) const;
  // Tensor parallelism's regions around a column-wise GEMM (x whole or
  // sequence-sharded in, this rank's output features out) and a row-wise
  // one (this rank's input features in; out whole or sequence-sharded);
  // plain GEMMs without TP. `cache`: op-AC (column-wise GEMMs only).
  at::Tensor column_gemm(const at::Tensor& x, const at::Tensor& w, bool float8, int64_t layer, const char* unit,
                         OpCache* cache) const;
  at::Tensor row_gemm(const at::Tensor& x, const at::Tensor& w, bool float8, int64_t layer, const char* unit) const;
  // A replicated norm weight as the block uses it: under SP each rank sees
  // a part of the sequence, so its gradient is summed over tp in backward.
  at::Tensor norm_weight(const at::Tensor& w) const;
  at::Tensor block_forward(int64_t layer, const LayerWeights& w, at::Tensor h, const at::Tensor& docs,
                           OpCache* cache = nullptr, bool recompute = false) const;
  at::Tensor attention(int64_t layer, const LayerWeights& w, const at::Tensor& x, OpCache* cache,
                       const at::Tensor& docs) const;
  // DeepSeek-V3's MLA (args_.is_mla()): TorchTitan's TP plan, CP through
  // context_parallel_attention, SDPA at mla_scale_; no float8 (the family
  // refuses it).
  at::Tensor mla_attention(int64_t layer, const LayerWeights& w, const at::Tensor& x, const at::Tensor& docs) const;
  // block_causal attention of q [B,H,S,Dh], k/v [B,G,S,Dv] under the starts
  // `docs`: CUDA's varlen flash where it takes the shapes, else the fused
  // CPU kernel (compile), else SDPA with the document mask.
  at::Tensor document_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& docs,
                                std::optional<double> scale = std::nullopt) const;
  at::Tensor feed_forward(int64_t layer, const LayerWeights& w, const at::Tensor& x, OpCache* cache,
                          bool recompute) const;
  // A weight every tp rank holds whole but applies to its part of the
  // work (norms under SP, q/k norms over its heads, experts under SP): its
  // gradient is summed over tp in backward.
  at::Tensor tp_summed(const at::Tensor& w, bool partial) const;
  at::Tensor apply_rope(const at::Tensor& x, at::ScalarType out_dtype) const;  // [B,S,n,Dh]
  // RoPE rotations for S local tokens: rows 0..S-1, or under CP the rows of
  // this rank's positions (also kept in cp_positions_).
  const at::Tensor& rope_table(int64_t S) const;
  void build_compute_views();
  // The techniques' one-time setup (constructor): the fused kernels where
  // the device has them, and which GEMMs run in float8.
  void apply_compile(bool fused_model, bool fused_loss);
  void apply_float8(const Float8Options& f);
  const LayerWeights& layer_weights(int64_t layer) const;  // by global index

  ModelArgs args_;
  std::vector<ModelPart> parts_;
  std::vector<int64_t> layer_ids_;     // global index of each local block, in part order
  std::vector<int64_t> local_of_;      // global layer → index into layer_ids_ (-1: not here)
  static constexpr int64_t kEmbeddingUnit = -1, kHeadUnit = -2;
  std::vector<int64_t> unit_layer_;    // per unit: its global layer, or kEmbeddingUnit / kHeadUnit
  std::vector<size_t> stage_units_;    // part k's units are [stage_units_[k], stage_units_[k+1])
  TensorParallelOptions tp_;
  ExpertParallelOptions ep_;
  ContextParallelOptions cp_;
  std::shared_ptr<const LayoutSeams> seams_;  // null: one process
  // The seams, which a layout needs (a logic error when a parallelism is
  // on without them).
  const LayoutSeams& seams() const;
  mutable at::Tensor cp_positions_, cp_freqs_;  // for the local length cp_positions_.size(0)
  at::Tensor docs_;  // set_documents: the next forwards' starts (undefined: causal)
  mutable at::Tensor varlen_of_;     // the starts varlen_ describes
  mutable VarlenDocuments varlen_;   // CUDA's varlen flash: cumulative starts of varlen_of_
  ParamStore store_;
  at::ScalarType attention_dtype_;     // q/k/v dtype for SDPA (see constructor)
  at::Tensor freqs_cis_;               // complex64 [S_max, rope_dim/2]
  double mla_scale_ = 0;               // MLA's softmax scale (qk head dim^-0.5, YaRN's mscale²)
  double head_norm_eps_ = 0;           // the final norm's eps
  at::Tensor tok_embeddings_, norm_, output_;  // undefined when the part has no embedding / head
  std::vector<LayerWeights> layers_;   // the blocks, local index (layer_ids_ order)
  std::vector<int64_t> moe_layers_;    // global indices of the local MoE layers
  std::vector<at::Tensor> expert_bias_;            // per local layer (undefined: dense)
  mutable std::vector<at::Tensor> expert_counts_;  // per local layer, accumulated by forward
  mutable std::vector<int64_t> ep_received_;       // per local layer, accumulated by forward (EP)
  bool count_experts_ = true;
  std::vector<int64_t> qkv_rows_;      // local rows of wq, wk, wv: the QKV output's split
  ActivationCheckpointPolicy ac_policy_;
  bool fused_model_ = false, fused_loss_ = false;
  bool split_backward_ = false;
  bool float8_ = false, float8_emulate_ = true, float8_output_ = false;
  Float8Recipe float8_recipe_ = Float8Recipe::kTensorwise;
  std::vector<Float8Units> float8_units_;
  std::vector<std::pair<std::string, double>>* sqnr_probe_ = nullptr;  // set during float8_sqnr()
  std::map<std::string, Float8Tensor> float8_weights_;  // by Float8Gemm::name
};

// Precomputed RoPE rotations with Llama 3.1 scaling: complex64 [seq_len, dim/2].
at::Tensor precompute_freqs_cis(int64_t head_dim, int64_t seq_len, double theta,
                                const RopeScaling& scaling);
// DeepSeek-V3's rotations with YaRN (active past yarn.original_seq_len):
// complex64 [seq_len, rope_dim/2].
at::Tensor precompute_yarn_freqs_cis(int64_t rope_dim, int64_t seq_len, double theta, const YarnArgs& yarn);

}  // namespace ctitan
