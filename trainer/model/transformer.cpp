#include "trainer/model/transformer.h"

#include <algorithm>
#include <limits>

#include "common/errors.h"
#include "trainer/kernels/documents.h"
#include "trainer/kernels/fused_cuda.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/model/cross_entropy.h"
#include "trainer/model/param_init.h"

namespace ctitan {

namespace {

// The part's specs as this rank holds them: the layout's placement plan
// (whole tensors in one process).
std::vector<ParamSpec> planned_specs(const ModelArgs& args, const std::vector<ModelPart>& parts,
                                     const ParallelLayout& layout) {
  std::vector<ParamSpec> specs = model_param_specs(args, parts);
  if (!layout.seams) {
    TORCH_CHECK(!layout.tp.on() && !layout.ep.on(), "a parallel layout needs its seams (parallel_layout())");
    return specs;
  }
  return layout.seams->plan(args, std::move(specs), layout.tp, layout.ep);
}

// TorchTitan's fully_shard units over the part's specs: tok_embeddings, one
// per block, norm + output (norm alone with a tied output).
std::vector<ParamStore::UnitSpec> model_units(const ModelArgs& args, const std::vector<ModelPart>& parts) {
  std::vector<ParamStore::UnitSpec> units;
  for (const ModelPart& part : parts) {
    if (part.embedding) units.push_back({"tok_embeddings", 1});
    for (int64_t l = part.first_layer; l < part.first_layer + part.n_layers; ++l)
      units.push_back({"layers." + std::to_string(l), model_param_specs(args, ModelPart{false, l, 1, false}).size()});
    if (part.head) units.push_back({"norm+output", args.tie_embeddings ? size_t{1} : size_t{2}});
  }
  return units;
}

std::vector<ModelPart> resolved_parts(const ModelArgs& args, const std::vector<ModelPart>& parts) {
  if (parts.empty()) throw InputError("model: no model part to build");
  std::vector<ModelPart> out;
  for (const ModelPart& p : parts) out.push_back(p.resolved(args));
  return out;
}

// TorchTitan's DeepSeek-V3 final norm: torch.finfo(dtype).eps.
double head_norm_eps(const ModelArgs& args, at::ScalarType compute_dtype) {
  if (!args.final_norm_eps_of_dtype) return args.norm_eps;
  if (compute_dtype == at::kBFloat16) return static_cast<double>(std::numeric_limits<c10::BFloat16>::epsilon());
  if (compute_dtype == at::kDouble) return std::numeric_limits<double>::epsilon();
  return static_cast<double>(std::numeric_limits<float>::epsilon());
}

}  // namespace

Transformer::PartIndex::PartIndex(const ModelArgs& args, const std::vector<ModelPart>& in)
    : parts(resolved_parts(args, in)) {
  local_of.assign(args.n_layers, -1);
  stage_units.push_back(0);
  for (const ModelPart& p : parts) {
    if (p.embedding) unit_layer.push_back(kEmbeddingUnit);
    for (int64_t l = p.first_layer; l < p.first_layer + p.n_layers; ++l) {
      if (local_of[l] >= 0) throw InputError("model parts: layer " + std::to_string(l) + " is in two parts");
      local_of[l] = static_cast<int64_t>(layer_ids.size());
      layer_ids.push_back(l);
      unit_layer.push_back(l);
    }
    if (p.head) unit_layer.push_back(kHeadUnit);
    stage_units.push_back(unit_layer.size());
  }
}

bool Transformer::PartIndex::has_embedding() const {
  return std::any_of(parts.begin(), parts.end(), [](const ModelPart& p) { return p.embedding; });
}

bool Transformer::PartIndex::has_head() const {
  return std::any_of(parts.begin(), parts.end(), [](const ModelPart& p) { return p.head; });
}

Transformer::Transformer(const ModelArgs& args, at::ScalarType compute_dtype, int64_t max_seq_len, c10::Device device,
               ModelPart part, ParamStore::Storage storage, ParallelLayout layout, const ModelTechniques& techniques)
    : Transformer(args, compute_dtype, max_seq_len, device, std::vector<ModelPart>{part}, storage, std::move(layout),
                  techniques) {}

Transformer::Transformer(const ModelArgs& args, at::ScalarType compute_dtype, int64_t max_seq_len, c10::Device device,
               const std::vector<ModelPart>& parts, ParamStore::Storage storage, ParallelLayout layout,
               const ModelTechniques& techniques)
    : args_(args),
      parts_(args, parts),
      store_(planned_specs(args, parts_.parts, layout), model_units(args, parts_.parts), compute_dtype, device,
             storage),
      attention_(make_attention(args, max_seq_len)),
      ops_(args, device, compute_dtype, std::move(layout), techniques, attention_->rope_frequencies(max_seq_len, device),
           choose_float8(args, parts_, store_, *attention_, techniques.float8)),
      ac_policy_(techniques.activation_checkpointing),
      head_norm_eps_(head_norm_eps(args, compute_dtype)) {
  bind_weights();
  store_.set_fused_cuda(ops_.fused_model() && device.is_cuda());
}

void Transformer::bind_weights() {
  ParamStore& st = store_;
  const auto view = [&](const std::string& name) { return st.leaf(name, st.slot(name).shape); };
  if (has_embedding()) weights_.tok_embeddings = view("tok_embeddings.weight");
  for (int64_t l : parts_.layer_ids) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerWeights w;
    attention_->bind(st, p, w);
    if (args_.moe_layer(l)) {
      w.moe.router = view(p + "moe.router.gate.weight");
      w.moe.w1 = view(p + "moe.experts.w1");
      w.moe.w2 = view(p + "moe.experts.w2");
      w.moe.w3 = view(p + "moe.experts.w3");
      if (args_.moe.gate_bias) w.moe.router_bias = view(p + "moe.router.gate.bias");
      if (args_.moe.expert_biases) {
        w.moe.b1 = view(p + "moe.experts.b1");
        w.moe.b2 = view(p + "moe.experts.b2");
        w.moe.b3 = view(p + "moe.experts.b3");
      }
      if (args_.moe.num_shared_experts > 0) {
        w.moe.shared_w1 = view(p + "moe.shared_experts.w1.weight");
        w.moe.shared_w3 = view(p + "moe.shared_experts.w3.weight");
        w.moe.shared_w2 = view(p + "moe.shared_experts.w2.weight");
      }
      moe_.emplace(l, MoeLayer(args_.moe, device()));
    } else {
      // The FFN width on this rank comes from the specs.
      const auto& w1 = st.slot(p + "feed_forward.w1.weight").shape;
      const auto& w3 = st.slot(p + "feed_forward.w3.weight").shape;
      w.w13 = st.leaf(p + "feed_forward.w1.weight", {w1[0] + w3[0], w1[1]});
      w.w2 = view(p + "feed_forward.w2.weight");
    }
    w.attention_norm = view(p + "attention_norm.weight");
    w.ffn_norm = view(p + "ffn_norm.weight");
    weights_.layers.push_back(std::move(w));
  }
  if (has_head()) {
    weights_.norm = view("norm.weight");
    // A tied output is the embedding matrix (the family keeps both in one part).
    weights_.output = args_.tie_embeddings ? weights_.tok_embeddings : view("output.weight");
    TORCH_CHECK(weights_.output.defined(), "a tied output needs the embedding in the same model part");
  }
}

Float8Gemms Transformer::choose_float8(const ModelArgs& args, const PartIndex& parts, const ParamStore& store,
                                       const Attention& attention, const std::optional<Float8Options>& options) {
  if (!options) return Float8Gemms();
  Float8Gemms f8(*options);
  // Every module is evaluated, so each filter entry is marked as matched. A
  // GEMM over several modules (wq|wk|wv, w1|w3) runs in float8 only when
  // none of them is filtered.
  const auto chosen = [&](const std::string& p, const std::vector<std::string>& modules) {
    bool hit = false;
    for (const std::string& m : modules) hit = f8.filtered(p + m) || hit;
    return !hit;
  };
  const auto slots = [&](const std::string& p, const std::vector<std::string>& modules) {
    std::vector<size_t> out;
    for (const std::string& m : modules) out.push_back(store.index(p + m + ".weight"));
    return out;
  };
  for (int64_t l : parts.layer_ids) {
    const std::string p = "layers." + std::to_string(l) + ".";
    for (const std::string& m : attention.high_precision_modules()) f8.filtered(p + m);
    std::vector<std::pair<Attention::Gemm, bool>> gemms;
    for (const Attention::Gemm& g : attention.float8_gemms()) gemms.emplace_back(g, chosen(p, g.modules));
    // The FFN's names are evaluated on every layer; an MoE layer's router
    // and experts stay in the compute dtype (TorchTitan filters them too), a
    // filter entry naming them is still a valid entry.
    const bool w13 = chosen(p, {"feed_forward.w1", "feed_forward.w3"});
    const bool w2 = chosen(p, {"feed_forward.w2"});
    if (args.moe_layer(l))
      for (const char* m : {"moe.router.gate", "moe.experts", "moe.shared_experts.w1", "moe.shared_experts.w2",
                            "moe.shared_experts.w3"})
        f8.filtered(p + m);
    for (const auto& [g, on] : gemms)
      if (on) f8.add(p + g.unit, slots(p, g.modules));
    if (!args.moe_layer(l) && w13)
      f8.add(p + "feed_forward.w1|w3", slots(p, {"feed_forward.w1", "feed_forward.w3"}));
    if (!args.moe_layer(l) && w2) f8.add(p + "feed_forward.w2", slots(p, {"feed_forward.w2"}));
  }
  if (parts.has_head() && !f8.filtered("output")) f8.add("output", {store.index("output.weight")});
  // An entry may name linears of another pipeline stage: it is a mistake
  // only when it matches no linear of the whole model.
  const bool whole = parts.parts.size() == 1 && parts.has_embedding() && parts.has_head();
  if (!whole) {
    for (int64_t l = 0; l < args.n_layers; ++l)
      for (const char* m : {"attention.wq", "attention.wk", "attention.wv", "attention.wo", "feed_forward.w1",
                            "feed_forward.w3", "feed_forward.w2", "attention.wq_a", "attention.wq_b",
                            "attention.wkv_a", "attention.wkv_b"})
        f8.filtered("layers." + std::to_string(l) + "." + m);
    f8.filtered("output");
  }
  f8.check_every_entry_matched();
  return f8;
}

std::vector<int64_t> Transformer::moe_layers() const {
  std::vector<int64_t> out;  // in part order
  for (int64_t l : parts_.layer_ids)
    if (moe_.count(l)) out.push_back(l);
  return out;
}

const LayerWeights& Transformer::layer_weights(int64_t layer) const {
  TORCH_CHECK(layer >= 0 && layer < args_.n_layers && parts_.local_of[layer] >= 0, "layer ", layer,
              " is not in this model part");
  return weights_.layers[parts_.local_of[layer]];
}

void Transformer::init_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  for (const auto& s : store_.slots()) init_param_storage(store_.param(s.name), s, args_, seed);
  store_.begin_step();
}

void Transformer::set_documents(const at::Tensor& starts) {
  // One document per sample is causal attention: the causal kernels run.
  docs_ = !args_.block_causal() || !starts.defined() || starts.is_meta() || single_document(starts)
              ? at::Tensor()
              : starts.to(device(), at::kLong).contiguous();
}

double Transformer::float8_flops_per_token() const {
  if (!float8().on()) return 0.0;
  const double per_element = float8().recipe() == Float8Recipe::kRowwiseWithGwHp ? 4.0 : 6.0;
  double elements = 0;
  for (const Float8Gemm& g : float8().gemms())
    for (size_t slot : g.slots) {
      double n = 1;
      for (int64_t d : slots().at(slot).global_shape) n *= static_cast<double>(d);
      elements += n;
    }
  return per_element * elements;
}

Float8Gemms::Sqnr Transformer::float8_sqnr(const at::Tensor& tokens) {
  Float8Gemms::Sqnr out;
  if (!float8().on()) return out;
  torch::NoGradGuard no_grad;
  float8().open_probe(&out);
  const bool counting = count_experts_;
  count_experts_ = false;
  try {
    forward_logits(tokens);
  } catch (...) {
    float8().close_probe();
    count_experts_ = counting;
    throw;
  }
  float8().close_probe();
  count_experts_ = counting;
  return out;
}

at::Tensor Transformer::block_forward(int64_t layer, const LayerWeights& w, at::Tensor h, const at::Tensor& docs,
                                      OpCache* cache, bool recompute) {
  // One TransformerBlock: h + attention(norm(h)), then + feed_forward(norm(h))
  // (the dense SwiGLU or the MoE layer).
  h = h + attention_->forward(ops_, layer, w, ops_.rms_norm(h, ops_.norm_weight(w.attention_norm)), cache, docs);
  const at::Tensor x = ops_.rms_norm(h, ops_.norm_weight(w.ffn_norm));
  if (w.moe.router.defined()) return h + moe_.at(layer).forward(ops_, w.moe, x, count_experts_ && !recompute);
  return h + dense_feed_forward(ops_, layer, w.w13, w.w2, x, cache);
}

at::Tensor Transformer::embed(const at::Tensor& tokens) {
  const int64_t S = tokens.size(1);
  TORCH_CHECK(S <= ops_.max_seq_len(), "sequence length ", S, " exceeds the model's max ", ops_.max_seq_len());
  // On meta (the dry run) through aten::index: LibTorch has C++ meta
  // kernels for index and its backward's index_put, while embedding's
  // index_select has its meta kernel in Python only. Same shapes.
  const TensorParallelOptions& tp = ops_.tp();
  if (tp.on())
    return ops_.seams().vocab_parallel_embedding(weights_.tok_embeddings, tokens, *tp.group, tp.sequence_parallel);
  if (tokens.is_meta()) return weights_.tok_embeddings.index({tokens});  // [B,S,D]
  return at::embedding(weights_.tok_embeddings, tokens);                  // [B,S,D]
}

at::Tensor Transformer::block(int64_t l, const at::Tensor& h) {
  const LayerWeights& w = layer_weights(l);
  if (!ac_policy_.checkpoints_layer(l)) return block_forward(l, w, h, docs_);
  std::shared_ptr<OpCache> cache;
  if (ac_policy_.mode == ActivationCheckpointPolicy::Mode::kSelectiveOp) cache = std::make_shared<OpCache>();
  std::vector<at::Tensor> inputs = w.list();
  inputs.insert(inputs.begin(), h);
  auto calls = std::make_shared<int>(0);  // the first call is the forward, later ones recompute
  return checkpoint(
      [this, l, cache, calls, docs = docs_](const std::vector<at::Tensor>& in) {
        if (cache) cache->next = 0;  // a recomputation replays from the first kept output
        return block_forward(l, layer_weights(l).with(in, 1), in[0], docs, cache.get(), (*calls)++ > 0);
      },
      inputs);
}

at::Tensor Transformer::hidden_states(const at::Tensor& tokens) {
  TORCH_CHECK(whole(), "hidden_states: needs the whole model, this rank holds pipeline stages");
  at::Tensor h = embed(tokens);
  for (int64_t l : parts_.layer_ids) h = block(l, h);
  return h;
}

at::Tensor Transformer::local_logits(const at::Tensor& h) const {
  return ops_.column_gemm(ops_.rms_norm(h, ops_.norm_weight(weights_.norm), head_norm_eps_), weights_.output, -1,
                          "output", nullptr);
}

at::Tensor Transformer::forward_logits(const at::Tensor& tokens) {
  const at::Tensor logits = local_logits(hidden_states(tokens));
  const TensorParallelOptions& tp = ops_.tp();
  return tp.on() ? ops_.seams().gather_from_tp(logits, *tp.group, -1) : logits;
}

at::Tensor Transformer::head_loss(const at::Tensor& h, const at::Tensor& labels) {
  const TensorParallelOptions& tp = ops_.tp();
  // On CUDA the fused loss never forms the [B·S,V] logits: chunks of rows
  // through the output GEMM and the CE kernel, gradients made per chunk.
  // Not under TP (vocab-sharded logits), a float8 output layer, or the
  // split backward (which defers the output layer's dW to the W pass).
  if (ops_.fused_loss() && cuda_kernels_take(h) && !tp.on() && !ops_.in_float8(-1, "output") && !ops_.split_backward())
    return cuda_linear_cross_entropy(
        ops_.rms_norm(h, ops_.norm_weight(weights_.norm), head_norm_eps_).flatten(0, 1), weights_.output,
        labels.flatten(0, 1));
  at::Tensor logits = local_logits(h);  // [B,S,V] (this rank's V/tp columns under TP)
  if (tp.on()) {
    // Loss parallelism: the vocab-sharded logits are never gathered (on meta
    // the local loss has the same shapes).
    if (tp.loss_parallel && !logits.is_meta())
      return ops_.seams().vocab_parallel_cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1), *tp.group);
    if (!tp.loss_parallel) logits = ops_.seams().gather_from_tp(logits, *tp.group, -1);
  }
  // The fused loss writes d(loss)/d(logits) into the logits' storage during
  // forward (the logits are dead after the loss), so no second [B*S,V] buffer.
  if (ops_.fused_loss())
    return fused_cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1), /*grad_into_logits=*/true);
  // On meta (the dry run): log_softmax + nll_loss have C++ meta kernels,
  // the chunked loss's logsumexp does not. Same scalar.
  if (logits.is_meta()) return at::cross_entropy_loss(logits.flatten(0, 1).to(at::kFloat), labels.flatten(0, 1));
  return chunked_cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1));
}

at::Tensor Transformer::forward_loss(const at::Tensor& tokens, const at::Tensor& labels) {
  TORCH_CHECK(whole(), "forward_loss: needs the whole model, this rank holds pipeline stages");
  at::Tensor h = embed(tokens);
  for (int64_t l : parts_.layer_ids) h = block(l, h);
  return head_loss(h, labels);
}

at::Tensor Transformer::run_unit(size_t u, const at::Tensor& input, const at::Tensor& labels) {
  const int64_t l = parts_.unit_layer.at(u);
  if (l == PartIndex::kEmbeddingUnit) return embed(input);
  if (l == PartIndex::kHeadUnit) return head_loss(input, labels);
  return block(l, input);
}

std::string Transformer::techniques() const {
  std::string compile = ops_.fused_model() && ops_.fused_loss() ? "model+loss" : ops_.fused_model() ? "model" : ops_.fused_loss() ? "loss" : "off";
  if ((ops_.fused_model() || ops_.fused_loss()) && device().is_cuda())
    compile += store_.optimizer_writes_compute()
                   ? " (fused CUDA kernels, AdamW writing the bf16 compute copy; attention: ATen's SDPA)"
                   : " (fused CUDA kernels; attention: ATen's SDPA)";
  else if (ops_.fused_model() || ops_.fused_loss())
    compile += fused_kernels_available() ? " (fused AVX-512 kernels)" : " (no AVX-512: eager fallback)";
  else if (!device().is_cpu())
    compile += " (ATen ops on " + device().str() + ")";
  std::string attention;
  if (args_.block_causal())
    attention = std::string(", attention: block_causal (") + args_.attn_type + "; " +
                (ops_.cp().on() ? "CP chunk pairs with document masks"
                 : device().is_cuda()
                     ? "ATen's varlen flash for bf16/fp16 heads of 8..256 (not MLA), else SDPA with the document mask"
                 : ops_.fused_model() && device().is_cpu() && fused_kernels_available()
                     ? "the fused kernel skipping the masked blocks"
                     : "SDPA with the document mask") +
                ")";
  return "compile: " + compile + ", float8: " + (float8().on() ? float8_backend(device(), float8().emulate()) : "off") +
         attention;
}

}  // namespace ctitan
