#include "trainer/model/block_ops.h"

#include <algorithm>

#include "trainer/kernels/fused_cuda.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/flash_sinks.h"
#include "trainer/kernels/sink_attention.h"
#include "trainer/model/gemm.h"
#include "trainer/model/weight_grad.h"

namespace ctitan {
namespace {

// Pieces of each rank's sequence shard that async TP pipelines over: one per
// tp rank, as TorchTitan's micro-pipeline splits per shard (at least two).
int64_t async_chunks(const TensorParallelOptions& tp) { return std::max<int64_t>(2, tp.size()); }

std::string gemm_name(int64_t layer, const char* unit) {
  return layer < 0 ? std::string(unit) : "layers." + std::to_string(layer) + "." + unit;
}

}  // namespace

BlockOps::BlockOps(const ModelArgs& args, c10::Device device, at::ScalarType compute_dtype, ParallelLayout layout,
                   const ModelTechniques& techniques, at::Tensor freqs_cis, Float8Gemms float8)
    : args_(args),
      compute_dtype_(compute_dtype),
      attention_dtype_(compute_dtype),
      tp_(layout.tp),
      ep_(layout.ep),
      seams_(layout.seams),
      split_backward_(techniques.split_backward),
      float8_(std::move(float8)),
      freqs_cis_(std::move(freqs_cis)) {
  // ATen's CPU flash-attention kernel is ~2x slower in bf16 than in fp32 at
  // small head dims (16: 32 ms vs 18 ms fwd+bwd per debugmodel layer, casts
  // included) and faster from 64 up, so small heads attend in fp32 on the
  // CPU. Only precision rises; the math is unchanged. Other devices keep the
  // compute dtype.
  if (device.is_cpu() && compute_dtype == at::kBFloat16 && args_.head_dim() < 32) attention_dtype_ = at::kFloat;
  if (layout.cp.on() || layout.seams) {
    seams().check_context_parallel(layout.cp);  // seq_len is the caller's
    cp_ = std::move(layout.cp);
  }
  // The CPU's AVX-512 kernels (fused_ops.h), or ctitan's CUDA kernels
  // (fused_cuda.h) where this build has them; elsewhere ATen's ops.
  const bool kernels = device.is_cpu() || (device.is_cuda() && cuda_kernels_built());
  fused_model_ = techniques.compile_model && kernels;
  fused_loss_ = techniques.compile_loss && kernels;
}

const LayoutSeams& BlockOps::seams() const {
  TORCH_CHECK(seams_, "a parallel layout needs its seams (parallel_layout())");
  return *seams_;
}

bool BlockOps::in_float8(int64_t layer, const char* unit) const {
  return float8_.on() && float8_.runs(gemm_name(layer, unit));
}

at::Tensor BlockOps::linear(const at::Tensor& x, const at::Tensor& w, int64_t layer, const char* unit,
                            Float8TpSharding tp) const {
  if (in_float8(layer, unit)) return float8_.linear(x, w, gemm_name(layer, unit), tp);
  return split_backward_ ? deferrable_linear(x, w) : gemm_linear(x, w);
}

at::Tensor BlockOps::tp_input(const at::Tensor& x) const {
  return !tp_.on()               ? x
         : tp_.sequence_parallel ? seams().gather_from_sp(x, *tp_.group, 1)
                                 : seams().copy_to_tp(x, *tp_.group);
}

at::Tensor BlockOps::column_gemm(const at::Tensor& x, const at::Tensor& w, int64_t layer, const char* unit,
                                 OpCache* cache) const {
  const bool float8 = in_float8(layer, unit);
  // Async TP runs its own pipelined GEMMs (float8 GEMMs keep the plain regions).
  if (tp_.on() && tp_.async && !float8) return seams().async_gather_linear(x, w, *tp_.group, async_chunks(tp_));
  const at::Tensor in = tp_input(x);
  if (float8)
    return float8_.linear(in, w, gemm_name(layer, unit),
                          tp_.on() ? Float8TpSharding::column(tp_.group) : Float8TpSharding{});
  return cache ? cached_linear(cache, true, in, w) : linear(in, w, layer, unit);
}

at::Tensor BlockOps::row_gemm(const at::Tensor& x, const at::Tensor& w, int64_t layer, const char* unit) const {
  if (tp_.on() && tp_.async && !in_float8(layer, unit))
    return seams().async_linear_scatter(x, w, *tp_.group, async_chunks(tp_));
  const at::Tensor partial =
      linear(x, w, layer, unit, tp_.on() ? Float8TpSharding::row(tp_.group) : Float8TpSharding{});
  if (!tp_.on()) return partial;
  return tp_.sequence_parallel ? seams().scatter_to_sp(partial, *tp_.group, 1)
                               : seams().reduce_from_tp(partial, *tp_.group);
}

at::Tensor BlockOps::tp_summed(const at::Tensor& w, bool partial) const {
  return tp_.on() && partial ? seams().copy_to_tp(w, *tp_.group) : w;
}

at::Tensor BlockOps::rms_norm(const at::Tensor& x, const at::Tensor& w, std::optional<double> eps_in) const {
  const double eps = eps_in.value_or(args_.norm_eps);
  return fused_model_ ? fused_rms_norm(x, w, eps) : at::rms_norm(x, {w.size(0)}, w, eps);
}

void BlockOps::set_ptrr_blocks(std::vector<std::vector<int64_t>> blocks) {
  if (blocks == cp_.ptrr_blocks) return;
  cp_.ptrr_blocks = std::move(blocks);
  cp_positions_ = at::Tensor();  // rope_table deals anew
}

const at::Tensor& BlockOps::rope_table(int64_t S) const {
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

at::Tensor BlockOps::apply_rope(const at::Tensor& x, at::ScalarType out_dtype) const {
  // x [B,S,n,Dh] → complex pairs (x0 + i·x1) rotated by freqs_cis[S], in fp32.
  const int64_t S = x.size(1);
  // With rope_half_split the pairs are (i, i + Dh/2) (HF's rotate_half).
  const auto real = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor xr = args_.rope_half_split
                            ? x.to(real).unflatten(3, {2, -1}).transpose(3, 4).contiguous()
                            : x.to(real).reshape({x.size(0), S, x.size(2), -1, 2});
  at::Tensor xc = at::view_as_complex(xr);
  at::Tensor f = rope_table(S).narrow(0, 0, S).view({1, S, 1, -1}).to(xc.scalar_type());
  at::Tensor rotated = at::view_as_real(xc * f);  // [B,S,n,Dh/2,2]
  if (args_.rope_half_split) rotated = rotated.transpose(3, 4);
  return rotated.flatten(3).to(out_dtype);
}

at::Tensor BlockOps::document_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
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

// CP's masked ring pairs, else the fused CPU kernel (compile), else ATen's
// CPU flash kernel with the window as a mask and the sinks on its output
// (flash_sinks.h: no [B, H, S, S] scores kept), else ATen's CUDA flash
// kernel with the window (bf16/fp16, no documents), else the eager chain.
at::Tensor BlockOps::attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& docs,
                               const AttentionExtras& extras) const {
  if (cp_.on()) return seams().context_parallel_attention(q, k, v, cp_positions_, cp_, std::nullopt, docs, extras);
  if (fused_model_ && fused_attention_runs(q, k, v)) return fused_causal_attention(q, k, v, docs, extras);
  if (flash_sinks_run(q)) return flash_sink_window_attention(q, k, v, docs, extras);
  if (cuda_flash_sinks_run(q, k, v, docs)) return cuda_flash_sink_window_attention(q, k, v, extras);
  return sink_window_attention(q, k, v, docs, extras);
}

}  // namespace ctitan
