// The communicator: every collective ctitan issues goes through here.
//
// One Communicator is one process group (the world, or one dimension of the
// device mesh). It wraps a c10d backend chosen by the tensors' device —
// ProcessGroupGloo for CPU tensors, ProcessGroupNCCL for CUDA tensors (the
// NCCL path compiles in the normal build and is untested without a GPU).
// Whatever the backend in use lacks (Gloo: AVG reductions, and any
// dtype/op gaps the probe finds) is closed here, never at call sites; each
// workaround has a test against a reference result.
//
// Every call is asynchronous and returns a Work handle; wait() blocks until
// the collective is done or comm.train_timeout_seconds have passed since it
// was issued, in which case it throws CommError naming the rank, the group
// and the collective, after the flight recorder has been dumped. Layouts
// are rank-major and flat (only numel matters): all_gather's output is
// [size() * in.numel()] with rank r's input at chunk r. Outputs may be
// non-contiguous views. Issue a group's collectives from one thread, in the
// same order on every rank; a Work may be waited on from any thread.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace c10d {
class Store;
class Backend;
}  // namespace c10d

namespace ctitan {

class FlightRecorder;

enum class ReduceOp { kSum, kAvg, kMax, kMin };

// A collective that failed or did not finish in time. what() is one line:
// "rank 1: all_gather on dp_shard (4.0 MiB bf16) did not complete within 100 s".
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;          // throws CommError on failure or timeout
  virtual bool completed() = 0;     // non-blocking poll
};
using WorkPtr = std::shared_ptr<Work>;

// One point-to-point transfer of a batch (Communicator::batch_p2p).
struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  at::Tensor tensor;
  int peer = 0;
  int tag = 0;
};

struct CommOptions {
  std::chrono::milliseconds timeout{100'000};       // comm.train_timeout_seconds
  std::chrono::milliseconds init_timeout{300'000};  // comm.init_timeout_seconds: joining a group
  std::shared_ptr<FlightRecorder> recorder;          // may be null
  // comm.cuda_backend = "gloo": every collective runs on Gloo over host
  // copies of its tensors (page-locked for CUDA ones), the outputs written
  // back at wait(). Lets ranks that share one GPU run (NCCL refuses them);
  // it is not NCCL: no collective overlaps the device's compute.
  bool stage_through_host = false;
};

// The NCCL version LibTorch's ProcessGroupNCCL uses ("2.27.5"), or "" in a
// build without NCCL: env.json records it beside the GPU keys.
std::string nccl_version();

class Communicator {
 public:
  // Joins group `name` of `size` ranks through `store` (already prefixed so
  // that distinct groups do not collide). `global_rank` names this process
  // in errors and in the flight recorder. A group of size 1 needs no
  // backend (store may be null): its collectives are local copies with the
  // same semantics, e.g. kAvg is the identity. Throws CommError when the
  // other ranks do not join within options.init_timeout.
  static std::shared_ptr<Communicator> create(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                              std::string name, int global_rank, CommOptions options);
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;

  // In place on a contiguous tensor. kAvg divides by size().
  virtual WorkPtr all_reduce(at::Tensor t, ReduceOp op = ReduceOp::kSum) = 0;
  // out: contiguous, size() * in.numel() elements, rank-major.
  virtual WorkPtr all_gather(at::Tensor out, const at::Tensor& in) = 0;
  // in: contiguous, size() * out.numel() elements, rank-major; out receives
  // this rank's chunk of the reduction.
  virtual WorkPtr reduce_scatter(at::Tensor out, const at::Tensor& in, ReduceOp op = ReduceOp::kSum) = 0;
  virtual WorkPtr broadcast(at::Tensor t, int root) = 0;
  // in/out: size() equal chunks; chunk r of in goes to rank r, chunk r of out
  // came from rank r.
  virtual WorkPtr all_to_all(at::Tensor out, const at::Tensor& in) = 0;
  // Variable splits along dim 0, as torch.distributed.all_to_all_single with
  // split sizes: in's rows are size() consecutive blocks of in_splits[r]
  // rows, block r going to rank r; out receives out_splits[r] rows from rank
  // r, rank-major. in and out share dtype and trailing shape; each splits
  // vector has size() entries summing to its tensor's rows (zeros allowed).
  // The splits must agree between ranks (out_splits[s] here = in_splits[me]
  // on rank s): exchange the counts first, e.g. with all_to_all.
  virtual WorkPtr all_to_all_v(at::Tensor out, const at::Tensor& in, const std::vector<int64_t>& out_splits,
                               const std::vector<int64_t>& in_splits) = 0;
  virtual WorkPtr send(at::Tensor t, int dst, int tag = 0) = 0;
  virtual WorkPtr recv(at::Tensor t, int src, int tag = 0) = 0;
  virtual void barrier() = 0;

  // Posts `ops` as one group, like torch.distributed.batch_isend_irecv; one
  // Work per op, in order. NCCL ignores tags and runs the sends and receives
  // between two ranks on one stream, so two ranks that each post a send
  // before the receive of the other's message deadlock once a message
  // outgrows NCCL's buffers: grouped (c10d's coalescing, i.e. ncclGroupStart
  // and ncclGroupEnd), the send and the receive progress together in either
  // order. Other backends take the ops one by one (Gloo matches by tag).
  virtual std::vector<WorkPtr> batch_p2p(const std::vector<P2POp>& ops);

  // Ends the group, once: NCCL backends are shut down (ProcessGroupNCCL::
  // shutdown, so that its destructor does not warn or hang at exit), or
  // aborted when `abort` — an error path, where work that will never finish
  // must not be waited for. Gloo is left to its destructor. A collective
  // issued afterwards is a CommError. The destructor does it too.
  virtual void shutdown(bool abort = false) { (void)abort; }
};

}  // namespace ctitan
