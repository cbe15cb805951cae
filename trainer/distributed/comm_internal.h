// Internal to trainer/distributed: what the c10d communicator (comm.cpp), the
// size-1 communicator (comm_local.cpp) and the rendezvous (mesh.cpp) share —
// how errors read, and the argument checks that keep a wrong size from
// hanging or corrupting memory inside a backend.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "trainer/distributed/comm.h"

namespace ctitan::dist_internal {

// "100 s", "0.3 s": how durations read in CommError messages.
std::string format_seconds(std::chrono::milliseconds d);
// "512 B", "4.0 MiB".
std::string human_bytes(int64_t bytes);
// "bf16", "fp32", "int64", ...
std::string dtype_name(at::ScalarType t);
// The first line of a c10d/Gloo/NCCL exception, without c10's backtrace.
std::string backend_message(const std::exception& e);
bool is_timeout_message(const std::string& msg);

// Checks one call's arguments; errors read "rank R: OP on GROUP: what".
class ArgChecks {
 public:
  ArgChecks(const Communicator& c, int global_rank, const char* op) : c_(c), global_rank_(global_rank), op_(op) {}
  void same_dtype(const at::Tensor& out, const at::Tensor& in) const;
  void numel(const at::Tensor& t, int64_t expected, const char* what, const std::string& rule) const;
  void peer(int r, const char* what, bool may_be_self = false) const;
  [[noreturn]] void error(const std::string& what) const;

 private:
  const Communicator& c_;
  int global_rank_;
  const char* op_;
};

// The size contracts of comm.h.
void check_all_gather(const Communicator& c, int global_rank, const at::Tensor& out, const at::Tensor& in);
void check_reduce_scatter(const Communicator& c, int global_rank, const at::Tensor& out, const at::Tensor& in);
void check_all_to_all(const Communicator& c, int global_rank, const at::Tensor& out, const at::Tensor& in);
void check_all_to_all_v(const Communicator& c, int global_rank, const at::Tensor& out, const at::Tensor& in,
                        const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits);

// CommOptions::stage_through_host: `inner` (a Gloo group) run on host copies
// of every tensor, the outputs written back at wait() (comm_staged.cpp).
std::shared_ptr<Communicator> make_staged_communicator(std::shared_ptr<Communicator> inner);

// A group of size 1: collectives are local copies, complete on return.
std::shared_ptr<Communicator> make_local_communicator(std::string name, int global_rank);
// comm.mode = "fake_backend": `size` ranks in name only; collectives check
// their arguments and complete without moving data (size 1: the local one).
std::shared_ptr<Communicator> make_fake_communicator(std::string name, int rank, int size, int global_rank);

}  // namespace ctitan::dist_internal
