#include "trainer/model/tensor_piece.h"

namespace ctitan {

std::vector<int64_t> row_box(const std::vector<int64_t>& global_shape, int64_t row) {
  std::vector<int64_t> o(global_shape.size(), 0);
  if (!o.empty()) o[0] = row;
  return o;
}

TensorPieces whole_tensors(const NamedTensors& tensors) {
  TensorPieces pieces;
  for (const auto& [name, t] : tensors) pieces.push_back({name, t, t.sizes().vec(), {}});
  return pieces;
}

}  // namespace ctitan
