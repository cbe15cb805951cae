// Split backwards for the zero-bubble pipeline schedules (Qi et al. 2024):
// a backward becomes I, the gradients of a stage's input and of everything
// but the GEMM weights, and W, the GEMM weights' gradients dW = dYᵀ·X, run
// later to fill the pipeline's idle time — Megatron's WeightGradStore idea.
//
// Inside a DeferWeightGrads scope the model's GEMMs (deferrable_linear, and
// cached_linear under op-level activation checkpointing) compute only dX in
// backward and queue dW's computation with the (X, dY) it needs; the
// queue's run() computes them in order and hands each to its sink, which
// adds it to the weight's gradient as autograd's AccumulateGrad would have.
// Inside activation checkpointing's recomputation the weight is a detached
// copy of the parameter: the sink finds the parameter by its memory
// (ParamStore::add_grad). Float8 GEMMs and async TP's pipelined GEMMs keep
// dW in the backward (their W part is then empty for those GEMMs).
//
// The scope is process-wide, not per thread: autograd runs CUDA backwards
// on its own device thread, which must find the queue the training thread
// opened. One thread at a time opens scopes (the pipeline schedule's; ctitan
// runs one rank per process), and while one is open every GEMM backward in
// the process queues to it. push() may come from autograd's threads.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <mutex>
#include <vector>

namespace ctitan {

class WeightGradQueue {
 public:
  using Sink = std::function<void(const at::Tensor& weight, const at::Tensor& grad)>;
  explicit WeightGradQueue(Sink sink) : sink_(std::move(sink)) {}
  // A GEMM's deferred weight gradient: dW = dYᵀ·X for y = x·wᵀ (x [*, in],
  // dy [*, out], w [out, in]).
  void push(at::Tensor x, at::Tensor dy, at::Tensor w);
  // Computes every queued dW, in order, hands it to the sink, and empties.
  void run();
  size_t size() const;

 private:
  struct Item {
    at::Tensor x, dy, w;
  };
  Sink sink_;
  mutable std::mutex mu_;
  std::vector<Item> items_;
};

// While alive, GEMM backwards (on any thread: autograd's device threads
// included) queue dW to `queue`; scopes nest.
class DeferWeightGrads {
 public:
  explicit DeferWeightGrads(WeightGradQueue* queue);
  ~DeferWeightGrads();
  DeferWeightGrads(const DeferWeightGrads&) = delete;
  DeferWeightGrads& operator=(const DeferWeightGrads&) = delete;

 private:
  WeightGradQueue* previous_;
};

// The queue of the innermost open DeferWeightGrads scope, or null.
WeightGradQueue* deferred_weight_grads();

// y = x·wᵀ (at::linear without bias) whose backward queues dW inside a
// DeferWeightGrads scope; elsewhere exactly at::linear's backward (the same
// mm calls in the same layouts).
at::Tensor deferrable_linear(const at::Tensor& x, const at::Tensor& w);

// The two halves of y = x·wᵀ's backward, shared with cached_linear:
// dX = dY·W, and dW = dYᵀ·X.
at::Tensor linear_grad_input(const at::Tensor& dy, const at::Tensor& w, const at::Tensor& x);
at::Tensor linear_grad_weight(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w);

}  // namespace ctitan
