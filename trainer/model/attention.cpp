#include "trainer/model/attention.h"

#include <cmath>
#include <tuple>
#include <vector>

#include "trainer/kernels/fused_cuda.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/sink_attention.h"

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
  // GPT-OSS's variant (TorchTitan's gpt_oss precompute_rope_cache): at
  // every length when factor > 1, the bounds unrounded, and cos and sin
  // times the concentration 0.1·ln(factor) + 1 (the table's magnitude).
  const int64_t half = rope_dim / 2;
  at::Tensor freqs = 1.0 / at::pow(theta, torch::arange(0, rope_dim, 2, torch::kFloat) / static_cast<double>(rope_dim));
  const bool active = y.active(seq_len);
  double magnitude = 1.0;
  if (active) {
    const auto correction_dim = [&](double rotations) {
      return rope_dim * std::log(y.original_seq_len / (rotations * 2 * M_PI)) / (2 * std::log(theta));
    };
    double low = correction_dim(y.beta_fast), high = correction_dim(y.beta_slow);
    if (y.gpt_oss) {
      magnitude = 0.1 * std::log(y.factor) + 1.0;
    } else {
      low = std::max(std::floor(low), 0.0);
      high = std::min(std::ceil(high), static_cast<double>(rope_dim - 1));
      if (low == high) high += 0.001;
    }
    const at::Tensor ramp = ((torch::arange(half, torch::kFloat) - low) / (high - low)).clamp(0, 1);
    const at::Tensor smooth = 1 - ramp;
    freqs = freqs / y.factor * (1 - smooth) + freqs * smooth;
  }
  const at::Tensor angles = torch::outer(torch::arange(seq_len, torch::kFloat), freqs);
  return torch::polar(torch::full_like(angles, magnitude), angles);
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


// An empty RoPE table of the right shape: on the meta device (a dry run,
// the planner's layout) nothing proportional to the sequence is computed or
// held.
at::Tensor meta_table(int64_t max_seq_len, int64_t dim, c10::Device device) {
  return at::empty({max_seq_len, dim / 2}, at::TensorOptions().dtype(at::kComplexFloat).device(device));
}

// The attention output o [B,H,S,Dv] through wo (row-wise under TP): one
// copy that both casts and lays out [B,S,H,Dv] for the GEMM. (.to aliases a
// same-dtype tensor whose suggested format is "contiguous" — the ring's
// [B,H,S,Dh] output transposed — so contiguous() makes sure.)
// `bo` (attention_bias): added to the whole (or, under SP, this rank's
// part of the) output, so its gradient is summed over tp under SP.
at::Tensor output_projection(const BlockOps& ops, int64_t layer, const at::Tensor& o, const at::Tensor& wo,
                             const at::Tensor& bo = {}) {
  const at::Tensor laid = o.transpose(1, 2)
                              .to(ops.compute_dtype(), /*non_blocking=*/false, /*copy=*/false,
                                  at::MemoryFormat::Contiguous)
                              .contiguous();
  const at::Tensor out = ops.row_gemm(laid.view({o.size(0), o.size(2), -1}), wo, layer, "attention.wo");
  return bo.defined() ? out + ops.norm_weight(bo).to(out.scalar_type()) : out;
}

// Llama 3 / Qwen3: q, k, v from one fused GEMM over wq|wk|wv, heads of
// head_dim, K ≤ H key/value heads.
class GroupedQueryAttention final : public Attention {
 public:
  explicit GroupedQueryAttention(const ModelArgs& args) : args_(args) {}

  void bind(ParamStore& st, const std::string& p, LayerWeights& w) override {
    // Local shapes: the rows of wq, wk, wv (heads × Dh on this rank) come
    // from the specs.
    const auto& wq = st.slot(p + "attention.wq.weight").shape;
    const auto& wk = st.slot(p + "attention.wk.weight").shape;
    const auto& wv = st.slot(p + "attention.wv.weight").shape;
    if (qkv_rows_.empty()) qkv_rows_ = {wq[0], wk[0], wv[0]};
    w.wqkv = st.leaf(p + "attention.wq.weight", {wq[0] + wk[0] + wv[0], wq[1]});
    w.wo = st.leaf(p + "attention.wo.weight", st.slot(p + "attention.wo.weight").shape);
    if (args_.qk_norm) {
      w.q_norm = st.leaf(p + "attention.q_norm.weight", st.slot(p + "attention.q_norm.weight").shape);
      w.k_norm = st.leaf(p + "attention.k_norm.weight", st.slot(p + "attention.k_norm.weight").shape);
    }
    if (args_.attention_bias) {  // wq, wk, wv's biases adjacent: one view, as the weights
      w.bqkv = st.leaf(p + "attention.wq.bias", {wq[0] + wk[0] + wv[0]});
      w.bo = st.leaf(p + "attention.wo.bias", st.slot(p + "attention.wo.bias").shape);
    }
    if (args_.attention_sinks) w.sinks = st.leaf(p + "attention.sinks", st.slot(p + "attention.sinks").shape);
  }

  at::Tensor rope_frequencies(int64_t max_seq_len, c10::Device device) const override {
    if (device.is_meta()) return meta_table(max_seq_len, args_.head_dim(), device);
    if (args_.yarn.enabled)
      return precompute_yarn_freqs_cis(args_.head_dim(), max_seq_len, args_.rope_theta, args_.yarn).to(device);
    return precompute_freqs_cis(args_.head_dim(), max_seq_len, args_.rope_theta, args_.rope_scaling).to(device);
  }

  std::vector<Gemm> float8_gemms() const override {
    return {{"attention.wq|wk|wv", {"attention.wq", "attention.wk", "attention.wv"}},
            {"attention.wo", {"attention.wo"}}};
  }
  std::vector<std::string> high_precision_modules() const override { return {}; }

  at::Tensor forward(const BlockOps& ops, int64_t layer, const LayerWeights& w, const at::Tensor& x, OpCache* cache,
                     const at::Tensor& docs) const override {
    // Local shapes only: this rank's heads come from the weights. Under TP x
    // is whole or (SP) this rank's part of the sequence; the column-wise GEMMs
    // see the whole sequence, so B and S come from their output.
    const int64_t Dh = args_.head_dim();
    const int64_t H = qkv_rows_[0] / Dh, K = qkv_rows_[1] / Dh;
    const at::ScalarType adt = ops.attention_dtype();
    // split (not narrow): its backward is one concatenation, where three
    // narrows would each materialise a zero-filled full-size gradient.
    // Selective "op" checkpointing keeps every other GEMM output (qkv, w13 —
    // TorchTitan keeps every second mm) and the attention output.
    at::Tensor qkv_out = ops.column_gemm(x, w.wqkv, layer, "attention.wq|wk|wv", cache);  // [B,S,(H+2K)Dh]
    if (w.bqkv.defined()) qkv_out = qkv_out + w.bqkv.to(qkv_out.scalar_type());  // this rank's heads' biases
    const int64_t B = qkv_out.size(0), S = qkv_out.size(1);
    auto qkv = qkv_out.split_with_sizes(qkv_rows_, 2);
    at::Tensor q = qkv[0].view({B, S, -1, Dh}), k = qkv[1].view({B, S, -1, Dh});
    if (args_.qk_norm) {  // per head over Dh, before RoPE (Qwen3); the weights see this rank's heads
      q = ops.rms_norm(q, ops.tp_summed(w.q_norm, true));
      k = ops.rms_norm(k, ops.tp_summed(w.k_norm, true));
    }
    if (args_.rope_half_split) {
      q = ops.apply_rope(q, adt);
      k = ops.apply_rope(k, adt);
    } else if (ops.fused_model() && cuda_kernels_take(q)) {
      std::tie(q, k) = cuda_rope_qk(q, k, ops.rope_table(S), adt);  // q and k in one launch
    } else if (ops.fused_model()) {
      q = fused_rope(q, ops.rope_table(S), adt);
      k = fused_rope(k, ops.rope_table(S), adt);
    } else {
      q = ops.apply_rope(q, adt);
      k = ops.apply_rope(k, adt);
    }
    at::Tensor v = qkv[2].view({B, S, -1, Dh}).to(adt);
    const at::Tensor qt = q.transpose(1, 2), kt = k.transpose(1, 2), vt = v.transpose(1, 2);
    const AttentionExtras extras{args_.window_of(layer), w.sinks};
    if (extras.any())
      return output_projection(
          ops, layer, q.is_meta() ? meta_attention(qt, kt, vt) : ops.attention(qt, kt, vt, docs, extras), w.wo, w.bo);
    const at::Tensor o = ops.cp().on() && !q.is_meta()
                       ? ops.seams().context_parallel_attention(qt, kt, vt, ops.cp_positions(), ops.cp(),
                                                                std::nullopt, docs)
                   : q.is_meta() ? meta_attention(qt, kt, vt)
                   // Documents: not kept under "op" checkpointing (recomputed).
                   : docs.defined()   ? ops.document_attention(qt, kt, vt, docs)
                   : ops.fused_model() ? fused_causal_attention(qt, kt, vt)
                   // Kept under "op" checkpointing through ATen's CPU flash kernel; on CUDA
                   // attention is recomputed (ATen's CUDA flash op takes bf16/fp16 only).
                   : cache && K == H && q.device().is_cpu()
                       ? cached_causal_attention(cache, qt, kt, vt)
                       : at::scaled_dot_product_attention(qt, kt, vt, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                          /*is_causal=*/true, /*scale=*/std::nullopt,
                                                          /*enable_gqa=*/K != H);
    return output_projection(ops, layer, o, w.wo, w.bo);
  }

 private:
  ModelArgs args_;
  std::vector<int64_t> qkv_rows_;  // local rows of wq, wk, wv: the QKV output's split
};

// DeepSeek-V3's MLA: TorchTitan's TP plan, CP through the layout's
// context-parallel attention, SDPA at the YaRN-scaled softmax scale.
class LatentAttention final : public Attention {
 public:
  LatentAttention(const ModelArgs& args, int64_t max_seq_len) : args_(args) {
    const MlaArgs& m = args.mla;
    scale_ = std::pow(static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim), -0.5);
    if (args.yarn.enabled && max_seq_len > args.yarn.original_seq_len) {
      const double ms = 0.1 * m.mscale * std::log(args.yarn.factor) + 1.0;
      scale_ *= ms * ms;
    }
  }

  void bind(ParamStore& st, const std::string& p, LayerWeights& w) override {
    const auto view = [&](const std::string& name) { return st.leaf(name, st.slot(name).shape); };
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
    w.wo = view(p + "attention.wo.weight");
    if (args_.qk_norm) {
      w.q_norm = view(p + "attention.q_norm.weight");
      w.k_norm = view(p + "attention.k_norm.weight");
    }
  }

  at::Tensor rope_frequencies(int64_t max_seq_len, c10::Device device) const override {
    if (device.is_meta()) return meta_table(max_seq_len, args_.rope_dim(), device);
    return precompute_yarn_freqs_cis(args_.rope_dim(), max_seq_len, args_.rope_theta, args_.yarn).to(device);
  }

  // The low-rank down-projections wq_a and wkv_a stay in the compute dtype.
  // They are replicated over tp and each rank's gradient into them is a
  // partial sum over its heads: float8 codes of the parts are not the codes
  // of the sum, so a TP run could not match one process; their outputs (576
  // and 1536 wide in 671B) are also below the sizes where torchao's
  // auto-filter finds float8 GEMMs worth it. A filter entry naming them is
  // still valid.
  std::vector<Gemm> float8_gemms() const override {
    const std::string q = args_.mla.q_lora_rank > 0 ? "attention.wq_b" : "attention.wq";
    return {{q, {q}}, {"attention.wkv_b", {"attention.wkv_b"}}, {"attention.wo", {"attention.wo"}}};
  }
  std::vector<std::string> high_precision_modules() const override {
    if (args_.mla.q_lora_rank > 0) return {"attention.wq_a", "attention.wkv_a"};
    return {"attention.wkv_a"};
  }

  at::Tensor forward(const BlockOps& ops, int64_t layer, const LayerWeights& w, const at::Tensor& x, OpCache*,
                     const at::Tensor& docs) const override {
    // TorchTitan's DeepSeek-V3 Attention, head by head: q [B,S,H,nope+rope],
    // k = [k_nope | the one RoPE key expanded over the heads], v [B,S,H,v].
    // Under TP (TorchTitan's plan): the input gathered (SP) or copied once;
    // wq / wq_b and wkv_b column-wise by heads, wo row-wise; wq_a, q_norm,
    // wkv_a and kv_norm replicated, their gradients (each rank's heads' part)
    // summed over tp. H is this rank's heads.
    const MlaArgs& m = args_.mla;
    const int64_t nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim;
    const at::ScalarType adt = ops.attention_dtype();
    // wq / wq_b and wkv_b are column-wise: float8 scales over the whole weight.
    const TensorParallelOptions& tp = ops.tp();
    const Float8TpSharding column = tp.on() ? Float8TpSharding::column(tp.group) : Float8TpSharding{};
    const at::Tensor in = ops.tp_input(x);
    const int64_t B = in.size(0), S = in.size(1);
    const at::Tensor q_lin =
        m.q_lora_rank > 0
            ? ops.linear(ops.rms_norm(ops.linear(in, ops.tp_summed(w.mla.wq_a, true), layer, "attention.wq_a"),
                                      ops.tp_summed(w.mla.q_norm, true)),
                         w.mla.wq_b, layer, "attention.wq_b", column)
            : ops.linear(in, w.mla.wq, layer, "attention.wq", column);
    const int64_t H = q_lin.size(2) / (nope + rope);
    const auto q_parts = q_lin.view({B, S, H, nope + rope}).split_with_sizes({nope, rope}, 3);
    at::Tensor q = at::cat({q_parts[0].to(adt), ops.apply_rope(q_parts[1], adt)}, 3);
    const auto kv_parts = ops.linear(in, ops.tp_summed(w.mla.wkv_a, true), layer, "attention.wkv_a")
                              .split_with_sizes({m.kv_lora_rank, rope}, 2);
    const at::Tensor k_pe = ops.apply_rope(kv_parts[1].unsqueeze(2), adt);  // [B,S,1,rope]
    const auto kv = ops.linear(ops.rms_norm(kv_parts[0], ops.tp_summed(w.mla.kv_norm, true)), w.mla.wkv_b, layer,
                               "attention.wkv_b", column)
                        .view({B, S, H, nope + m.v_head_dim})
                        .split_with_sizes({nope, m.v_head_dim}, 3);
    at::Tensor k = at::cat({kv[0].to(adt), k_pe.expand({B, S, H, rope})}, 3);
    at::Tensor v = kv[1].to(adt);
    const at::Tensor qt = q.transpose(1, 2), kt = k.transpose(1, 2), vt = v.transpose(1, 2);
    const at::Tensor o = q.is_meta()       ? meta_attention(qt, kt, vt)
                   : ops.cp().on()   ? ops.seams().context_parallel_attention(qt, kt, vt, ops.cp_positions(), ops.cp(),
                                                                            scale_, docs)
                   : docs.defined()  ? ops.document_attention(qt, kt, vt, docs, scale_)
                                     : at::scaled_dot_product_attention(qt, kt, vt, /*attn_mask=*/{},
                                                                        /*dropout_p=*/0.0, /*is_causal=*/true,
                                                                        /*scale=*/scale_);
    return output_projection(ops, layer, o, w.wo);
  }

 private:
  ModelArgs args_;
  double scale_ = 0;  // the softmax scale (qk head dim^-0.5, YaRN's mscale²)
};

}  // namespace

std::unique_ptr<Attention> make_attention(const ModelArgs& args, int64_t max_seq_len) {
  if (args.is_mla()) return std::make_unique<LatentAttention>(args, max_seq_len);
  return std::make_unique<GroupedQueryAttention>(args);
}

}  // namespace ctitan
