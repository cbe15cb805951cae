// Fused causal attention for small heads (forward + backward), fp32.
//
// Legend: B batch, H query heads, G kv heads (H/G query heads share one),
// S sequence, Dh head dim (16·NV), i query row, j key row.
//
// Why: ATen's CPU flash-attention kernel runs its Q·Kᵀ and P·V blocks as
// small GEMMs, which at Dh = 16 are mostly overhead (25 ms fwd+bwd per
// debugmodel layer on one core here). With K and V transposed per head into
// [Dh][S] (16 KB at Dh 16, S 256), the scores of one query row against 16
// keys are Dh FMAs of a broadcast q element with one Kᵀ row — every lane
// useful — and P·V, dV, dK, dQ are FMAs of a broadcast probability with one
// Dh-wide row. Each task owns one (batch, kv head), so dK/dV accumulate
// without races; the softmax uses exact row maxima (all scores of a
// 4-query block are kept in L1), so no running rescale is needed.
//
// Documents (block_causal, documents.h): query row i sees keys [start_i, i].
// A 4-row block starts its key loop at the 16-key block holding its first
// row's start (starts never decrease along a sequence), so the masked
// blocks before it are skipped, not computed and discarded; inside the
// first block the lanes below each row's start are masked like the causal
// ones above the diagonal. With every start 0 the loops and masks are the
// causal kernel's, bit for bit.
//
// Output layout: [B,S,H,Dh] memory returned as a [B,H,S,Dh] view, so the
// model's o.transpose(1,2) is already contiguous (no copy), and likewise
// for dq/dk/dv.
#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/vec.h"
#include "trainer/kernels/documents.h"
#include "trainer/kernels/flash_sinks.h"
#include "trainer/kernels/sink_attention.h"

#include <cmath>
#include <limits>
#include <vector>

namespace ctitan {
namespace {

using namespace kernels;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int kRows = 4;  // query rows per block: each K/V row loaded once feeds 4 FMAs

// A [B,n,S,Dh] tensor's row (b, head, i), Dh contiguous.
struct Rows {
  const float* p;
  int64_t sb, sh, ss;
  const float* at(int64_t b, int64_t h, int64_t i) const { return p + b * sb + h * sh + i * ss; }
};
struct MutRows {
  float* p;
  int64_t sb, sh, ss;
  float* at(int64_t b, int64_t h, int64_t i) const { return p + b * sb + h * sh + i * ss; }
};
Rows rows_of(const at::Tensor& t) { return {t.const_data_ptr<float>(), t.stride(0), t.stride(1), t.stride(2)}; }
MutRows rows_of(at::Tensor& t) { return {t.mutable_data_ptr<float>(), t.stride(0), t.stride(1), t.stride(2)}; }

CTITAN_KERNELS_BEGIN

// Lanes of key block [jb, jb+16) that query row i may attend to (j ≤ i).
inline __mmask16 causal_lanes(int64_t i, int64_t jb) {
  const int64_t n = i - jb + 1;
  return n >= kLanes ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << n) - 1);
}

// Lanes of key block [jb, jb+16) at or after `start` (the row's document).
inline __mmask16 document_lanes(int64_t start, int64_t jb) {
  const int64_t n = start - jb;
  return n <= 0 ? __mmask16(0xFFFF) : n >= kLanes ? __mmask16(0) : static_cast<__mmask16>(0xFFFFu << n);
}

// What a row sees beyond causal: its sample's document starts (or null)
// and the sliding window (0: none).
struct RowMask {
  const int64_t* st = nullptr;
  int64_t window = 0;
  // The first key row i may see.
  int64_t first_key(int64_t i) const {
    int64_t j = st ? st[i] : 0;
    if (window > 0) j = std::max(j, i - window + 1);
    return j;
  }
  bool any() const { return st != nullptr || window > 0; }
};

// The lanes query row i sees in key block jb: causal, from its first key on.
inline __mmask16 visible_lanes(const RowMask& m, int64_t i, int64_t jb) {
  const __mmask16 causal = causal_lanes(i, jb);
  return m.any() ? static_cast<__mmask16>(causal & document_lanes(m.first_key(i), jb)) : causal;
}

// xt[d·Sp + j] = x(b, h, j)[d], zero-padded to Sp (a multiple of 16) keys.
void transpose_head(const Rows& x, int64_t b, int64_t h, int64_t S, int64_t Sp, int64_t Dh, float* xt) {
  for (int64_t j = 0; j < Sp; ++j) {
    const float* row = j < S ? x.at(b, h, j) : nullptr;
    for (int64_t d = 0; d < Dh; ++d) xt[d * Sp + j] = row ? row[d] : 0.f;
  }
}

// acc[r] = Σ_d a_r[d] · xt[d][jb..jb+16) for the block's kRows rows: the
// scores (a = q, xt = Kᵀ) or dp (a = dO, xt = Vᵀ). kBlocks key blocks at
// once: FMA latency is 4 cycles and there are two FMA ports, so 8
// independent accumulators keep them busy where 4 would not.
template <int NV, int kBlocks>
inline void dot_blocks(const float* const* a, const float* xt, int64_t Sp, int64_t jb, fVec (*acc)[kRows]) {
  for (int c = 0; c < kBlocks; ++c)
    for (int r = 0; r < kRows; ++r) acc[c][r] = fVec(0.f);
  for (int d = 0; d < 16 * NV; ++d) {
    for (int c = 0; c < kBlocks; ++c) {
      const fVec kt = load(xt + d * Sp + jb + c * kLanes);
      for (int r = 0; r < kRows; ++r) acc[c][r] = at::vec::fmadd(fVec(a[r][d]), kt, acc[c][r]);
    }
  }
}

// out[r] = Σ_{j<nk} p[r·Sp + j] · v_j. At Dh 16 the 4 row accumulators are
// spelled out and doubled (even/odd keys): 8 independent FMA chains in
// registers (as arrays g++ kept them on the stack).
template <int NV>
inline void pv_accumulate(const float* p, int64_t Sp, const float* v, int64_t vs, int64_t nk, fVec (*out)[NV]) {
  if constexpr (NV == 1) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    const float *p0 = p, *p1 = p + Sp, *p2 = p + 2 * Sp, *p3 = p + 3 * Sp;
    int64_t j = 0;
    for (; j + 2 <= nk; j += 2) {
      const __m512 va = _mm512_loadu_ps(v + j * vs), vb = _mm512_loadu_ps(v + (j + 1) * vs);
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(p0[j]), va, a0);
      a1 = _mm512_fmadd_ps(_mm512_set1_ps(p1[j]), va, a1);
      a2 = _mm512_fmadd_ps(_mm512_set1_ps(p2[j]), va, a2);
      a3 = _mm512_fmadd_ps(_mm512_set1_ps(p3[j]), va, a3);
      b0 = _mm512_fmadd_ps(_mm512_set1_ps(p0[j + 1]), vb, b0);
      b1 = _mm512_fmadd_ps(_mm512_set1_ps(p1[j + 1]), vb, b1);
      b2 = _mm512_fmadd_ps(_mm512_set1_ps(p2[j + 1]), vb, b2);
      b3 = _mm512_fmadd_ps(_mm512_set1_ps(p3[j + 1]), vb, b3);
    }
    if (j < nk) {
      const __m512 va = _mm512_loadu_ps(v + j * vs);
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(p0[j]), va, a0);
      a1 = _mm512_fmadd_ps(_mm512_set1_ps(p1[j]), va, a1);
      a2 = _mm512_fmadd_ps(_mm512_set1_ps(p2[j]), va, a2);
      a3 = _mm512_fmadd_ps(_mm512_set1_ps(p3[j]), va, a3);
    }
    static_assert(kRows == 4, "spelled out for 4 rows");
    out[0][0] = _mm512_add_ps(a0, b0);
    out[1][0] = _mm512_add_ps(a1, b1);
    out[2][0] = _mm512_add_ps(a2, b2);
    out[3][0] = _mm512_add_ps(a3, b3);
  } else {  // Dh ≥ 32: 4·NV ≥ 8 chains already
    for (int r = 0; r < kRows; ++r)
      for (int u = 0; u < NV; ++u) out[r][u] = fVec(0.f);
    for (int64_t j = 0; j < nk; ++j)
      for (int u = 0; u < NV; ++u) {
        const fVec vv = load(v + j * vs + 16 * u);
        for (int r = 0; r < kRows; ++r) out[r][u] = at::vec::fmadd(fVec(p[r * Sp + j]), vv, out[r][u]);
      }
  }
}

// Forward of one (batch, kv head): every query head of its group.
// lse2 (log2 units, [B,H,S]) is saved for backward.
template <int NV>
void forward_task(const Rows& q, const Rows& k, const Rows& v, const MutRows& o, float* lse2, const RowMask& mask,
                  const float* sinks, int64_t b, int64_t g, int64_t H, int64_t G, int64_t S, float scale) {
  constexpr int64_t Dh = 16 * NV;
  const int64_t Sp = (S + kLanes - 1) / kLanes * kLanes;
  std::vector<float> kt(Dh * Sp), sbuf(kRows * Sp);
  transpose_head(k, b, g, S, Sp, Dh, kt.data());
  const float c = scale * kLog2e;  // scores in log2 units: exp(s) = exp2(s·log2e)
  for (int64_t h = g * (H / G); h < (g + 1) * (H / G); ++h) {
    for (int64_t i0 = 0; i0 < S; i0 += kRows) {
      const int64_t nk = std::min(S, i0 + kRows);  // keys this block can see
      const int64_t jb0 = mask.first_key(i0) / kLanes * kLanes;  // its first key block
      const float* qr[kRows];
      for (int r = 0; r < kRows; ++r) qr[r] = q.at(b, h, std::min(i0 + r, S - 1));
      fVec mx[kRows], acc[2][kRows];
      for (int r = 0; r < kRows; ++r) mx[r] = fVec(-std::numeric_limits<float>::infinity());
      auto scores = [&](int64_t jb, const fVec* a) {
        for (int r = 0; r < kRows; ++r) {
          const __mmask16 lanes = visible_lanes(mask, std::min(i0 + r, S - 1), jb);  // padding rows: the last row's
          const __m512 s = _mm512_mask_blend_ps(lanes, _mm512_set1_ps(-INFINITY), a[r] * fVec(c));
          mx[r] = at::vec::maximum(mx[r], fVec(s));
          store(sbuf.data() + r * Sp + jb, fVec(s));
        }
      };
      int64_t jb = jb0;
      for (; jb + kLanes < nk; jb += 2 * kLanes) {
        dot_blocks<NV, 2>(qr, kt.data(), Sp, jb, acc);
        scores(jb, acc[0]);
        scores(jb + kLanes, acc[1]);
      }
      if (jb < nk) {
        dot_blocks<NV, 1>(qr, kt.data(), Sp, jb, acc);
        scores(jb, acc[0]);
      }
      // p = exp(s − m) in place, the rows interleaved (independent exps).
      // A sink is one more logit in the max and the sum, whose value row is 0.
      fVec m[kRows], sum[kRows];
      const float sink2 = sinks ? sinks[h] * kLog2e : 0.f;
      float sink_part[kRows] = {};
      for (int r = 0; r < kRows; ++r) {
        const float row_max = mx[r].reduce_max();
        m[r] = fVec(sinks ? std::max(row_max, sink2) : row_max);
        if (sinks) sink_part[r] = std::exp2(sink2 - m[r].reduce_max());
        sum[r] = fVec(0.f);
      }
      for (int64_t jb = jb0; jb < nk; jb += kLanes)
        for (int r = 0; r < kRows; ++r) {
          float* p = sbuf.data() + r * Sp + jb;
          const fVec e = kernels::exp2(load(p) - m[r]);
          store(p, e);
          sum[r] = sum[r] + e;
        }
      float inv_l[kRows];
      for (int r = 0; r < kRows; ++r) {
        const float l = sum[r].reduce_add() + sink_part[r];
        inv_l[r] = 1.f / l;
        if (i0 + r < S) lse2[(b * H + h) * S + i0 + r] = m[r].reduce_max() + std::log2(l);
      }
      // o_r = Σ_j p_rj · v_j (masked p are 0).
      fVec out[kRows][NV];
      pv_accumulate<NV>(sbuf.data() + jb0, Sp, v.at(b, g, jb0), v.ss, nk - jb0, out);
      for (int r = 0; r < kRows && i0 + r < S; ++r)
        for (int u = 0; u < NV; ++u) store(o.at(b, h, i0 + r) + 16 * u, out[r][u] * fVec(inv_l[r]));
    }
  }
}

// Backward of one (batch, kv head), flash-attention style: p recomputed from
// the saved lse, dp = dO·Vᵀ, ds = p·(dp − Σ dO∘O), dq = scale·ds·K,
// dk = scale·dsᵀ·q, dv = pᵀ·dO; dk/dv summed over the group's query heads.
// With sinks, dsink[h] (this batch's part) = −Σ_i p_sink,i · Σ dO_i∘O_i.
template <int NV>
void backward_task(const Rows& q, const Rows& k, const Rows& v, const Rows& o, const Rows& dout, const float* lse2,
                   const MutRows& dq, const MutRows& dk, const MutRows& dv, const RowMask& mask, const float* sinks,
                   float* dsink, int64_t b, int64_t g, int64_t H, int64_t G, int64_t S, float scale) {
  constexpr int64_t Dh = 16 * NV;
  const int64_t Sp = (S + kLanes - 1) / kLanes * kLanes;
  std::vector<float> kt(Dh * Sp), vt(Dh * Sp), dk_acc(S * Dh, 0.f), dv_acc(S * Dh, 0.f);
  transpose_head(k, b, g, S, Sp, Dh, kt.data());
  transpose_head(v, b, g, S, Sp, Dh, vt.data());
  const float c = scale * kLog2e;
  alignas(64) float pbuf[kRows][kLanes], dsbuf[kRows][kLanes];
  for (int64_t h = g * (H / G); h < (g + 1) * (H / G); ++h) {
    for (int64_t i0 = 0; i0 < S; i0 += kRows) {
      const int64_t nk = std::min(S, i0 + kRows);
      const int64_t jb0 = mask.first_key(i0) / kLanes * kLanes;
      const float *qr[kRows], *dor[kRows];
      // q and dO rows stay in registers: the dV/dK updates below would
      // otherwise reload them after every store (they may alias, to g++).
      fVec neg_lse[kRows], delta[kRows], dqa[kRows][NV], qv[kRows][NV], dov[kRows][NV];
      for (int r = 0; r < kRows; ++r) {
        const int64_t i = std::min(i0 + r, S - 1);
        qr[r] = q.at(b, h, i);
        dor[r] = dout.at(b, h, i);
        neg_lse[r] = fVec(-lse2[(b * H + h) * S + i]);
        fVec dd(0.f);  // Σ_d dO∘O: softmax backward's row term
        for (int u = 0; u < NV; ++u) {
          qv[r][u] = load(qr[r] + 16 * u);
          dov[r][u] = load(dor[r] + 16 * u);
          dd = at::vec::fmadd(dov[r][u], load(o.at(b, h, i) + 16 * u), dd);
          dqa[r][u] = fVec(0.f);
        }
        delta[r] = fVec(dd.reduce_add());
        if (sinks && i0 + r < S)
          dsink[h] -= std::exp2(sinks[h] * kLog2e - lse2[(b * H + h) * S + i]) * dd.reduce_add();
      }
      for (int64_t jb = jb0; jb < nk; jb += kLanes) {
        fVec s[1][kRows], dp[1][kRows];
        dot_blocks<NV, 1>(qr, kt.data(), Sp, jb, s);
        dot_blocks<NV, 1>(dor, vt.data(), Sp, jb, dp);
        for (int r = 0; r < kRows; ++r) {
          const __mmask16 lanes = i0 + r < S ? visible_lanes(mask, i0 + r, jb) : __mmask16(0);
          const fVec p = _mm512_maskz_mov_ps(lanes, kernels::exp2(at::vec::fmadd(s[0][r], fVec(c), neg_lse[r])));
          store(pbuf[r], p);
          store(dsbuf[r], p * (dp[0][r] - delta[r]));
        }
        for (int64_t jj = 0; jj < std::min<int64_t>(kLanes, nk - jb); ++jj) {
          const int64_t j = jb + jj;
          const float* kj = k.at(b, g, j);
          for (int u = 0; u < NV; ++u) {
            fVec dvj = load(dv_acc.data() + j * Dh + 16 * u), dkj = load(dk_acc.data() + j * Dh + 16 * u);
            const fVec kv = load(kj + 16 * u);
#pragma GCC unroll 16
            for (int r = 0; r < kRows; ++r) {
              dvj = at::vec::fmadd(fVec(pbuf[r][jj]), dov[r][u], dvj);
              dkj = at::vec::fmadd(fVec(dsbuf[r][jj]), qv[r][u], dkj);
              dqa[r][u] = at::vec::fmadd(fVec(dsbuf[r][jj]), kv, dqa[r][u]);
            }
            store(dv_acc.data() + j * Dh + 16 * u, dvj);
            store(dk_acc.data() + j * Dh + 16 * u, dkj);
          }
        }
      }
      for (int r = 0; r < kRows && i0 + r < S; ++r)
        for (int u = 0; u < NV; ++u) store(dq.at(b, h, i0 + r) + 16 * u, dqa[r][u] * fVec(scale));
    }
  }
  for (int64_t j = 0; j < S; ++j)
    for (int u = 0; u < NV; ++u) {
      store(dk.at(b, g, j) + 16 * u, load(dk_acc.data() + j * Dh + 16 * u) * fVec(scale));
      store(dv.at(b, g, j) + 16 * u, load(dv_acc.data() + j * Dh + 16 * u));
    }
}

template <typename F>
void dispatch_nv(int64_t Dh, const F& f) {
  if (Dh == 16) f(std::integral_constant<int, 1>{});
  else if (Dh == 32) f(std::integral_constant<int, 2>{});
  else f(std::integral_constant<int, 4>{});
}

// starts: int64 [B,S] contiguous (documents), or undefined (causal);
// window 0: none; sinks fp32 [H] or empty.
void forward_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& starts,
                    int64_t window, const at::Tensor& sinks, at::Tensor& o, at::Tensor& lse2) {
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), G = k.size(1);
  const float scale = 1.f / std::sqrt(static_cast<float>(q.size(3)));
  const Rows qr = rows_of(q), kr = rows_of(k), vr = rows_of(v);
  const MutRows orr = rows_of(o);
  float* l = lse2.mutable_data_ptr<float>();
  const int64_t* st = starts.defined() ? starts.const_data_ptr<int64_t>() : nullptr;
  const float* sk = sinks.numel() > 0 ? sinks.const_data_ptr<float>() : nullptr;
  dispatch_nv(q.size(3), [&](auto nv) {
    parallel_rows(B * G, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        forward_task<decltype(nv)::value>(qr, kr, vr, orr, l, RowMask{st ? st + t / G * S : nullptr, window}, sk,
                                          t / G, t % G, H, G, S, scale);
    });
  });
}

// dsink: fp32 [B,H] zeros (each batch's part), or empty without sinks.
void backward_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o,
                     const at::Tensor& dout, const at::Tensor& lse2, const at::Tensor& starts, int64_t window,
                     const at::Tensor& sinks, at::Tensor& dq, at::Tensor& dk, at::Tensor& dv, at::Tensor& dsink) {
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), G = k.size(1);
  const float scale = 1.f / std::sqrt(static_cast<float>(q.size(3)));
  const Rows qr = rows_of(q), kr = rows_of(k), vr = rows_of(v), orr = rows_of(o), dor = rows_of(dout);
  const MutRows dqr = rows_of(dq), dkr = rows_of(dk), dvr = rows_of(dv);
  const float* l = lse2.const_data_ptr<float>();
  const int64_t* st = starts.defined() ? starts.const_data_ptr<int64_t>() : nullptr;
  const float* sk = sinks.numel() > 0 ? sinks.const_data_ptr<float>() : nullptr;
  float* ds = sk ? dsink.mutable_data_ptr<float>() : nullptr;
  dispatch_nv(q.size(3), [&](auto nv) {
    parallel_rows(B * G, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        backward_task<decltype(nv)::value>(qr, kr, vr, orr, dor, l, dqr, dkr, dvr,
                                           RowMask{st ? st + t / G * S : nullptr, window}, sk,
                                           ds ? ds + t / G * H : nullptr, t / G, t % G, H, G, S, scale);
    });
  });
}

CTITAN_KERNELS_END

// [B,n,S,Dh] view over fresh [B,S,n,Dh] memory (see the file comment).
at::Tensor empty_bshd(const at::Tensor& like) {
  return at::empty({like.size(0), like.size(2), like.size(1), like.size(3)}, like.options()).transpose(1, 2);
}

// Rows must have Dh contiguous; batch/head/sequence strides are free.
at::Tensor dense_rows(const at::Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); }

class FusedCausalAttention : public torch::autograd::Function<FusedCausalAttention> {
 public:
  // sinks: fp32 [H], or [0] for none (an autograd input, which an
  // undefined tensor may not be).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                            const at::Tensor& v_in, const at::Tensor& sinks, const at::Tensor* starts_in,
                            int64_t window) {
    const at::Tensor starts = *starts_in;  // not an autograd input (an undefined tensor may not be one)
    const at::Tensor q = dense_rows(q_in), k = dense_rows(k_in), v = dense_rows(v_in);
    at::Tensor o = empty_bshd(q);
    at::Tensor lse2 = at::empty({q.size(0), q.size(1), q.size(2)}, q.options());
    forward_kernel(q, k, v, starts, window, sinks, o, lse2);
    ctx->save_for_backward({q, k, v, o, lse2, sinks});
    if (starts.defined()) ctx->saved_data["starts"] = starts;
    ctx->saved_data["window"] = window;
    return o;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto s = ctx->get_saved_variables();
    const at::Tensor dout = dense_rows(grad_out[0]);
    at::Tensor dq = empty_bshd(s[0]), dk = empty_bshd(s[1]), dv = empty_bshd(s[2]);
    const at::Tensor& sinks = s[5];
    at::Tensor dsink = sinks.numel() > 0 ? at::zeros({s[0].size(0), sinks.size(0)}, sinks.options()) : at::Tensor();
    const auto st = ctx->saved_data.find("starts");
    backward_kernel(s[0], s[1], s[2], s[3], dout, s[4], st == ctx->saved_data.end() ? at::Tensor() : st->second.toTensor(),
                    ctx->saved_data["window"].toInt(), sinks, dq, dk, dv, dsink);
    return {dq, dk, dv, dsink.defined() ? dsink.sum(0) : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fused_attention_runs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t Dh = q.size(3);
  return fused_kernels_available() && q.device().is_cpu() && q.scalar_type() == at::kFloat &&
         k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat && (Dh == 16 || Dh == 32 || Dh == 64) &&
         v.size(3) == Dh;
}

at::Tensor fused_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& starts_in, const AttentionExtras& extras) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes() && q.size(0) == k.size(0) &&
                  q.size(2) == k.size(2) && q.size(3) == k.size(3) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
              "fused_causal_attention: q [B,H,S,Dh], k/v [B,G,S,Dh] with H a multiple of G expected, got ",
              q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  const bool documents = starts_in.defined();
  TORCH_CHECK(!documents || (starts_in.dim() == 2 && starts_in.size(0) == q.size(0) && starts_in.size(1) == q.size(2)),
              "fused_causal_attention: starts [B,S] expected, got ", starts_in.sizes());
  TORCH_CHECK(!extras.sinks.defined() || (extras.sinks.dim() == 1 && extras.sinks.size(0) == q.size(1)),
              "fused_causal_attention: sinks [H] expected, got ", extras.sinks.sizes());
  if (!fused_attention_runs(q, k, v)) {
    if (extras.any())
      return flash_sinks_run(q) ? flash_sink_window_attention(q, k, v, starts_in, extras)
                                : sink_window_attention(q, k, v, starts_in, extras);
    if (documents) return document_attention_sdpa(q, k, v, starts_in);
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                            /*scale=*/std::nullopt, /*enable_gqa=*/k.size(1) != q.size(1));
  }
  const at::Tensor starts = documents ? starts_in.to(at::kLong).contiguous() : at::Tensor();
  const at::Tensor sinks = extras.sinks.defined() ? extras.sinks.to(at::kFloat).contiguous()
                                                  : at::empty({0}, q.options());
  return FusedCausalAttention::apply(q, k, v, sinks, &starts, extras.window);
}

}  // namespace ctitan
