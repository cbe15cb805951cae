// The parameter store of one model part: where its parameters, gradients
// and compute copies live, laid out from the placement plan (param_spec.h)
// before anything is allocated.
//
// Flat storage (no sharding, DDP): every parameter is a view into one flat
// fp32 "master" buffer and every gradient a view into one flat fp32
// gradient buffer, in the specs' order, so the optimizer, clipping and the
// data-parallel reductions act on a few large tensors instead of one small
// tensor per parameter. With compute dtype bfloat16 the master is cast once
// per step into a flat bf16 compute buffer (begin_step), forward/backward
// run on views of it, and accumulate_grads() casts the bf16 gradients into
// the fp32 buffer — FSDP2's MixedPrecisionPolicy(param=bf16, reduce=fp32).
// With float32 the compute views alias the master; float64 (gradient checks
// in tests) does the same with an fp64 master.
//
// Unit storage (FSDP): no flat buffers at all. Each unit (the fully_shard
// units: tok_embeddings, each block, norm + output) gets a compute buffer
// whose memory exists only between fill_unit() and release_unit(): the
// data-parallel hooks gather into it and free it; the master, gradient and
// optimizer state are the hooks' shards.
//
// Compute leaves (leaf()) are detached views that autograd treats as
// parameters; a leaf may span consecutive slots (wq|wk|wv, w1|w3), so each
// layer runs one QKV GEMM and one gate/up GEMM.
//
// Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "trainer/model/param_spec.h"

namespace ctitan {

struct ParamSlot : ParamSpec {
  int64_t offset = 0;  // into the flat buffers (unit storage: the units' concatenated layout), in elements
};

class ParamStore {
 public:
  enum class Storage { kFlat, kUnits };
  struct UnitSpec {
    std::string name;
    size_t n_params = 0;  // consecutive specs
  };
  struct Unit {
    std::string name;
    int64_t offset = 0, numel = 0;  // in the flat layout
    std::vector<size_t> slots;      // indices into slots()
  };

  // `specs` in layout order, grouped into `units` (their n_params add up to
  // specs.size()). Buffers are created on `device` (meta: shapes only).
  ParamStore(std::vector<ParamSpec> specs, const std::vector<UnitSpec>& units, at::ScalarType compute_dtype,
             c10::Device device, Storage storage);

  const std::vector<ParamSlot>& slots() const { return slots_; }
  const std::vector<Unit>& units() const { return units_; }
  size_t index(const std::string& name) const;  // std::out_of_range for an unknown FQN
  const ParamSlot& slot(const std::string& name) const { return slots_[index(name)]; }
  at::ScalarType compute_dtype() const { return compute_dtype_; }
  c10::Device device() const { return device_; }

  // Flat storage only: the master, the fp32 gradient and views of them.
  at::Tensor& flat_params() { return master_; }
  at::Tensor& flat_grads() { return master_grad_; }
  at::Tensor param(const std::string& name) const;
  at::Tensor grad(const std::string& name) const;
  // Elements of the parameters (the flat layout; unit storage likewise).
  int64_t num_params() const { return total_; }

  // A compute leaf over consecutive slots starting at `first_slot`, viewed
  // as `shape`.
  at::Tensor leaf(const std::string& first_slot, std::vector<int64_t> shape);

  // Unit storage: unit u's compute buffer (the unit's slice of the flat
  // layout, in the compute dtype); its memory is allocated by fill_unit()
  // and released by release_unit(), its views stay valid throughout.
  bool unit_storage() const { return !unit_buffers_.empty(); }
  at::Tensor& unit_buffer(size_t u) { return unit_buffers_.at(u); }
  void fill_unit(size_t u);     // allocate (contents undefined until written)
  void release_unit(size_t u);  // free the memory, keep the views
  // Unit storage: writes unit u's autograd gradients into `out` (fp32, the
  // unit's numel, its flat layout; zeros for unused parameters) and
  // releases them.
  void take_unit_grad(size_t u, at::Tensor& out);

  // Refresh the compute copy of the master (flat, bf16); right after an
  // optimizer step that wrote it itself (hand_compute_to_optimizer), nothing.
  void begin_step(bool after_optimizer_step = false);
  // compile.enable on CUDA: backward's bf16 gradients go into the fp32
  // buffer through ctitan's vectorised kernel, and the optimizer may write
  // the compute copy.
  void set_fused_cuda(bool on) { fused_cuda_ = on; }
  // Flat storage, bf16 compute on CUDA with set_fused_cuda: the flat
  // compute buffer, for AdamW's fused kernel to round the updated master
  // into. Undefined otherwise.
  at::Tensor compute_for_optimizer() const;
  // The optimizer writes the compute copy in its step: begin_step(true)
  // leaves it from now on.
  void set_optimizer_writes_compute() { optimizer_writes_compute_ = true; }
  bool optimizer_writes_compute() const { return optimizer_writes_compute_; }
  // Starts a new step's gradients. With bf16 compute the fp32 buffer is
  // overwritten by the next accumulate_grads() (read it only after that).
  void zero_grad();
  // Flat, bf16 compute: adds (first call of a step: writes) the autograd
  // gradients into the fp32 buffer and releases them. After every backward.
  void accumulate_grads();
  void accumulate_grads(size_t unit);  // the same for one unit's parameters
  // Adds `g` to the autograd gradient of the leaf whose memory `alias`
  // views — the leaf itself or a detached copy (activation checkpointing's
  // recomputation) — as autograd's AccumulateGrad would. For weight
  // gradients computed outside autograd (weight_grad.h).
  void add_grad(const at::Tensor& alias, const at::Tensor& g);

 private:
  std::vector<ParamSlot> slots_;
  std::map<std::string, size_t> index_;
  std::vector<Unit> units_;
  at::ScalarType compute_dtype_;
  c10::Device device_;
  int64_t total_ = 0;
  at::Tensor master_, master_grad_;      // flat: fp32 (fp64) [N]
  at::Tensor compute_;                   // flat: compute dtype [N] (aliases master for fp32/fp64)
  std::vector<at::Tensor> unit_buffers_;  // unit storage
  std::vector<bool> master_grad_fresh_;   // per unit: master_grad_ holds this step's sum so far
  bool fused_cuda_ = false, optimizer_writes_compute_ = false;
  struct Leaf {
    at::Tensor tensor;
    int64_t offset;  // in the flat layout
    size_t unit;
  };
  std::vector<Leaf> leaves_;
};

}  // namespace ctitan
