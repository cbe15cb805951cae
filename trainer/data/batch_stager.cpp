#include "trainer/data/batch_stager.h"

#include <ATen/ATen.h>

#include <cstring>
#include <optional>

#ifdef CTITAN_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#endif

namespace ctitan {

struct BatchStager::Slot {
  at::Tensor inputs, labels;  // pinned host memory
#ifdef CTITAN_WITH_CUDA
  std::optional<at::cuda::CUDAEvent> copied;  // recorded after the copies that read this slot
#endif
};

BatchStager::BatchStager(c10::Device device, int64_t batch, int64_t seq_len)
    : device_(device), batch_(batch), seq_len_(seq_len) {
#ifdef CTITAN_WITH_CUDA
  if (device_.is_cuda()) {
    const auto pinned = at::TensorOptions().dtype(at::kLong).pinned_memory(true);
    for (auto& s : slots_) {
      s = std::make_unique<Slot>();
      s->inputs = at::empty({batch_, seq_len_}, pinned);
      s->labels = at::empty({batch_, seq_len_}, pinned);
    }
    pinned_ = true;
  }
#endif
}

BatchStager::~BatchStager() = default;

std::pair<at::Tensor, at::Tensor> BatchStager::stage(const TokenBatch& b) {
  const auto ids = at::TensorOptions().dtype(at::kLong);
  if (!pinned_) {
    at::Tensor in = at::from_blob(const_cast<int64_t*>(b.inputs.data()), {batch_, seq_len_}, ids);
    at::Tensor lb = at::from_blob(const_cast<int64_t*>(b.labels.data()), {batch_, seq_len_}, ids);
    return {in.to(device_, /*non_blocking=*/false, /*copy=*/true), lb.to(device_, false, true)};
  }
#ifdef CTITAN_WITH_CUDA
  Slot& s = *slots_[next_];
  next_ ^= 1;
  if (s.copied) s.copied->synchronize();  // the copy that last read this slot is done
  const size_t bytes = static_cast<size_t>(batch_ * seq_len_) * sizeof(int64_t);
  std::memcpy(s.inputs.data_ptr<int64_t>(), b.inputs.data(), bytes);
  std::memcpy(s.labels.data_ptr<int64_t>(), b.labels.data(), bytes);
  at::Tensor in = s.inputs.to(device_, /*non_blocking=*/true, /*copy=*/true);
  at::Tensor lb = s.labels.to(device_, true, true);
  if (!s.copied) s.copied.emplace();
  s.copied->record(at::cuda::getCurrentCUDAStream(device_.index()));
  return {in, lb};
#else
  return {};
#endif
}

}  // namespace ctitan
