// Moves a host batch (token ids and labels) to the training device.
//
//   cpu   a copy of the batch (the loader reuses its buffers);
//   cuda  through pinned host buffers with a non-blocking copy, so the copy
//         is queued on the current stream like a kernel and overlaps what
//         the host does next. Two buffers alternate, and a buffer is filled
//         again only after the copy that read it has finished (a CUDA event
//         per buffer): the host never overwrites memory a copy still reads,
//         and never waits for the GPU's compute, only for a copy.
//
// The CUDA path is compiled wherever LibTorch has CUDA and runs only on a
// GPU (tests/gpu/).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <utility>

#include "trainer/data/dataset.h"

namespace ctitan {

class BatchStager {
 public:
  BatchStager(c10::Device device, int64_t batch, int64_t seq_len);
  ~BatchStager();
  BatchStager(const BatchStager&) = delete;
  BatchStager& operator=(const BatchStager&) = delete;

  // (inputs, labels) as [batch, seq_len] int64 tensors on the device.
  std::pair<at::Tensor, at::Tensor> stage(const TokenBatch& b);
  bool pinned() const { return pinned_; }

 private:
  struct Slot;
  c10::Device device_;
  int64_t batch_, seq_len_;
  bool pinned_ = false;
  std::unique_ptr<Slot> slots_[2];
  int next_ = 0;
};

}  // namespace ctitan
