// Fused RMSNorm (forward + hand-written backward).
//
// Legend: N rows (B·S tokens, leading dims flattened), D model dim.
//
// Eager at::rms_norm on bf16 runs: cast to fp32 (saved for backward: an fp32
// copy of x), pow, mean, add, rsqrt, mul, mul, cast — and its backward about
// a dozen more full passes. Here forward reads each row once from memory
// (twice from L1: sum of squares, then scale) and saves x as given plus one
// fp32 rstd per row; backward is one pass per row with the weight gradient
// accumulated per thread in fp32 and summed once.
#include "trainer/kernels/fused_cuda.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/vec.h"

#include <cmath>

namespace ctitan {
namespace {

using namespace kernels;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

CTITAN_KERNELS_BEGIN

// y[r] = x[r] · rstd[r] · w, rstd[r] = 1/sqrt(mean(x[r]²) + eps).
// Products are formed in eager's order ((x·rstd)·w) so fp32 matches closely.
template <typename T, typename W>
void forward_rows(const T* x, const W* w, T* y, float* rstd, int64_t N, int64_t D, float eps) {
  parallel_rows(N, grain_rows(D * int64_t(sizeof(T))), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * D;
      T* yr = y + r * D;
      fVec acc0(0.f), acc1(0.f);  // two chains hide the FMA latency
      int64_t d = 0;
      for (; d + 2 * kLanes <= D; d += 2 * kLanes) {
        const fVec a = load(xr + d), b = load(xr + d + kLanes);
        acc0 = at::vec::fmadd(a, a, acc0);
        acc1 = at::vec::fmadd(b, b, acc1);
      }
      for (; d < D; d += kLanes) {
        const fVec a = load(xr + d, std::min(kLanes, D - d));
        acc0 = at::vec::fmadd(a, a, acc0);
      }
      const float inv = 1.0f / std::sqrt((acc0 + acc1).reduce_add() / static_cast<float>(D) + eps);
      rstd[r] = inv;
      const fVec vinv(inv);
      for (d = 0; d + kLanes <= D; d += kLanes) store(yr + d, load(xr + d) * vinv * load(w + d));
      if (d < D) {
        const int64_t n = D - d;
        store(yr + d, load(xr + d, n) * vinv * load(w + d, n), n);
      }
    }
  });
}

// dx = rstd·(dy·w) − x·(rstd³·Σ(dy·w·x)/D);  dw += dy·(x·rstd) per thread.
// dw_acc: [threads, D] fp32 zeros, or nullptr when dw is not needed.
template <typename T, typename W>
void backward_rows(const T* dy, const T* x, const W* w, const float* rstd, T* dx, float* dw_acc,
                   int64_t N, int64_t D) {
  parallel_rows(N, grain_rows(2 * D * int64_t(sizeof(T))), [&](int64_t r0, int64_t r1) {
    float* dwa = dw_acc ? dw_acc + at::get_thread_num() * D : nullptr;
    for (int64_t r = r0; r < r1; ++r) {
      const T *dyr = dy + r * D, *xr = x + r * D;
      T* dxr = dx + r * D;
      const float inv = rstd[r];
      const fVec vinv(inv);
      fVec dot(0.f);
      int64_t d = 0;
      for (; d < D; d += kLanes) {
        const int64_t n = std::min(kLanes, D - d);
        const fVec g = n == kLanes ? load(dyr + d) : load(dyr + d, n);
        const fVec xv = n == kLanes ? load(xr + d) : load(xr + d, n);
        const fVec wv = n == kLanes ? load(w + d) : load(w + d, n);
        dot = at::vec::fmadd(g * wv, xv, dot);
        if (dwa) store(dwa + d, at::vec::fmadd(g, xv * vinv, load(dwa + d, n)), n);
      }
      const fVec k(inv * inv * inv * dot.reduce_add() / static_cast<float>(D));
      for (d = 0; d < D; d += kLanes) {
        const int64_t n = std::min(kLanes, D - d);
        const fVec g = n == kLanes ? load(dyr + d) : load(dyr + d, n);
        const fVec xv = n == kLanes ? load(xr + d) : load(xr + d, n);
        const fVec wv = n == kLanes ? load(w + d) : load(w + d, n);
        const fVec out = vinv * (g * wv) - xv * k;
        if (n == kLanes) store(dxr + d, out); else store(dxr + d, out, n);
      }
    }
  });
}

void forward_kernel(const at::Tensor& x, const at::Tensor& w, at::Tensor& y, at::Tensor& rstd, double eps) {
  const int64_t D = x.size(-1), N = D ? x.numel() / D : 0;
  dispatch_fp32_bf16(x.scalar_type(), [&](auto xt) {
    using T = decltype(xt);
    dispatch_fp32_bf16(w.scalar_type(), [&](auto wt) {
      using W = decltype(wt);
      forward_rows<T, W>(x.const_data_ptr<T>(), w.const_data_ptr<W>(), y.mutable_data_ptr<T>(),
                         rstd.mutable_data_ptr<float>(), N, D, static_cast<float>(eps));
    });
  });
}

void backward_kernel(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, const at::Tensor& rstd,
                     at::Tensor& dx, float* dw_acc) {
  const int64_t D = x.size(-1), N = D ? x.numel() / D : 0;
  dispatch_fp32_bf16(x.scalar_type(), [&](auto xt) {
    using T = decltype(xt);
    dispatch_fp32_bf16(w.scalar_type(), [&](auto wt) {
      using W = decltype(wt);
      backward_rows<T, W>(dy.const_data_ptr<T>(), x.const_data_ptr<T>(), w.const_data_ptr<W>(),
                          rstd.const_data_ptr<float>(), dx.mutable_data_ptr<T>(), dw_acc, N, D);
    });
  });
}

CTITAN_KERNELS_END

class FusedRmsNorm : public torch::autograd::Function<FusedRmsNorm> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w_in, double eps) {
    const at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
    at::Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
    at::Tensor rstd = at::empty({x.size(-1) ? x.numel() / x.size(-1) : 0}, x.options().dtype(at::kFloat));
    forward_kernel(x, w, y, rstd, eps);
    ctx->save_for_backward({x, w, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    const at::Tensor dy = grad_out[0].to(x.scalar_type()).contiguous();
    at::Tensor dx = at::empty_like(x);
    at::Tensor dw, dw_acc;
    if (ctx->needs_input_grad(1)) dw_acc = at::zeros({at::get_num_threads(), x.size(-1)}, x.options().dtype(at::kFloat));
    backward_kernel(dy, x, w, rstd, dx, dw_acc.defined() ? dw_acc.mutable_data_ptr<float>() : nullptr);
    if (dw_acc.defined()) dw = dw_acc.sum(0).to(w.scalar_type());
    return {dx, dw, at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
              "fused_rms_norm: weight [D] must match x [..., D], got ", weight.sizes(), " and ", x.sizes());
  const auto ok = [](const at::Tensor& t) { return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16; };
  if (cuda_kernels_take(x) && ok(weight) && weight.device() == x.device()) return cuda_rms_norm(x, weight, eps);
  if (!fused_kernels_available() || !x.device().is_cpu() || !ok(x) || !ok(weight))
    return at::rms_norm(x, {x.size(-1)}, weight, eps);
  return FusedRmsNorm::apply(x, weight, eps);
}

}  // namespace ctitan
