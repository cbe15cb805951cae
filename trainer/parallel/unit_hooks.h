// Hooks a parallelism hangs around the units of the unit runner
// (TrainModel::forward_backward), FSDP2-style: the runner owns the forward
// order — tok_embeddings, each TransformerBlock, norm + output + loss — and
// the reverse order of backward; a parallelism says what happens at each
// unit's boundaries (gather its parameters, free them, reduce its
// gradients) and never drives the model's forward itself.
//
// Unit indices are Transformer::units(). For one micro-batch the runner calls,
// in order: before_forward(u) / after_forward(u) for u = 0..n-1, then
// before_backward(u) / after_backward(u) for u = n-1..0, then
// after_all_backward(). first/last_micro say where the micro-batch sits in
// the step's gradient accumulation.
#pragma once

#include <cstddef>

namespace ctitan {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(size_t unit) = 0;
  virtual void after_forward(size_t unit) = 0;
  virtual void before_backward(size_t unit) = 0;
  virtual void after_backward(size_t unit, bool first_micro, bool last_micro) = 0;
  virtual void after_all_backward(bool last_micro) = 0;
};

}  // namespace ctitan
