// comm.cuda_backend = "gloo": collectives of device tensors through host
// memory (CommOptions::stage_through_host). Each call copies its inputs
// into host buffers (page-locked for CUDA tensors, so the copies are DMA),
// runs the wrapped Gloo communicator on them, and writes its outputs back
// into the caller's tensors when the Work is waited on. Every tensor is
// staged, CPU ones included (a plain copy): the logic is the same on every
// device, and the CPU tests check it.
//
// The copies are blocking on the current CUDA stream: the collective sees
// what the stream has produced, and the caller sees the result after
// wait(), as with Gloo on the CPU. What this does not reproduce of NCCL:
// its own streams (collectives overlapping compute on the device), its
// grouping of sends and receives, and its speed.
#include <mutex>
#include <utility>

#include "trainer/distributed/comm_internal.h"

namespace ctitan::dist_internal {
namespace {

at::Tensor host_empty(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(t.is_cuda()));
}

at::Tensor host_copy(const at::Tensor& t) {
  at::Tensor h = host_empty(t);
  h.copy_(t);
  return h;
}

// The inner work, then (once, at wait) the copies back into the caller's
// tensors. The host buffers live as long as the work.
class StagedWork final : public Work {
 public:
  StagedWork(WorkPtr inner, std::function<void()> finish) : inner_(std::move(inner)), finish_(std::move(finish)) {}
  void wait() override {
    inner_->wait();
    std::lock_guard<std::mutex> lock(mu_);
    if (finish_) std::exchange(finish_, nullptr)();
  }
  bool completed() override { return inner_->completed(); }

 private:
  WorkPtr inner_;
  std::mutex mu_;
  std::function<void()> finish_;
};

// out ← host after the work; `keep` holds the other host buffers alive.
WorkPtr staged(WorkPtr inner, at::Tensor out, at::Tensor host, std::vector<at::Tensor> keep = {}) {
  return std::make_shared<StagedWork>(std::move(inner), [out, host, keep]() mutable { out.copy_(host); });
}

// A collective from `in` into `out`: `in` copied to host, `out` staged in a
// host buffer and written back at wait(). run(host_out, host_in) starts it.
template <typename Run>
WorkPtr staged_in_out(at::Tensor out, const at::Tensor& in, const Run& run) {
  at::Tensor h_in = host_copy(in), h_out = host_empty(out);
  return staged(run(h_out, h_in), out, h_out, {h_in});
}

class StagedCommunicator final : public Communicator {
 public:
  explicit StagedCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  void set_timeout(std::chrono::milliseconds timeout) override { inner_->set_timeout(timeout); }

  WorkPtr all_reduce(at::Tensor t, ReduceOp op) override {
    at::Tensor h = host_copy(t);
    return staged(inner_->all_reduce(h, op), t, h);
  }
  WorkPtr all_gather(at::Tensor out, const at::Tensor& in) override {
    return staged_in_out(out, in, [&](at::Tensor o, const at::Tensor& i) { return inner_->all_gather(o, i); });
  }
  WorkPtr reduce_scatter(at::Tensor out, const at::Tensor& in, ReduceOp op) override {
    return staged_in_out(out, in,
                         [&](at::Tensor o, const at::Tensor& i) { return inner_->reduce_scatter(o, i, op); });
  }
  WorkPtr broadcast(at::Tensor t, int root) override {
    at::Tensor h = host_copy(t);
    return staged(inner_->broadcast(h, root), t, h);
  }
  WorkPtr all_to_all(at::Tensor out, const at::Tensor& in) override {
    return staged_in_out(out, in, [&](at::Tensor o, const at::Tensor& i) { return inner_->all_to_all(o, i); });
  }
  WorkPtr all_to_all_v(at::Tensor out, const at::Tensor& in, const std::vector<int64_t>& out_splits,
                       const std::vector<int64_t>& in_splits) override {
    return staged_in_out(out, in, [&](at::Tensor o, const at::Tensor& i) {
      return inner_->all_to_all_v(o, i, out_splits, in_splits);
    });
  }
  WorkPtr send(at::Tensor t, int dst, int tag) override {
    at::Tensor h = host_copy(t);
    return std::make_shared<StagedWork>(inner_->send(h, dst, tag), [h] {});
  }
  WorkPtr recv(at::Tensor t, int src, int tag) override {
    at::Tensor h = host_empty(t);
    return staged(inner_->recv(h, src, tag), t, h);
  }
  void barrier() override { inner_->barrier(); }

  // One group in the wrapped communicator, each op on its host buffer.
  std::vector<WorkPtr> batch_p2p(const std::vector<P2POp>& ops) override {
    std::vector<P2POp> host_ops = ops;
    for (P2POp& op : host_ops)
      op.tensor = op.kind == P2POp::Kind::kSend ? host_copy(op.tensor) : host_empty(op.tensor);
    std::vector<WorkPtr> inner = inner_->batch_p2p(host_ops), works;
    for (size_t i = 0; i < ops.size(); ++i) {
      const at::Tensor h = host_ops[i].tensor;
      works.push_back(ops[i].kind == P2POp::Kind::kSend
                          ? std::make_shared<StagedWork>(inner[i], [h] {})
                          : staged(inner[i], ops[i].tensor, h));
    }
    return works;
  }

  void shutdown(bool abort) override { inner_->shutdown(abort); }

 private:
  std::shared_ptr<Communicator> inner_;
};

}  // namespace

std::shared_ptr<Communicator> make_staged_communicator(std::shared_ptr<Communicator> inner) {
  return std::make_shared<StagedCommunicator>(std::move(inner));
}

}  // namespace ctitan::dist_internal
