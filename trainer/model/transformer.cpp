#include "trainer/model/transformer.h"

#include "trainer/model/gemm.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "common/errors.h"
#include "trainer/kernels/fused_cuda.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/cross_entropy.h"
#include "trainer/kernels/documents.h"
#include "trainer/model/param_init.h"
#include "trainer/model/weight_grad.h"

namespace ctitan {

at::Tensor precompute_freqs_cis(int64_t head_dim, int64_t seq_len, double theta,
                                const RopeScaling& s) {
  // freqs[i] = theta^(-2i/Dh), then Llama 3.1's piecewise rescaling by wavelength.
  const int64_t half = head_dim / 2;
  std::vector<float> freqs(half);
  const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (int64_t i = 0; i < half; ++i) {
    // Computed in float32 like torch.arange(...).float() / dim in TorchTitan.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float f = 1.0f / std::pow(static_cast<float>(theta), exponent);
    const double wavelen = 2.0 * M_PI / f;
    double scaled;
    if (!s.enabled || wavelen < high_wavelen) {
      scaled = f;
    } else if (wavelen > low_wavelen) {
      scaled = f / s.factor;
    } else {
      const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      scaled = (1 - smooth) * f / s.factor + smooth * f;
    }
    freqs[i] = static_cast<float>(scaled);
  }
  at::Tensor f = torch::tensor(freqs, torch::kFloat);
  at::Tensor t = torch::arange(seq_len, torch::kFloat);
  at::Tensor angles = torch::outer(t, f);
  return torch::polar(torch::ones_like(angles), angles);
}

at::Tensor precompute_yarn_freqs_cis(int64_t rope_dim, int64_t seq_len, double theta, const YarnArgs& y) {
  // DeepSeek-V3's precompute_freqs_cis: freqs[i] = θ^(-2i/d) in fp32; past
  // original_seq_len, blended towards freqs[i]/factor between the correction
  // dims of beta_fast and beta_slow rotations (a linear ramp over i).
  const int64_t half = rope_dim / 2;
  at::Tensor freqs = 1.0 / at::pow(theta, torch::arange(0, rope_dim, 2, torch::kFloat) / static_cast<double>(rope_dim));
  if (y.enabled && seq_len > y.original_seq_len) {
    const auto correction_dim = [&](double rotations) {
      return rope_dim * std::log(y.original_seq_len / (rotations * 2 * M_PI)) / (2 * std::log(theta));
    };
    const double low = std::max(std::floor(correction_dim(y.beta_fast)), 0.0);
    double high = std::min(std::ceil(correction_dim(y.beta_slow)), static_cast<double>(rope_dim - 1));
    if (low == high) high += 0.001;
    const at::Tensor ramp = ((torch::arange(half, torch::kFloat) - low) / (high - low)).clamp(0, 1);
    const at::Tensor smooth = 1 - ramp;
    freqs = freqs / y.factor * (1 - smooth) + freqs * smooth;
  }
  const at::Tensor angles = torch::outer(torch::arange(seq_len, torch::kFloat), freqs);
  return torch::polar(torch::ones_like(angles), angles);
}

ModelPart ModelPart::resolved(const ModelArgs& args) const {
  ModelPart p = *this;
  if (p.n_layers < 0) p.n_layers = args.n_layers - p.first_layer;
  if (p.first_layer < 0 || p.n_layers < 0 || p.first_layer + p.n_layers > args.n_layers)
    throw InputError("model part: layers " + std::to_string(first_layer) + " .. " +
                     std::to_string(first_layer + p.n_layers - 1) + " do not fit a model of " +
                     std::to_string(args.n_layers) + " layers");
  if (!p.embedding && !p.head && p.n_layers == 0) throw InputError("model part: holds no embedding, layer or head");
  return p;
}

std::vector<ParamSpec> model_param_specs(const ModelArgs& args, const std::vector<ModelPart>& parts) {
  std::vector<ParamSpec> specs;
  for (const ModelPart& part : parts) {
    std::vector<ParamSpec> more = model_param_specs(args, part);
    specs.insert(specs.end(), more.begin(), more.end());
  }
  return specs;
}

std::vector<ParamSpec> model_param_specs(const ModelArgs& args, const ModelPart& part_in) {
  const ModelPart part = part_in.resolved(args);
  const int64_t d = args.dim, hd = args.head_dim(), f = args.ffn_hidden_dim();
  std::vector<ParamSpec> specs;
  if (part.embedding) specs.push_back(whole_param("tok_embeddings.weight", {args.vocab_size, d}));
  for (int64_t l = part.first_layer; l < part.first_layer + part.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    if (args.is_mla()) {  // DeepSeek-V3's names and shapes
      const MlaArgs& m = args.mla;
      const int64_t H = args.n_heads, qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
      if (m.q_lora_rank > 0) {
        specs.push_back(whole_param(p + "attention.wq_a.weight", {m.q_lora_rank, d}));
        specs.push_back(whole_param(p + "attention.q_norm.weight", {m.q_lora_rank}));
        specs.push_back(whole_param(p + "attention.wq_b.weight", {H * qk, m.q_lora_rank}));
      } else {
        specs.push_back(whole_param(p + "attention.wq.weight", {H * qk, d}));
      }
      specs.push_back(whole_param(p + "attention.wkv_a.weight", {m.kv_lora_rank + m.qk_rope_head_dim, d}));
      specs.push_back(whole_param(p + "attention.kv_norm.weight", {m.kv_lora_rank}));
      specs.push_back(whole_param(p + "attention.wkv_b.weight", {H * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank}));
      specs.push_back(whole_param(p + "attention.wo.weight", {d, H * m.v_head_dim}));
    } else {
      // wq,wk,wv adjacent → one [(H+2K)Dh, D] view; w1,w3 adjacent → one [2F, D] view.
      specs.push_back(whole_param(p + "attention.wq.weight", {args.n_heads * hd, d}));
      specs.push_back(whole_param(p + "attention.wk.weight", {args.kv_dim(), d}));
      specs.push_back(whole_param(p + "attention.wv.weight", {args.kv_dim(), d}));
      specs.push_back(whole_param(p + "attention.wo.weight", {d, args.n_heads * hd}));
    }
    if (args.qk_norm) {
      specs.push_back(whole_param(p + "attention.q_norm.weight", {hd}));
      specs.push_back(whole_param(p + "attention.k_norm.weight", {hd}));
    }
    if (args.moe_layer(l)) {
      const MoeArgs& m = args.moe;
      const int64_t E = m.num_experts, hm = m.hidden_dim, sh = m.num_shared_experts * m.hidden_dim;
      specs.push_back(whole_param(p + "moe.router.gate.weight", {E, d}));
      specs.push_back(whole_param(p + "moe.experts.w1", {E, hm, d}));
      specs.push_back(whole_param(p + "moe.experts.w2", {E, d, hm}));
      specs.push_back(whole_param(p + "moe.experts.w3", {E, hm, d}));
      if (sh > 0) {
        specs.push_back(whole_param(p + "moe.shared_experts.w1.weight", {sh, d}));
        specs.push_back(whole_param(p + "moe.shared_experts.w3.weight", {sh, d}));
        specs.push_back(whole_param(p + "moe.shared_experts.w2.weight", {d, sh}));
      }
    } else {
      specs.push_back(whole_param(p + "feed_forward.w1.weight", {f, d}));
      specs.push_back(whole_param(p + "feed_forward.w3.weight", {f, d}));
      specs.push_back(whole_param(p + "feed_forward.w2.weight", {d, f}));
    }
    specs.push_back(whole_param(p + "attention_norm.weight", {d}));
    specs.push_back(whole_param(p + "ffn_norm.weight", {d}));
  }
  if (part.head) {
    specs.push_back(whole_param("norm.weight", {d}));
    if (!args.tie_embeddings) specs.push_back(whole_param("output.weight", {args.vocab_size, d}));
  }
  return specs;
}

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

// Pieces of each rank's sequence shard that async TP pipelines over: one per
// tp rank, as TorchTitan's micro-pipeline splits per shard (at least two).
int64_t async_chunks(const TensorParallelOptions& tp) { return std::max<int64_t>(2, tp.size()); }

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

}  // namespace

Transformer::Transformer(const ModelArgs& args, at::ScalarType compute_dtype, int64_t max_seq_len, c10::Device device,
               ModelPart part, ParamStore::Storage storage, ParallelLayout layout, const ModelTechniques& techniques)
    : Transformer(args, compute_dtype, max_seq_len, device, std::vector<ModelPart>{part}, storage, std::move(layout),
                  techniques) {}

Transformer::Transformer(const ModelArgs& args, at::ScalarType compute_dtype, int64_t max_seq_len, c10::Device device,
               const std::vector<ModelPart>& parts, ParamStore::Storage storage, ParallelLayout layout,
               const ModelTechniques& techniques)
    : args_(args),
      parts_(resolved_parts(args, parts)),
      tp_(layout.tp),
      ep_(layout.ep),
      seams_(layout.seams),
      store_(planned_specs(args, parts_, layout), model_units(args, parts_), compute_dtype, device, storage) {
  local_of_.assign(args_.n_layers, -1);
  stage_units_.push_back(0);
  for (const ModelPart& p : parts_) {
    if (p.embedding) unit_layer_.push_back(kEmbeddingUnit);
    for (int64_t l = p.first_layer; l < p.first_layer + p.n_layers; ++l) {
      if (local_of_[l] >= 0) throw InputError("model parts: layer " + std::to_string(l) + " is in two parts");
      local_of_[l] = static_cast<int64_t>(layer_ids_.size());
      layer_ids_.push_back(l);
      unit_layer_.push_back(l);
    }
    if (p.head) unit_layer_.push_back(kHeadUnit);
    stage_units_.push_back(unit_layer_.size());
  }
  // ATen's CPU flash-attention kernel is ~2x slower in bf16 than in fp32 at
  // small head dims (16: 32 ms vs 18 ms fwd+bwd per debugmodel layer, casts
  // included) and faster from 64 up, so small heads attend in fp32 on the
  // CPU. Only precision rises; the math is unchanged. Other devices keep the
  // compute dtype.
  attention_dtype_ = compute_dtype;
  if (device.is_cpu() && compute_dtype == torch::kBFloat16 && args_.head_dim() < 32) attention_dtype_ = torch::kFloat;
  // On the meta device (a dry run, the planner's layout) the RoPE table is a
  // shape only: nothing proportional to the sequence is computed or held.
  const bool meta = device.is_meta();
  const auto meta_table = [&](int64_t dim) {
    return at::empty({max_seq_len, dim / 2}, at::TensorOptions().dtype(at::kComplexFloat).device(device));
  };
  if (args.is_mla()) {
    freqs_cis_ = meta ? meta_table(args.rope_dim())
                      : precompute_yarn_freqs_cis(args.rope_dim(), max_seq_len, args.rope_theta, args.yarn).to(device);
    const MlaArgs& m = args.mla;
    mla_scale_ = std::pow(static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim), -0.5);
    if (args.yarn.enabled && max_seq_len > args.yarn.original_seq_len) {
      const double ms = 0.1 * m.mscale * std::log(args.yarn.factor) + 1.0;
      mla_scale_ *= ms * ms;
    }
  } else {
    freqs_cis_ = meta ? meta_table(args.head_dim())
                      : precompute_freqs_cis(args.head_dim(), max_seq_len, args.rope_theta, args.rope_scaling)
                            .to(device);
  }
  // TorchTitan's DeepSeek-V3 final norm: torch.finfo(dtype).eps.
  head_norm_eps_ = !args.final_norm_eps_of_dtype ? args.norm_eps
                   : compute_dtype == torch::kBFloat16
                       ? static_cast<double>(std::numeric_limits<c10::BFloat16>::epsilon())
                   : compute_dtype == torch::kDouble ? std::numeric_limits<double>::epsilon()
                                                     : static_cast<double>(std::numeric_limits<float>::epsilon());
  build_compute_views();
  if (layout.cp.on() || layout.seams) {
    seams().check_context_parallel(layout.cp);  // seq_len is the caller's
    cp_ = std::move(layout.cp);
  }
  ac_policy_ = techniques.activation_checkpointing;
  if (techniques.compile_model || techniques.compile_loss)
    apply_compile(techniques.compile_model, techniques.compile_loss);
  if (techniques.float8) apply_float8(*techniques.float8);
  split_backward_ = techniques.split_backward;
}

void Transformer::build_compute_views() {
  ParamStore& st = store_;
  if (has_embedding()) tok_embeddings_ = st.leaf("tok_embeddings.weight", st.slot("tok_embeddings.weight").shape);
  const auto view = [&](const std::string& name) { return st.leaf(name, st.slot(name).shape); };
  for (int64_t l : layer_ids_) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerWeights w;
    if (args_.is_mla()) {
      if (args_.mla.q_lora_rank > 0) {
        w.mla.wq_a = view(p + "attention.wq_a.weight");
        w.mla.q_norm = view(p + "attention.q_norm.weight");
        w.mla.wq_b = view(p + "attention.wq_b.weight");
      } else {
        w.mla.wq = view(p + "attention.wq.weight");
      }
      w.mla.wkv_a = view(p + "attention.wkv_a.weight");
      w.mla.kv_norm = view(p + "attention.kv_norm.weight");
      w.mla.wkv_b = view(p + "attention.wkv_b.weight");
    } else {
      // Local shapes: the rows of wq, wk, wv (heads × Dh on this rank) and of
      // w1, w3 (the FFN width on this rank) come from the specs.
      const auto& wq = st.slot(p + "attention.wq.weight").shape;
      const auto& wk = st.slot(p + "attention.wk.weight").shape;
      const auto& wv = st.slot(p + "attention.wv.weight").shape;
      if (qkv_rows_.empty()) qkv_rows_ = {wq[0], wk[0], wv[0]};
      w.wqkv = st.leaf(p + "attention.wq.weight", {wq[0] + wk[0] + wv[0], wq[1]});
    }
    w.wo = view(p + "attention.wo.weight");
    if (args_.qk_norm) {
      w.q_norm = view(p + "attention.q_norm.weight");
      w.k_norm = view(p + "attention.k_norm.weight");
    }
    if (args_.moe_layer(l)) {
      w.moe.router = view(p + "moe.router.gate.weight");
      w.moe.w1 = view(p + "moe.experts.w1");
      w.moe.w2 = view(p + "moe.experts.w2");
      w.moe.w3 = view(p + "moe.experts.w3");
      if (args_.moe.num_shared_experts > 0) {
        w.moe.shared_w1 = view(p + "moe.shared_experts.w1.weight");
        w.moe.shared_w3 = view(p + "moe.shared_experts.w3.weight");
        w.moe.shared_w2 = view(p + "moe.shared_experts.w2.weight");
      }
      moe_layers_.push_back(l);
      expert_bias_.push_back(at::zeros({args_.moe.num_experts}, at::TensorOptions(at::kFloat).device(device())));
      expert_counts_.push_back(at::zeros({args_.moe.num_experts}, at::TensorOptions(at::kLong).device(device())));
      ep_received_.push_back(0);
    } else {
      const auto& w1 = st.slot(p + "feed_forward.w1.weight").shape;
      const auto& w3 = st.slot(p + "feed_forward.w3.weight").shape;
      w.w13 = st.leaf(p + "feed_forward.w1.weight", {w1[0] + w3[0], w1[1]});
      w.w2 = view(p + "feed_forward.w2.weight");
      expert_bias_.emplace_back();
      expert_counts_.emplace_back();
      ep_received_.push_back(0);
    }
    w.attention_norm = view(p + "attention_norm.weight");
    w.ffn_norm = view(p + "ffn_norm.weight");
    layers_.push_back(std::move(w));
  }
  if (has_head()) {
    norm_ = view("norm.weight");
    // A tied output is the embedding matrix (the family keeps both in one part).
    output_ = args_.tie_embeddings ? tok_embeddings_ : view("output.weight");
    TORCH_CHECK(output_.defined(), "a tied output needs the embedding in the same model part");
  }
}

namespace {

// f(tensor) for each of a layer's weight slots, in list()'s fixed order
// (W: LayerWeights, const or not).
template <typename W, typename F>
void each_layer_weight(W& w, F&& f) {
  for (auto* t : {&w.attention_norm, &w.wqkv, &w.wo, &w.ffn_norm, &w.w13, &w.w2, &w.q_norm, &w.k_norm, &w.moe.router,
                  &w.moe.w1, &w.moe.w2, &w.moe.w3, &w.moe.shared_w1, &w.moe.shared_w2, &w.moe.shared_w3, &w.mla.wq,
                  &w.mla.wq_a, &w.mla.q_norm, &w.mla.wq_b, &w.mla.wkv_a, &w.mla.kv_norm, &w.mla.wkv_b})
    f(*t);
}

}  // namespace

std::vector<at::Tensor> Transformer::LayerWeights::list() const {
  std::vector<at::Tensor> out;
  each_layer_weight(*this, [&](const at::Tensor& t) {
    if (t.defined()) out.push_back(t);
  });
  return out;
}

Transformer::LayerWeights Transformer::LayerWeights::with(const std::vector<at::Tensor>& in, size_t first) const {
  LayerWeights w = *this;
  size_t i = first;
  each_layer_weight(w, [&](at::Tensor& t) {
    if (t.defined()) t = in.at(i++);
  });
  return w;
}

at::Tensor Transformer::take_expert_counts(int64_t layer) {
  at::Tensor& c = expert_counts_.at(local_of_[layer]);
  at::Tensor out = c.clone();
  c.zero_();
  return out;
}

const Transformer::LayerWeights& Transformer::layer_weights(int64_t layer) const {
  TORCH_CHECK(layer >= 0 && layer < args_.n_layers && local_of_[layer] >= 0, "layer ", layer,
              " is not in this model part");
  return layers_[local_of_[layer]];
}

void Transformer::init_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  for (const auto& s : store_.slots()) init_param_storage(store_.param(s.name), s, args_, seed);
  store_.begin_step();
}

const LayoutSeams& Transformer::seams() const {
  TORCH_CHECK(seams_, "a parallel layout needs its seams (parallel_layout())");
  return *seams_;
}

void Transformer::set_documents(const at::Tensor& starts) {
  // One document per sample is causal attention: the causal kernels run.
  docs_ = !args_.block_causal() || !starts.defined() || starts.is_meta() || single_document(starts)
              ? at::Tensor()
              : starts.to(device(), at::kLong).contiguous();
}

at::Tensor Transformer::document_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                           const at::Tensor& docs, std::optional<double> scale) const {
  if (varlen_refuses(q, k, v).empty()) {
    if (!varlen_of_.is_same(docs)) {  // once per batch (the cumulative starts need one host sync)
      varlen_ = varlen_documents(docs);
      varlen_of_ = docs;
    }
    return document_attention_varlen(q, k, v, varlen_, scale);
  }
  if (fused_model_ && !scale) {
    // The CPU kernel is fp32: bf16 heads (head dim >= 32) go through it cast,
    // which beats SDPA computing every masked block (the kernel itself falls
    // back to masked SDPA where it cannot run).
    const int64_t Dh = q.size(3);
    if (q.scalar_type() == at::kBFloat16 && q.device().is_cpu() && fused_kernels_available() && (Dh == 32 || Dh == 64))
      return fused_causal_attention(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), docs).to(at::kBFloat16);
    return fused_causal_attention(q, k, v, docs);
  }
  return document_attention_sdpa(q, k, v, docs, scale);
}

void Transformer::set_ptrr_blocks(std::vector<std::vector<int64_t>> blocks) {
  if (blocks == cp_.ptrr_blocks) return;
  cp_.ptrr_blocks = std::move(blocks);
  cp_positions_ = at::Tensor();  // rope_table deals anew
}

const at::Tensor& Transformer::rope_table(int64_t S) const {
  if (!cp_.on()) return freqs_cis_;
  if (!cp_positions_.defined() || cp_positions_.size(0) != S) {
    if (freqs_cis_.is_meta()) {  // shapes only (a dry run): no positions of the sequence are listed
      TORCH_CHECK(S * cp_.size() <= freqs_cis_.size(0), "sequence length ", S * cp_.size(), " exceeds the model's max ",
                  freqs_cis_.size(0));
      cp_positions_ = at::empty({S}, freqs_cis_.options().dtype(at::kLong));
      cp_freqs_ = at::empty({S, freqs_cis_.size(1)}, freqs_cis_.options());
      return cp_freqs_;
    }
    cp_positions_ = seams().cp_positions(cp_, cp_.rank(), S * cp_.size());
    TORCH_CHECK(S * cp_.size() <= freqs_cis_.size(0), "sequence length ", S * cp_.size(), " exceeds the model's max ",
                freqs_cis_.size(0));
    cp_freqs_ = freqs_cis_.index_select(0, cp_positions_.to(freqs_cis_.device())).contiguous();
  }
  return cp_freqs_;
}

at::Tensor Transformer::apply_rope(const at::Tensor& x, at::ScalarType out_dtype) const {
  // x [B,S,n,Dh] → complex pairs (x0 + i·x1) rotated by freqs_cis[S], in fp32.
  const int64_t S = x.size(1);
  // With rope_half_split the pairs are (i, i + Dh/2) (HF's rotate_half).
  const auto real = x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  const at::Tensor xr = args_.rope_half_split
                            ? x.to(real).unflatten(3, {2, -1}).transpose(3, 4).contiguous()
                            : x.to(real).reshape({x.size(0), S, x.size(2), -1, 2});
  at::Tensor xc = torch::view_as_complex(xr);
  at::Tensor f = rope_table(S).narrow(0, 0, S).view({1, S, 1, -1}).to(xc.scalar_type());
  at::Tensor rotated = torch::view_as_real(xc * f);  // [B,S,n,Dh/2,2]
  if (args_.rope_half_split) rotated = rotated.transpose(3, 4);
  return rotated.flatten(3).to(out_dtype);
}

at::Tensor Transformer::linear(const at::Tensor& x, const at::Tensor& w, bool float8, int64_t layer, const char* unit,
                          Float8TpSharding tp) const {
  if (!float8) return split_backward_ ? deferrable_linear(x, w) : gemm_linear(x, w);
  const std::string name = layer < 0 ? std::string(unit) : "layers." + std::to_string(layer) + "." + unit;
  const auto pre = float8_weights_.find(name);
  at::Tensor y = float8_linear(x, w, float8_recipe_, float8_emulate_,
                               pre == float8_weights_.end() ? nullptr : &pre->second, tp);
  if (sqnr_probe_) sqnr_probe_->emplace_back(name, sqnr_db(at::linear(x, w), y));
  return y;
}

std::vector<std::pair<std::string, double>> Transformer::float8_sqnr(const at::Tensor& tokens) {
  std::vector<std::pair<std::string, double>> out;
  if (!float8_) return out;
  torch::NoGradGuard no_grad;
  sqnr_probe_ = &out;
  const bool counting = count_experts_;
  count_experts_ = false;
  try {
    forward_logits(tokens);
  } catch (...) {
    sqnr_probe_ = nullptr;
    count_experts_ = counting;
    throw;
  }
  sqnr_probe_ = nullptr;
  count_experts_ = counting;
  return out;
}

namespace {

// Attention's shapes on the meta device (the dry run): SDPA's CPU kernels
// and its math path's masking have their meta kernels in Python only, so
// this is softmax(q kᵀ) v over views and structured ops that LibTorch runs
// on meta; the causal mask changes no shape. q [B,H,S,Dh], k/v [B,G,S,Dh].
at::Tensor meta_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t B = q.size(0), H = q.size(1), G = k.size(1), S = k.size(2);
  auto heads = [&](const at::Tensor& t) {
    const int64_t Dh = t.size(3);
    return t.unsqueeze(2).expand({B, G, H / G, S, Dh}).reshape({B, H, S, Dh});
  };
  const at::Tensor o = at::matmul(at::softmax(at::matmul(q, heads(k).transpose(-2, -1)), -1), heads(v));
  return o.transpose(1, 2).contiguous().transpose(1, 2);  // laid out [B,S,H,Dh], as SDPA returns it
}

}  // namespace

at::Tensor Transformer::rms_norm(const at::Tensor& x, const at::Tensor& w, std::optional<double> eps_in) const {
  const double eps = eps_in.value_or(args_.norm_eps);
  return fused_model_ ? fused_rms_norm(x, w, eps) : at::rms_norm(x, {w.size(0)}, w, eps);
}

at::Tensor Transformer::block_forward(int64_t layer, const LayerWeights& w, at::Tensor h, const at::Tensor& docs,
                                      OpCache* cache, bool recompute) const {
  // One TransformerBlock: h + attention(norm(h)), then + feed_forward(norm(h))
  // (the dense SwiGLU or the MoE layer).
  h = h + attention(layer, w, rms_norm(h, norm_weight(w.attention_norm)), cache, docs);
  return h + feed_forward(layer, w, rms_norm(h, norm_weight(w.ffn_norm)), cache, recompute);
}

at::Tensor Transformer::mla_attention(int64_t layer, const LayerWeights& w, const at::Tensor& x,
                                      const at::Tensor& docs) const {
  // TorchTitan's DeepSeek-V3 Attention, head by head: q [B,S,H,nope+rope],
  // k = [k_nope | the one RoPE key expanded over the heads], v [B,S,H,v].
  // Under TP (TorchTitan's plan): the input gathered (SP) or copied once;
  // wq / wq_b and wkv_b column-wise by heads, wo row-wise; wq_a, q_norm,
  // wkv_a and kv_norm replicated, their gradients (each rank's heads' part)
  // summed over tp. H is this rank's heads.
  const MlaArgs& m = args_.mla;
  const int64_t nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim;
  const Float8Units f8 = float8_ ? float8_units_[local_of_[layer]] : Float8Units{};
  // wq / wq_b and wkv_b are column-wise: float8 scales over the whole weight.
  const Float8TpSharding column = tp_.on() ? Float8TpSharding::column(tp_.group) : Float8TpSharding{};
  const at::Tensor in = !tp_.on()               ? x
                        : tp_.sequence_parallel ? seams().gather_from_sp(x, *tp_.group, 1)
                                                : seams().copy_to_tp(x, *tp_.group);
  const int64_t B = in.size(0), S = in.size(1);
  const at::Tensor q_lin =
      m.q_lora_rank > 0
          ? linear(rms_norm(linear(in, tp_summed(w.mla.wq_a, true), false, layer, "attention.wq_a"),
                            tp_summed(w.mla.q_norm, true)),
                   w.mla.wq_b, f8.qkv, layer, "attention.wq_b", column)
          : linear(in, w.mla.wq, f8.qkv, layer, "attention.wq", column);
  const int64_t H = q_lin.size(2) / (nope + rope);
  const auto q_parts = q_lin.view({B, S, H, nope + rope}).split_with_sizes({nope, rope}, 3);
  at::Tensor q = at::cat({q_parts[0].to(attention_dtype_), apply_rope(q_parts[1], attention_dtype_)}, 3);
  const auto kv_parts = linear(in, tp_summed(w.mla.wkv_a, true), false, layer, "attention.wkv_a")
                            .split_with_sizes({m.kv_lora_rank, rope}, 2);
  const at::Tensor k_pe = apply_rope(kv_parts[1].unsqueeze(2), attention_dtype_);  // [B,S,1,rope]
  const auto kv = linear(rms_norm(kv_parts[0], tp_summed(w.mla.kv_norm, true)), w.mla.wkv_b, f8.kv_b, layer,
                         "attention.wkv_b", column)
                      .view({B, S, H, nope + m.v_head_dim})
                      .split_with_sizes({nope, m.v_head_dim}, 3);
  at::Tensor k = at::cat({kv[0].to(attention_dtype_), k_pe.expand({B, S, H, rope})}, 3);
  at::Tensor v = kv[1].to(attention_dtype_);
  at::Tensor o = q.is_meta() ? meta_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
                 : cp_.on()  ? seams().context_parallel_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                  v.transpose(1, 2), cp_positions_, cp_, mla_scale_,
                                                                  docs)
                 : docs.defined() ? document_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), docs,
                                                       mla_scale_)
                             : at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                v.transpose(1, 2), /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                                /*is_causal=*/true, /*scale=*/mla_scale_);
  o = o.transpose(1, 2).to(compute_dtype(), /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::Contiguous).contiguous();
  return row_gemm(o.view({B, S, -1}), w.wo, f8.wo, layer, "attention.wo");
}

at::Tensor Transformer::attention(int64_t layer, const LayerWeights& w, const at::Tensor& x, OpCache* cache,
                                  const at::Tensor& docs) const {
  if (args_.is_mla()) return mla_attention(layer, w, x, docs);
  // Local shapes only: this rank's heads come from the weights. Under TP x
  // is whole or (SP) this rank's part of the sequence; the column-wise GEMMs
  // see the whole sequence, so B and S come from their output.
  const int64_t Dh = args_.head_dim();
  const int64_t H = qkv_rows_[0] / Dh, K = qkv_rows_[1] / Dh;
  const Float8Units f8 = float8_ ? float8_units_[local_of_[layer]] : Float8Units{};
  // split (not narrow): its backward is one concatenation, where three
  // narrows would each materialise a zero-filled full-size gradient.
  // Selective "op" checkpointing keeps every other GEMM output (qkv, w13 —
  // TorchTitan keeps every second mm) and the attention output.
  at::Tensor qkv_out = column_gemm(x, w.wqkv, f8.qkv, layer, "attention.wq|wk|wv", cache);  // [B,S,(H+2K)Dh]
  const int64_t B = qkv_out.size(0), S = qkv_out.size(1);
  auto qkv = qkv_out.split_with_sizes(qkv_rows_, 2);
  at::Tensor q = qkv[0].view({B, S, -1, Dh}), k = qkv[1].view({B, S, -1, Dh});
  if (args_.qk_norm) {  // per head over Dh, before RoPE (Qwen3); the weights see this rank's heads
    q = rms_norm(q, tp_summed(w.q_norm, true));
    k = rms_norm(k, tp_summed(w.k_norm, true));
  }
  if (args_.rope_half_split) {
    q = apply_rope(q, attention_dtype_);
    k = apply_rope(k, attention_dtype_);
  } else if (fused_model_ && cuda_kernels_take(q)) {
    std::tie(q, k) = cuda_rope_qk(q, k, rope_table(S), attention_dtype_);  // q and k in one launch
  } else if (fused_model_) {
    q = fused_rope(q, rope_table(S), attention_dtype_);
    k = fused_rope(k, rope_table(S), attention_dtype_);
  } else {
    q = apply_rope(q, attention_dtype_);
    k = apply_rope(k, attention_dtype_);
  }
  at::Tensor v = qkv[2].view({B, S, -1, Dh}).to(attention_dtype_);
  at::Tensor o = cp_.on() && !q.is_meta()
                     ? seams().context_parallel_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                          cp_positions_, cp_, std::nullopt, docs)
                 : q.is_meta() ? meta_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
                 // Documents: not kept under "op" checkpointing (recomputed).
                 : docs.defined() ? document_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), docs)
                 : fused_model_ ? fused_causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
                 // Kept under "op" checkpointing through ATen's CPU flash kernel; on CUDA
                 // attention is recomputed (ATen's CUDA flash op takes bf16/fp16 only).
                 : cache && K == H && q.device().is_cpu() ? cached_causal_attention(cache, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
                                   : at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                        /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                                        /*scale=*/std::nullopt, /*enable_gqa=*/K != H);
  // One copy that both casts and lays out [B,S,H,Dh] for the output projection.
  // (.to aliases a same-dtype tensor whose suggested format is "contiguous" —
  // the ring's [B,H,S,Dh] output transposed — so contiguous() makes sure.)
  o = o.transpose(1, 2).to(compute_dtype(), /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::Contiguous).contiguous();
  return row_gemm(o.view({B, S, -1}), w.wo, f8.wo, layer, "attention.wo");
}

at::Tensor Transformer::feed_forward(int64_t layer, const LayerWeights& w, const at::Tensor& x, OpCache* cache,
                                     bool recompute) const {
  if (w.moe.router.defined()) {
    const bool sp = tp_.on() && tp_.sequence_parallel;
    const int64_t D = x.size(-1);
    const at::Tensor& bias = expert_bias_[local_of_[layer]];
    MoeWeights mw = w.moe;
    at::Tensor counts, y;
    int64_t received = 0;
    if (ep_.on() && ep_.etp && tp_.on()) {
      // Expert tensor parallelism: every tp rank routes all the tp group's
      // tokens (gathered under SP), dispatches them over ep and computes
      // its slice of each expert's hidden dimension: partial sums, reduced
      // over tp (reduce-scattered under SP). The router's gradient is
      // partial too (its gate weights meet partial outputs); the shared
      // experts run on the rank's own tokens as in the dense layout.
      Communicator& g = *tp_.group;
      const at::Tensor all = sp ? seams().gather_from_sp(x, g, 1) : seams().copy_to_tp(x, g);
      MoeWeights routed = mw;
      routed.router = tp_summed(mw.router, true);
      routed.shared_w1 = routed.shared_w2 = routed.shared_w3 = at::Tensor();
      const ExpertDispatch dispatch{*ep_.group, seams()};
      const at::Tensor partial =
          moe_forward(all.reshape({-1, D}), routed, bias, args_.moe, &counts, &dispatch, &received).view(all.sizes());
      y = sp ? seams().scatter_to_sp(partial, g, 1) : seams().reduce_from_tp(partial, g);
      if (mw.shared_w1.defined()) {
        for (at::Tensor* t : {&mw.shared_w1, &mw.shared_w2, &mw.shared_w3}) *t = tp_summed(*t, sp);
        y = y + moe_shared_experts(x.reshape({-1, D}), mw).view(x.sizes());
      }
    } else {
      // Each rank routes the tokens it holds (its sequence part under SP,
      // else all of them, as every rank). Without EP the experts are
      // replicated over tp; with EP (spanning tp) each rank owns its own.
      for (at::Tensor* t : {&mw.router, &mw.shared_w1, &mw.shared_w2, &mw.shared_w3})
        if (t->defined()) *t = tp_summed(*t, sp);
      if (!ep_.on())
        for (at::Tensor* t : {&mw.w1, &mw.w2, &mw.w3}) *t = tp_summed(*t, sp);
      std::optional<ExpertDispatch> dispatch;
      if (ep_.on()) dispatch.emplace(ExpertDispatch{*ep_.group, seams()});
      y = moe_forward(x.reshape({-1, D}), mw, bias, args_.moe, &counts, dispatch ? &*dispatch : nullptr, &received)
              .view(x.sizes());
    }
    if (count_experts_ && !recompute && !counts.is_meta()) {
      expert_counts_[local_of_[layer]].add_(counts);
      ep_received_[local_of_[layer]] += received;
    }
    return y;
  }
  const Float8Units f8 = float8_ ? float8_units_[local_of_[layer]] : Float8Units{};
  const int64_t F = w.w2.size(1);
  at::Tensor gate_up = column_gemm(x, w.w13, f8.w13, layer, "feed_forward.w1|w3", cache);  // [B,S,2F]
  at::Tensor act;
  if (fused_model_) {
    act = fused_swiglu(gate_up);
  } else {
    auto parts = gate_up.split(F, 2);
    act = at::silu(parts[0]) * parts[1];
  }
  return row_gemm(act, w.w2, f8.w2, layer, "feed_forward.w2");
}

at::Tensor Transformer::tp_summed(const at::Tensor& w, bool partial) const {
  return tp_.on() && partial ? seams().copy_to_tp(w, *tp_.group) : w;
}

at::Tensor Transformer::norm_weight(const at::Tensor& w) const { return tp_summed(w, tp_.sequence_parallel); }

at::Tensor Transformer::column_gemm(const at::Tensor& x, const at::Tensor& w, bool float8, int64_t layer,
                               const char* unit, OpCache* cache) const {
  // Async TP runs its own pipelined GEMMs (float8 GEMMs keep the plain regions).
  if (tp_.on() && tp_.async && !float8) return seams().async_gather_linear(x, w, *tp_.group, async_chunks(tp_));
  const at::Tensor in = !tp_.on()               ? x
                        : tp_.sequence_parallel ? seams().gather_from_sp(x, *tp_.group, 1)
                                                : seams().copy_to_tp(x, *tp_.group);
  if (float8) return linear(in, w, true, layer, unit, tp_.on() ? Float8TpSharding::column(tp_.group) : Float8TpSharding{});
  return cache ? cached_linear(cache, true, in, w) : linear(in, w, false, layer, unit);
}

at::Tensor Transformer::row_gemm(const at::Tensor& x, const at::Tensor& w, bool float8, int64_t layer,
                            const char* unit) const {
  if (tp_.on() && tp_.async && !float8) return seams().async_linear_scatter(x, w, *tp_.group, async_chunks(tp_));
  const at::Tensor partial =
      linear(x, w, float8, layer, unit, tp_.on() ? Float8TpSharding::row(tp_.group) : Float8TpSharding{});
  if (!tp_.on()) return partial;
  return tp_.sequence_parallel ? seams().scatter_to_sp(partial, *tp_.group, 1)
                               : seams().reduce_from_tp(partial, *tp_.group);
}

at::Tensor Transformer::embed(const at::Tensor& tokens) {
  const int64_t S = tokens.size(1);
  TORCH_CHECK(S <= freqs_cis_.size(0), "sequence length ", S, " exceeds the model's max ", freqs_cis_.size(0));
  // On meta (the dry run) through aten::index: LibTorch has C++ meta
  // kernels for index and its backward's index_put, while embedding's
  // index_select has its meta kernel in Python only. Same shapes.
  if (tp_.on()) return seams().vocab_parallel_embedding(tok_embeddings_, tokens, *tp_.group, tp_.sequence_parallel);
  if (tokens.is_meta()) return tok_embeddings_.index({tokens});  // [B,S,D]
  return at::embedding(tok_embeddings_, tokens);                  // [B,S,D]
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
  for (int64_t l : layer_ids_) h = block(l, h);
  return h;
}

at::Tensor Transformer::local_logits(const at::Tensor& h) const {
  return column_gemm(rms_norm(h, norm_weight(norm_), head_norm_eps_), output_, float8_output_, -1, "output", nullptr);
}

at::Tensor Transformer::forward_logits(const at::Tensor& tokens) {
  const at::Tensor logits = local_logits(hidden_states(tokens));
  return tp_.on() ? seams().gather_from_tp(logits, *tp_.group, -1) : logits;
}

at::Tensor Transformer::head_loss(const at::Tensor& h, const at::Tensor& labels) {
  // On CUDA the fused loss never forms the [B·S,V] logits: chunks of rows
  // through the output GEMM and the CE kernel, gradients made per chunk.
  // Not under TP (vocab-sharded logits), a float8 output layer, or the
  // split backward (which defers the output layer's dW to the W pass).
  if (fused_loss_ && cuda_kernels_take(h) && !tp_.on() && !float8_output_ && !split_backward_)
    return cuda_linear_cross_entropy(rms_norm(h, norm_weight(norm_), head_norm_eps_).flatten(0, 1), output_,
                                     labels.flatten(0, 1));
  at::Tensor logits = local_logits(h);  // [B,S,V] (this rank's V/tp columns under TP)
  if (tp_.on()) {
    // Loss parallelism: the vocab-sharded logits are never gathered (on meta
    // the local loss has the same shapes).
    if (tp_.loss_parallel && !logits.is_meta())
      return seams().vocab_parallel_cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1), *tp_.group);
    if (!tp_.loss_parallel) logits = seams().gather_from_tp(logits, *tp_.group, -1);
  }
  // The fused loss writes d(loss)/d(logits) into the logits' storage during
  // forward (the logits are dead after the loss), so no second [B*S,V] buffer.
  if (fused_loss_) return fused_cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1), /*grad_into_logits=*/true);
  // On meta (the dry run): log_softmax + nll_loss have C++ meta kernels,
  // the chunked loss's logsumexp does not. Same scalar.
  if (logits.is_meta()) return at::cross_entropy_loss(logits.flatten(0, 1).to(at::kFloat), labels.flatten(0, 1));
  return chunked_cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1));
}

at::Tensor Transformer::forward_loss(const at::Tensor& tokens, const at::Tensor& labels) {
  TORCH_CHECK(whole(), "forward_loss: needs the whole model, this rank holds pipeline stages");
  at::Tensor h = embed(tokens);
  for (int64_t l : layer_ids_) h = block(l, h);
  return head_loss(h, labels);
}

at::Tensor Transformer::run_unit(size_t u, const at::Tensor& input, const at::Tensor& labels) {
  const int64_t l = unit_layer_.at(u);
  if (l == kEmbeddingUnit) return embed(input);
  if (l == kHeadUnit) return head_loss(input, labels);
  return block(l, input);
}

void Transformer::apply_compile(bool fused_model, bool fused_loss) {
  // The CPU's AVX-512 kernels (fused_ops.h), or ctitan's CUDA kernels
  // (fused_cuda.h) where this build has them; elsewhere ATen's ops.
  const bool kernels = device().is_cpu() || (device().is_cuda() && cuda_kernels_built());
  fused_model_ = fused_model && kernels;
  fused_loss_ = fused_loss && kernels;
  store_.set_fused_cuda(fused_model_ && device().is_cuda());
}

void Transformer::apply_float8(const Float8Options& f) {
  const std::vector<std::string>& filter_fqns = f.filter_fqns;
  float8_ = true;
  float8_recipe_ = f.recipe;
  float8_emulate_ = f.emulate;
  std::vector<bool> used(filter_fqns.size(), false);
  auto filtered = [&](const std::string& fqn) {
    bool hit = false;
    for (size_t i = 0; i < filter_fqns.size(); ++i)
      if (fqn.find(filter_fqns[i]) != std::string::npos) hit = used[i] = true;
    return hit;
  };
  float8_units_.assign(layer_ids_.size(), {});
  const bool mla = args_.is_mla();
  const char* mla_q = args_.mla.q_lora_rank > 0 ? "attention.wq_b" : "attention.wq";
  for (int64_t l : layer_ids_) {
    const std::string p = "layers." + std::to_string(l) + ".";
    // Evaluate every module so each filter entry is marked as matched.
    // MLA: the low-rank down-projections wq_a and wkv_a stay in the compute
    // dtype. They are replicated over tp and each rank's gradient into them
    // is a partial sum over its heads: float8 codes of the parts are not the
    // codes of the sum, so a TP run could not match one process; their
    // outputs (576 and 1536 wide in 671B) are also below the sizes where
    // torchao's auto-filter finds float8 GEMMs worth it. A filter entry
    // naming them is still valid.
    if (mla && args_.mla.q_lora_rank > 0) filtered(p + "attention.wq_a");
    if (mla) filtered(p + "attention.wkv_a");
    const bool q = filtered(p + (mla ? mla_q : "attention.wq"));
    const bool k = mla ? filtered(p + "attention.wkv_b") : filtered(p + "attention.wk");
    const bool v = !mla && filtered(p + "attention.wv");
    const bool o = filtered(p + "attention.wo");
    const bool w1 = filtered(p + "feed_forward.w1"), w3 = filtered(p + "feed_forward.w3");
    const bool w2 = filtered(p + "feed_forward.w2");
    // An MoE layer's router and experts stay in the compute dtype (TorchTitan
    // filters them too); a filter entry naming them is still a valid entry.
    for (const char* m : {"moe.router.gate", "moe.experts", "moe.shared_experts.w1", "moe.shared_experts.w2",
                          "moe.shared_experts.w3"})
      if (args_.moe_layer(l)) filtered(p + m);
    const bool dense = !args_.moe_layer(l);
    float8_units_[local_of_[l]] = mla ? Float8Units{!q, !o, dense && !(w1 || w3), dense && !w2, !k}
                                      : Float8Units{!(q || k || v), !o, dense && !(w1 || w3), dense && !w2};
  }
  float8_output_ = has_head() && !filtered("output");
  // An entry may name linears of another pipeline stage: it is a mistake
  // only when it matches no linear of the whole model.
  for (size_t i = 0; i < filter_fqns.size() && !whole(); ++i) {
    for (int64_t l = 0; l < args_.n_layers && !used[i]; ++l)
      for (const char* m : {"attention.wq", "attention.wk", "attention.wv", "attention.wo", "feed_forward.w1",
                            "feed_forward.w3", "feed_forward.w2", "attention.wq_a", "attention.wq_b",
                            "attention.wkv_a", "attention.wkv_b"})
        if (("layers." + std::to_string(l) + "." + m).find(filter_fqns[i]) != std::string::npos) used[i] = true;
    if (std::string("output").find(filter_fqns[i]) != std::string::npos) used[i] = true;
  }
  for (size_t i = 0; i < filter_fqns.size(); ++i)
    if (!used[i])
      throw InputError("quantize.linear.float8.filter_fqns entry '" + filter_fqns[i] +
                       "' matches no linear layer (names look like layers.0.attention.wq, output)");
}

std::vector<Transformer::Float8Gemm> Transformer::float8_gemms() const {
  std::vector<Float8Gemm> out;
  if (!float8_) return out;
  for (int64_t l : layer_ids_) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const auto slot = [&](const char* m) { return store_.index(p + m + ".weight"); };
    const Float8Units& f = float8_units_[local_of_[l]];
    if (f.qkv && args_.is_mla()) {
      const char* q = args_.mla.q_lora_rank > 0 ? "attention.wq_b" : "attention.wq";
      out.push_back({p + q, {slot(q)}});
    } else if (f.qkv) {
      out.push_back({p + "attention.wq|wk|wv", {slot("attention.wq"), slot("attention.wk"), slot("attention.wv")}});
    }
    if (f.kv_b) out.push_back({p + "attention.wkv_b", {slot("attention.wkv_b")}});
    if (f.wo) out.push_back({p + "attention.wo", {slot("attention.wo")}});
    if (f.w13) out.push_back({p + "feed_forward.w1|w3", {slot("feed_forward.w1"), slot("feed_forward.w3")}});
    if (f.w2) out.push_back({p + "feed_forward.w2", {slot("feed_forward.w2")}});
  }
  if (float8_output_) out.push_back({"output", {store_.index("output.weight")}});
  return out;
}

std::string Transformer::techniques() const {
  std::string compile = fused_model_ && fused_loss_ ? "model+loss" : fused_model_ ? "model" : fused_loss_ ? "loss" : "off";
  if ((fused_model_ || fused_loss_) && device().is_cuda())
    compile += store_.optimizer_writes_compute()
                   ? " (fused CUDA kernels, AdamW writing the bf16 compute copy; attention: ATen's SDPA)"
                   : " (fused CUDA kernels; attention: ATen's SDPA)";
  else if (fused_model_ || fused_loss_)
    compile += fused_kernels_available() ? " (fused AVX-512 kernels)" : " (no AVX-512: eager fallback)";
  else if (!device().is_cpu())
    compile += " (ATen ops on " + device().str() + ")";
  std::string attention;
  if (args_.block_causal())
    attention = std::string(", attention: block_causal (") + args_.attn_type + "; " +
                (cp_.on() ? "CP chunk pairs with document masks"
                 : device().is_cuda()
                     ? "ATen's varlen flash for bf16/fp16 heads of 8..256 (not MLA), else SDPA with the document mask"
                 : fused_model_ && device().is_cpu() && fused_kernels_available()
                     ? "the fused kernel skipping the masked blocks"
                     : "SDPA with the document mask") +
                ")";
  return "compile: " + compile + ", float8: " + (float8_ ? float8_backend(device(), float8_emulate_) : "off") +
         attention;
}

}  // namespace ctitan
