#include "trainer/kernels/attention_mask.h"

#include <limits>

namespace ctitan {

at::Tensor first_visible_key(const at::Tensor& qpos, const at::Tensor& starts_q, int64_t window) {
  const at::Tensor q = qpos.to(starts_q.defined() ? starts_q.device() : qpos.device(), at::kLong).view({1, -1});
  at::Tensor first = window > 0 ? q - (window - 1) : at::zeros_like(q);
  if (starts_q.defined()) first = at::maximum(first, starts_q);
  return first;
}

at::Tensor visible_keys(const at::Tensor& first, const at::Tensor& qpos, const at::Tensor& kpos) {
  const at::Tensor k = kpos.to(first.device(), at::kLong).view({1, 1, -1});
  return k.ge(first.unsqueeze(-1)) & k.le(qpos.to(first.device(), at::kLong).view({1, -1, 1}));
}

at::Tensor additive_attention_mask(const at::Tensor& first, const at::Tensor& qpos, const at::Tensor& kpos,
                                   at::ScalarType dtype) {
  const auto opts = first.options().dtype(dtype);
  return at::where(visible_keys(first, qpos, kpos), at::zeros({}, opts),
                   at::full({}, -std::numeric_limits<double>::infinity(), opts))
      .unsqueeze(1);
}

}  // namespace ctitan
