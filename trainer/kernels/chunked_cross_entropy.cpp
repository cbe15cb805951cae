#include "trainer/kernels/chunked_cross_entropy.h"

#include <algorithm>

namespace ctitan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType accumulate_dtype(const at::Tensor& logits) {
  return logits.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

class ChunkedCrossEntropy : public torch::autograd::Function<ChunkedCrossEntropy> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& labels) {
    const int64_t N = logits.size(0), V = logits.size(1), rows = cross_entropy_rows_per_chunk(logits.device(), V);
    const auto acc = accumulate_dtype(logits);
    at::Tensor lse = at::empty({N}, logits.options().dtype(acc));
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
      const int64_t n = std::min(rows, N - r0);
      lse.narrow(0, r0, n).copy_(at::logsumexp(logits.narrow(0, r0, n).to(acc), {1}));
    }
    at::Tensor target = logits.gather(1, labels.unsqueeze(1)).squeeze(1).to(acc);
    ctx->save_for_backward({logits, labels, lse});
    return (lse - target).mean();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &labels = saved[1], &lse = saved[2];
    const int64_t N = logits.size(0), V = logits.size(1), rows = cross_entropy_rows_per_chunk(logits.device(), V);
    const auto acc = accumulate_dtype(logits);
    // d(mean CE)/dlogits = (softmax − onehot(label)) · g / N
    const at::Tensor scale = grad_out[0].to(acc) / static_cast<double>(N);
    at::Tensor grad = at::empty_like(logits);
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
      const int64_t n = std::min(rows, N - r0);
      at::Tensor p = (logits.narrow(0, r0, n).to(acc) - lse.narrow(0, r0, n).unsqueeze(1)).exp_();
      at::Tensor lab = labels.narrow(0, r0, n).unsqueeze(1);
      p.scatter_add_(1, lab, at::full({n, 1}, -1.0, p.options()));
      p.mul_(scale);
      grad.narrow(0, r0, n).copy_(p);
    }
    return {grad, at::Tensor()};
  }
};

}  // namespace

int64_t cross_entropy_rows_per_chunk(const c10::Device& device, int64_t vocab) {
  // fp32 elements per chunk: 2^20 (4 MB, stays in a CPU's cache) on a CPU;
  // 2^26 (256 MB) elsewhere, where a cache-sized chunk would be thousands of
  // tiny kernel launches per step and only memory bounds the chunk.
  const int64_t elements = device.is_cpu() ? int64_t{1} << 20 : int64_t{1} << 26;
  return std::max<int64_t>(1, elements / std::max<int64_t>(vocab, 1));
}

int64_t cross_entropy_chunks(const c10::Device& device, int64_t rows, int64_t vocab) {
  const int64_t per = cross_entropy_rows_per_chunk(device, vocab);
  return (rows + per - 1) / per;
}

at::Tensor chunked_cross_entropy(const at::Tensor& logits, const at::Tensor& labels) {
  return ChunkedCrossEntropy::apply(logits, labels);
}

}  // namespace ctitan
