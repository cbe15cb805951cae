// Llama 3 (TorchTitan's definition) over one flat parameter buffer.
//
// Legend: B batch, S sequence, D model dim, H query heads, K kv heads,
// Dh head dim, F ffn hidden dim, V vocab.
//
// Storage: every parameter is a view into one flat fp32 "master" buffer, and
// every gradient a view into one flat fp32 gradient buffer, so the optimizer,
// clipping and (later) data-parallel reductions act on a handful of large
// tensors instead of one small tensor per parameter. The names are
// TorchTitan's FQNs (layers.3.attention.wq.weight, ...).
//
// Compute: with compute dtype bfloat16 the master buffer is cast once per
// step into a flat bf16 buffer (begin_step), the forward/backward run on bf16
// views of it, and accumulate_grads() casts the bf16 gradients into the fp32
// gradient buffer — FSDP2's MixedPrecisionPolicy(param=bf16, reduce=fp32)
// semantics. With float32 the compute views alias the master buffer; float64
// (for gradient checks in tests) does the same with an fp64 master.
// wq|wk|wv and w1|w3 are laid out next to each other, so each layer runs
// one QKV matmul and one gate/up matmul over views of the same memory.
//
// Not thread-safe. Forward/backward follow LibTorch's autograd rules.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "trainer/float8/float8_linear.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/llama_args.h"

namespace ctitan {

struct ParamSlot {
  std::string name;            // TorchTitan FQN
  std::vector<int64_t> shape;
  int64_t offset = 0;          // into the flat buffers, in elements
  int64_t numel = 0;
};

class Llama3 {
 public:
  // Every buffer lives on `device` (meta: shapes only, nothing allocated).
  Llama3(const LlamaArgs& args, at::ScalarType compute_dtype, int64_t max_seq_len,
         c10::Device device = c10::Device(c10::kCPU));

  // TorchTitan's init_weights. Every value is a function of (seed, FQN,
  // element index) only (param_init.h), so a shard or a pipeline stage that
  // initialises its own part gets the same values.
  void init_weights(uint64_t seed);

  // tokens/labels: int64 [B,S]. Returns the mean cross-entropy (fp32 scalar).
  at::Tensor forward_loss(const at::Tensor& tokens, const at::Tensor& labels);
  // Logits [B,S,V] in the compute dtype.
  at::Tensor forward_logits(const at::Tensor& tokens);

  // Which TransformerBlocks recompute their activations in backward.
  void set_activation_checkpointing(const ActivationCheckpointPolicy& p) { ac_policy_ = p; }
  const ActivationCheckpointPolicy& activation_checkpointing() const { return ac_policy_; }

  // compile.enable: ctitan's fused CPU kernels for the block ops ("model")
  // and the loss ("loss"). They are CPU kernels: on another device the ATen
  // ops run (techniques() says which).
  void set_compile(bool fused_model, bool fused_loss);
  bool fused_model() const { return fused_model_; }
  // model.converters = ["quantize.linear.float8"]: linears whose FQN contains
  // no filter_fqns entry run float8_linear. The fused wq|wk|wv and w1|w3
  // GEMMs are one unit each: float8 only if none of their modules is
  // filtered. Throws InputError for an entry that matches no linear.
  void set_float8(Float8Recipe recipe, bool emulate, const std::vector<std::string>& filter_fqns);
  std::string techniques() const;  // one line: which kernels and converters run

  // The GEMMs that run in float8, each over consecutive slots (wq|wk|wv,
  // wo, w1|w3, w2, output); `name` is the SQNR/probe name.
  struct Float8Gemm {
    std::string name;            // "layers.3.attention.wq|wk|wv", "output"
    std::vector<size_t> slots;   // indices into slots(), consecutive
  };
  std::vector<Float8Gemm> float8_gemms() const;
  bool float8_tensorwise() const { return float8_ && float8_recipe_ == Float8Recipe::kTensorwise; }
  // FSDP's float8 all-gather hands in a GEMM's weight already in float8
  // (tensorwise); forward uses it instead of quantising the weight. Cleared
  // when the unit is freed.
  void set_float8_weight(const std::string& gemm, Float8Tensor q) { float8_weights_[gemm] = std::move(q); }
  void clear_float8_weight(const std::string& gemm) { float8_weights_.erase(gemm); }
  // Float8 quantisation error per float8 GEMM unit on `tokens`: SQNR (dB) of
  // its float8 output against the same GEMM in the compute dtype. A no-grad
  // forward, run at log steps only. Empty without float8.
  std::vector<std::pair<std::string, double>> float8_sqnr(const at::Tensor& tokens);

  // --- stages, for data-parallel wrappers that run backward unit by unit ----
  at::Tensor embed(const at::Tensor& tokens);                 // [B,S,D]
  at::Tensor block(int64_t layer, const at::Tensor& h);       // with the AC policy
  at::Tensor head_loss(const at::Tensor& h, const at::Tensor& labels);  // norm, output, loss

  // Parameter units, TorchTitan's fully_shard units: tok_embeddings, one per
  // TransformerBlock, then norm + output. Each is a contiguous range of the
  // flat buffers, in forward order.
  struct Unit {
    std::string name;
    int64_t offset = 0, numel = 0;  // in the flat buffers
    std::vector<size_t> slots;      // indices into slots()
  };
  const std::vector<Unit>& units() const { return units_; }

  // FSDP: gives every unit its own compute buffer (unit_buffer(u), the
  // unit's slice of the flat layout) and releases the full master, gradient
  // and compute buffers — the wrapper keeps the shards and fills/frees the
  // unit buffers around their use. Call after init_weights() and after the
  // wrapper has copied its shards out of flat_params().
  void use_unit_buffers();
  bool has_unit_buffers() const { return !unit_buffers_.empty(); }
  at::Tensor& unit_buffer(size_t u) { return unit_buffers_.at(u); }
  // Unit-buffer mode: writes unit u's autograd gradients into `out` (fp32,
  // the unit's numel, its flat layout; zeros for unused parameters) and
  // releases them.
  void take_unit_grad(size_t u, at::Tensor& out);

  void begin_step();        // refresh the bf16 compute copy of the master weights
  // Starts a new step's gradients. With bf16 compute the fp32 buffer is
  // overwritten by the next accumulate_grads() (read it only after that).
  void zero_grad();
  // bf16 compute: adds (first call of a step: writes) the autograd gradients
  // into the fp32 buffer and releases them. Call after every backward.
  void accumulate_grads();
  void accumulate_grads(size_t unit);  // the same for one unit's parameters

  const LlamaArgs& args() const { return args_; }
  at::ScalarType compute_dtype() const { return compute_dtype_; }
  c10::Device device() const { return device_; }
  const std::vector<ParamSlot>& slots() const { return slots_; }
  at::Tensor& flat_params() { return master_; }
  at::Tensor& flat_grads() { return master_grad_; }
  at::Tensor param(const std::string& name) const;  // view of the master
  at::Tensor grad(const std::string& name) const;   // view of the fp32 grad
  int64_t num_params() const { return master_.numel(); }

 private:
  struct LayerWeights {
    at::Tensor attention_norm, wqkv, wo, ffn_norm, w13, w2;
  };
  // Which GEMMs of a layer (and the output projection) run in float8.
  struct Float8Units {
    bool qkv = false, wo = false, w13 = false, w2 = false;
  };
  // at::linear, or float8_linear for a float8 unit; `layer`/`unit` name it
  // for the SQNR probe (layer −1: outside the blocks).
  at::Tensor linear(const at::Tensor& x, const at::Tensor& w, bool float8, int64_t layer, const char* unit) const;
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w) const;
  at::Tensor hidden_states(const at::Tensor& tokens);
  at::Tensor block_forward(int64_t layer, const LayerWeights& w, at::Tensor h, OpCache* cache = nullptr) const;
  at::Tensor apply_rope(const at::Tensor& x, at::ScalarType out_dtype) const;  // [B,S,n,Dh]
  const ParamSlot& slot(const std::string& name) const;
  at::Tensor compute_leaf(const std::string& first_slot, std::vector<int64_t> shape);
  void build_compute_views();

  LlamaArgs args_;
  at::ScalarType compute_dtype_;
  c10::Device device_;
  at::ScalarType attention_dtype_;     // q/k/v dtype for SDPA (see constructor)
  std::vector<ParamSlot> slots_;
  at::Tensor master_, master_grad_;    // fp32 [N]
  at::Tensor compute_;                 // compute dtype [N] (aliases master for fp32/fp64)
  std::vector<Unit> units_;
  std::vector<at::Tensor> unit_buffers_;  // FSDP: per-unit compute buffers
  std::vector<bool> master_grad_fresh_;   // per unit: master_grad_ holds this step's sum so far
  struct Leaf {
    at::Tensor tensor;
    int64_t offset;  // into the flat buffers
    size_t unit;
  };
  std::vector<Leaf> leaves_;
  at::Tensor freqs_cis_;               // complex64 [S_max, Dh/2]
  at::Tensor tok_embeddings_, norm_, output_;
  std::vector<LayerWeights> layers_;
  ActivationCheckpointPolicy ac_policy_;
  bool fused_model_ = false, fused_loss_ = false;
  bool float8_ = false, float8_emulate_ = true, float8_output_ = false;
  Float8Recipe float8_recipe_ = Float8Recipe::kTensorwise;
  std::vector<Float8Units> float8_units_;
  std::vector<std::pair<std::string, double>>* sqnr_probe_ = nullptr;  // set during float8_sqnr()
  std::map<std::string, Float8Tensor> float8_weights_;  // by Float8Gemm::name
};

// Precomputed RoPE rotations with Llama 3.1 scaling: complex64 [seq_len, dim/2].
at::Tensor precompute_freqs_cis(int64_t head_dim, int64_t seq_len, double theta,
                                const RopeScaling& scaling);

}  // namespace ctitan
