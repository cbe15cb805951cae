// Fused SwiGLU on the fused w1|w3 projection output (forward + backward).
//
// Legend: M rows (B·S tokens), F ffn hidden dim; gate_up [M, 2F] holds
// gate = gate_up[:, :F] and up = gate_up[:, F:].
//
// Eager: silu(gate) writes an [M,F] tensor that mul reads and autograd keeps
// for backward; backward runs mul, mul, silu_backward and a cat into
// d(gate_up) — five passes over [M,F]-sized tensors and one extra tensor.
// Here forward is one pass (silu·up in fp32, rounded once), only gate_up is
// saved, and backward recomputes sigmoid and writes both halves of
// d(gate_up) in the same pass.
#include "trainer/kernels/fused_cuda.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/vec.h"

namespace ctitan {
namespace {

using namespace kernels;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

CTITAN_KERNELS_BEGIN

template <typename T>
void forward_rows(const T* gu, T* out, int64_t M, int64_t F) {
  parallel_rows(M, grain_rows(3 * F * int64_t(sizeof(T))), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* g = gu + r * 2 * F;
      const T* u = g + F;
      T* o = out + r * F;
      int64_t j = 0;
      for (; j + kLanes <= F; j += kLanes) {
        const fVec gv = load(g + j);
        store(o + j, gv * sigmoid(gv) * load(u + j));
      }
      if (j < F) {
        const int64_t n = F - j;
        const fVec gv = load(g + j, n);
        store(o + j, gv * sigmoid(gv) * load(u + j, n), n);
      }
    }
  });
}

// d_up = dy·silu(g);  d_gate = dy·u·s·(1 + g·(1 − s)), s = sigmoid(g)
// (ATen's silu_backward formula).
template <typename T>
void backward_rows(const T* dy, const T* gu, T* dgu, int64_t M, int64_t F) {
  parallel_rows(M, grain_rows(5 * F * int64_t(sizeof(T))), [&](int64_t r0, int64_t r1) {
    const fVec one(1.f);
    for (int64_t r = r0; r < r1; ++r) {
      const T *g = gu + r * 2 * F, *dyr = dy + r * F;
      const T* u = g + F;
      T* dg = dgu + r * 2 * F;
      T* du = dg + F;
      for (int64_t j = 0; j < F; j += kLanes) {
        const int64_t n = std::min(kLanes, F - j);
        const bool full = n == kLanes;
        const fVec gv = full ? load(g + j) : load(g + j, n);
        const fVec uv = full ? load(u + j) : load(u + j, n);
        const fVec dv = full ? load(dyr + j) : load(dyr + j, n);
        const fVec s = sigmoid(gv);
        const fVec dgate = dv * uv * s * at::vec::fmadd(gv, one - s, one);
        const fVec dup = dv * (gv * s);
        if (full) {
          store(dg + j, dgate);
          store(du + j, dup);
        } else {
          store(dg + j, dgate, n);
          store(du + j, dup, n);
        }
      }
    }
  });
}

void forward_kernel(const at::Tensor& gu, at::Tensor& out) {
  const int64_t F = gu.size(-1) / 2, M = F ? gu.numel() / (2 * F) : 0;
  dispatch_fp32_bf16(gu.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T>(gu.const_data_ptr<T>(), out.mutable_data_ptr<T>(), M, F);
  });
}

void backward_kernel(const at::Tensor& dy, const at::Tensor& gu, at::Tensor& dgu) {
  const int64_t F = gu.size(-1) / 2, M = F ? gu.numel() / (2 * F) : 0;
  dispatch_fp32_bf16(gu.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    backward_rows<T>(dy.const_data_ptr<T>(), gu.const_data_ptr<T>(), dgu.mutable_data_ptr<T>(), M, F);
  });
}

CTITAN_KERNELS_END

std::vector<int64_t> half_last_dim(const at::Tensor& t) {
  std::vector<int64_t> shape = t.sizes().vec();
  shape.back() /= 2;
  return shape;
}

class FusedSwiGLU : public torch::autograd::Function<FusedSwiGLU> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up_in) {
    const at::Tensor gate_up = gate_up_in.contiguous();
    at::Tensor out = at::empty(half_last_dim(gate_up), gate_up.options());
    forward_kernel(gate_up, out);
    ctx->save_for_backward({gate_up});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const at::Tensor gate_up = ctx->get_saved_variables()[0];
    const at::Tensor dy = grad_out[0].to(gate_up.scalar_type()).contiguous();
    at::Tensor d_gate_up = at::empty_like(gate_up);
    backward_kernel(dy, gate_up, d_gate_up);
    return {d_gate_up};
  }
};

}  // namespace

at::Tensor fused_swiglu(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0,
              "fused_swiglu: gate_up [..., 2F] needs an even last dim, got ", gate_up.sizes());
  const auto dtype = gate_up.scalar_type();
  if (cuda_kernels_take(gate_up)) return cuda_swiglu(gate_up);
  if (!fused_kernels_available() || !gate_up.device().is_cpu() || (dtype != at::kFloat && dtype != at::kBFloat16)) {
    auto parts = gate_up.split(gate_up.size(-1) / 2, -1);
    return at::silu(parts[0]) * parts[1];
  }
  return FusedSwiGLU::apply(gate_up);
}

}  // namespace ctitan
