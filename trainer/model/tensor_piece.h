// A tensor as pieces of a whole: what a rank holds of each parameter (and
// of its optimizer state) under a layout, named by TorchTitan's FQN. The
// engine (data_parallel, train_model) describes its tensors this way and
// the checkpoint writes and reads them (checkpoint.h): a piece is a box of
// the whole tensor's global shape, an offset and an extent in every
// dimension.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ctitan {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct TensorPiece {
  std::string name;                   // TorchTitan FQN, "model." / "optimizer." prefixed
  at::Tensor tensor;                  // the box [offsets, offsets + tensor.sizes()) of the whole, any device
  std::vector<int64_t> global_shape;  // shape of the whole tensor
  std::vector<int64_t> offsets;       // the box's corner, one per dimension; empty: all zero
};
using TensorPieces = std::vector<TensorPiece>;

// The offsets of a box that starts at `row` of dim 0 (FSDP's shards).
std::vector<int64_t> row_box(const std::vector<int64_t>& global_shape, int64_t row);
// Each tensor whole: one piece at offset zero.
TensorPieces whole_tensors(const NamedTensors& tensors);

}  // namespace ctitan
