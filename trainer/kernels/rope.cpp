// Fused rotary embedding (forward + backward), Transformer::apply_rope's math.
//
// Legend: B batch, S sequence, n heads of this projection (H or K), Dh head
// dim; x [B,S,n,Dh] with element pairs (x[2i], x[2i+1]) read as the complex
// number x[2i] + i·x[2i+1]; freqs_cis complex64 [S_max, Dh/2] = cos + i·sin.
//
// Eager: cast to fp32 (a copy), complex mul against the broadcast freqs (a
// second tensor), cast to the output dtype (a third); backward multiplies by
// conj(freqs) and casts back the same way. Here each [n,Dh] block is read
// once and written once in the output dtype, straight from a strided view
// (the model's q/k are split views of one QKV GEMM output, so no copy), and
// nothing is saved for backward but the freqs table.
#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/vec.h"

namespace ctitan {
namespace {

using namespace kernels;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

CTITAN_KERNELS_BEGIN

// out[b,s,h,:] = x[b,s,h,:] ⊙ f[s,:] as complex pairs (conj(f) if kInverse):
//   forward  (a,b)·(c,s) → (a·c − b·s, b·c + a·s)
//   inverse  (a,b)·(c,−s) → (a·c + b·s, b·c − a·s)
// With cc = (c,c), ss = (s,s) and x' = (b,a) that is fmaddsub(x, cc, x'·ss)
// (fmsubadd for the inverse): one shuffle, one mul, one fma per 16 values.
// x rows are at b·sb + s·ss (elements); out is contiguous.
template <typename I, typename O, bool kInverse>
void rotate_rows(const I* x, int64_t sb, int64_t ss, const float* f, O* out, int64_t B, int64_t S, int64_t n,
                 int64_t Dh) {
  const int64_t row = n * Dh;
  parallel_rows(B * S, grain_rows(row * int64_t(sizeof(I) + sizeof(O))), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / S, s = r % S;
      const I* xr = x + b * sb + s * ss;
      O* outr = out + r * row;
      const float* fr = f + s * Dh;
      for (int64_t d = 0; d < Dh; d += kLanes) {
        const int64_t m = std::min(kLanes, Dh - d);  // Dh even, so pairs never straddle
        const __m512 fv = m == kLanes ? load(fr + d) : load(fr + d, m);
        const fVec cc = _mm512_moveldup_ps(fv), sn = _mm512_movehdup_ps(fv);
        for (int64_t h = 0; h < n; ++h) {
          const fVec xv = m == kLanes ? load(xr + h * Dh + d) : load(xr + h * Dh + d, m);
          const __m512 swapped_sin = fVec(_mm512_permute_ps(__m512(xv), 0xB1)) * sn;
          const fVec res = kInverse ? _mm512_fmsubadd_ps(xv, cc, swapped_sin) : _mm512_fmaddsub_ps(xv, cc, swapped_sin);
          if (m == kLanes) store(outr + h * Dh + d, res); else store(outr + h * Dh + d, res, m);
        }
      }
    }
  });
}

template <bool kInverse>
void rotate(const at::Tensor& x, const at::Tensor& freqs_real, at::Tensor& out) {
  const int64_t B = x.size(0), S = x.size(1), n = x.size(2), Dh = x.size(3);
  dispatch_fp32_bf16(x.scalar_type(), [&](auto in_tag) {
    using I = decltype(in_tag);
    dispatch_fp32_bf16(out.scalar_type(), [&](auto out_tag) {
      using O = decltype(out_tag);
      rotate_rows<I, O, kInverse>(x.const_data_ptr<I>(), x.stride(0), x.stride(1), freqs_real.const_data_ptr<float>(),
                                  out.mutable_data_ptr<O>(), B, S, n, Dh);
    });
  });
}

CTITAN_KERNELS_END

class FusedRope : public torch::autograd::Function<FusedRope> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& freqs_cis,
                            at::ScalarType out_dtype) {
    // Only each [n,Dh] block has to be dense; batch/sequence strides are free.
    const bool dense_rows = x_in.stride(3) == 1 && x_in.stride(2) == x_in.size(3);
    const at::Tensor x = dense_rows ? x_in : x_in.contiguous();
    const at::Tensor f = at::view_as_real(freqs_cis.contiguous());  // float [S_max, Dh/2, 2]
    at::Tensor out = at::empty(x.sizes(), x.options().dtype(out_dtype));
    rotate</*kInverse=*/false>(x, f, out);
    ctx->save_for_backward({f});
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const at::Tensor f = ctx->get_saved_variables()[0];
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const at::Tensor dy = grad_out[0].contiguous();
    at::Tensor dx = at::empty(dy.sizes(), dy.options().dtype(x_dtype));
    rotate</*kInverse=*/true>(dy, f, dx);
    return {dx, at::Tensor(), at::Tensor()};
  }
};

// The eager chain, exactly Transformer::apply_rope.
at::Tensor eager_rope(const at::Tensor& x, const at::Tensor& freqs_cis, at::ScalarType out_dtype) {
  const int64_t S = x.size(1);
  const auto real = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor xc = at::view_as_complex(x.to(real).reshape({x.size(0), S, x.size(2), -1, 2}));
  at::Tensor f = freqs_cis.narrow(0, 0, S).view({1, S, 1, -1}).to(xc.scalar_type());
  return at::view_as_real(xc * f).flatten(3).to(out_dtype);
}

}  // namespace

at::Tensor fused_rope(const at::Tensor& x, const at::Tensor& freqs_cis, at::ScalarType out_dtype) {
  TORCH_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, "fused_rope: x must be [B,S,n,Dh] with even Dh, got ", x.sizes());
  TORCH_CHECK(freqs_cis.dim() == 2 && freqs_cis.size(0) >= x.size(1) && freqs_cis.size(1) == x.size(3) / 2,
              "fused_rope: freqs_cis must be [S_max >= S, Dh/2], got ", freqs_cis.sizes(), " for x ", x.sizes());
  const auto ok = [](at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16; };
  if (!fused_kernels_available() || !x.device().is_cpu() || !ok(x.scalar_type()) || !ok(out_dtype) ||
      freqs_cis.scalar_type() != at::kComplexFloat)
    return eager_rope(x, freqs_cis, out_dtype);
  return FusedRope::apply(x, freqs_cis, out_dtype);
}

}  // namespace ctitan
