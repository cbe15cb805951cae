// The size-1 communicator, and what every communicator shares: error text
// and argument checks (comm_internal.h).
#include <cstdio>

#include "trainer/distributed/comm_internal.h"

namespace ctitan::dist_internal {

std::string format_seconds(std::chrono::milliseconds d) {
  char buf[32];
  if (d.count() % 1000 == 0) {
    std::snprintf(buf, sizeof buf, "%lld s", static_cast<long long>(d.count() / 1000));
  } else {
    std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  }
  return buf;
}

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  for (; v >= 1024.0 && u < 4; ++u) v /= 1024.0;
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  }
  return buf;
}

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "fp32";
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "fp16";
    case at::kDouble: return "fp64";
    case at::kFloat8_e4m3fn: return "fp8_e4m3fn";
    case at::kFloat8_e5m2: return "fp8_e5m2";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}

std::string backend_message(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string msg = c10_error ? c10_error->what_without_backtrace() : e.what();
  msg = msg.substr(0, msg.find('\n'));
  return msg.empty() ? "unknown error" : msg;
}

bool is_timeout_message(const std::string& msg) {
  std::string lower(msg);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

void ArgChecks::same_dtype(const at::Tensor& out, const at::Tensor& in) const {
  if (out.scalar_type() != in.scalar_type() || out.device() != in.device()) {
    error("output is " + dtype_name(out.scalar_type()) + " on " + out.device().str() + " but input is " +
          dtype_name(in.scalar_type()) + " on " + in.device().str());
  }
}

void ArgChecks::numel(const at::Tensor& t, int64_t expected, const char* what, const std::string& rule) const {
  if (t.numel() != expected) {
    error(std::string(what) + " has " + std::to_string(t.numel()) + " elements, expected " + rule + " = " +
          std::to_string(expected));
  }
}

void ArgChecks::peer(int r, const char* what, bool may_be_self) const {
  if (r < 0 || r >= c_.size() || (!may_be_self && r == c_.rank())) {
    error(std::string(what) + " " + std::to_string(r) + " is not " + (may_be_self ? "a" : "another") +
          " rank of the group's " + std::to_string(c_.size()));
  }
}

void ArgChecks::error(const std::string& what) const {
  throw CommError("rank " + std::to_string(global_rank_) + ": " + op_ + " on " + c_.name() + ": " + what);
}

void check_all_gather(const Communicator& c, int global_rank, const at::Tensor& out, const at::Tensor& in) {
  ArgChecks ck(c, global_rank, "all_gather");
  ck.same_dtype(out, in);
  ck.numel(out, c.size() * in.numel(), "output", std::to_string(c.size()) + " x " + std::to_string(in.numel()));
}

void check_reduce_scatter(const Communicator& c, int global_rank, const at::Tensor& out, const at::Tensor& in) {
  ArgChecks ck(c, global_rank, "reduce_scatter");
  ck.same_dtype(out, in);
  ck.numel(in, c.size() * out.numel(), "input", std::to_string(c.size()) + " x " + std::to_string(out.numel()));
}

void check_all_to_all(const Communicator& c, int global_rank, const at::Tensor& out, const at::Tensor& in) {
  ArgChecks ck(c, global_rank, "all_to_all");
  ck.same_dtype(out, in);
  ck.numel(out, in.numel(), "output", "the input's");
  if (in.numel() % c.size() != 0) {
    ck.error("input has " + std::to_string(in.numel()) + " elements, not divisible into " +
             std::to_string(c.size()) + " chunks");
  }
}

void check_all_to_all_v(const Communicator& c, int global_rank, const at::Tensor& out, const at::Tensor& in,
                        const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits) {
  ArgChecks ck(c, global_rank, "all_to_all_v");
  ck.same_dtype(out, in);
  if (in.dim() < 1 || out.dim() < 1 || in.sizes().slice(1) != out.sizes().slice(1))
    ck.error("input " + c10::str(in.sizes()) + " and output " + c10::str(out.sizes()) +
             " must be rows of the same trailing shape");
  const auto check = [&](const std::vector<int64_t>& splits, const at::Tensor& t, const char* what) {
    if (splits.size() != static_cast<size_t>(c.size()))
      ck.error(std::string(what) + " splits have " + std::to_string(splits.size()) + " entries, not " +
               std::to_string(c.size()));
    int64_t rows = 0;
    for (int64_t n : splits) {
      if (n < 0) ck.error(std::string(what) + " splits hold a negative count");
      rows += n;
    }
    if (rows != t.size(0))
      ck.error(std::string(what) + " splits sum to " + std::to_string(rows) + " rows, the " + what + " has " +
               std::to_string(t.size(0)));
  };
  check(in_splits, in, "input");
  check(out_splits, out, "output");
}

namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool completed() override { return true; }
};

// The group's one rank reduces with itself (kAvg included: x / 1 = x), and
// gathers, scatters and exchanges with itself: copies in the same layout.
class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::string name, int global_rank) : name_(std::move(name)), global_rank_(global_rank) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  void set_timeout(std::chrono::milliseconds) override {}

  WorkPtr all_reduce(at::Tensor, ReduceOp) override { return done(); }
  WorkPtr all_gather(at::Tensor out, const at::Tensor& in) override {
    check_all_gather(*this, global_rank_, out, in);
    return copy(out, in);
  }
  WorkPtr reduce_scatter(at::Tensor out, const at::Tensor& in, ReduceOp) override {
    check_reduce_scatter(*this, global_rank_, out, in);
    return copy(out, in);
  }
  WorkPtr broadcast(at::Tensor, int root) override {
    ArgChecks(*this, global_rank_, "broadcast").peer(root, "root", /*may_be_self=*/true);
    return done();
  }
  WorkPtr all_to_all(at::Tensor out, const at::Tensor& in) override {
    check_all_to_all(*this, global_rank_, out, in);
    return copy(out, in);
  }
  WorkPtr all_to_all_v(at::Tensor out, const at::Tensor& in, const std::vector<int64_t>& out_splits,
                       const std::vector<int64_t>& in_splits) override {
    check_all_to_all_v(*this, global_rank_, out, in, out_splits, in_splits);
    return copy(out, in);
  }
  WorkPtr send(at::Tensor, int, int) override {
    ArgChecks(*this, global_rank_, "send").error("a group of size 1 has no peer");
  }
  WorkPtr recv(at::Tensor, int, int) override {
    ArgChecks(*this, global_rank_, "recv").error("a group of size 1 has no peer");
  }
  void barrier() override {}

 private:
  static WorkPtr done() { return std::make_shared<DoneWork>(); }
  static WorkPtr copy(at::Tensor& out, const at::Tensor& in) {
    out.copy_(in.reshape(out.sizes()));
    return done();
  }
  std::string name_;
  int global_rank_;
};

// comm.mode = "fake_backend": a group of `size` ranks of which this process
// is one, with no other process behind it. Every collective checks its
// arguments against the group's size and completes at once without touching
// data — the dry run's tensors live on the meta device and have none.
class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(std::string name, int rank, int size, int global_rank)
      : name_(std::move(name)), rank_(rank), size_(size), global_rank_(global_rank) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  void set_timeout(std::chrono::milliseconds) override {}

  WorkPtr all_reduce(at::Tensor, ReduceOp) override { return done(); }
  WorkPtr all_gather(at::Tensor out, const at::Tensor& in) override {
    check_all_gather(*this, global_rank_, out, in);
    return done();
  }
  WorkPtr reduce_scatter(at::Tensor out, const at::Tensor& in, ReduceOp) override {
    check_reduce_scatter(*this, global_rank_, out, in);
    return done();
  }
  WorkPtr broadcast(at::Tensor, int root) override {
    ArgChecks(*this, global_rank_, "broadcast").peer(root, "root", /*may_be_self=*/true);
    return done();
  }
  WorkPtr all_to_all(at::Tensor out, const at::Tensor& in) override {
    check_all_to_all(*this, global_rank_, out, in);
    return done();
  }
  WorkPtr all_to_all_v(at::Tensor out, const at::Tensor& in, const std::vector<int64_t>& out_splits,
                       const std::vector<int64_t>& in_splits) override {
    check_all_to_all_v(*this, global_rank_, out, in, out_splits, in_splits);
    return done();
  }
  WorkPtr send(at::Tensor, int dst, int) override {
    ArgChecks(*this, global_rank_, "send").peer(dst, "destination");
    return done();
  }
  WorkPtr recv(at::Tensor, int src, int) override {
    ArgChecks(*this, global_rank_, "recv").peer(src, "source");
    return done();
  }
  void barrier() override {}

 private:
  static WorkPtr done() { return std::make_shared<DoneWork>(); }
  std::string name_;
  int rank_, size_, global_rank_;
};

}  // namespace

std::shared_ptr<Communicator> make_local_communicator(std::string name, int global_rank) {
  return std::make_shared<LocalCommunicator>(std::move(name), global_rank);
}

std::shared_ptr<Communicator> make_fake_communicator(std::string name, int rank, int size, int global_rank) {
  if (size == 1) return make_local_communicator(std::move(name), global_rank);
  return std::make_shared<FakeCommunicator>(std::move(name), rank, size, global_rank);
}

}  // namespace ctitan::dist_internal
