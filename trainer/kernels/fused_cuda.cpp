// The autograd side of ctitan's fused CUDA kernels (fused_cuda.h): shapes,
// dtypes, saved tensors, the current stream; the kernels themselves are
// trainer/kernels/cuda/fused_kernels.cu.
#include "trainer/kernels/fused_cuda.h"

#include <algorithm>

#ifdef CTITAN_WITH_CUDA_KERNELS
#include "trainer/kernels/cuda/fused_kernels.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace ctitan {

int64_t linear_cross_entropy_rows_per_chunk(int64_t V) {
  return std::max<int64_t>(1, (int64_t{1} << 27) / std::max<int64_t>(V, 1));
}

#ifdef CTITAN_WITH_CUDA_KERNELS

namespace {

namespace ck = cuda_kernels;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

ck::Dtype dtype_of(at::ScalarType t) {
  TORCH_CHECK(t == at::kFloat || t == at::kBFloat16, "ctitan's CUDA kernels take float32 or bfloat16, got ", t);
  return t == at::kFloat ? ck::Dtype::kFloat32 : ck::Dtype::kBFloat16;
}

void* stream_of(const at::Tensor& t) { return at::cuda::getCurrentCUDAStream(t.get_device()).stream(); }

void check(int code, const char* kernel) {
  TORCH_CHECK(code == 0, "ctitan CUDA kernel ", kernel, " did not launch: ", ck::error_string(code));
}

struct CudaRmsNorm : torch::autograd::Function<CudaRmsNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w_in, double eps) {
    const c10::cuda::CUDAGuard guard(x_in.device());
    const at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
    const int64_t D = x.size(-1), rows = D ? x.numel() / D : 0;
    at::Tensor y = at::empty_like(x);
    at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));
    check(ck::rms_norm_forward(x.data_ptr(), dtype_of(x.scalar_type()), w.data_ptr(), dtype_of(w.scalar_type()),
                               y.data_ptr(), rstd.data_ptr<float>(), rows, D, static_cast<float>(eps), stream_of(x)),
          "rms_norm_forward");
    ctx->save_for_backward({x, w, rstd});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor dy = grads[0].contiguous();
    const int64_t D = x.size(-1), rows = D ? x.numel() / D : 0;
    const int64_t parts = ck::rms_norm_partial_rows(rows);
    at::Tensor dx = at::empty_like(x);
    at::Tensor dw_partial = at::zeros({parts, D}, x.options().dtype(at::kFloat));
    check(ck::rms_norm_backward(dy.data_ptr(), x.data_ptr(), dtype_of(x.scalar_type()), w.data_ptr(),
                                dtype_of(w.scalar_type()), rstd.data_ptr<float>(), dx.data_ptr(),
                                dw_partial.data_ptr<float>(), parts, rows, D, stream_of(x)),
          "rms_norm_backward");
    return {dx, dw_partial.sum(0).to(w.scalar_type()), at::Tensor()};
  }
};

struct CudaSwiGLU : torch::autograd::Function<CudaSwiGLU> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up_in) {
    const c10::cuda::CUDAGuard guard(gate_up_in.device());
    const at::Tensor gu = gate_up_in.contiguous();
    const int64_t F = gu.size(-1) / 2, rows = F ? gu.numel() / (2 * F) : 0;
    auto sizes = gu.sizes().vec();
    sizes.back() = F;
    at::Tensor y = at::empty(sizes, gu.options());
    check(ck::swiglu_forward(gu.data_ptr(), y.data_ptr(), dtype_of(gu.scalar_type()), rows, F, stream_of(gu)),
          "swiglu_forward");
    ctx->save_for_backward({gu});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor gu = ctx->get_saved_variables()[0];
    const c10::cuda::CUDAGuard guard(gu.device());
    const at::Tensor dy = grads[0].contiguous();
    const int64_t F = gu.size(-1) / 2, rows = F ? gu.numel() / (2 * F) : 0;
    at::Tensor dgu = at::empty_like(gu);
    check(ck::swiglu_backward(dy.data_ptr(), gu.data_ptr(), dgu.data_ptr(), dtype_of(gu.scalar_type()), rows, F,
                              stream_of(gu)),
          "swiglu_backward");
    return {dgu};
  }
};

// x whose [n, Dh] blocks per token are contiguous (else a contiguous copy).
at::Tensor rope_operand(const at::Tensor& x) {
  return x.stride(3) == 1 && x.stride(2) == x.size(3) ? x : x.contiguous();
}

ck::RopeSide rope_side(const at::Tensor& x, at::Tensor& out) {
  return {x.data_ptr(), x.stride(0), x.stride(1), x.size(2), out.data_ptr()};
}

struct CudaRopeQK : torch::autograd::Function<CudaRopeQK> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                               const at::Tensor& freqs, int64_t out_dtype) {
    const c10::cuda::CUDAGuard guard(q_in.device());
    const at::Tensor q = rope_operand(q_in), k = rope_operand(k_in);
    const auto out_t = static_cast<at::ScalarType>(out_dtype);
    const int64_t B = q.size(0), S = q.size(1), Dh = q.size(3);
    at::Tensor qo = at::empty(q.sizes(), q.options().dtype(out_t)), ko = at::empty(k.sizes(), k.options().dtype(out_t));
    check(ck::rope(rope_side(q, qo), rope_side(k, ko), dtype_of(q.scalar_type()), dtype_of(out_t),
                   freqs.data_ptr<float>(), B, S, Dh, /*inverse=*/false, stream_of(q)),
          "rope");
    ctx->save_for_backward({freqs});
    ctx->saved_data["in_dtype"] = static_cast<int64_t>(q.scalar_type());  // k's too (cuda_rope_qk checks)
    return {qo, ko};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor freqs = ctx->get_saved_variables()[0];
    const auto in_t = static_cast<at::ScalarType>(ctx->saved_data["in_dtype"].toInt());
    const c10::cuda::CUDAGuard guard(freqs.device());
    const at::Tensor dqo = grads[0].defined() ? grads[0].contiguous() : at::Tensor();
    const at::Tensor dko = grads[1].defined() ? grads[1].contiguous() : at::Tensor();
    const at::Tensor& any = dqo.defined() ? dqo : dko;
    at::Tensor dq = dqo.defined() ? at::empty(dqo.sizes(), dqo.options().dtype(in_t)) : at::Tensor();
    at::Tensor dk = dko.defined() ? at::empty(dko.sizes(), dko.options().dtype(in_t)) : at::Tensor();
    // A side without a gradient takes part with no heads.
    const ck::RopeSide sq = dqo.defined() ? rope_side(dqo, dq) : ck::RopeSide{nullptr, 0, 0, 0, nullptr};
    const ck::RopeSide sk = dko.defined() ? rope_side(dko, dk) : ck::RopeSide{nullptr, 0, 0, 0, nullptr};
    check(ck::rope(sq, sk, dtype_of(any.scalar_type()), dtype_of(in_t), freqs.data_ptr<float>(), any.size(0),
                   any.size(1), any.size(3), /*inverse=*/true, stream_of(any)),
          "rope backward");
    return {dq, dk, at::Tensor(), at::Tensor()};
  }
};

struct CudaLinearCrossEntropy : torch::autograd::Function<CudaLinearCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h_in, const at::Tensor& w_in,
                            const at::Tensor& labels_in, bool grad) {
    const c10::cuda::CUDAGuard guard(h_in.device());
    const at::Tensor h = h_in.contiguous(), w = w_in.contiguous(), labels = labels_in.contiguous();
    const int64_t N = h.size(0), V = w.size(0);
    const int64_t chunk = linear_cross_entropy_rows_per_chunk(V);
    at::Tensor loss_rows = at::empty({N}, h.options().dtype(at::kFloat));
    at::Tensor dh = grad ? at::empty_like(h) : at::Tensor();
    at::Tensor dw = grad ? at::zeros_like(w) : at::Tensor();
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
      const int64_t n = std::min(chunk, N - r0);
      const at::Tensor hc = h.narrow(0, r0, n);
      at::Tensor logits = at::mm(hc, w.t());  // [n, V], h's dtype
      check(ck::cross_entropy_rows(logits.data_ptr(), logits.stride(0), dtype_of(logits.scalar_type()),
                                   labels.data_ptr<int64_t>() + r0, n, V, grad, 1.0f / static_cast<float>(N),
                                   loss_rows.data_ptr<float>() + r0, stream_of(h)),
            "cross_entropy_rows");
      if (!grad) continue;
      at::Tensor dhc = dh.narrow(0, r0, n);
      at::mm_out(dhc, logits, w);           // d h = d logits · w
      dw.addmm_(logits.t(), hc);            // d w += d logitsᵀ · h
    }
    if (grad) ctx->save_for_backward({dh, dw});
    return loss_rows.sum() / static_cast<double>(N);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    TORCH_CHECK(!saved.empty(), "cuda_linear_cross_entropy: backward of a forward that computed no gradient");
    const at::Tensor g = grads[0];
    return {saved[0] * g.to(saved[0].scalar_type()), saved[1] * g.to(saved[1].scalar_type()), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

bool cuda_kernels_built() { return true; }

bool cuda_kernels_take(const at::Tensor& t) {
  return t.is_cuda() && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16);
}

at::Tensor cuda_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return CudaRmsNorm::apply(x, w, eps);
}

at::Tensor cuda_swiglu(const at::Tensor& gate_up) { return CudaSwiGLU::apply(gate_up); }

void cuda_expert_swiglu_forward(const at::Tensor& h1, const at::Tensor& h3, at::Tensor& y, double limit, double alpha) {
  const c10::cuda::CUDAGuard guard(h1.device());
  check(ck::expert_swiglu_forward(h1.data_ptr(), h3.data_ptr(), y.data_ptr(), dtype_of(h1.scalar_type()), h1.numel(),
                                  static_cast<float>(limit), static_cast<float>(alpha), stream_of(h1)),
        "expert_swiglu_forward");
}

void cuda_expert_swiglu_backward(const at::Tensor& dy, const at::Tensor& h1, const at::Tensor& h3, at::Tensor& dh1,
                                 at::Tensor& dh3, double limit, double alpha) {
  const c10::cuda::CUDAGuard guard(h1.device());
  check(ck::expert_swiglu_backward(dy.data_ptr(), h1.data_ptr(), h3.data_ptr(), dh1.data_ptr(), dh3.data_ptr(),
                                   dtype_of(h1.scalar_type()), h1.numel(), static_cast<float>(limit),
                                   static_cast<float>(alpha), stream_of(h1)),
        "expert_swiglu_backward");
}

std::pair<at::Tensor, at::Tensor> cuda_rope_qk(const at::Tensor& q, const at::Tensor& k, const at::Tensor& freqs_cis,
                                               at::ScalarType out_dtype) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(0) == k.size(0) && q.size(1) == k.size(1) &&
                  q.size(3) == k.size(3) && q.size(3) % 2 == 0 && q.scalar_type() == k.scalar_type(),
              "cuda_rope_qk: q [B,S,H,Dh] and k [B,S,K,Dh] of one dtype expected, got ", q.sizes(), " and ", k.sizes());
  const int64_t S = q.size(1);
  TORCH_CHECK(freqs_cis.dim() == 2 && freqs_cis.size(0) >= S && freqs_cis.size(1) == q.size(3) / 2 &&
                  freqs_cis.scalar_type() == at::kComplexFloat,
              "cuda_rope_qk: freqs_cis must be complex64 [S_max >= S, Dh/2], got ", freqs_cis.sizes());
  const at::Tensor freqs = at::view_as_real(freqs_cis.narrow(0, 0, S)).to(q.device()).contiguous();
  auto out = CudaRopeQK::apply(q, k, freqs, static_cast<int64_t>(out_dtype));
  return {out[0], out[1]};
}

at::Tensor cuda_linear_cross_entropy(const at::Tensor& h, const at::Tensor& w, const at::Tensor& labels) {
  TORCH_CHECK(h.dim() == 2 && w.dim() == 2 && h.size(1) == w.size(1) && labels.dim() == 1 &&
                  labels.size(0) == h.size(0) && labels.scalar_type() == at::kLong &&
                  h.scalar_type() == w.scalar_type(),
              "cuda_linear_cross_entropy: h [N,D], w [V,D] of one dtype and int64 labels [N] expected, got ",
              h.sizes(), " ", h.scalar_type(), ", ", w.sizes(), " ", w.scalar_type(), ", ", labels.sizes());
  const bool grad = at::GradMode::is_enabled() && (h.requires_grad() || w.requires_grad());
  return CudaLinearCrossEntropy::apply(h, w, labels, grad);
}

void cuda_adamw_(at::Tensor& params, const at::Tensor& grads, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                 const at::Tensor& step, double lr, double beta1, double beta2, double weight_decay, double eps,
                 double grad_scale, const at::Tensor& compute) {
  for (const at::Tensor* t : {static_cast<const at::Tensor*>(&params), &grads, static_cast<const at::Tensor*>(&exp_avg),
                              static_cast<const at::Tensor*>(&exp_avg_sq)})
    TORCH_CHECK(t->is_cuda() && t->scalar_type() == at::kFloat && t->is_contiguous() && t->numel() == params.numel(),
                "cuda_adamw_: params, grads and the two moments must be contiguous fp32 CUDA tensors of one size");
  TORCH_CHECK(step.is_cuda() && step.scalar_type() == at::kFloat && step.numel() == 1,
              "cuda_adamw_: step must be one fp32 CUDA value");
  TORCH_CHECK(!compute.defined() || (compute.is_cuda() && compute.is_contiguous() && compute.numel() == params.numel()),
              "cuda_adamw_: the compute copy must be contiguous on CUDA with params' numel");
  const c10::cuda::CUDAGuard guard(params.device());
  check(ck::adamw(params.data_ptr<float>(), grads.data_ptr<float>(), exp_avg.data_ptr<float>(),
                  exp_avg_sq.data_ptr<float>(), step.data_ptr<float>(), params.numel(), lr, beta1, beta2, weight_decay,
                  eps, static_cast<float>(grad_scale), compute.defined() ? compute.data_ptr() : nullptr,
                  compute.defined() ? dtype_of(compute.scalar_type()) : ck::Dtype::kFloat32, stream_of(params)),
        "adamw");
}

void cuda_accumulate_into(at::Tensor& dst, const at::Tensor& src, bool accumulate) {
  TORCH_CHECK(dst.is_cuda() && dst.scalar_type() == at::kFloat && dst.is_contiguous() && src.is_cuda() &&
                  src.is_contiguous() && src.numel() == dst.numel(),
              "cuda_accumulate_into: a contiguous fp32 CUDA dst and a contiguous CUDA src of its numel expected");
  const c10::cuda::CUDAGuard guard(dst.device());
  check(ck::accumulate_into(dst.data_ptr<float>(), src.data_ptr(), dtype_of(src.scalar_type()), dst.numel(), accumulate,
                            stream_of(dst)),
        "accumulate_into");
}

#else  // LibTorch without CUDA, or no CUDA toolkit at build time: the model never routes here.

bool cuda_kernels_built() { return false; }
bool cuda_kernels_take(const at::Tensor&) { return false; }
namespace {
[[noreturn]] void not_built(const char* what) {
  TORCH_CHECK(false, what, ": this ctitan was built without its CUDA kernels (no CUDA toolkit or CPU-only LibTorch)");
}
}  // namespace
at::Tensor cuda_rms_norm(const at::Tensor&, const at::Tensor&, double) { not_built("cuda_rms_norm"); }
at::Tensor cuda_swiglu(const at::Tensor&) { not_built("cuda_swiglu"); }
void cuda_expert_swiglu_forward(const at::Tensor&, const at::Tensor&, at::Tensor&, double, double) {
  not_built("cuda_expert_swiglu_forward");
}
void cuda_expert_swiglu_backward(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor&, at::Tensor&, double,
                                 double) {
  not_built("cuda_expert_swiglu_backward");
}
std::pair<at::Tensor, at::Tensor> cuda_rope_qk(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                               at::ScalarType) {
  not_built("cuda_rope_qk");
}
at::Tensor cuda_linear_cross_entropy(const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  not_built("cuda_linear_cross_entropy");
}
void cuda_adamw_(at::Tensor&, const at::Tensor&, at::Tensor&, at::Tensor&, const at::Tensor&, double, double, double,
                 double, double, double, const at::Tensor&) {
  not_built("cuda_adamw_");
}
void cuda_accumulate_into(at::Tensor&, const at::Tensor&, bool) { not_built("cuda_accumulate_into"); }

#endif

}  // namespace ctitan
