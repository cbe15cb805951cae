#include "trainer/model/llama.h"

#include <cmath>
#include <stdexcept>

#include "common/errors.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/cross_entropy.h"
#include "trainer/model/param_init.h"

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
    if (wavelen < high_wavelen) {
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

Llama3::Llama3(const LlamaArgs& args, at::ScalarType compute_dtype, int64_t max_seq_len, c10::Device device)
    : args_(args), compute_dtype_(compute_dtype), device_(device) {
  const int64_t d = args.dim, hd = args.head_dim(), f = args.ffn_hidden_dim();
  int64_t offset = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    slots_.push_back({name, std::move(shape), offset, n});
    offset += n;
  };
  add("tok_embeddings.weight", {args.vocab_size, d});
  for (int64_t l = 0; l < args.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    // wq,wk,wv adjacent → one [(H+2K)Dh, D] view; w1,w3 adjacent → one [2F, D] view.
    add(p + "attention.wq.weight", {args.n_heads * hd, d});
    add(p + "attention.wk.weight", {args.kv_dim(), d});
    add(p + "attention.wv.weight", {args.kv_dim(), d});
    add(p + "attention.wo.weight", {d, args.n_heads * hd});
    add(p + "feed_forward.w1.weight", {f, d});
    add(p + "feed_forward.w3.weight", {f, d});
    add(p + "feed_forward.w2.weight", {d, f});
    add(p + "attention_norm.weight", {d});
    add(p + "ffn_norm.weight", {d});
  }
  add("norm.weight", {d});
  add("output.weight", {args.vocab_size, d});

  // Master weights are fp32, or fp64 when computing in fp64 (gradient checks).
  const auto master_dtype = compute_dtype_ == torch::kDouble ? torch::kDouble : torch::kFloat;
  const auto on_device = torch::TensorOptions().device(device_);
  master_ = torch::zeros({offset}, on_device.dtype(master_dtype));
  master_grad_ = torch::zeros({offset}, on_device.dtype(master_dtype));
  compute_ = compute_dtype_ == master_dtype ? master_ : torch::zeros({offset}, on_device.dtype(compute_dtype_));
  auto add_unit = [&](std::string name, size_t first, size_t last) {  // slots [first, last)
    Unit u{std::move(name), slots_[first].offset, 0, {}};
    for (size_t i = first; i < last; ++i) {
      u.slots.push_back(i);
      u.numel += slots_[i].numel;
    }
    units_.push_back(std::move(u));
  };
  add_unit("tok_embeddings", 0, 1);
  for (int64_t l = 0; l < args.n_layers; ++l) add_unit("layers." + std::to_string(l), 1 + 9 * l, 10 + 9 * l);
  add_unit("norm+output", slots_.size() - 2, slots_.size());
  master_grad_fresh_.assign(units_.size(), true);
  // ATen's CPU flash-attention kernel is ~2x slower in bf16 than in fp32 at
  // small head dims (16: 32 ms vs 18 ms fwd+bwd per debugmodel layer, casts
  // included) and faster from 64 up, so small heads attend in fp32 on the
  // CPU. Only precision rises; the math is unchanged. Other devices keep the
  // compute dtype.
  attention_dtype_ = compute_dtype_;
  if (device_.is_cpu() && compute_dtype_ == torch::kBFloat16 && args_.head_dim() < 32) attention_dtype_ = torch::kFloat;
  freqs_cis_ = precompute_freqs_cis(hd, max_seq_len, args.rope_theta, args.rope_scaling).to(device_);
  build_compute_views();
}

const ParamSlot& Llama3::slot(const std::string& name) const {
  for (const auto& s : slots_)
    if (s.name == name) return s;
  throw std::out_of_range("no parameter named " + name);
}

at::Tensor Llama3::param(const std::string& name) const {
  const auto& s = slot(name);
  return master_.narrow(0, s.offset, s.numel).view(s.shape);
}

at::Tensor Llama3::grad(const std::string& name) const {
  const auto& s = slot(name);
  return master_grad_.narrow(0, s.offset, s.numel).view(s.shape);
}

at::Tensor Llama3::compute_leaf(const std::string& first_slot, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  const int64_t offset = slot(first_slot).offset;
  size_t unit = 0;
  while (offset >= units_[unit].offset + units_[unit].numel) ++unit;
  at::Tensor leaf;
  if (has_unit_buffers()) {
    leaf = unit_buffers_[unit].narrow(0, offset - units_[unit].offset, n).view(shape).detach();
    leaf.requires_grad_(true);
  } else {
    // A detached view: autograd treats it as a leaf whose storage is the flat buffer.
    leaf = compute_.narrow(0, offset, n).view(shape).detach();
    leaf.requires_grad_(true);
    if (compute_.is_same(master_)) {
      // fp32/fp64 compute: autograd accumulates straight into the flat
      // gradient buffer (AccumulateGrad adds in place into a defined grad).
      leaf.mutable_grad() = master_grad_.narrow(0, offset, n).view(shape);
    }
  }
  leaves_.push_back({leaf, offset, unit});
  return leaf;
}

void Llama3::build_compute_views() {
  const int64_t d = args_.dim, f = args_.ffn_hidden_dim();
  const int64_t qkv_rows = (args_.n_heads + 2 * args_.n_kv_heads) * args_.head_dim();
  leaves_.clear();
  tok_embeddings_ = compute_leaf("tok_embeddings.weight", {args_.vocab_size, d});
  layers_.clear();
  for (int64_t l = 0; l < args_.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerWeights w;
    w.wqkv = compute_leaf(p + "attention.wq.weight", {qkv_rows, d});
    w.wo = compute_leaf(p + "attention.wo.weight", {d, args_.n_heads * args_.head_dim()});
    w.w13 = compute_leaf(p + "feed_forward.w1.weight", {2 * f, d});
    w.w2 = compute_leaf(p + "feed_forward.w2.weight", {d, f});
    w.attention_norm = compute_leaf(p + "attention_norm.weight", {d});
    w.ffn_norm = compute_leaf(p + "ffn_norm.weight", {d});
    layers_.push_back(std::move(w));
  }
  norm_ = compute_leaf("norm.weight", {d});
  output_ = compute_leaf("output.weight", {args_.vocab_size, d});
}

void Llama3::init_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  for (const auto& s : slots_)
    init_param_box(param(s.name), s.name, s.shape, std::vector<int64_t>(s.shape.size(), 0), args_, seed);
  begin_step();
}

void Llama3::begin_step() {
  if (compute_.is_same(master_)) return;
  torch::NoGradGuard no_grad;
  compute_.copy_(master_);
}

void Llama3::zero_grad() {
  if (has_unit_buffers()) {
    for (auto& leaf : leaves_) leaf.tensor.mutable_grad().reset();
    return;
  }
  if (compute_.is_same(master_)) {
    master_grad_.zero_();
    return;
  }
  // bf16: the next accumulate_grads() overwrites instead of adding, which
  // saves a pass over the fp32 buffer.
  for (auto& leaf : leaves_) leaf.tensor.mutable_grad().reset();
  master_grad_fresh_.assign(units_.size(), false);
}

void Llama3::accumulate_grads() {
  for (size_t u = 0; u < units_.size(); ++u) accumulate_grads(u);
}

void Llama3::accumulate_grads(size_t unit) {
  TORCH_CHECK(!has_unit_buffers(), "accumulate_grads: unit-buffer (FSDP) gradients go through take_unit_grad");
  if (compute_.is_same(master_)) return;
  torch::NoGradGuard no_grad;
  for (auto& leaf : leaves_) {
    if (leaf.unit != unit) continue;
    at::Tensor dst = master_grad_.narrow(0, leaf.offset, leaf.tensor.numel()).view(leaf.tensor.sizes());
    at::Tensor& g = leaf.tensor.mutable_grad();
    if (!g.defined()) {
      if (!master_grad_fresh_[unit]) dst.zero_();  // parameter unused by this batch
    } else if (master_grad_fresh_[unit]) {
      dst.add_(g);
    } else {
      dst.copy_(g);
    }
    g.reset();
  }
  master_grad_fresh_[unit] = true;
}

void Llama3::use_unit_buffers() {
  TORCH_CHECK(!has_unit_buffers(), "use_unit_buffers called twice");
  for (const auto& u : units_) unit_buffers_.push_back(torch::zeros({u.numel}, master_.options().dtype(compute_dtype_)));
  master_ = master_grad_ = compute_ = at::Tensor();
  build_compute_views();
}

void Llama3::take_unit_grad(size_t u, at::Tensor& out) {
  TORCH_CHECK(out.numel() == units_[u].numel, "take_unit_grad: ", units_[u].name, " has ", units_[u].numel,
              " elements, out has ", out.numel());
  torch::NoGradGuard no_grad;
  for (auto& leaf : leaves_) {
    if (leaf.unit != u) continue;
    at::Tensor dst = out.narrow(0, leaf.offset - units_[u].offset, leaf.tensor.numel()).view(leaf.tensor.sizes());
    at::Tensor& g = leaf.tensor.mutable_grad();
    if (g.defined()) {
      dst.copy_(g);
    } else {
      dst.zero_();
    }
    g.reset();
  }
}

at::Tensor Llama3::apply_rope(const at::Tensor& x, at::ScalarType out_dtype) const {
  // x [B,S,n,Dh] → complex pairs (x0 + i·x1) rotated by freqs_cis[S], in fp32.
  const int64_t S = x.size(1);
  const auto real = x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  at::Tensor xc = torch::view_as_complex(x.to(real).reshape({x.size(0), S, x.size(2), -1, 2}));
  at::Tensor f = freqs_cis_.narrow(0, 0, S).view({1, S, 1, -1}).to(xc.scalar_type());
  return torch::view_as_real(xc * f).flatten(3).to(out_dtype);
}

at::Tensor Llama3::linear(const at::Tensor& x, const at::Tensor& w, bool float8, int64_t layer,
                          const char* unit) const {
  if (!float8) return at::linear(x, w);
  const std::string name = layer < 0 ? std::string(unit) : "layers." + std::to_string(layer) + "." + unit;
  const auto pre = float8_weights_.find(name);
  at::Tensor y = float8_linear(x, w, float8_recipe_, float8_emulate_,
                               pre == float8_weights_.end() ? nullptr : &pre->second);
  if (sqnr_probe_) sqnr_probe_->emplace_back(name, sqnr_db(at::linear(x, w), y));
  return y;
}

std::vector<std::pair<std::string, double>> Llama3::float8_sqnr(const at::Tensor& tokens) {
  std::vector<std::pair<std::string, double>> out;
  if (!float8_) return out;
  torch::NoGradGuard no_grad;
  sqnr_probe_ = &out;
  try {
    forward_logits(tokens);
  } catch (...) {
    sqnr_probe_ = nullptr;
    throw;
  }
  sqnr_probe_ = nullptr;
  return out;
}

namespace {

// Attention's shapes on the meta device (the dry run): SDPA's CPU kernels
// and its math path's masking have their meta kernels in Python only, so
// this is softmax(q kᵀ) v over views and structured ops that LibTorch runs
// on meta; the causal mask changes no shape. q [B,H,S,Dh], k/v [B,G,S,Dh].
at::Tensor meta_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t B = q.size(0), H = q.size(1), G = k.size(1), S = k.size(2), Dh = k.size(3);
  auto heads = [&](const at::Tensor& t) { return t.unsqueeze(2).expand({B, G, H / G, S, Dh}).reshape({B, H, S, Dh}); };
  const at::Tensor o = at::matmul(at::softmax(at::matmul(q, heads(k).transpose(-2, -1)), -1), heads(v));
  return o.transpose(1, 2).contiguous().transpose(1, 2);  // laid out [B,S,H,Dh], as SDPA returns it
}

}  // namespace

at::Tensor Llama3::rms_norm(const at::Tensor& x, const at::Tensor& w) const {
  return fused_model_ ? fused_rms_norm(x, w, args_.norm_eps) : at::rms_norm(x, {args_.dim}, w, args_.norm_eps);
}

at::Tensor Llama3::block_forward(int64_t layer, const LayerWeights& w, at::Tensor h, OpCache* cache) const {
  // One TransformerBlock: h + attention(norm(h)), then + feed_forward(norm(h)).
  const int64_t B = h.size(0), S = h.size(1);
  const int64_t H = args_.n_heads, K = args_.n_kv_heads, Dh = args_.head_dim();
  const int64_t F = args_.ffn_hidden_dim();
  const Float8Units f8 = float8_ ? float8_units_[layer] : Float8Units{};
  at::Tensor x = rms_norm(h, w.attention_norm);
  // split (not narrow): its backward is one concatenation, where three
  // narrows would each materialise a zero-filled full-size gradient.
  // Selective "op" checkpointing keeps every other GEMM output (qkv, w13 —
  // TorchTitan keeps every second mm) and the attention output.
  at::Tensor qkv_out = f8.qkv ? linear(x, w.wqkv, true, layer, "attention.wq|wk|wv")
                              : cached_linear(cache, true, x, w.wqkv);  // [B,S,(H+2K)Dh]
  auto qkv = qkv_out.split_with_sizes({H * Dh, K * Dh, K * Dh}, 2);
  at::Tensor q, k;
  if (fused_model_) {
    q = fused_rope(qkv[0].view({B, S, H, Dh}), freqs_cis_, attention_dtype_);
    k = fused_rope(qkv[1].view({B, S, K, Dh}), freqs_cis_, attention_dtype_);
  } else {
    q = apply_rope(qkv[0].view({B, S, H, Dh}), attention_dtype_);
    k = apply_rope(qkv[1].view({B, S, K, Dh}), attention_dtype_);
  }
  at::Tensor v = qkv[2].view({B, S, K, Dh}).to(attention_dtype_);
  at::Tensor o = q.is_meta() ? meta_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
                 : fused_model_ ? fused_causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
                 : cache && K == H ? cached_causal_attention(cache, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
                                   : at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                        /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                                        /*scale=*/std::nullopt, /*enable_gqa=*/K != H);
  // One copy that both casts and lays out [B,S,H,Dh] for the output projection.
  o = o.transpose(1, 2).to(compute_dtype_, /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::Contiguous);
  h = h + linear(o.view({B, S, H * Dh}), w.wo, f8.wo, layer, "attention.wo");
  x = rms_norm(h, w.ffn_norm);
  at::Tensor gate_up = f8.w13 ? linear(x, w.w13, true, layer, "feed_forward.w1|w3")
                              : cached_linear(cache, true, x, w.w13);  // [B,S,2F]
  at::Tensor act;
  if (fused_model_) {
    act = fused_swiglu(gate_up);
  } else {
    auto parts = gate_up.split(F, 2);
    act = at::silu(parts[0]) * parts[1];
  }
  h = h + linear(act, w.w2, f8.w2, layer, "feed_forward.w2");
  return h;
}

at::Tensor Llama3::embed(const at::Tensor& tokens) {
  const int64_t S = tokens.size(1);
  TORCH_CHECK(S <= freqs_cis_.size(0), "sequence length ", S, " exceeds the model's max ", freqs_cis_.size(0));
  // On meta (the dry run) through aten::index: LibTorch has C++ meta
  // kernels for index and its backward's index_put, while embedding's
  // index_select has its meta kernel in Python only. Same shapes.
  if (tokens.is_meta()) return tok_embeddings_.index({tokens});  // [B,S,D]
  return at::embedding(tok_embeddings_, tokens);                  // [B,S,D]
}

at::Tensor Llama3::block(int64_t l, const at::Tensor& h) {
  const LayerWeights& w = layers_[l];
  if (!ac_policy_.checkpoints_layer(l)) return block_forward(l, w, h);
  std::shared_ptr<OpCache> cache;
  if (ac_policy_.mode == ActivationCheckpointPolicy::Mode::kSelectiveOp) cache = std::make_shared<OpCache>();
  return checkpoint(
      [this, l, cache](const std::vector<at::Tensor>& in) {
        if (cache) cache->next = 0;  // a recomputation replays from the first kept output
        return block_forward(l, {in[1], in[2], in[3], in[4], in[5], in[6]}, in[0], cache.get());
      },
      {h, w.attention_norm, w.wqkv, w.wo, w.ffn_norm, w.w13, w.w2});
}

at::Tensor Llama3::hidden_states(const at::Tensor& tokens) {
  at::Tensor h = embed(tokens);
  for (int64_t l = 0; l < args_.n_layers; ++l) h = block(l, h);
  return rms_norm(h, norm_);
}

at::Tensor Llama3::forward_logits(const at::Tensor& tokens) {
  return linear(hidden_states(tokens), output_, float8_output_, -1, "output");
}

at::Tensor Llama3::head_loss(const at::Tensor& h, const at::Tensor& labels) {
  at::Tensor logits = linear(rms_norm(h, norm_), output_, float8_output_, -1, "output");
  // The fused loss writes d(loss)/d(logits) into the logits' storage during
  // forward (the logits are dead after the loss), so no second [B*S,V] buffer.
  if (fused_loss_) return fused_cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1), /*grad_into_logits=*/true);
  // On meta (the dry run): log_softmax + nll_loss have C++ meta kernels,
  // the chunked loss's logsumexp does not. Same scalar.
  if (logits.is_meta()) return at::cross_entropy_loss(logits.flatten(0, 1).to(at::kFloat), labels.flatten(0, 1));
  return chunked_cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1));
}

at::Tensor Llama3::forward_loss(const at::Tensor& tokens, const at::Tensor& labels) {
  at::Tensor h = embed(tokens);
  for (int64_t l = 0; l < args_.n_layers; ++l) h = block(l, h);
  return head_loss(h, labels);
}

void Llama3::set_compile(bool fused_model, bool fused_loss) {
  fused_model_ = fused_model && device_.is_cpu();
  fused_loss_ = fused_loss && device_.is_cpu();
}

void Llama3::set_float8(Float8Recipe recipe, bool emulate, const std::vector<std::string>& filter_fqns) {
  float8_ = true;
  float8_recipe_ = recipe;
  float8_emulate_ = emulate;
  std::vector<bool> used(filter_fqns.size(), false);
  auto filtered = [&](const std::string& fqn) {
    bool hit = false;
    for (size_t i = 0; i < filter_fqns.size(); ++i)
      if (fqn.find(filter_fqns[i]) != std::string::npos) hit = used[i] = true;
    return hit;
  };
  float8_units_.assign(args_.n_layers, {});
  for (int64_t l = 0; l < args_.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    // Evaluate every module so each filter entry is marked as matched.
    const bool q = filtered(p + "attention.wq"), k = filtered(p + "attention.wk"), v = filtered(p + "attention.wv");
    const bool o = filtered(p + "attention.wo");
    const bool w1 = filtered(p + "feed_forward.w1"), w3 = filtered(p + "feed_forward.w3");
    const bool w2 = filtered(p + "feed_forward.w2");
    float8_units_[l] = {!(q || k || v), !o, !(w1 || w3), !w2};
  }
  float8_output_ = !filtered("output");
  for (size_t i = 0; i < filter_fqns.size(); ++i)
    if (!used[i])
      throw InputError("quantize.linear.float8.filter_fqns entry '" + filter_fqns[i] +
                       "' matches no linear layer (names look like layers.0.attention.wq, output)");
}

std::vector<Llama3::Float8Gemm> Llama3::float8_gemms() const {
  std::vector<Float8Gemm> out;
  if (!float8_) return out;
  for (int64_t l = 0; l < args_.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const size_t base = 1 + 9 * static_cast<size_t>(l);  // wq wk wv wo w1 w3 w2 (norms follow)
    const Float8Units& f = float8_units_[l];
    if (f.qkv) out.push_back({p + "attention.wq|wk|wv", {base, base + 1, base + 2}});
    if (f.wo) out.push_back({p + "attention.wo", {base + 3}});
    if (f.w13) out.push_back({p + "feed_forward.w1|w3", {base + 4, base + 5}});
    if (f.w2) out.push_back({p + "feed_forward.w2", {base + 6}});
  }
  if (float8_output_) out.push_back({"output", {slots_.size() - 1}});
  return out;
}

std::string Llama3::techniques() const {
  std::string compile = fused_model_ && fused_loss_ ? "model+loss" : fused_model_ ? "model" : fused_loss_ ? "loss" : "off";
  if (fused_model_ || fused_loss_)
    compile += fused_kernels_available() ? " (fused AVX-512 kernels)" : " (no AVX-512: eager fallback)";
  if (!device_.is_cpu()) compile += " (ATen ops on " + device_.str() + ")";
  return "compile: " + compile + ", float8: " + (float8_ ? float8_backend(tok_embeddings_.device(), float8_emulate_) : "off");
}

}  // namespace ctitan
