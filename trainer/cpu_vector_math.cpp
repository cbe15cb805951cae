#include "trainer/cpu_vector_math.h"

#include <ATen/Context.h>

#include <mutex>

namespace ctitan {

const std::vector<VectorMathOp>& vml_routed_ops() {
  static const std::vector<VectorMathOp> ops = {
      {"acos", [](const at::Tensor& x) { return at::acos(x); }},
      {"asin", [](const at::Tensor& x) { return at::asin(x); }},
      {"atan", [](const at::Tensor& x) { return at::atan(x); }},
      {"cos", [](const at::Tensor& x) { return at::cos(x); }},
      {"erf", [](const at::Tensor& x) { return at::erf(x); }},
      {"erfc", [](const at::Tensor& x) { return at::erfc(x); }},
      {"erfinv", [](const at::Tensor& x) { return at::erfinv(x); }},
      {"exp", [](const at::Tensor& x) { return at::exp(x); }},
      {"log", [](const at::Tensor& x) { return at::log(x); }},
      {"log10", [](const at::Tensor& x) { return at::log10(x); }},
      {"log2", [](const at::Tensor& x) { return at::log2(x); }},
      {"sin", [](const at::Tensor& x) { return at::sin(x); }},
      {"sqrt", [](const at::Tensor& x) { return at::sqrt(x); }},
      {"tan", [](const at::Tensor& x) { return at::tan(x); }},
      {"tanh", [](const at::Tensor& x) { return at::tanh(x); }},
      {"trunc", [](const at::Tensor& x) { return at::trunc(x); }},
  };
  return ops;
}

void settle_cpu_vector_math() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!at::hasMKL()) return;
    for (const auto dtype : {at::kFloat, at::kDouble}) {
      // 0.5 is inside every op's domain (erfinv, acos and asin included).
      const at::Tensor x = at::full({1}, 0.5, at::TensorOptions().dtype(dtype));
      for (const VectorMathOp& op : vml_routed_ops()) op.run(x);
    }
  });
}

}  // namespace ctitan
