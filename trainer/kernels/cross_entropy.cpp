// Fused mean cross-entropy over [N,V] logits (forward + backward).
//
// Legend: N rows (B·S tokens), V vocab.
//
// ctitan::chunked_cross_entropy (trainer/kernels/chunked_cross_entropy.h)
// already avoids fp32 logits for the whole batch, but per chunk it still casts to
// fp32, runs logsumexp (max pass + exp pass), and in backward casts, exps,
// scatters, scales and copies — several passes over each chunk. Here each
// row is read once in forward (lane-wise online max and sum of exp, rescaled
// only when a lane's max grows, so ~1 exp per logit) and once in backward,
// which writes (softmax − onehot)·g/N directly in the logits' dtype. Only
// the fp32 log-sum-exp per row is saved.
#include "trainer/kernels/chunked_cross_entropy.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/vec.h"

#include <cfloat>
#include <cmath>
#include <limits>

namespace ctitan {
namespace {

using namespace kernels;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

CTITAN_KERNELS_BEGIN

// log Σ_j exp(x_j) of one row, fp32. Each lane keeps its own running max m
// and sum s = Σ exp(x − m); a lane's sum is rescaled only when a new value
// exceeds its max (a few dozen times per row), so the loop costs one exp per
// logit. exp(x − m) = exp2(x·log2e − m·log2e): one FMA feeds the exp.
// m starts at −FLT_MAX/2, not −inf, so m·log2e and m − m' stay finite and a
// lane that only ever sees −inf (masked logits, the tail) sums exp2(−inf) = 0.
// A NaN logit never raises m but turns its lane's sum into NaN (exp2 keeps
// NaN), so the result is NaN, as in eager.
template <typename T>
float row_logsumexp(const T* x, int64_t V) {
  const fVec log2e(kLog2e);
  fVec m(-FLT_MAX / 2), neg_m2 = m * fVec(-kLog2e), s(0.f);
  auto step = [&](const fVec& v) {
    if (_mm512_cmp_ps_mask(v, m, _CMP_GT_OQ)) {
      const fVec m_new = at::vec::maximum(m, v);
      s = s * kernels::exp2((m - m_new) * log2e);
      m = m_new;
      neg_m2 = m * fVec(-kLog2e);
    }
    s = s + kernels::exp2(at::vec::fmadd(v, log2e, neg_m2));
  };
  int64_t j = 0;
  for (; j + kLanes <= V; j += kLanes) step(load(x + j));
  if (j < V) {  // missing lanes read as −inf: they add exp(−inf) = 0
    const __mmask16 valid = static_cast<__mmask16>((1u << (V - j)) - 1);
    step(_mm512_mask_blend_ps(valid, _mm512_set1_ps(-std::numeric_limits<float>::infinity()), load(x + j, V - j)));
  }
  const float M = m.reduce_max();
  return M + std::log((s * kernels::exp2((m - fVec(M)) * log2e)).reduce_add());
}

// lse[i] = log-sum-exp of row i; loss[i] = lse[i] − x[i, label[i]].
template <typename T>
void forward_rows(const T* x, const int64_t* labels, float* lse, float* loss, int64_t N, int64_t V) {
  parallel_rows(N, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * V;
      lse[r] = row_logsumexp(xr, V);
      loss[r] = lse[r] - static_cast<float>(xr[labels[r]]);
    }
  });
}

// dx[i,j] = (exp(x[i,j] − lse[i]) − [j == label[i]]) · scale, rounded once.
// Element-wise in j, so dx may be x itself.
template <typename T>
void backward_rows(const T* x, const int64_t* labels, const float* lse, float scale, T* dx, int64_t N, int64_t V) {
  parallel_rows(N, 1, [&](int64_t r0, int64_t r1) {
    const fVec vscale(scale), log2e(kLog2e);
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * V;
      T* dr = dx + r * V;
      const fVec neg_lse2(-lse[r] * kLog2e);  // exp(x − lse) = exp2(x·log2e − lse·log2e)
      const int64_t t = labels[r];
      const float x_t = static_cast<float>(xr[t]);  // read first: dx may alias x
      int64_t j = 0;
      for (; j + kLanes <= V; j += kLanes)
        store(dr + j, kernels::exp2(at::vec::fmadd(load(xr + j), log2e, neg_lse2)) * vscale);
      if (j < V) store(dr + j, kernels::exp2(at::vec::fmadd(load(xr + j, V - j), log2e, neg_lse2)) * vscale, V - j);
      dr[t] = static_cast<T>((std::exp(x_t - lse[r]) - 1.0f) * scale);
    }
  });
}

void forward_kernel(const at::Tensor& logits, const at::Tensor& labels, at::Tensor& lse, at::Tensor& loss) {
  dispatch_fp32_bf16(logits.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T>(logits.const_data_ptr<T>(), labels.const_data_ptr<int64_t>(), lse.mutable_data_ptr<float>(),
                    loss.mutable_data_ptr<float>(), logits.size(0), logits.size(1));
  });
}

void backward_kernel(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& lse, float scale,
                     at::Tensor& grad) {
  dispatch_fp32_bf16(logits.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    backward_rows<T>(logits.const_data_ptr<T>(), labels.const_data_ptr<int64_t>(), lse.const_data_ptr<float>(), scale,
                     grad.mutable_data_ptr<T>(), logits.size(0), logits.size(1));
  });
}

CTITAN_KERNELS_END

class FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits_in, const at::Tensor& labels_in,
                            bool grad_into_logits) {
    const at::Tensor logits = logits_in.contiguous(), labels = labels_in.contiguous();
    ctx->saved_data["grad_into_logits"] = grad_into_logits;
    const int64_t N = logits.size(0), V = logits.size(1);
    const auto [lo, hi] = at::aminmax(labels);
    TORCH_CHECK(N == 0 || (lo.item<int64_t>() >= 0 && hi.item<int64_t>() < V),
                "fused_cross_entropy: labels must lie in [0, ", V, ")");
    at::Tensor lse = at::empty({N}, logits.options().dtype(at::kFloat));
    at::Tensor loss = at::empty({N}, lse.options());
    forward_kernel(logits, labels, lse, loss);
    ctx->save_for_backward({logits, labels, lse});
    return loss.mean();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &labels = saved[1], &lse = saved[2];
    // d(mean CE)/dlogits = (softmax − onehot(label)) · g / N
    const float scale = grad_out[0].item<float>() / static_cast<float>(logits.size(0));
    at::Tensor grad = ctx->saved_data["grad_into_logits"].toBool() ? logits : at::empty_like(logits);
    backward_kernel(logits, labels, lse, scale, grad);
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& labels, bool grad_into_logits) {
  TORCH_CHECK(logits.dim() == 2 && labels.dim() == 1 && labels.size(0) == logits.size(0) &&
                  labels.scalar_type() == at::kLong,
              "fused_cross_entropy: logits [N,V] and int64 labels [N] expected, got ", logits.sizes(), " and ",
              labels.sizes(), " ", labels.scalar_type());
  const auto dtype = logits.scalar_type();
  if (!fused_kernels_available() || !logits.device().is_cpu() || (dtype != at::kFloat && dtype != at::kBFloat16))
    return chunked_cross_entropy(logits, labels);  // the model's loss, same math
  return FusedCrossEntropy::apply(logits, labels, grad_into_logits);
}

}  // namespace ctitan
