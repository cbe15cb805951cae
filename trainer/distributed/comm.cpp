// The communicator over c10d: ProcessGroupGloo for CPU tensors, and
// ProcessGroupNCCL for CUDA tensors, created the first time one is seen.
//
// Each collective is planned as what goes on the wire plus a finishing step
// that runs once the backend is done. That is where the backends' gaps are
// closed (docs/distributed.md lists them with their tests):
//  - dtypes a backend cannot move (Gloo: float8, int16, uint16/32/64) travel
//    as their bytes: all_gather, all_to_all, broadcast and send/recv only
//    copy, so the bit pattern is the value;
//  - dtypes a backend cannot reduce are reduced in a wider dtype (floats in
//    fp32, integers in int64) and rounded back once;
//  - kAvg on integers (which c10d's AVG rejects) is SUM in int64, then a
//    division that truncates like NCCL's integer average;
//  - non-contiguous outputs go through a contiguous staging tensor, and
//    every tensor is flattened, so the rank-major layout holds for any shape.
#include "trainer/distributed/comm.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <mutex>
#include <sstream>

#include "profiling/collective_observer.h"
#include "trainer/distributed/comm_internal.h"
#include "trainer/distributed/flight_recorder.h"

namespace ctitan {
namespace {

using dist_internal::ArgChecks;
using dist_internal::backend_message;
using dist_internal::dtype_name;
using dist_internal::format_seconds;
using dist_internal::human_bytes;
using dist_internal::is_timeout_message;

enum class BackendKind { kGloo, kNccl };
using Clock = std::chrono::steady_clock;

// Dtypes each backend handles itself (found by experiment for Gloo; NCCL per
// c10d's ncclDataType table, which moves float8 but does not reduce it).
bool moves_natively(BackendKind b, at::ScalarType t) {
  switch (t) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16: case at::kLong:
    case at::kInt: case at::kChar: case at::kByte: case at::kBool:
      return true;
    case at::kFloat8_e4m3fn: case at::kFloat8_e5m2:
      return b == BackendKind::kNccl;
    default:
      return false;
  }
}

bool reduces_natively(BackendKind b, at::ScalarType t) {
  return moves_natively(b, t) && !at::isFloat8Type(t);
}

c10d::ReduceOp::RedOpType to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return c10d::ReduceOp::SUM;
    case ReduceOp::kAvg: return c10d::ReduceOp::AVG;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

// A caller's tensor as the backend sees it: flat, contiguous, of the wire
// dtype; copy_back (if set) writes a staging copy back into the caller's tensor.
struct Staged {
  at::Tensor wire;
  std::function<void()> copy_back;
};

Staged stage(const at::Tensor& t, at::ScalarType wire, bool keep_values) {
  if (t.is_contiguous() && t.scalar_type() == wire) return {t.view(-1), nullptr};
  at::Tensor buf = keep_values ? t.reshape(-1).to(wire, /*non_blocking=*/false, /*copy=*/true)
                               : at::empty({t.numel()}, t.options().dtype(wire));
  return {buf, [t, buf] { t.copy_(buf.view(t.sizes())); }};
}

// Dtypes the backend cannot move travel as bytes; the layout is unchanged.
at::Tensor as_movable(BackendKind b, const at::Tensor& flat) {
  return moves_natively(b, flat.scalar_type()) ? flat : flat.view(at::kByte);
}

// The tensors of a copy collective (all_gather, all_to_all): the output
// staged if need be, both sides flat and movable.
struct MovePlan {
  at::Tensor out, in;
  std::function<void()> copy_back;
};

MovePlan plan_move(BackendKind kind, const at::Tensor& out, const at::Tensor& in) {
  Staged o = stage(out, out.scalar_type(), /*keep_values=*/false);
  return {as_movable(kind, o.wire), as_movable(kind, in.reshape(-1).contiguous()), std::move(o.copy_back)};
}

// What the backend computes for a reduction, and the steps after it.
struct ReducePlan {
  at::Tensor in, out;
  c10d::ReduceOp::RedOpType op;
  std::function<void()> finish;
};

int64_t bytes_of(const at::Tensor& t) { return static_cast<int64_t>(t.nbytes()); }

// Identity of one collective: for the recorder and for error messages.
struct Call {
  std::string op;
  int64_t bytes = 0;
  at::ScalarType dtype = at::kFloat;
};

// What every Work of one group shares.
struct GroupInfo {
  std::string name;
  int global_rank = 0;
  int size = 1;
  std::shared_ptr<FlightRecorder> recorder;
};

// Records the failure, dumps the recorder and returns the one-line error.
CommError fail(const GroupInfo& g, const Call& call, uint64_t seq, bool timed_out, const std::string& why,
               std::chrono::milliseconds timeout) {
  std::ostringstream msg;
  msg << "rank " << g.global_rank << ": " << call.op << " on " << g.name << ' ';
  if (call.bytes) msg << '(' << human_bytes(call.bytes) << ' ' << dtype_name(call.dtype) << ") ";
  if (timed_out) {
    msg << "did not complete within " << format_seconds(timeout);
  } else {
    msg << "failed: " << why;
  }
  if (g.recorder) {
    g.recorder->end(seq, timed_out ? FlightRecorder::State::kTimedOut : FlightRecorder::State::kFailed);
    try {
      g.recorder->dump();
    } catch (const std::exception& e) {
      msg << " (flight recorder dump failed: " << backend_message(e) << ')';
    }
  }
  return CommError(msg.str());
}

// A c10d work in flight. The deadline runs from when the collective was
// issued, as NCCL's watchdog counts it.
class BackendWork final : public Work {
 public:
  BackendWork(std::shared_ptr<const GroupInfo> group, Call call, uint64_t seq, BackendKind kind,
              c10::intrusive_ptr<c10d::Work> work, std::function<void()> finish, std::chrono::milliseconds timeout,
              uint64_t trace_token)
      : group_(std::move(group)), call_(std::move(call)), seq_(seq), kind_(kind), work_(std::move(work)),
        finish_(std::move(finish)), timeout_(timeout), deadline_(Clock::now() + timeout), trace_token_(trace_token) {
    // The moment the backend finished, for the recorder's end time (and so
    // for a step's communication time): wait() may come much later when the
    // collective overlapped computation.
    // Some Gloo works (send/recv, barrier) have no future: they fall back to
    // the time wait() returns.
    if (kind_ != BackendKind::kNccl && work_) {
      try {
        auto done = done_;
        work_->getFuture()->addCallback([done](c10::ivalue::Future&) {
          done->store(Clock::now().time_since_epoch().count(), std::memory_order_release);
        });
      } catch (const c10::Error&) {
      }
    }
  }

  void wait() override {
    const auto began = Clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    WaitReport report{trace_token_, began};
    if (!settled_ && !work_) settle_success();
    if (!settled_) {
      try {
        if (kind_ == BackendKind::kNccl) {
          // Stream-ordered: the current stream waits, the CPU does not. Hangs
          // are caught by c10d's NCCL watchdog with the same timeout.
          work_->wait();
        } else {
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
          work_->wait(std::max(left, std::chrono::milliseconds(1)));
        }
      } catch (const std::exception& e) {
        settle_failure(e);
      }
      if (!settled_) settle_success();
    }
    if (error_) std::rethrow_exception(error_);
  }

  // Tells the profiler (if one traces this collective) how long wait() blocked.
  struct WaitReport {
    uint64_t token;
    Clock::time_point began;
    ~WaitReport() {
      if (CollectiveObserver* o = token ? collective_observer() : nullptr) o->wait_returned(token, began, Clock::now());
    }
  };

  bool completed() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (settled_) return true;
    if (!work_) {
      settle_success();
      return true;
    }
    if (!work_->isCompleted()) return false;
    if (work_->isSuccess()) {
      settle_success();
    } else {
      try {
        std::rethrow_exception(work_->exception());
      } catch (const std::exception& e) {
        settle_failure(e);
      }
    }
    return true;
  }

 private:
  void settle_success() {
    settled_ = true;
    try {
      if (finish_) finish_();
    } catch (const std::exception& e) {
      error_ = std::make_exception_ptr(fail(*group_, call_, seq_, false, backend_message(e), timeout_));
      return;
    }
    const auto done = done_->load(std::memory_order_acquire);
    const Clock::time_point finished = done != 0 ? Clock::time_point(Clock::duration(done)) : Clock::now();
    if (CollectiveObserver* o = trace_token_ ? collective_observer() : nullptr) o->settled(trace_token_, finished, true);
    if (group_->recorder) group_->recorder->end(seq_, FlightRecorder::State::kCompleted, finished);
  }

  void settle_failure(const std::exception& e) {
    settled_ = true;
    const std::string why = backend_message(e);
    const bool timed_out = !work_->isCompleted() || is_timeout_message(why);
    if (CollectiveObserver* o = trace_token_ ? collective_observer() : nullptr) o->settled(trace_token_, Clock::now(), false);
    error_ = std::make_exception_ptr(fail(*group_, call_, seq_, timed_out, why, timeout_));
  }

  std::shared_ptr<std::atomic<Clock::rep>> done_ = std::make_shared<std::atomic<Clock::rep>>(0);
  std::shared_ptr<const GroupInfo> group_;
  Call call_;
  uint64_t seq_;
  BackendKind kind_;
  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> finish_;
  std::chrono::milliseconds timeout_;
  Clock::time_point deadline_;
  uint64_t trace_token_;  // CollectiveObserver's, 0 = not traced
  std::mutex mu_;
  bool settled_ = false;
  std::exception_ptr error_;
};

c10::intrusive_ptr<c10d::Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                            std::chrono::milliseconds init_timeout) {
  auto opts = c10d::ProcessGroupGloo::Options::create(init_timeout);
  // Like torch.distributed: GLOO_SOCKET_IFNAME picks the interfaces on multi-NIC hosts.
  if (const char* names = std::getenv("GLOO_SOCKET_IFNAME"); names && *names) {
    std::stringstream ss(names);
    for (std::string name; std::getline(ss, name, ',');) {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    }
  } else {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("gloo", store), rank,
                                                    size, opts);
}

class ProcessGroupCommunicator final : public Communicator {
 public:
  ProcessGroupCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::string name,
                           int global_rank, CommOptions options)
      : store_(std::move(store)), rank_(rank), timeout_(options.timeout) {
    auto info = std::make_shared<GroupInfo>();
    info->name = std::move(name);
    info->global_rank = global_rank;
    info->size = size;
    info->recorder = std::move(options.recorder);
    group_ = std::move(info);
    try {
      gloo_ = make_gloo(store_, rank, size, options.init_timeout);
    } catch (const std::exception& e) {
      std::string msg = "rank " + std::to_string(global_rank) + ": joining group " + group_->name + " of " +
                        std::to_string(size) + " ranks ";
      const std::string why = backend_message(e);
      throw CommError(msg + (is_timeout_message(why) ? "did not complete within " + format_seconds(options.init_timeout)
                                                   : "failed: " + why));
    }
    gloo_->setTimeout(timeout_.load());
  }

  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  const std::string& name() const override { return group_->name; }
  void set_timeout(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mu_);
    timeout_ = timeout;
    gloo_->setTimeout(timeout);
    if (nccl_) nccl_->setTimeout(timeout);
  }

  WorkPtr all_reduce(at::Tensor t, ReduceOp op) override {
    const BackendKind kind = kind_of(t, "all_reduce");
    ReducePlan plan = plan_reduce(kind, t, t, op, /*in_place=*/true);
    return issue({"all_reduce", bytes_of(t), t.scalar_type()}, kind, [&](c10d::Backend& b) {
      std::vector<at::Tensor> v{plan.out};
      c10d::AllreduceOptions o;
      o.reduceOp = plan.op;
      return b.allreduce(v, o);
    }, std::move(plan.finish));
  }

  WorkPtr all_gather(at::Tensor out, const at::Tensor& in) override {
    dist_internal::check_all_gather(*this, group_->global_rank, out, in);
    const BackendKind kind = kind_of(in, "all_gather");
    MovePlan plan = plan_move(kind, out, in);
    return issue({"all_gather", bytes_of(out), in.scalar_type()}, kind,
                 [&](c10d::Backend& b) { return b._allgather_base(plan.out, plan.in); }, std::move(plan.copy_back));
  }

  WorkPtr reduce_scatter(at::Tensor out, const at::Tensor& in, ReduceOp op) override {
    dist_internal::check_reduce_scatter(*this, group_->global_rank, out, in);
    const BackendKind kind = kind_of(in, "reduce_scatter");
    ReducePlan plan = plan_reduce(kind, out, in, op, /*in_place=*/false);
    return issue({"reduce_scatter", bytes_of(in), in.scalar_type()}, kind, [&](c10d::Backend& b) {
      c10d::ReduceScatterOptions o;
      o.reduceOp = plan.op;
      return b._reduce_scatter_base(plan.out, plan.in, o);
    }, std::move(plan.finish));
  }

  WorkPtr broadcast(at::Tensor t, int root) override {
    ArgChecks(*this, group_->global_rank, "broadcast").peer(root, "root", /*may_be_self=*/true);
    const BackendKind kind = kind_of(t, "broadcast");
    Staged s = stage(t, t.scalar_type(), /*keep_values=*/true);
    std::vector<at::Tensor> v{as_movable(kind, s.wire)};
    return issue({"broadcast", bytes_of(t), t.scalar_type()}, kind, [&](c10d::Backend& b) {
      c10d::BroadcastOptions o;
      o.rootRank = root;
      return b.broadcast(v, o);
    }, std::move(s.copy_back));
  }

  WorkPtr all_to_all(at::Tensor out, const at::Tensor& in) override {
    dist_internal::check_all_to_all(*this, group_->global_rank, out, in);
    const BackendKind kind = kind_of(in, "all_to_all");
    MovePlan plan = plan_move(kind, out, in);
    std::vector<int64_t> equal_splits;  // empty: size() equal chunks
    return issue({"all_to_all", bytes_of(in), in.scalar_type()}, kind, [&](c10d::Backend& b) {
      return b.alltoall_base(plan.out, plan.in, equal_splits, equal_splits);
    }, std::move(plan.copy_back));
  }

  WorkPtr all_to_all_v(at::Tensor out, const at::Tensor& in, const std::vector<int64_t>& out_splits,
                       const std::vector<int64_t>& in_splits) override {
    dist_internal::check_all_to_all_v(*this, group_->global_rank, out, in, out_splits, in_splits);
    const BackendKind kind = kind_of(in, "all_to_all_v");
    MovePlan plan = plan_move(kind, out, in);
    // The wire tensors are flat (and bytes for dtypes Gloo cannot move):
    // the splits count their elements.
    int64_t per_row = 1;
    for (int64_t d = 1; d < in.dim(); ++d) per_row *= in.size(d);
    if (plan.in.scalar_type() != in.scalar_type()) per_row *= static_cast<int64_t>(in.element_size());
    std::vector<int64_t> outs(out_splits), ins(in_splits);
    for (auto& n : outs) n *= per_row;
    for (auto& n : ins) n *= per_row;
    return issue({"all_to_all_v", bytes_of(in), in.scalar_type()}, kind, [&](c10d::Backend& b) {
      return b.alltoall_base(plan.out, plan.in, outs, ins);
    }, std::move(plan.copy_back));
  }

  WorkPtr send(at::Tensor t, int dst, int tag) override {
    ArgChecks(*this, group_->global_rank, "send").peer(dst, "destination");
    const BackendKind kind = kind_of(t, "send");
    std::vector<at::Tensor> v{as_movable(kind, t.reshape(-1).contiguous())};
    return issue({"send", bytes_of(t), t.scalar_type()}, kind, [&](c10d::Backend& b) { return b.send(v, dst, tag); },
                 nullptr);
  }

  WorkPtr recv(at::Tensor t, int src, int tag) override {
    ArgChecks(*this, group_->global_rank, "recv").peer(src, "source");
    const BackendKind kind = kind_of(t, "recv");
    Staged s = stage(t, t.scalar_type(), false);
    std::vector<at::Tensor> v{as_movable(kind, s.wire)};
    return issue({"recv", bytes_of(t), t.scalar_type()}, kind, [&](c10d::Backend& b) { return b.recv(v, src, tag); },
                 std::move(s.copy_back));
  }

  std::vector<WorkPtr> batch_p2p(const std::vector<P2POp>& ops) override {
    bool nccl = ops.size() > 1;
    for (const P2POp& op : ops) nccl = nccl && kind_of(op.tensor, "batch_p2p") == BackendKind::kNccl;
    if (!nccl) return Communicator::batch_p2p(ops);
    // One NCCL group: every op is recorded as itself, and all share the
    // group's work (inside the group c10d returns none per op).
    c10d::Backend& b = backend(BackendKind::kNccl);
    struct Posted {
      Call call;
      Begun begun;
      std::vector<at::Tensor> wire;
      std::function<void()> finish;
    };
    std::vector<Posted> posted;
    for (const P2POp& op : ops) {
      const bool send = op.kind == P2POp::Kind::kSend;
      ArgChecks(*this, group_->global_rank, send ? "send" : "recv").peer(op.peer, send ? "destination" : "source");
      Posted p;
      p.call = {send ? "send" : "recv", bytes_of(op.tensor), op.tensor.scalar_type()};
      if (send) {
        p.wire = {as_movable(BackendKind::kNccl, op.tensor.reshape(-1).contiguous())};
      } else {
        Staged s = stage(op.tensor, op.tensor.scalar_type(), false);
        p.wire = {as_movable(BackendKind::kNccl, s.wire)};
        p.finish = std::move(s.copy_back);
      }
      posted.push_back(std::move(p));
    }
    for (Posted& p : posted) p.begun = begin(p.call);
    c10::intrusive_ptr<c10d::Work> work;
    size_t i = 0;
    try {
      b.startCoalescing();
      for (; i < ops.size(); ++i) {
        if (ops[i].kind == P2POp::Kind::kSend) b.send(posted[i].wire, ops[i].peer, ops[i].tag);
        else b.recv(posted[i].wire, ops[i].peer, ops[i].tag);
      }
      work = b.endCoalescing();
    } catch (const std::exception& e) {
      const Posted& p = posted[std::min(i, posted.size() - 1)];
      throw fail(*group_, p.call, p.begun.seq, false, backend_message(e), p.begun.timeout);
    }
    std::vector<WorkPtr> works;
    for (Posted& p : posted)
      works.push_back(std::make_shared<BackendWork>(group_, std::move(p.call), p.begun.seq, BackendKind::kNccl, work,
                                                    std::move(p.finish), p.begun.timeout, p.begun.token));
    return works;
  }

  void shutdown(bool abort) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    if (!nccl_) return;
    try {
      if (abort) nccl_->abort();
      else nccl_->shutdown();
    } catch (const std::exception& e) {  // at exit: say so, do not throw from a destructor's path
      std::cerr << "rank " << group_->global_rank << ": group " << group_->name << ": NCCL "
                << (abort ? "abort" : "shutdown") << " failed: " << backend_message(e) << std::endl;
    }
  }

  ~ProcessGroupCommunicator() override { shutdown(std::uncaught_exceptions() > 0); }

  void barrier() override {
    issue({"barrier", 0, at::kByte}, BackendKind::kGloo, [](c10d::Backend& b) { return b.barrier(); }, nullptr)
        ->wait();
  }

 private:
  BackendKind kind_of(const at::Tensor& t, const char* op) {
    if (t.device().is_cpu()) return BackendKind::kGloo;
    if (t.device().is_cuda()) return BackendKind::kNccl;
    ArgChecks(*this, group_->global_rank, op)
        .error("tensors on " + t.device().str() + " are not supported (CPU uses Gloo, CUDA uses NCCL)");
  }

  c10d::Backend& backend(BackendKind kind) {
    if (kind == BackendKind::kGloo) return *gloo_;
    std::lock_guard<std::mutex> lock(mu_);
#ifdef USE_C10D_NCCL
    if (!nccl_) {
      // Created on first use: a CPU-only run never touches CUDA. Every rank of
      // the group reaches this with its first CUDA collective.
      try {
        auto opts = c10d::ProcessGroupNCCL::Options::create();
        opts->timeout = timeout_.load();
        nccl_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>("nccl", store_),
                                                            rank_, group_->size, opts);
      } catch (const std::exception& e) {
        throw CommError("rank " + std::to_string(group_->global_rank) + ": group " + group_->name +
                        ": creating the NCCL backend failed: " + backend_message(e));
      }
    }
    return *nccl_;
#else
    throw CommError("rank " + std::to_string(group_->global_rank) + ": group " + group_->name +
                    ": CUDA tensors need a LibTorch built with NCCL");
#endif
  }

  ReducePlan plan_reduce(BackendKind kind, const at::Tensor& out, const at::Tensor& in, ReduceOp op, bool in_place) {
    const at::ScalarType dtype = out.scalar_type();
    const ArgChecks checks(*this, group_->global_rank, in_place ? "all_reduce" : "reduce_scatter");
    at::ScalarType wire = dtype;
    const bool integral = at::isIntegralType(dtype, /*includeBool=*/false);
    if (op == ReduceOp::kAvg && integral) {
      wire = at::kLong;  // the sum of small integers would wrap before the division
    } else if (!reduces_natively(kind, dtype)) {
      if (at::isFloatingType(dtype)) {
        wire = at::kFloat;
      } else if (integral) {
        wire = at::kLong;
      } else {
        checks.error(dtype_name(dtype) + " cannot be reduced");
      }
    }
    const bool integer_avg = op == ReduceOp::kAvg && !at::isFloatingType(wire);
    if (integer_avg && wire == at::kBool) {
      checks.error("AVG of bool is undefined");
    }
    Staged o = stage(out, wire, /*keep_values=*/in_place);
    ReducePlan plan;
    plan.out = o.wire;
    plan.in = in_place ? o.wire : in.reshape(-1).to(wire).contiguous();
    plan.op = integer_avg ? c10d::ReduceOp::SUM : to_c10d(op);
    plan.finish = [wire_out = o.wire, copy_back = std::move(o.copy_back), integer_avg, size = group_->size] {
      if (integer_avg) wire_out.div_(size, "trunc");
      if (copy_back) copy_back();
    };
    return plan;
  }

  // Issues one collective: records it, starts it on the backend, and turns
  // a synchronous backend error into the same one-line CommError.
  template <class Start>
  WorkPtr issue(Call call, BackendKind kind, Start&& start, std::function<void()> finish) {
    c10d::Backend& b = backend(kind);
    const Begun begun = begin(call);
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = start(b);
    } catch (const std::exception& e) {
      throw fail(*group_, call, begun.seq, false, backend_message(e), begun.timeout);
    }
    return std::make_shared<BackendWork>(group_, std::move(call), begun.seq, kind, std::move(work), std::move(finish),
                                         begun.timeout, begun.token);
  }

  // A call as it starts: in the flight recorder and the profiler, with the
  // timeout it runs under.
  struct Begun {
    uint64_t seq = 0, token = 0;
    std::chrono::milliseconds timeout{0};
  };
  Begun begin(const Call& call) {
    if (shut_down_)
      throw CommError("rank " + std::to_string(group_->global_rank) + ": " + call.op + " on " + group_->name +
                      " after the group was shut down");
    Begun b;
    b.seq = group_->recorder ? group_->recorder->begin(call.op, group_->name, call.bytes,
                                                       call.bytes ? dtype_name(call.dtype) : "")
                             : 0;
    b.timeout = timeout_.load();
    CollectiveObserver* observer = collective_observer();
    b.token =
        observer ? observer->issued(call.op.c_str(), group_->name, call.bytes, call.bytes ? dtype_name(call.dtype) : "")
                 : 0;
    return b;
  }

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  std::shared_ptr<const GroupInfo> group_;
  std::atomic<std::chrono::milliseconds> timeout_;
  std::mutex mu_;  // guards the lazy NCCL backend
  c10::intrusive_ptr<c10d::Backend> gloo_, nccl_;
  std::atomic<bool> shut_down_{false};
};

}  // namespace

std::vector<WorkPtr> Communicator::batch_p2p(const std::vector<P2POp>& ops) {
  std::vector<WorkPtr> works;
  for (const P2POp& op : ops)
    works.push_back(op.kind == P2POp::Kind::kSend ? send(op.tensor, op.peer, op.tag) : recv(op.tensor, op.peer, op.tag));
  return works;
}

std::shared_ptr<Communicator> Communicator::create(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                                   std::string name, int global_rank, CommOptions options) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw CommError("rank " + std::to_string(global_rank) + ": group " + name + ": rank " + std::to_string(rank) +
                    " is outside a group of " + std::to_string(size));
  }
  if (size == 1) return dist_internal::make_local_communicator(std::move(name), global_rank);
  const bool staged = options.stage_through_host;
  auto group = std::make_shared<ProcessGroupCommunicator>(std::move(store), rank, size, std::move(name), global_rank,
                                                          std::move(options));
  return staged ? dist_internal::make_staged_communicator(std::move(group)) : group;
}

std::string nccl_version() {
#ifdef USE_C10D_NCCL
  return c10d::getNcclVersion();
#else
  return "";
#endif
}

}  // namespace ctitan
