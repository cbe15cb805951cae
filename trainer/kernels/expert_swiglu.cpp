// The experts' SwiGLU, plain or GPT-OSS's clamped form (expert_swiglu.h).
//
// Eager, the clamped form is six ops over [N, F] tensors forward (two clamps,
// a scale, sigmoid and two products) and autograd keeps their inputs; here
// forward reads h1 and h3 once and writes y, and backward reads dy, h1, h3
// and writes dh1, dh3 in one pass.
#include "trainer/kernels/expert_swiglu.h"

#include "trainer/kernels/fused_cuda.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/vec.h"

namespace ctitan {

at::Tensor expert_swiglu(const at::Tensor& h1, const at::Tensor& h3, double limit, double alpha) {
  if (limit <= 0) return at::silu(h1) * h3;
  const bool meta = h1.is_meta();
  const at::Tensor g = meta ? h1 : h1.clamp_max(limit);
  const at::Tensor u = meta ? h3 : h3.clamp(-limit, limit);
  return g * at::sigmoid(g * alpha) * (u + 1);
}

namespace {

using namespace kernels;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

CTITAN_KERNELS_BEGIN

// The clamped operands (g, u) of h1 and h3; the identity when unclamped.
struct Clamp {
  bool on;
  fVec limit, neg_limit, alpha;
  fVec g(const fVec& h1) const { return on ? at::vec::minimum(h1, limit) : h1; }
  fVec u(const fVec& h3) const { return on ? at::vec::clamp(h3, neg_limit, limit) : h3; }
};

template <typename T>
void forward_rows(const T* h1, const T* h3, T* y, int64_t M, int64_t F, const Clamp& c) {
  parallel_rows(M, grain_rows(3 * F * int64_t(sizeof(T))), [&](int64_t r0, int64_t r1) {
    const fVec one(1.f);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < F; j += kLanes) {
        const int64_t n = std::min(kLanes, F - j), o = r * F + j;
        const bool full = n == kLanes;
        const fVec a = full ? load(h1 + o) : load(h1 + o, n), b = full ? load(h3 + o) : load(h3 + o, n);
        const fVec g = c.g(a);
        const fVec out = c.on ? g * sigmoid(c.alpha * g) * (c.u(b) + one) : g * sigmoid(g) * b;
        if (full) {
          store(y + o, out);
        } else {
          store(y + o, out, n);
        }
      }
  });
}

// Plain: dh1 = dy·h3·s·(1 + h1·(1 − s)), dh3 = dy·silu(h1) (ATen's
// silu_backward). Clamped: dh1 = dy·(u+1)·(s + alpha·g·s·(1 − s)) where
// h1 < limit, dh3 = dy·g·s where −limit < h3 < limit, s = σ(alpha·g).
template <typename T>
void backward_rows(const T* dy, const T* h1, const T* h3, T* dh1, T* dh3, int64_t M, int64_t F, const Clamp& c) {
  parallel_rows(M, grain_rows(5 * F * int64_t(sizeof(T))), [&](int64_t r0, int64_t r1) {
    const fVec one(1.f), zero(0.f);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < F; j += kLanes) {
        const int64_t n = std::min(kLanes, F - j), o = r * F + j;
        const bool full = n == kLanes;
        const fVec a = full ? load(h1 + o) : load(h1 + o, n), b = full ? load(h3 + o) : load(h3 + o, n);
        const fVec d = full ? load(dy + o) : load(dy + o, n);
        fVec da, db;
        if (c.on) {
          const fVec g = c.g(a), s = sigmoid(c.alpha * g), dgs = d * (c.u(b) + one);
          da = fVec::blendv(zero, dgs * s + c.alpha * (dgs * g * (s * (one - s))), a < c.limit);
          db = fVec::blendv(zero, d * (g * s), (b > c.neg_limit) & (b < c.limit));
        } else {
          const fVec s = sigmoid(a);
          da = d * b * s * at::vec::fmadd(a, one - s, one);
          db = d * (a * s);
        }
        if (full) {
          store(dh1 + o, da);
          store(dh3 + o, db);
        } else {
          store(dh1 + o, da, n);
          store(dh3 + o, db, n);
        }
      }
  });
}

Clamp clamp_of(double limit, double alpha) {
  const float l = static_cast<float>(limit);
  return {limit > 0, fVec(l), fVec(-l), fVec(static_cast<float>(alpha))};
}

void forward_kernel(const at::Tensor& h1, const at::Tensor& h3, at::Tensor& y, double limit, double alpha) {
  const int64_t F = h1.dim() ? h1.size(-1) : 1, M = F ? h1.numel() / F : 0;
  const Clamp c = clamp_of(limit, alpha);
  dispatch_fp32_bf16(h1.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T>(h1.const_data_ptr<T>(), h3.const_data_ptr<T>(), y.mutable_data_ptr<T>(), M, F, c);
  });
}

void backward_kernel(const at::Tensor& dy, const at::Tensor& h1, const at::Tensor& h3, at::Tensor& dh1,
                     at::Tensor& dh3, double limit, double alpha) {
  const int64_t F = h1.dim() ? h1.size(-1) : 1, M = F ? h1.numel() / F : 0;
  const Clamp c = clamp_of(limit, alpha);
  dispatch_fp32_bf16(h1.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    backward_rows<T>(dy.const_data_ptr<T>(), h1.const_data_ptr<T>(), h3.const_data_ptr<T>(),
                     dh1.mutable_data_ptr<T>(), dh3.mutable_data_ptr<T>(), M, F, c);
  });
}

CTITAN_KERNELS_END

// One node for both devices: the CPU kernel above, or the CUDA one (fused_cuda.h).
class FusedExpertSwiGLU : public torch::autograd::Function<FusedExpertSwiGLU> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h1_in, const at::Tensor& h3_in, double limit,
                            double alpha) {
    const at::Tensor h1 = h1_in.contiguous(), h3 = h3_in.contiguous();
    at::Tensor y = at::empty_like(h1);
    if (h1.is_cuda()) {
      cuda_expert_swiglu_forward(h1, h3, y, limit, alpha);
    } else {
      forward_kernel(h1, h3, y, limit, alpha);
    }
    ctx->save_for_backward({h1, h3});
    ctx->saved_data["limit"] = limit;
    ctx->saved_data["alpha"] = alpha;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &h1 = saved[0], &h3 = saved[1];
    const at::Tensor dy = grad_out[0].to(h1.scalar_type()).contiguous();
    at::Tensor dh1 = at::empty_like(h1), dh3 = at::empty_like(h3);
    const double limit = ctx->saved_data["limit"].toDouble(), alpha = ctx->saved_data["alpha"].toDouble();
    if (h1.is_cuda()) {
      cuda_expert_swiglu_backward(dy, h1, h3, dh1, dh3, limit, alpha);
    } else {
      backward_kernel(dy, h1, h3, dh1, dh3, limit, alpha);
    }
    return {dh1, dh3, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_expert_swiglu(const at::Tensor& h1, const at::Tensor& h3, double limit, double alpha) {
  TORCH_CHECK(h1.sizes() == h3.sizes() && h1.scalar_type() == h3.scalar_type() && h1.device() == h3.device(),
              "fused_expert_swiglu: h1 and h3 of one shape, dtype and device expected, got ", h1.sizes(), " ",
              h1.scalar_type(), " and ", h3.sizes(), " ", h3.scalar_type());
  const auto dtype = h1.scalar_type();
  const bool cpu_kernel =
      fused_kernels_available() && h1.device().is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16);
  if (!cpu_kernel && !cuda_kernels_take(h1)) return expert_swiglu(h1, h3, limit, alpha);
  return FusedExpertSwiGLU::apply(h1, h3, limit, alpha);
}

}  // namespace ctitan
