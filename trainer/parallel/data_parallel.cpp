#include "trainer/parallel/data_parallel.h"

#include <c10/core/StorageImpl.h>

#include <algorithm>
#include <cmath>

#include "common/errors.h"
#include "profiling/memory.h"
#include "profiling/trace.h"
#include "trainer/float8/float8_linear.h"
#include "trainer/float8/fp8_codec.h"
#include "trainer/model/param_init.h"
#include "trainer/optim/adamw.h"
#include "trainer/parallel/expert_parallel.h"

namespace ctitan {
namespace {

using Clock = std::chrono::steady_clock;

// The same memory under a tensor of its own, so writing to it does not bump
// the version counter that autograd checks on the parameters' saved views
// (FSDP2 writes its all-gather output the same way).
at::Tensor unversioned_alias(const at::Tensor& t) {
  if (t.is_meta()) return at::empty(t.sizes(), t.options());  // no memory to alias
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options());
}

}  // namespace

DataParallel::DataParallel(Transformer& model, DeviceMesh& mesh, DataParallelOptions opts)
    : model_(model), mesh_(mesh), opts_(std::move(opts)) {
  replicate_ = mesh.size("dp_replicate");
  // FSDP shards over dp_shard, and over dp_shard x cp (TorchTitan's "fsdp")
  // under context parallelism: the cp ranks hold the same weights.
  shard_dim_ = mesh.size("cp") > 1 ? "fsdp" : "dp_shard";
  shard_ = mesh.size(shard_dim_);
  if (opts_.reshard_after_forward != "default" && opts_.reshard_after_forward != "always" &&
      opts_.reshard_after_forward != "never")
    throw InputError("parallelism.fsdp_reshard_after_forward '" + opts_.reshard_after_forward +
                     "' is unknown; use default, always or never");
  TORCH_CHECK(sharded() == model.store().unit_storage(), "DataParallel: FSDP needs the model built with unit "
              "storage (and only FSDP does): dp_shard ", shard_);
  units_.resize(model.units().size());
  if (opts_.recorder) first_seq_ = opts_.recorder->next_seq();
  if (opts_.float8_all_gather && !model.float8().tensorwise())
    throw InputError("quantize.linear.float8.enable_fsdp_float8_all_gather needs recipe_name = \"tensorwise\" "
                     "(a per-row scale cannot be computed on a shard of rows before the gather)");
  // The placement plan: FSDP's Shard(0) over dp_shard (x cp), then
  // Replicate() over dp_replicate (HSDP, DDP).
  // Under expert parallelism the routed experts (already Shard(0) over ep)
  // are sharded over the ranks that hold the same experts, dp_shard_mod_ep
  // — along their hidden dimension when those ranks × ep outnumber the
  // experts, as TorchTitan's shard_placement_fn does (also without EP,
  // when the FSDP ranks outnumber the experts).
  const int64_t r = mesh_.coord(shard_dim_);
  const bool ep = model.expert_parallel().on();
  const int64_t m = mesh_.size("dp_shard_mod_ep"), mr = mesh_.coord("dp_shard_mod_ep");
  for (const ParamSlot& s : model.slots()) {
    ParamSpec spec = s;
    if (ep && is_routed_expert(s.name)) {
      const int dim = m * model.expert_parallel().size() > s.global_shape[0] ? 1 : 0;
      spec = shard_padded(std::move(spec), "dp_shard_mod_ep", m, mr, dim);
    } else if (is_routed_expert(s.name) && shard_ > s.global_shape[0]) {
      // Without EP, too: more FSDP ranks than experts shard the hidden dim.
      spec = shard_padded(std::move(spec), shard_dim_, shard_, r, 1);
    } else {
      spec = shard_rows(std::move(spec), shard_dim_, shard_, r);
    }
    specs_.push_back(replicate(std::move(spec), "dp_replicate", replicate_));
  }
  for (const ParamSlot& s : model.slots()) storage_.push_back({s.offset, s.numel});
  if (sharded()) build_shards();
  plan_norm_ranges();
}

void DataParallel::plan_norm_ranges() {
  // Pipeline stages hold different parameters: the norm spans the stages.
  bool sharded_anywhere = mesh_.size("pp") > 1;
  for (const ParamSpec& s : specs_)
    for (const Placement& p : s.placements) sharded_anywhere |= !p.replicated();
  if (!sharded_anywhere) return;  // every rank holds every reduced gradient: a local norm
  // The parameters this rank holds the first replica of, consecutive ones merged.
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (!first_replica(specs_[i])) continue;
    const auto [offset, numel] = storage_[i];
    if (!norm_ranges_.empty() && norm_ranges_.back().first + norm_ranges_.back().second == offset) {
      norm_ranges_.back().second += numel;
    } else {
      norm_ranges_.emplace_back(offset, numel);
    }
  }
  if (norm_ranges_.empty()) norm_ranges_.emplace_back(0, 0);  // a rank with nothing to count still joins the sum
}

void DataParallel::build_shards() {
  int64_t total = 0;
  const auto& slots = model_.slots();
  const bool ep = model_.expert_parallel().on();
  shard_of_.assign(slots.size(), {0, 0});
  experts_.resize(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    const auto& unit = model_.units()[u];
    units_[u].dim = shard_dim_;
    units_[u].n = shard_;
    // The experts' gradient is complete for the tokens of the whole ep
    // group: summed over dp_shard_mod_ep, it is divided by the dense
    // parameters' factor (TorchTitan's fsdp_gradient_divide_factor).
    experts_[u].dim = "dp_shard_mod_ep";
    experts_[u].n = mesh_.size("dp_shard_mod_ep");
    experts_[u].grad_scale = 1.0 / static_cast<double>(shard_);
    for (int k = 0; k < 2; ++k) {
      UnitShard& us = k == 0 ? units_[u] : experts_[u];
      us.offset = total;
      for (size_t si : unit.slots) {
        const ParamSlot& s = slots[si];
        if ((ep && is_routed_expert(s.name)) != (k == 1)) continue;
        int dim = 0;  // the dimension the spec shards over us.dim
        for (const Placement& pl : specs_[si].placements)
          if (pl.mesh_dim == us.dim && !pl.replicated()) dim = pl.shard_dim;
        ShardedParam p;
        p.name = s.name;
        for (int d = 0; d < dim; ++d) p.outer *= s.shape[static_cast<size_t>(d)];
        p.rows = s.shape[static_cast<size_t>(dim)];
        p.rest = s.numel / (p.outer * p.rows);
        p.chunk = specs_[si].shape[static_cast<size_t>(dim)];
        p.unit_offset = s.offset - unit.offset;
        p.shard_offset = p.gather_offset = us.numel;
        storage_[si] = {us.offset + p.shard_offset, p.shard_numel()};  // in the shard buffers
        shard_of_[si] = {k, us.params.size()};
        us.numel += p.shard_numel();
        us.params.push_back(p);
      }
      us.hp_numel = us.numel;
      total += us.numel;
    }
  }
  // Only this rank's rows exist: the model has no full buffers (unit
  // storage), the shards are initialised from their boxes (init_weights).
  const auto fp32 = torch::TensorOptions().device(model_.device()).dtype(torch::kFloat);
  master_shard_ = torch::zeros({total}, fp32);
  grad_shard_ = torch::zeros({total}, fp32);
  if (opts_.float8_all_gather) plan_float8_gather();
}

void DataParallel::init_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  if (!sharded()) {
    model_.init_weights(seed);
    // DDP: every rank starts from the same weights; they do (same seed),
    // and the broadcast makes it a guarantee, as DDP's constructor does.
    Communicator& g = mesh_.group("dp_replicate");
    if (replicate_ > 1) wait(g.broadcast(model_.store().flat_params(), 0), g);
    return;
  }
  for (size_t i = 0; i < specs_.size(); ++i)
    init_param_storage(master_shard_.narrow(0, storage_[i].first, storage_[i].second).view(specs_[i].shape),
                       specs_[i], model_.args(), seed);
  begin_step();
}

void DataParallel::plan_float8_gather() {
  for (const auto& g : model_.float8().gemms()) {
    size_t u = 0;
    while (model_.units()[u].slots.back() < g.slots.front()) ++u;
    Float8Gemm gemm{g.name, u, {}, at::Tensor()};
    for (size_t si : g.slots) {
      TORCH_CHECK(shard_of_[si].first == 0, "float8 all-gather: ", g.name, " is a routed expert's weight");
      gemm.params.push_back(shard_of_[si].second);
    }
    for (size_t pi : gemm.params) units_[u].params[pi].gemm = static_cast<int>(gemms_.size());
    units_[u].gemms.push_back(gemms_.size());
    gemms_.push_back(std::move(gemm));
  }
  for (auto& us : units_) {  // re-lay the gather shards: float8 codes and the rest apart
    if (us.gemms.empty()) continue;
    us.code_numel = us.hp_numel = 0;
    for (auto& p : us.params) {
      int64_t& n = p.gemm >= 0 ? us.code_numel : us.hp_numel;
      p.gather_offset = n;
      n += p.chunk * p.rest;
    }
  }
}

void DataParallel::compute_float8_scales(const std::vector<size_t>& gemms) {
  torch::NoGradGuard no_grad;
  // amax over this rank's rows of each GEMM's weight (its compute-dtype
  // values, as the unsharded GEMM would see them; padding rows are zero).
  at::Tensor amax = torch::zeros({static_cast<int64_t>(gemms.size())}, grad_shard_.options());
  for (size_t i = 0; i < gemms.size(); ++i) {
    const Float8Gemm& g = gemms_[gemms[i]];
    const UnitShard& us = units_[g.unit];
    // On the device: no host read per GEMM (and none possible on meta).
    at::Tensor m;
    for (size_t pi : g.params) {
      const ShardedParam& p = us.params[pi];
      at::Tensor rows = compute_shard_.narrow(0, us.offset + p.shard_offset, p.chunk * p.rest).view({p.chunk, p.rest});
      const at::Tensor a = fp8_abs_max(rows, -1);
      m = m.defined() ? at::maximum(m, a) : a;
    }
    if (m.defined()) amax.narrow(0, static_cast<int64_t>(i), 1).copy_(m.reshape({1}));
  }
  Communicator& shard = mesh_.group(shard_dim_);
  wait(shard.all_reduce(amax, ReduceOp::kMax), shard);
  // Under TP every float8 weight is also split over tp: the whole weight's amax.
  if (Communicator& tp = mesh_.group("tp"); tp.size() > 1) wait(tp.all_reduce(amax, ReduceOp::kMax), tp);
  const Float8Cast cast{Float8Scaling::kTensorwise, Fp8Format::kE4M3FN};
  for (size_t i = 0; i < gemms.size(); ++i)
    gemms_[gemms[i]].scale = float8_scale(amax.narrow(0, i, 1).view({1, 1}), cast, /*pow2=*/false);
}

void DataParallel::unshard_float8(size_t u) {
  UnitShard& us = units_[u];
  if (!opts_.float8_precompute_scales) compute_float8_scales(us.gemms);
  at::Tensor codes = torch::empty({us.code_numel}, grad_shard_.options().dtype(torch::kUInt8));
  at::Tensor hp = torch::empty({us.hp_numel}, compute_shard_.options());
  for (const auto& p : us.params) {
    at::Tensor shard = compute_shard_.narrow(0, us.offset + p.shard_offset, p.chunk * p.rest);
    if (p.gemm < 0) {
      hp.narrow(0, p.gather_offset, p.chunk * p.rest).copy_(shard);
    } else {
      codes.narrow(0, p.gather_offset, p.chunk * p.rest)
          .copy_(fp8_encode(shard.to(torch::kFloat) * gemms_[p.gemm].scale, Fp8Format::kE4M3FN));
    }
  }
  us.gathered = torch::empty({shard_ * us.hp_numel}, hp.options());
  us.codes_gathered = torch::empty({shard_ * us.code_numel}, codes.options());
  Communicator& g = mesh_.group(shard_dim_);
  us.codes_gather = g.all_gather(us.codes_gathered, codes);
  us.gather = g.all_gather(us.gathered, hp);
}

void DataParallel::unpack_float8(size_t u) {
  UnitShard& us = units_[u];
  wait(us.codes_gather, mesh_.group(shard_dim_));
  us.codes_gather.reset();
  // The float8 values of w·scale in the unit's layout, as the GEMM backend
  // takes them (float8_operand_data: bf16 holds every e4m3 value exactly for
  // the emulation; _scaled_mm takes the gathered codes as they are).
  const std::string backend = float8_backend(model_.device(), model_.float8().emulate());
  const auto operand_dtype = backend == "scaled_mm" ? fp8_torch_dtype(Fp8Format::kE4M3FN) : torch::kBFloat16;
  us.float8_data = torch::empty({model_.units()[u].numel}, grad_shard_.options().dtype(operand_dtype));
  at::Tensor src = us.codes_gathered.view({shard_, us.code_numel});
  for (const auto& p : us.params) {
    if (p.gemm < 0) continue;
    at::Tensor d = us.float8_data.narrow(0, p.unit_offset, p.rows * p.rest).view({p.rows, p.rest});
    at::Tensor s = src.narrow(1, p.gather_offset, p.chunk * p.rest).view({shard_, p.chunk, p.rest});
    for (int64_t r = 0; r < shard_; ++r) {
      const int64_t valid = std::clamp(p.rows - r * p.chunk, int64_t{0}, p.chunk);
      if (valid > 0)
        d.narrow(0, r * p.chunk, valid).copy_(float8_operand_data(s[r].narrow(0, 0, valid), Fp8Format::kE4M3FN, backend));
    }
  }
  us.codes_gathered = at::Tensor();
  at::Tensor leaves = unversioned_alias(model_.store().unit_buffer(u));
  for (size_t gi : us.gemms) {
    const Float8Gemm& g = gemms_[gi];
    const ShardedParam& first = us.params[g.params.front()];
    int64_t rows = 0;
    for (size_t pi : g.params) rows += us.params[pi].rows;
    at::Tensor data = us.float8_data.narrow(0, first.unit_offset, rows * first.rest).view({rows, first.rest});
    model_.float8().set_weight(g.name, Float8Tensor{data, g.scale, Fp8Format::kE4M3FN});
    // The parameters themselves hold the dequantised weight: what the GEMM
    // computes with, for anyone who reads them.
    leaves.narrow(0, first.unit_offset, rows * first.rest).copy_((data.to(torch::kFloat) / g.scale).view({-1}));
  }
}

std::string DataParallel::describe() const {
  std::string s;
  if (replicate_ == 1 && shard_ == 1) return "no data parallelism";
  if (replicate_ > 1 && shard_ > 1) {
    s = "HSDP " + std::to_string(replicate_) + " x " + std::to_string(shard_);
  } else if (shard_ > 1) {
    s = "FSDP " + std::to_string(shard_);
  } else {
    s = "DDP " + std::to_string(replicate_);
  }
  if (sharded()) {
    s += std::string(" (reshard after forward: ") +
         (opts_.reshard_after_forward == "never"    ? "no"
          : opts_.reshard_after_forward == "always" ? "all units"
                                                    : "all but the last unit");
    if (!gemms_.empty())
      s += std::string(", float8 all-gather of ") + std::to_string(gemms_.size()) + " GEMM weights" +
           (opts_.float8_precompute_scales ? ", scales precomputed per step" : "");
    s += ")";
  }
  return s;
}

std::vector<std::string> DataParallel::layout() const {
  std::vector<std::string> lines;
  for (const ParamSpec& s : specs_) lines.push_back(s.describe());
  return lines;
}

bool DataParallel::first_replica(const ParamSpec& s) const {
  for (const Placement& p : s.placements)
    if (p.replicated() && mesh_.coord(p.mesh_dim) != 0) return false;
  return true;
}

at::Tensor& DataParallel::params() { return sharded() ? master_shard_ : model_.store().flat_params(); }
at::Tensor& DataParallel::grads() { return sharded() ? grad_shard_ : model_.store().flat_grads(); }

int64_t DataParallel::state_bytes() const {
  const int64_t n = sharded() ? master_shard_.numel() : model_.store().num_params();
  return n * 4 * 4;  // fp32 master, gradient, exp_avg, exp_avg_sq
}

bool DataParallel::reshards_after_forward(size_t u) const {
  if (opts_.reshard_after_forward == "never") return false;
  if (opts_.reshard_after_forward == "always") return true;
  return u + 1 < units_.size();  // TorchTitan: the last unit's backward comes right after its forward
}

bool DataParallel::give_compute_copy(AdamW& opt) {
  if (sharded()) return false;
  at::Tensor compute = model_.store().compute_for_optimizer();
  if (!compute.defined() || !opt.write_compute_copy(compute)) return false;
  model_.store().set_optimizer_writes_compute();
  return true;
}

void DataParallel::begin_step(bool after_optimizer_step) {
  if (!sharded()) {
    model_.store().begin_step(after_optimizer_step);
    return;
  }
  torch::NoGradGuard no_grad;
  if (model_.compute_dtype() == torch::kFloat) {
    compute_shard_ = master_shard_;
  } else {
    compute_shard_ = master_shard_.to(model_.compute_dtype());
  }
  if (opts_.float8_precompute_scales && !gemms_.empty()) {
    std::vector<size_t> all(gemms_.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    compute_float8_scales(all);
  }
}

void DataParallel::reshard_all() {
  for (size_t u = 0; u < units_.size(); ++u) reshard(u);
}

void DataParallel::wait(const WorkPtr& w, const Communicator& group) {
  const auto t0 = Clock::now();
  w->wait();
  exposed_by_dim_[group.name()] += std::chrono::duration<double>(Clock::now() - t0).count();
}

void DataParallel::unshard(size_t u) {
  UnitShard& us = units_[u];
  if (us.resident || us.gather) return;
  MemoryCategoryScope mem(MemoryCategory::kCommunication);
  if (experts_[u].numel > 0) issue_gather(experts_[u]);
  if (!us.gemms.empty()) {
    unshard_float8(u);
    return;
  }
  issue_gather(us);
}

void DataParallel::issue_gather(UnitShard& us) {
  const at::Tensor shard = compute_shard_.narrow(0, us.offset, us.numel);
  if (us.n == 1) {  // experts with no FSDP beside EP: this rank's shard is the whole
    us.gathered = shard;
    return;
  }
  us.gathered = torch::empty({us.n * us.numel}, compute_shard_.options());
  us.gather = mesh_.group(us.dim).all_gather(us.gathered, shard);
}

void DataParallel::wait_unshard(size_t u) {
  UnitShard& us = units_[u];
  if (us.resident) return;
  unshard(u);
  TraceRange range(trace_cat::kDataParallel, "unshard", model_.units()[u].name);
  torch::NoGradGuard no_grad;
  MemoryCategoryScope mem(MemoryCategory::kParameters);  // the unit's gathered parameters
  model_.store().fill_unit(u);
  const at::Tensor dst = unversioned_alias(model_.store().unit_buffer(u));
  unpack(us, dst);
  if (experts_[u].numel > 0) unpack(experts_[u], dst);
  if (!us.gemms.empty()) unpack_float8(u);
  us.resident = true;
}

void DataParallel::unpack(UnitShard& us, const at::Tensor& unit) {
  if (us.gather) {
    wait(us.gather, mesh_.group(us.dim));
    us.gather.reset();
  }
  at::Tensor src = us.gathered.view({us.n, us.hp_numel});
  for (const auto& p : us.params) {
    if (p.gemm >= 0) continue;  // float8 all-gather: unpack_float8
    at::Tensor d = unit.narrow(0, p.unit_offset, p.outer * p.rows * p.rest).view({p.outer, p.rows, p.rest});
    at::Tensor s = src.narrow(1, p.gather_offset, p.shard_numel()).view({us.n, p.outer, p.chunk, p.rest});
    for (int64_t r = 0; r < us.n; ++r)
      if (const int64_t v = p.valid(r); v > 0) d.narrow(1, r * p.chunk, v).copy_(s[r].narrow(1, 0, v));
  }
  us.gathered = at::Tensor();
}

void DataParallel::reshard(size_t u) {
  if (!sharded() || !units_[u].resident) return;
  model_.store().release_unit(u);
  for (size_t gi : units_[u].gemms) model_.float8().clear_weight(gemms_[gi].name);
  units_[u].float8_data = at::Tensor();
  units_[u].resident = false;
}

void DataParallel::reduce_unit(size_t u, bool first_micro, bool last_micro) {
  torch::NoGradGuard no_grad;
  TraceRange range(trace_cat::kDataParallel, "reduce", model_.units()[u].name);
  MemoryCategoryScope mem(MemoryCategory::kCommunication);
  const auto& unit = model_.units()[u];
  if (!sharded()) {  // DDP: one bucket per unit, reduced once per step
    model_.store().accumulate_grads(u);
    if (!last_micro || replicate_ == 1) return;
    Communicator& g = mesh_.group("dp_replicate");
    pending_.push_back({g.all_reduce(grads().narrow(0, unit.offset, unit.numel), ReduceOp::kAvg), nullptr, &g});
    return;
  }
  at::Tensor full = torch::empty({unit.numel}, grad_shard_.options());
  model_.store().take_unit_grad(u, full);
  reduce_shard(units_[u], full, first_micro);
  if (experts_[u].numel > 0) reduce_shard(experts_[u], full, first_micro);
}

void DataParallel::reduce_shard(UnitShard& us, const at::Tensor& full, bool first_micro) {
  at::Tensor packed = torch::zeros({us.n, us.numel}, grad_shard_.options());
  for (const auto& p : us.params) {
    at::Tensor s = full.narrow(0, p.unit_offset, p.outer * p.rows * p.rest).view({p.outer, p.rows, p.rest});
    at::Tensor d = packed.narrow(1, p.shard_offset, p.shard_numel()).view({us.n, p.outer, p.chunk, p.rest});
    for (int64_t r = 0; r < us.n; ++r)
      if (const int64_t v = p.valid(r); v > 0) d[r].narrow(1, 0, v).copy_(s.narrow(1, r * p.chunk, v));
  }
  if (us.grad_scale != 0) packed.mul_(us.grad_scale);
  at::Tensor dst = grad_shard_.narrow(0, us.offset, us.numel);
  const auto land = [dst, first_micro](const at::Tensor& out) {
    if (first_micro) {
      dst.copy_(out);
    } else {
      dst.add_(out);
    }
  };
  if (us.n == 1) {  // nothing to reduce over
    land(packed.view({-1}));
    return;
  }
  // At most two reduce-scatters in flight, as FSDP2 does: each holds a
  // unit-sized fp32 input, so an unbounded queue would keep a whole fp32
  // gradient copy alive until the end of backward.
  while (pending_.size() >= 2) finish_oldest_reduction();
  at::Tensor out = torch::empty({us.numel}, grad_shard_.options());
  Communicator& g = mesh_.group(us.dim);
  WorkPtr w = g.reduce_scatter(out, packed.view({-1}), us.grad_scale != 0 ? ReduceOp::kSum : ReduceOp::kAvg);
  pending_.push_back({w, [land, out, packed]() mutable { land(out); }, &g});
}

void DataParallel::before_forward(size_t u) {
  if (!sharded()) return;
  if (u == 0) unshard(0);
  if (u + 1 < units_.size()) unshard(u + 1);  // prefetch: in flight while this unit computes
  wait_unshard(u);
}

void DataParallel::after_forward(size_t u) {
  // The last unit's backward follows its forward at once: never freed here.
  if (sharded() && u + 1 < units_.size() && reshards_after_forward(u)) reshard(u);
}

void DataParallel::before_backward(size_t u) {
  if (!sharded()) return;
  if (u > 0) unshard(u - 1);  // prefetch the next unit's parameters
  wait_unshard(u);
}

void DataParallel::after_backward(size_t u, bool first_micro, bool last_micro) {
  // Each unit's gradients leave as soon as they exist, while the next
  // unit's backward computes.
  reduce_unit(u, first_micro, last_micro);
  reshard(u);
}

void DataParallel::after_all_backward(bool last_micro) {
  while (!pending_.empty()) finish_oldest_reduction();
  if (sharded() && replicate_ > 1 && last_micro) {
    Communicator& g = mesh_.group("dp_replicate");
    wait(g.all_reduce(grad_shard_, ReduceOp::kAvg), g);
  }
}

void DataParallel::finish_oldest_reduction() {
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  wait(p.work, *p.group);
  if (p.finish) p.finish();
}

double DataParallel::clip_grad_norm(double max_norm, double* deferred_coef) {
  torch::NoGradGuard no_grad;
  TraceRange range(trace_cat::kCompute, "clip_grad_norm");
  at::Tensor& g = grads();
  if (norm_ranges_.empty()) return clip_grad_norm_(g, max_norm, deferred_coef);  // nothing sharded: every rank has it all
  // Every value counted once over the world: a rank adds the squares of the
  // parameters it holds the first replica of (padding is zero). Each range's
  // norm is one reduction over it (no temporary of its size: squaring a
  // 125M model's TP shard first wrote 250 MB and took 80 ms).
  at::Tensor sq = torch::zeros({1}, g.options().dtype(torch::kDouble));
  for (const auto& [offset, numel] : norm_ranges_)
    if (numel > 0) sq += at::linalg_vector_norm(g.narrow(0, offset, numel), 2).to(torch::kDouble).square();
  Communicator& world = mesh_.group("world");
  wait(world.all_reduce(sq, ReduceOp::kSum), world);
  const double norm = std::sqrt(sq.item<double>());
  clip_to_norm_(g, norm, max_norm, deferred_coef);
  return norm;
}

double DataParallel::dp_mean(double local) {
  at::Tensor t = torch::full({1}, local, torch::kDouble);
  Communicator& loss = mesh_.group("loss");
  wait(loss.all_reduce(t, ReduceOp::kAvg), loss);
  return t.item<double>();
}

namespace {

// Length of the union of intervals.
double union_length(std::vector<std::pair<double, double>> iv) {
  std::sort(iv.begin(), iv.end());
  double total = 0, end = -1;
  for (const auto& [a, b] : iv) {
    if (b <= end) continue;
    total += b - std::max(a, end);
    end = b;
  }
  return total;
}

}  // namespace

CommTimes DataParallel::take_comm_times() {
  CommTimes t;
  t.exposed_by_dim = std::move(exposed_by_dim_);
  exposed_by_dim_.clear();
  for (const auto& [dim, s] : t.exposed_by_dim) t.exposed_comm_s += s;
  if (opts_.recorder) {
    auto by_group = opts_.recorder->completed_intervals_by_group(first_seq_);
    first_seq_ = opts_.recorder->next_seq();
    std::vector<std::pair<double, double>> all;
    for (auto& [group, iv] : by_group) {
      t.comm_by_dim[group] = union_length(iv);
      all.insert(all.end(), iv.begin(), iv.end());
    }
    t.comm_s = union_length(std::move(all));
  }
  return t;
}

TensorPieces DataParallel::checkpoint_pieces(AdamW& opt, bool for_save) {
  TensorPieces pieces;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const ParamSpec& s = specs_[i];
    // Replicas hold the same values: only the first one writes them.
    if (s.box_numel() == 0 || (for_save && !first_replica(s))) continue;
    auto box = [&](at::Tensor& flat) {
      at::Tensor t = flat.narrow(0, storage_[i].first, storage_[i].second).view(s.shape);
      for (size_t d = 0; d < s.shape.size(); ++d) t = t.narrow(static_cast<int64_t>(d), 0, s.box_shape[d]);
      return t;
    };
    pieces.push_back({"model." + s.name, box(params()), s.global_shape, s.box_offset});
    pieces.push_back({"optimizer.exp_avg." + s.name, box(opt.exp_avg()), s.global_shape, s.box_offset});
    pieces.push_back({"optimizer.exp_avg_sq." + s.name, box(opt.exp_avg_sq()), s.global_shape, s.box_offset});
  }
  if (!for_save || mesh_.rank() == 0)
    pieces.push_back({"optimizer.step", opt.step_tensor(), opt.step_tensor().sizes().vec(), {}});
  // MoE: each layer's aux-loss-free expert bias (TorchTitan's persistent
  // buffer layers.{i}.moe.expert_bias), the same on every rank of a stage:
  // written by the stage's first rank in every other dimension.
  const bool first_of_stage = mesh_.coord("dp_replicate") == 0 && mesh_.coord("dp_shard") == 0 &&
                              mesh_.coord("cp") == 0 && mesh_.coord("tp") == 0;
  if (!for_save || first_of_stage)
    for (int64_t l : model_.moe_layers()) {
      at::Tensor& bias = model_.moe_layer(l).bias();
      pieces.push_back({"model.layers." + std::to_string(l) + ".moe.expert_bias", bias, bias.sizes().vec(), {0}});
    }
  return pieces;
}

}  // namespace ctitan
