#include "trainer/model/gemm.h"

#include "trainer/kernels/fused_ops.h"  // aten_cpu_is_avx512

namespace ctitan {

bool widen_gemm(const at::Tensor& t) { return gemm_dtype(t.scalar_type(), t.device()) != t.scalar_type(); }

at::ScalarType gemm_dtype(at::ScalarType dtype, const c10::Device& device) {
  return dtype == at::kBFloat16 && device.is_cpu() && !aten_cpu_is_avx512() ? at::kFloat : dtype;
}

namespace {
template <typename Op>
at::Tensor widened(const at::Tensor& a, const at::Tensor& b, Op op) {
  if (!widen_gemm(a) || b.scalar_type() != at::kBFloat16) return op(a, b);
  return op(a.to(at::kFloat), b.to(at::kFloat)).to(at::kBFloat16);
}
}  // namespace

at::Tensor gemm_linear(const at::Tensor& x, const at::Tensor& w) {
  return widened(x, w, [](const at::Tensor& a, const at::Tensor& b) { return at::linear(a, b); });
}
at::Tensor gemm_matmul(const at::Tensor& a, const at::Tensor& b) {
  return widened(a, b, [](const at::Tensor& x, const at::Tensor& y) { return at::matmul(x, y); });
}
at::Tensor gemm_mm(const at::Tensor& a, const at::Tensor& b) {
  return widened(a, b, [](const at::Tensor& x, const at::Tensor& y) { return at::mm(x, y); });
}

}  // namespace ctitan
