#include "trainer/kernels/sink_attention.h"

#include "trainer/kernels/attention_mask.h"

#include <cmath>
#include <limits>

namespace ctitan {

at::Tensor sink_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& qpos,
                                 const at::Tensor& kpos, const at::Tensor& starts, const AttentionExtras& extras,
                                 std::optional<double> scale) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.size(1) > 0 && q.size(1) % k.size(1) == 0 &&
                  k.size(2) == v.size(2) && q.size(3) == k.size(3),
              "sink_window_attention: q [B,H,Lq,Dh], k [B,G,Lk,Dh], v [B,G,Lk,Dv] expected, got ", q.sizes(), ", ",
              k.sizes(), ", ", v.sizes());
  const int64_t B = q.size(0), H = q.size(1), G = k.size(1), Lq = q.size(2), Lk = k.size(2);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  const at::ScalarType acc = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto heads = [&](const at::Tensor& t) {  // [B,G,Lk,d] → [B,H,Lk,d]
    return t.unsqueeze(2).expand({B, G, H / G, Lk, t.size(3)}).reshape({B, H, Lk, t.size(3)}).to(acc);
  };
  at::Tensor scores = at::matmul(q.to(acc), heads(k).transpose(-2, -1)) * s;  // [B,H,Lq,Lk]
  const at::Tensor qp = qpos.to(q.device());
  const at::Tensor first = first_visible_key(qp, starts.defined() ? starts.to(q.device()) : starts, extras.window);
  const at::Tensor visible = visible_keys(first, qp, kpos).unsqueeze(1);  // [B or 1, 1, Lq, Lk]
  scores = scores.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
  if (extras.sinks.defined()) {
    TORCH_CHECK(extras.sinks.dim() == 1 && extras.sinks.size(0) == H, "sink_window_attention: sinks [", H,
                "] expected, got ", extras.sinks.sizes());
    const at::Tensor sink = extras.sinks.to(acc).view({1, H, 1, 1}).expand({B, H, Lq, 1});
    const at::Tensor p = at::softmax(at::cat({scores, sink}, -1), -1).narrow(-1, 0, Lk);
    return at::matmul(p, heads(v)).to(q.scalar_type());
  }
  return at::matmul(at::softmax(scores, -1), heads(v)).to(q.scalar_type());
}

at::Tensor sink_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& starts, const AttentionExtras& extras, std::optional<double> scale) {
  const at::Tensor pos = at::arange(q.size(2), at::TensorOptions(at::kLong).device(q.device()));
  return sink_window_attention(q, k, v, pos, pos, starts, extras, scale);
}

double window_visible_pairs(int64_t S, int64_t window) {
  const double n = static_cast<double>(S);
  if (window <= 0 || window >= S) return n * (n + 1) / 2;
  const double w = static_cast<double>(window);
  return w * (w + 1) / 2 + (n - w) * w;  // the first w rows ramp up, the rest see w keys
}

}  // namespace ctitan
