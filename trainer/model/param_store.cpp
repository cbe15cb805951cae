#include "trainer/model/param_store.h"

#include "trainer/kernels/fused_cuda.h"

#include <c10/core/StorageImpl.h>

#include <stdexcept>

namespace ctitan {
namespace {

// Frees (nbytes 0) or re-allocates a tensor's storage in place, as FSDP2
// does with untyped_storage().resize_(): every view of it — the model's
// parameter leaves and the tensors autograd saved — stays valid and sees
// the new memory once it is filled again.
void set_storage_bytes(const at::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (s->nbytes() == nbytes) return;
  if (nbytes == 0) {
    s->set_data_ptr_noswap(at::DataPtr(nullptr, s->device()));
  } else {
    s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  }
  s->set_nbytes(nbytes);
}

}  // namespace

ParamStore::ParamStore(std::vector<ParamSpec> specs, const std::vector<UnitSpec>& units, at::ScalarType compute_dtype,
                       c10::Device device, Storage storage)
    : compute_dtype_(compute_dtype), device_(device) {
  for (auto& s : specs) {
    ParamSlot slot;
    static_cast<ParamSpec&>(slot) = std::move(s);
    slot.offset = total_;
    total_ += slot.numel;
    index_[slot.name] = slots_.size();
    slots_.push_back(std::move(slot));
  }
  size_t next = 0;
  for (const auto& us : units) {
    Unit u{us.name, next < slots_.size() ? slots_[next].offset : total_, 0, {}};
    for (size_t i = 0; i < us.n_params; ++i, ++next) {
      TORCH_CHECK(next < slots_.size(), "ParamStore: units name more parameters than there are");
      u.slots.push_back(next);
      u.numel += slots_[next].numel;
    }
    units_.push_back(std::move(u));
  }
  TORCH_CHECK(next == slots_.size(), "ParamStore: ", slots_.size() - next, " parameters in no unit");
  master_grad_fresh_.assign(units_.size(), true);
  const auto on_device = torch::TensorOptions().device(device_);
  if (storage == Storage::kUnits) {
    for (const auto& u : units_) {
      unit_buffers_.push_back(torch::empty({u.numel}, on_device.dtype(compute_dtype_)));
      release_unit(unit_buffers_.size() - 1);
    }
    return;
  }
  // Master weights are fp32, or fp64 when computing in fp64 (gradient checks).
  const auto master_dtype = compute_dtype_ == torch::kDouble ? torch::kDouble : torch::kFloat;
  master_ = torch::zeros({total_}, on_device.dtype(master_dtype));
  master_grad_ = torch::zeros({total_}, on_device.dtype(master_dtype));
  compute_ = compute_dtype_ == master_dtype ? master_ : torch::zeros({total_}, on_device.dtype(compute_dtype_));
}

size_t ParamStore::index(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) throw std::out_of_range("no parameter named " + name);
  return it->second;
}

at::Tensor ParamStore::param(const std::string& name) const {
  TORCH_CHECK(master_.defined(), "ParamStore::param: unit storage has no flat master (the shards hold it)");
  const auto& s = slot(name);
  return master_.narrow(0, s.offset, s.numel).view(s.shape);
}

at::Tensor ParamStore::grad(const std::string& name) const {
  TORCH_CHECK(master_grad_.defined(), "ParamStore::grad: unit storage has no flat gradient (the shards hold it)");
  const auto& s = slot(name);
  return master_grad_.narrow(0, s.offset, s.numel).view(s.shape);
}

at::Tensor ParamStore::leaf(const std::string& first_slot, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  const int64_t offset = slot(first_slot).offset;
  size_t unit = 0;
  while (offset >= units_[unit].offset + units_[unit].numel) ++unit;
  TORCH_CHECK(offset + n <= units_[unit].offset + units_[unit].numel, "ParamStore::leaf: ", first_slot,
              " viewed as ", n, " elements crosses the end of unit ", units_[unit].name);
  at::Tensor leaf;
  if (unit_storage()) {
    // Views are bounds-checked against the storage: allocate it for the
    // moment (untouched memory), as when the unit is gathered.
    const bool resident = unit_buffers_[unit].storage().nbytes() > 0;
    if (!resident) fill_unit(unit);
    leaf = unit_buffers_[unit].narrow(0, offset - units_[unit].offset, n).view(shape).detach();
    leaf.requires_grad_(true);
    if (!resident) release_unit(unit);
  } else {
    // A detached view: autograd treats it as a leaf whose storage is the flat buffer.
    leaf = compute_.narrow(0, offset, n).view(shape).detach();
    leaf.requires_grad_(true);
    if (compute_.is_same(master_)) {
      // fp32/fp64 compute: autograd accumulates straight into the flat
      // gradient buffer (AccumulateGrad adds in place into a defined grad).
      leaf.mutable_grad() = master_grad_.narrow(0, offset, n).view(shape);
    }
  }
  leaves_.push_back({leaf, offset, unit});
  return leaf;
}

void ParamStore::fill_unit(size_t u) {
  at::Tensor& b = unit_buffers_.at(u);
  set_storage_bytes(b, b.numel() * b.element_size());
}

void ParamStore::release_unit(size_t u) { set_storage_bytes(unit_buffers_.at(u), 0); }

at::Tensor ParamStore::compute_for_optimizer() const {
  if (!fused_cuda_ || !master_.defined() || compute_.is_same(master_) || !compute_.is_cuda()) return {};
  return compute_;
}

void ParamStore::begin_step(bool after_optimizer_step) {
  if (!master_.defined() || compute_.is_same(master_)) return;
  if (after_optimizer_step && optimizer_writes_compute_) return;
  torch::NoGradGuard no_grad;
  compute_.copy_(master_);
}

void ParamStore::zero_grad() {
  if (unit_storage()) {
    for (auto& leaf : leaves_) leaf.tensor.mutable_grad().reset();
    return;
  }
  if (compute_.is_same(master_)) {
    master_grad_.zero_();
    return;
  }
  // bf16: the next accumulate_grads() overwrites instead of adding, which
  // saves a pass over the fp32 buffer.
  for (auto& leaf : leaves_) leaf.tensor.mutable_grad().reset();
  master_grad_fresh_.assign(units_.size(), false);
}

void ParamStore::accumulate_grads() {
  for (size_t u = 0; u < units_.size(); ++u) accumulate_grads(u);
}

void ParamStore::accumulate_grads(size_t unit) {
  TORCH_CHECK(!unit_storage(), "accumulate_grads: unit-storage (FSDP) gradients go through take_unit_grad");
  if (compute_.is_same(master_)) return;
  torch::NoGradGuard no_grad;
  for (auto& leaf : leaves_) {
    if (leaf.unit != unit) continue;
    at::Tensor dst = master_grad_.narrow(0, leaf.offset, leaf.tensor.numel()).view(leaf.tensor.sizes());
    at::Tensor& g = leaf.tensor.mutable_grad();
    if (!g.defined()) {
      if (!master_grad_fresh_[unit]) dst.zero_();  // parameter unused by this batch
    } else if (fused_cuda_ && cuda_kernels_take(g) && g.is_contiguous()) {
      cuda_accumulate_into(dst, g, master_grad_fresh_[unit]);
    } else if (master_grad_fresh_[unit]) {
      dst.add_(g);
    } else {
      dst.copy_(g);
    }
    g.reset();
  }
  master_grad_fresh_[unit] = true;
}

void ParamStore::add_grad(const at::Tensor& alias, const at::Tensor& g) {
  torch::NoGradGuard no_grad;
  for (auto& leaf : leaves_) {
    if (leaf.tensor.data_ptr() != alias.data_ptr() || !leaf.tensor.sizes().equals(alias.sizes())) continue;
    at::Tensor& grad = leaf.tensor.mutable_grad();
    if (grad.defined()) {
      grad.add_(g);
    } else {
      grad = g.contiguous();
    }
    return;
  }
  TORCH_CHECK(false, "ParamStore::add_grad: no parameter of this store at the weight's memory (shape ", alias.sizes(),
              ")");
}

void ParamStore::take_unit_grad(size_t u, at::Tensor& out) {
  TORCH_CHECK(out.numel() == units_[u].numel, "take_unit_grad: ", units_[u].name, " has ", units_[u].numel,
              " elements, out has ", out.numel());
  torch::NoGradGuard no_grad;
  for (auto& leaf : leaves_) {
    if (leaf.unit != u) continue;
    at::Tensor dst = out.narrow(0, leaf.offset - units_[u].offset, leaf.tensor.numel()).view(leaf.tensor.sizes());
    at::Tensor& g = leaf.tensor.mutable_grad();
    if (g.defined()) {
      dst.copy_(g);
    } else {
      dst.zero_();
    }
    g.reset();
  }
}

}  // namespace ctitan
