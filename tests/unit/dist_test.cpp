// The distributed runtime: every collective against a reference computed
// here from what each rank contributed (plain tensor math in fp64/int64),
// each gap the communicator closes for Gloo, the mesh's groups, the launch
// contract, the flight recorder and the timeout path. Ranks are threads of
// this process, each with its own Gloo group over one shared HashStore.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/errors.h"
#include "trainer/distributed/comm.h"
#include "trainer/distributed/flight_recorder.h"
#include "trainer/distributed/mesh.h"
#include "trainer/runtime.h"
#include "tests/unit/thread_ranks.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

using testing::run_group;
using testing::run_threads;

// What rank r contributes: n values that differ per rank and per element.
// Floats are multiples of 1/8 in [-8, 8], so sums over 4 ranks are exact in
// bf16 too; int64 mixes signs with values near 2^60 that fp64 cannot hold.
at::Tensor contribution(int r, int64_t n, at::ScalarType dtype) {
  auto i = torch::arange(n, torch::kLong);
  if (at::isFloatingType(dtype)) {
    auto v = ((i.to(torch::kDouble) * 0.37 + r * 1.3).sin() * 64).round() / 8;
    return v.to(dtype);
  }
  auto small = (i * 7919 + r * 31).remainder(1001) - 500;
  auto big = (i.remainder(3) == 0).to(torch::kLong) * (int64_t{r + 1} << 57);
  return (small + big).to(dtype);
}

// The reduction of all ranks' contributions, in fp64 (floats) or int64.
at::Tensor reference_reduce(int world, int64_t n, at::ScalarType dtype, ReduceOp op) {
  std::vector<at::Tensor> all;
  for (int r = 0; r < world; ++r) {
    all.push_back(contribution(r, n, dtype).to(at::isFloatingType(dtype) ? torch::kDouble : torch::kLong));
  }
  auto s = torch::stack(all);
  switch (op) {
    case ReduceOp::kSum: return s.sum(0);
    case ReduceOp::kMax: return s.amax(0);
    case ReduceOp::kMin: return s.amin(0);
    case ReduceOp::kAvg:
      return at::isFloatingType(dtype) ? s.sum(0) / world : s.sum(0).div(world, "trunc");
  }
  return s;
}

// Exact, except a float average, which rounds once in its dtype.
void expect_matches(const at::Tensor& got, const at::Tensor& ref, ReduceOp op, const std::string& what) {
  const at::ScalarType dtype = got.scalar_type();
  if (op == ReduceOp::kAvg && at::isFloatingType(dtype)) {
    const double rtol = dtype == at::kBFloat16 ? 1.0 / 256 : 1e-6;
    EXPECT_TRUE(torch::allclose(got.to(torch::kDouble), ref, rtol, 1e-12)) << what;
  } else {
    EXPECT_TRUE(torch::equal(got, ref.to(dtype))) << what << "\ngot " << got.slice(0, 0, 6) << "\nref "
                                                  << ref.slice(0, 0, 6);
  }
}

const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
const std::vector<at::ScalarType> kDtypes = {torch::kFloat, torch::kBFloat16, torch::kLong};

std::string label(int world, at::ScalarType dtype, ReduceOp op) {
  return "world " + std::to_string(world) + " " + c10::toString(dtype) + " op " + std::to_string(static_cast<int>(op));
}

TEST(DistComm, AllReduceMatchesReferenceForEveryOpAndDtype) {
  for (int world : {2, 3, 4}) {
    run_group(world, [&](int r, Communicator& c) {
      for (auto dtype : kDtypes) {
        for (auto op : kOps) {
          auto t = contribution(r, 37, dtype);
          c.all_reduce(t, op)->wait();
          expect_matches(t, reference_reduce(world, 37, dtype, op), op, label(world, dtype, op));
        }
      }
    });
  }
}

TEST(DistComm, ReduceScatterMatchesReferenceForEveryOpAndDtype) {
  for (int world : {2, 3, 4}) {
    run_group(world, [&](int r, Communicator& c) {
      for (auto dtype : kDtypes) {
        for (auto op : kOps) {
          auto out = torch::empty({5}, dtype);
          c.reduce_scatter(out, contribution(r, 5 * world, dtype), op)->wait();
          auto ref = reference_reduce(world, 5 * world, dtype, op).slice(0, 5 * r, 5 * r + 5);
          expect_matches(out, ref, op, label(world, dtype, op));
        }
      }
    });
  }
}

TEST(DistComm, AllGatherIsRankMajor) {
  for (int world : {2, 3, 4}) {
    run_group(world, [&](int r, Communicator& c) {
      for (auto dtype : kDtypes) {
        auto out = torch::empty({world * 6}, dtype);
        c.all_gather(out, contribution(r, 6, dtype))->wait();
        for (int src = 0; src < world; ++src) {
          EXPECT_TRUE(torch::equal(out.slice(0, 6 * src, 6 * src + 6), contribution(src, 6, dtype)))
              << label(world, dtype, ReduceOp::kSum) << " chunk " << src;
        }
      }
    });
  }
}

TEST(DistComm, AllToAllSendsChunkRToRankR) {
  for (int world : {2, 3, 4}) {
    run_group(world, [&](int r, Communicator& c) {
      for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
        // Element k of chunk d sent by rank s is 100 s + 10 d + k.
        auto in = torch::empty({world * 3}, torch::kFloat), out = torch::empty({world * 3}, dtype);
        for (int d = 0; d < world; ++d) in.slice(0, 3 * d, 3 * d + 3) = torch::arange(3) + 100 * r + 10 * d;
        c.all_to_all(out, in.to(dtype))->wait();
        for (int s = 0; s < world; ++s) {
          auto expected = (torch::arange(3) + 100 * s + 10 * r).to(dtype);
          EXPECT_TRUE(torch::equal(out.slice(0, 3 * s, 3 * s + 3), expected)) << "from rank " << s;
        }
      }
    });
  }
}

// Variable splits (expert parallelism's token dispatch): rank s sends
// (s + d) % 3 rows of width 4 to rank d (so some pairs exchange nothing),
// row j of that block holding 1000 s + 100 d + j; then every rank sends all
// its rows to rank 0 (the others receive nothing). uint16 travels as bytes
// on Gloo, so the splits are rescaled there.
TEST(DistComm, AllToAllVariableSplits) {
  for (int world : {2, 3, 4}) {
    run_group(world, [&](int r, Communicator& c) {
      const auto rows = [](int s, int d) { return static_cast<int64_t>((s + d) % 3); };
      const auto block = [](int s, int d, int64_t n) {
        return (torch::arange(n).unsqueeze(1) + 1000 * s + 100 * d).expand({n, 4}).contiguous();
      };
      for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kUInt16, torch::kLong}) {
        std::vector<int64_t> in_splits, out_splits;
        std::vector<torch::Tensor> sent, want;
        for (int d = 0; d < world; ++d) {
          in_splits.push_back(rows(r, d));
          out_splits.push_back(rows(d, r));
          sent.push_back(block(r, d, rows(r, d)));
          want.push_back(block(d, r, rows(d, r)));
        }
        const auto expected = torch::cat(want).to(dtype);
        auto out = torch::full({expected.size(0), 4}, -1, dtype);
        c.all_to_all_v(out, torch::cat(sent).to(dtype), out_splits, in_splits)->wait();
        EXPECT_TRUE(torch::equal(out, expected)) << "world " << world << " rank " << r << " " << out;
      }
      // Everything to rank 0.
      std::vector<int64_t> to0(world, 0), from(world, 0);
      to0[0] = 2;
      if (r == 0) std::fill(from.begin(), from.end(), 2);
      auto out = torch::zeros({r == 0 ? 2 * world : 0, 3});
      c.all_to_all_v(out, torch::full({2, 3}, static_cast<float>(r)), from, to0)->wait();
      for (int s = 0; r == 0 && s < world; ++s) {
        EXPECT_TRUE(torch::equal(out.slice(0, 2 * s, 2 * s + 2), torch::full({2, 3}, static_cast<float>(s))));
      }
    });
  }
}

// Splits that cannot describe the tensors are an error before any byte moves.
TEST(DistComm, AllToAllVariableSplitsCheckTheirCounts) {
  run_group(2, [&](int, Communicator& c) {
    const auto x = torch::zeros({3, 2});
    EXPECT_THROW(c.all_to_all_v(torch::zeros({3, 2}), x, {1, 2}, {1, 1}), CommError);      // input splits sum to 2
    EXPECT_THROW(c.all_to_all_v(torch::zeros({3, 2}), x, {3}, {1, 2}), CommError);         // one entry per rank
    EXPECT_THROW(c.all_to_all_v(torch::zeros({3, 3}), x, {1, 2}, {1, 2}), CommError);      // trailing shape
    EXPECT_THROW(c.all_to_all_v(torch::zeros({3, 2}), x, {4, -1}, {1, 2}), CommError);     // negative
  });
}

TEST(DistComm, BroadcastFromEveryRoot) {
  run_group(3, [&](int r, Communicator& c) {
    for (int root = 0; root < 3; ++root) {
      auto t = contribution(r, 9, torch::kBFloat16);
      c.broadcast(t, root)->wait();
      EXPECT_TRUE(torch::equal(t, contribution(root, 9, torch::kBFloat16))) << "root " << root;
    }
  });
}

TEST(DistComm, SendRecvAroundARing) {
  run_group(3, [&](int r, Communicator& c) {
    auto out = contribution(r, 8, torch::kLong), in = torch::zeros({8}, torch::kLong);
    auto sent = c.send(out, (r + 1) % 3, /*tag=*/7);
    c.recv(in, (r + 2) % 3, /*tag=*/7)->wait();
    sent->wait();
    EXPECT_TRUE(torch::equal(in, contribution((r + 2) % 3, 8, torch::kLong)));
  });
}

TEST(DistComm, BatchP2PSwapsBetweenTwoRanksWhateverTheOrder) {
  // Rank 0 lists its send first, rank 1 its receive: Gloo takes the ops
  // one by one (tags match them), NCCL would group them.
  run_group(2, [&](int r, Communicator& c) {
    auto out = contribution(r, 8, torch::kBFloat16), in = torch::zeros({8}, torch::kBFloat16);
    std::vector<P2POp> ops{{P2POp::Kind::kSend, out, 1 - r, 3}, {P2POp::Kind::kRecv, in, 1 - r, 3}};
    if (r == 1) std::swap(ops[0], ops[1]);
    auto works = c.batch_p2p(ops);
    ASSERT_EQ(works.size(), 2u);
    for (auto& w : works) w->wait();
    EXPECT_TRUE(torch::equal(in, contribution(1 - r, 8, torch::kBFloat16)));
  });
}

TEST(DistComm, ShutdownIsOnceAndACallAfterItIsAOneLineError) {
  run_group(2, [&](int r, Communicator& c) {
    auto t = torch::full({2}, r + 1.0);
    c.all_reduce(t)->wait();
    c.shutdown();
    c.shutdown();  // once: a second teardown (the destructor's) does nothing
    try {
      c.all_reduce(t);
      ADD_FAILURE() << "all_reduce after shutdown";
    } catch (const CommError& e) {
      EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(r) + ": all_reduce on world after the group was shut down");
    }
  });
}

TEST(DistMesh, ShutdownEndsEveryGroupOnceOverGloo) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  run_threads(4, [&](int r) {
    MeshShape shape;
    shape.dp_shard = 2;
    shape.tp = 2;
    auto mesh = DeviceMesh::create(shape, r, store, {});
    auto t = torch::full({3}, r + 1.0);
    mesh->group("dp").all_reduce(t, ReduceOp::kSum)->wait();
    mesh->group("tp").all_reduce(t, ReduceOp::kSum)->wait();
    mesh->shutdown();
    mesh->shutdown();
    for (const char* dim : {"world", "tp", "dp_shard", "dp", "fsdp"}) {
      EXPECT_THROW(mesh->group(dim).barrier(), CommError) << dim;
    }
  });  // the destructors shut down again: nothing happens
}

TEST(DistComm, CompletedPollsAndRecordsEachCall) {
  std::vector<std::shared_ptr<FlightRecorder>> recorders;
  for (int r = 0; r < 2; ++r) recorders.push_back(std::make_shared<FlightRecorder>(r, 8, "unused.json"));
  run_group(2, [&](int r, Communicator& c) {
    auto t = torch::ones({4});
    auto work = c.all_reduce(t);
    for (int i = 0; i < 2000 && !work->completed(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_TRUE(work->completed());
    work->wait();  // after completed(): returns at once, records nothing twice
    c.barrier();
  }, [&](int r) { return CommOptions{std::chrono::seconds(100), std::chrono::seconds(300), recorders[r]}; });
  auto entries = recorders[0]->entries();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].op, "all_reduce");
  EXPECT_EQ(entries[0].group, "world");
  EXPECT_EQ(entries[0].dtype, "fp32");
  EXPECT_EQ(entries[0].bytes, 16);
  EXPECT_EQ(entries[0].state, FlightRecorder::State::kCompleted);
  EXPECT_GE(entries[0].end_s, entries[0].start_s);
  EXPECT_EQ(entries[1].op, "barrier");
  EXPECT_EQ(entries[1].state, FlightRecorder::State::kCompleted);
}

TEST(DistComm, MismatchedSizesAreOneLineErrors) {
  run_group(2, [&](int r, Communicator& c) {
    try {
      c.all_gather(torch::empty({5}), torch::ones({3}));
      ADD_FAILURE() << "no error";
    } catch (const CommError& e) {
      EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(r) +
                                           ": all_gather on world: output has 5 elements, expected 2 x 3 = 6");
    }
    EXPECT_THROW(c.send(torch::ones({1}), r), CommError);  // to itself
  });
}

// A rank that never joins the collective: the waiting rank's error names
// itself, the op and the group, and its flight recorder is on disk.
TEST(DistComm, TimeoutNamesRankOpAndGroupAndDumpsTheRecorder) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("dist_timeout_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::atomic<bool> rank0_done{false};
  std::string message;
  const auto start = std::chrono::steady_clock::now();
  run_group(2, [&](int r, Communicator& c) {
    if (r == 0) {
      auto t = torch::ones({4});
      try {
        c.all_reduce(t)->wait();
      } catch (const CommError& e) {
        message = e.what();
      }
      rank0_done = true;
    } else {
      for (int i = 0; i < 1000 && !rank0_done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }, [&](int r) {
    auto path = (dir / "comm_traces" / ("rank_" + std::to_string(r) + ".json")).string();
    return CommOptions{std::chrono::milliseconds(300), std::chrono::seconds(300),
                       std::make_shared<FlightRecorder>(r, 16, path)};
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(message, "rank 0: all_reduce on world (16 B fp32) did not complete within 0.3 s");
  std::ifstream in(dir / "comm_traces" / "rank_0.json");
  ASSERT_TRUE(in.good());
  auto dump = nlohmann::json::parse(in);
  EXPECT_EQ(dump["rank"], 0);
  ASSERT_EQ(dump["entries"].size(), 1u);
  EXPECT_EQ(dump["entries"][0]["op"], "all_reduce");
  EXPECT_EQ(dump["entries"][0]["group"], "world");
  EXPECT_EQ(dump["entries"][0]["state"], "timed_out");
  EXPECT_FALSE(fs::exists(dir / "comm_traces" / "rank_1.json"));  // rank 1 had nothing fail
  fs::remove_all(dir);
}

TEST(DistComm, SizeOneGroupIsLocalWithTheSameSemantics) {
  auto c = Communicator::create(nullptr, 0, 1, "tp", 5, {});
  EXPECT_EQ(c->size(), 1);
  auto t = torch::tensor({3, -5}, torch::kLong);
  c->all_reduce(t, ReduceOp::kAvg)->wait();
  EXPECT_TRUE(torch::equal(t, torch::tensor({3, -5}, torch::kLong)));
  auto out = torch::zeros({2, 2});
  c->all_gather(out, torch::arange(4, torch::kFloat))->wait();
  EXPECT_TRUE(torch::equal(out, torch::arange(4, torch::kFloat).view({2, 2})));
  auto rs = torch::zeros({4}, torch::kBFloat16);
  c->reduce_scatter(rs, torch::ones({4}, torch::kBFloat16), ReduceOp::kAvg)->wait();
  EXPECT_TRUE(torch::equal(rs, torch::ones({4}, torch::kBFloat16)));
  auto a2a = torch::zeros({3});
  EXPECT_TRUE(c->all_to_all(a2a, torch::ones({3}))->completed());
  EXPECT_TRUE(torch::equal(a2a, torch::ones({3})));
  EXPECT_THROW(c->send(t, 0), CommError);
  EXPECT_THROW(c->all_gather(torch::zeros({3}), torch::ones({2})), CommError);
}

// ---- Gaps of Gloo in LibTorch 2.15, each closed inside the communicator ----

// Gloo rejects ReduceOp::AVG on integer tensors ("result type Float can't be
// cast to the desired output type Long"): SUM in int64, then truncate like NCCL.
TEST(DistCommGaps, IntegerAvgIsSumThenTruncatingDivision) {
  run_group(2, [&](int r, Communicator& c) {
    for (auto dtype : {torch::kLong, torch::kInt, torch::kByte}) {
      auto of = [&](int rank) {
        auto v = rank == 0 ? torch::tensor({-3, 7, 4, 1}) : torch::tensor({0, 0, 1, 2});
        return dtype == torch::kByte ? v.abs() : v;
      };
      auto mine = of(r);
      auto ref = (of(0) + of(1)).div(2, "trunc");  // -3 / 2 is -1, not floor's -2
      auto t = mine.to(dtype);
      c.all_reduce(t, ReduceOp::kAvg)->wait();
      EXPECT_TRUE(torch::equal(t, ref.to(dtype))) << c10::toString(dtype) << " got " << t;
      auto out = torch::empty({2}, dtype);
      c.reduce_scatter(out, mine.to(dtype), ReduceOp::kAvg)->wait();
      EXPECT_TRUE(torch::equal(out, ref.slice(0, 2 * r, 2 * r + 2).to(dtype))) << c10::toString(dtype);
    }
    // The sum is taken in int64: 200 + 100 would wrap in uint8 (to 44, average 22).
    auto small = torch::full({3}, r == 0 ? 200 : 100, torch::kByte);
    c.all_reduce(small, ReduceOp::kAvg)->wait();
    EXPECT_TRUE(torch::equal(small, torch::full({3}, 150, torch::kByte))) << small;
  });
}

// Gloo has no float8, int16 or uint16/32 ("Invalid scalar type") for any
// collective: copies move the bytes, reductions run in fp32 / int64.
TEST(DistCommGaps, UnsupportedDtypesMoveAsBytesAndReduceWider) {
  const std::vector<at::ScalarType> dtypes = {at::kFloat8_e4m3fn, at::kFloat8_e5m2, at::kShort, at::kUInt16,
                                              at::kUInt32};
  run_group(3, [&](int r, Communicator& c) {
    for (auto dtype : dtypes) {
      // Small values: exact in every dtype here, and their sums too (|sum| <= 12).
      auto mine = [&](int rank) {
        return (torch::arange(6, torch::kFloat) * 0.5 + rank).remainder(4).to(dtype);
      };
      auto out = torch::empty({18}, dtype);
      c.all_gather(out, mine(r))->wait();
      for (int s = 0; s < 3; ++s) {
        EXPECT_TRUE(torch::equal(out.slice(0, 6 * s, 6 * s + 6).view(at::kByte).reshape(-1),
                                 mine(s).view(at::kByte).reshape(-1)))
            << c10::toString(dtype) << " chunk " << s;
      }
      auto t = mine(r);
      c.broadcast(t, 2)->wait();
      EXPECT_TRUE(torch::equal(t.view(at::kByte), mine(2).view(at::kByte))) << c10::toString(dtype);
      for (auto op : {ReduceOp::kSum, ReduceOp::kMax}) {
        auto sum = mine(r);
        c.all_reduce(sum, op)->wait();
        auto all = torch::stack({mine(0).to(torch::kDouble), mine(1).to(torch::kDouble), mine(2).to(torch::kDouble)});
        auto ref = op == ReduceOp::kSum ? all.sum(0) : all.amax(0);
        EXPECT_TRUE(torch::equal(sum.to(torch::kDouble), ref.to(dtype).to(torch::kDouble))) << c10::toString(dtype);
      }
    }
  });
}

// _allgather_base wants out's shape to be [size x in's shape] and
// _reduce_scatter_base the reverse; the contract is only about numel, and
// outputs may be non-contiguous views (e.g. a column of a parameter).
TEST(DistCommGaps, AnyShapeAndNonContiguousOutputs) {
  run_group(2, [&](int r, Communicator& c) {
    auto gathered = torch::empty({4, 3});  // in is [6]
    c.all_gather(gathered, contribution(r, 6, torch::kFloat))->wait();
    EXPECT_TRUE(torch::equal(gathered.view(-1), torch::cat({contribution(0, 6, torch::kFloat),
                                                             contribution(1, 6, torch::kFloat)})));
    auto base = torch::zeros({8, 2});
    auto column = base.select(1, 1);  // stride 2
    auto every_other = [](int rank) { return contribution(rank, 8, torch::kFloat).slice(0, 0, 8, 2); };
    c.all_gather(column, every_other(r))->wait();  // non-contiguous input too
    EXPECT_TRUE(torch::equal(column, torch::cat({every_other(0), every_other(1)})));
    EXPECT_TRUE(torch::equal(base.select(1, 0), torch::zeros({8})));
    auto in = contribution(r, 8, torch::kBFloat16).view({2, 4});
    auto strided_out = torch::zeros({4, 2}, torch::kBFloat16).select(1, 0);
    c.reduce_scatter(strided_out, in, ReduceOp::kSum)->wait();
    auto ref = reference_reduce(2, 8, torch::kBFloat16, ReduceOp::kSum).slice(0, 4 * r, 4 * r + 4);
    EXPECT_TRUE(torch::equal(strided_out, ref.to(torch::kBFloat16)));
    auto noncontig_in = contribution(r, 12, torch::kFloat).view({3, 4}).t();  // [4, 3], strides (1, 4)
    auto ar = noncontig_in;
    c.all_reduce(ar, ReduceOp::kMax)->wait();
    auto ref_max = reference_reduce(2, 12, torch::kFloat, ReduceOp::kMax).view({3, 4}).t();
    EXPECT_TRUE(torch::equal(ar, ref_max));
  });
}

// ---- The device mesh ----

using Members = std::map<std::string, std::vector<std::vector<int64_t>>>;  // dim -> rank -> group's ranks

Members mesh_members(const MeshShape& shape) {
  const int world = static_cast<int>(shape.world());
  Members members;
  const std::vector<std::string> dims = {"world", "pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "ep",
                                         "dp_shard_mod_ep"};
  for (const auto& d : dims) members[d].resize(world);
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::mutex mu;
  run_threads(world, [&](int r) {
    auto mesh = DeviceMesh::create(shape, r, store, {});
    for (const auto& d : dims) {
      Communicator& g = mesh->group(d);
      EXPECT_EQ(g.size(), mesh->size(d)) << d;
      EXPECT_EQ(g.rank(), mesh->coord(d)) << d;
      auto out = torch::empty({g.size()}, torch::kLong);
      g.all_gather(out, torch::full({1}, r, torch::kLong))->wait();
      std::lock_guard<std::mutex> lock(mu);
      members[d][r] = std::vector<int64_t>(out.data_ptr<int64_t>(), out.data_ptr<int64_t>() + out.numel());
    }
  });
  return members;
}

using Groups = std::vector<std::vector<int64_t>>;

TEST(DistMesh, DpReplicateTwoByDpShardTwo) {
  MeshShape shape;
  shape.dp_replicate = 2;
  shape.dp_shard = 2;
  auto m = mesh_members(shape);
  // rank = dr * 2 + ds
  EXPECT_EQ(m["dp_shard"], (Groups{{0, 1}, {0, 1}, {2, 3}, {2, 3}}));
  EXPECT_EQ(m["dp_replicate"], (Groups{{0, 2}, {1, 3}, {0, 2}, {1, 3}}));
  EXPECT_EQ(m["dp"], (Groups{{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}}));
  EXPECT_EQ(m["world"][3], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(m["tp"], (Groups{{0}, {1}, {2}, {3}}));
}

TEST(DistMesh, PipelineTwoByTensorTwo) {
  MeshShape shape;
  shape.pp = 2;
  shape.tp = 2;
  auto m = mesh_members(shape);
  // rank = pp * 2 + tp; dp is a single rank
  EXPECT_EQ(m["tp"], (Groups{{0, 1}, {0, 1}, {2, 3}, {2, 3}}));
  EXPECT_EQ(m["pp"], (Groups{{0, 2}, {1, 3}, {0, 2}, {1, 3}}));
  EXPECT_EQ(m["dp"], (Groups{{0}, {1}, {2}, {3}}));
}

// Expert parallelism's groups over Gloo against TorchTitan's layout built
// independently here: the ranks as a tensor of shape (pp, dp_replicate,
// dp_shard_mod_ep, dp_shard_in_ep, cp, tp); a group is every rank that
// shares the coordinates outside its dimensions.
Groups torchtitan_groups(const MeshShape& s, const std::vector<int64_t>& dims) {
  const int64_t in_ep = s.etp == s.tp ? s.ep / s.cp : s.ep / (s.cp * s.tp);
  const auto ranks = torch::arange(s.world()).view({s.pp, s.dp_replicate, s.dp_shard / in_ep, in_ep, s.cp, s.tp});
  std::vector<int64_t> order;
  for (int64_t d = 0; d < 6; ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) order.push_back(d);
  order.insert(order.end(), dims.begin(), dims.end());
  int64_t size = 1;
  for (int64_t d : dims) size *= ranks.size(d);
  const auto rows = ranks.permute(order).reshape({-1, size});
  Groups by_rank(static_cast<size_t>(s.world()));
  for (int64_t g = 0; g < rows.size(0); ++g) {
    const auto row = rows[g].contiguous();
    std::vector<int64_t> members(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + size);
    std::sort(members.begin(), members.end());
    for (int64_t r : members) by_rank[static_cast<size_t>(r)] = members;
  }
  return by_rank;
}

TEST(DistMesh, ExpertParallelGroupsFollowTorchTitan) {
  struct Case {
    int64_t dr, ds, cp, tp, ep, etp;
  };
  // EP inside dp_shard; EP = cp; EP over dp_shard x tp with ETP 1; EP with
  // ETP = TP beside dp_replicate (ep is then dp_shard's own group).
  for (const Case c : {Case{1, 4, 1, 1, 2, 1}, Case{1, 2, 2, 1, 2, 1}, Case{1, 2, 1, 2, 4, 1}, Case{2, 2, 1, 2, 2, 2}}) {
    MeshShape s;
    s.dp_replicate = c.dr;
    s.dp_shard = c.ds;
    s.cp = c.cp;
    s.tp = c.tp;
    s.ep = c.ep;
    s.etp = c.etp;
    const auto m = mesh_members(s);
    const std::vector<int64_t> ep_dims = c.etp == c.tp && c.tp > 1 ? std::vector<int64_t>{3, 4}
                                                                    : std::vector<int64_t>{3, 4, 5};
    EXPECT_EQ(m.at("ep"), torchtitan_groups(s, ep_dims)) << s.describe();
    EXPECT_EQ(m.at("dp_shard_mod_ep"), torchtitan_groups(s, {2})) << s.describe();
    EXPECT_EQ(m.at("ep")[0].size(), static_cast<size_t>(c.ep)) << s.describe();
  }
  // Without EP: ep is each rank alone and the experts shard over fsdp.
  MeshShape plain;
  plain.dp_shard = 2;
  plain.cp = 2;
  const auto m = mesh_members(plain);
  EXPECT_EQ(m.at("ep"), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(m.at("dp_shard_mod_ep")[1], (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(DistMesh, SingleHasOnlySizeOneGroups) {
  auto mesh = DeviceMesh::single();
  for (const char* d : {"world", "pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "ep", "dp_shard_mod_ep"}) {
    EXPECT_EQ(mesh->group(d).size(), 1) << d;
    EXPECT_EQ(mesh->coord(d), 0) << d;
  }
  EXPECT_THROW(mesh->group("experts"), std::invalid_argument);
}

TEST(DistMesh, RendezvousThenAllReduceOverTcpStore) {
  // A free port: bind to 0, read it, release it.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  ::close(fd);

  DistEnv alone{0, 2, 0, 2, "127.0.0.1", port, true, "torchrun"};
  try {
    rendezvous(alone, std::chrono::milliseconds(300));
    ADD_FAILURE() << "rank 0 met nobody";
  } catch (const CommError& e) {
    EXPECT_EQ(std::string(e.what()), "rank 0: rendezvous at 127.0.0.1:" + std::to_string(port) +
                                         " timed out after 0.3 s waiting for 2 ranks");
  }
  run_threads(2, [&](int r) {
    DistEnv env{r, 2, r, 2, "127.0.0.1", port, true, "torchrun"};
    MeshShape shape;
    shape.dp_shard = 2;
    auto mesh = DeviceMesh::create(shape, r, rendezvous(env, std::chrono::seconds(20)), {});
    auto t = torch::full({3}, r + 1.0);
    mesh->group("dp").all_reduce(t, ReduceOp::kAvg)->wait();
    EXPECT_TRUE(torch::equal(t, torch::full({3}, 1.5)));
  });
}

// ---- Mesh shape from [parallelism] ----

MeshShape resolve(int64_t dr, int64_t ds, int64_t tp, int64_t pp, int64_t cp, int64_t world, int64_t ep = 1,
                  int64_t etp = 1) {
  ParallelismSection p;
  p.expert_parallel_degree = ep;
  p.expert_tensor_parallel_degree = etp;
  p.data_parallel_replicate_degree = dr;
  p.data_parallel_shard_degree = ds;
  p.tensor_parallel_degree = tp;
  p.pipeline_parallel_degree = pp;
  p.context_parallel_degree = cp;
  return resolve_mesh_shape(p, world);
}

std::string resolve_error(int64_t dr, int64_t ds, int64_t tp, int64_t pp, int64_t cp, int64_t world,
                          int64_t ep = 1, int64_t etp = 1) {
  try {
    resolve(dr, ds, tp, pp, cp, world, ep, etp);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(DistMeshShape, OneUnsetDegreeTakesTheRest) {
  auto s = resolve(1, -1, 2, 1, 1, 8);
  EXPECT_EQ(s.dp_shard, 4);
  EXPECT_EQ(s.describe(), "dp_shard 4 x tp 2");
  auto t = resolve(2, 1, -1, 1, 1, 8);
  EXPECT_EQ(t.tp, 4);
  EXPECT_EQ(resolve(1, -1, 1, 1, 1, 1).describe(), "1 rank");
  EXPECT_EQ(resolve(2, 2, 1, 2, 1, 8).describe(), "pp 2 x dp_replicate 2 x dp_shard 2");
}

// TorchTitan v0.2.2's ParallelDims rules for ep and etp.
TEST(DistMeshShape, ExpertParallelDegreesFollowTorchTitansRules) {
  // resolve(dr, ds, tp, pp, cp, world, ep, etp)
  const MeshShape s = resolve(1, -1, 2, 1, 1, 8, 4, 1);
  EXPECT_EQ(s.ep, 4);
  EXPECT_EQ(s.describe(), "dp_shard 4 x tp 2 x (ep 4, etp 1)");
  EXPECT_EQ(resolve(1, 2, 1, 1, 2, 4, 4, 1).ep, 4);  // all of cp and dp_shard
  EXPECT_EQ(resolve_error(1, 2, 2, 1, 1, 4, 2, 3),
            "parallelism.expert_tensor_parallel_degree = 3 is neither 1 nor tensor_parallel_degree (2); TorchTitan "
            "supports only ETP = TP or ETP = 1");
  EXPECT_EQ(resolve_error(1, 4, 1, 1, 1, 4, 3, 1),
            "parallelism.expert_parallel_degree = 3 must be a multiple of cp (1) dividing dp_shard x cp (4): expert "
            "parallelism borrows its ranks from them");
  EXPECT_EQ(resolve_error(1, 2, 2, 1, 1, 4, 8, 1),
            "parallelism.expert_parallel_degree = 8 must be a multiple of cp x tp (2) dividing dp_shard x cp x tp "
            "(4): expert parallelism borrows its ranks from them");
  EXPECT_EQ(resolve_error(1, 2, 2, 1, 1, 4, 2, 1), "no error");  // ep = tp's ranks (etp 1)
  EXPECT_EQ(resolve_error(1, 2, 1, 1, 2, 4, 1, 1), "no error");
  EXPECT_NE(resolve_error(1, 2, 1, 1, 2, 4, 0, 1).find("use positive degrees"), std::string::npos);
}

TEST(DistMeshShape, BadDegreesAreOneLineErrors) {
  EXPECT_EQ(resolve_error(2, 3, 1, 1, 1, 4),
            "parallelism degrees dp_replicate 2 x dp_shard 3 x tp 1 x pp 1 x cp 1 = 6 do not match the world size 4; "
            "set data_parallel_shard_degree = -1 to take the rest");
  EXPECT_EQ(resolve_error(1, -1, -1, 1, 1, 4),
            "parallelism.tensor_parallel_degree = -1: only data_parallel_shard_degree may be -1 (it takes the rest "
            "of the world); set tensor_parallel_degree to a positive degree");
  EXPECT_EQ(resolve_error(1, -1, 3, 1, 1, 4),
            "parallelism degrees dp_replicate 1 x tp 3 x pp 1 x cp 1 = 3 do not divide the world size 4, so "
            "data_parallel_shard_degree = -1 cannot take the rest");
  EXPECT_EQ(resolve_error(1, -1, 0, 1, 1, 4),
            "parallelism.tensor_parallel_degree = 0 is not a degree; use a positive integer (or -1 for "
            "data_parallel_shard_degree)");
}

// ---- Launch contract ----

// Clears the launch variables (torchrun's, every SLURM_*, and PATH for the
// scontrol cases) for one test and restores them after, so neither the
// environment ctest runs in (an srun step, say) nor a test leaks into
// another.
class DistEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& v : launch_variables()) {
      if (const char* old = std::getenv(v.c_str())) saved_[v] = old;
      ::unsetenv(v.c_str());
    }
  }
  void TearDown() override {
    for (const std::string& v : launch_variables()) ::unsetenv(v.c_str());
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
    if (!scratch_.empty()) fs::remove_all(scratch_);
  }
  // The torchrun variables, PATH, and every SLURM_* set now.
  static std::vector<std::string> launch_variables() {
    std::vector<std::string> names(std::begin(kVars), std::end(kVars));
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      if (kv.rfind("SLURM_", 0) == 0) names.push_back(kv.substr(0, kv.find('=')));
    }
    return names;
  }
  std::string error() {
    try {
      DistEnv::from_environment();
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  }
  // The environment of task `rank` of an srun step (job 123456) of `world`
  // tasks, 4 per node (the last node the rest), rank 0 on node7.
  static void set_srun_task(int rank, int world) {
    const int per_node = std::min(world, 4), full = world / per_node, rest = world % per_node;
    const std::string tasks_per_node = std::to_string(per_node) + (full > 1 ? "(x" + std::to_string(full) + ")" : "") +
                                       (rest > 0 ? "," + std::to_string(rest) : "");
    ::setenv("SLURM_JOB_ID", "123456", 1);
    ::setenv("SLURM_STEP_ID", "0", 1);
    ::setenv("SLURM_PROCID", std::to_string(rank).c_str(), 1);
    ::setenv("SLURM_NTASKS", std::to_string(world).c_str(), 1);
    ::setenv("SLURM_NPROCS", std::to_string(world).c_str(), 1);
    ::setenv("SLURM_LOCALID", std::to_string(rank % per_node).c_str(), 1);
    ::setenv("SLURM_NODEID", std::to_string(rank / per_node).c_str(), 1);
    ::setenv("SLURM_STEP_TASKS_PER_NODE", tasks_per_node.c_str(), 1);
    ::setenv("SLURM_TASKS_PER_NODE", tasks_per_node.c_str(), 1);
    ::setenv("SLURM_STEP_NODELIST", "node7,node8", 1);
    ::setenv("SLURM_JOB_NODELIST", "node7,node8", 1);
  }
  // A folder put first on PATH holding a stand-in `scontrol` that runs
  // `script` (sh) and records its arguments in args.txt.
  fs::path fake_scontrol(const std::string& script) {
    scratch_ = fs::path(::testing::TempDir()) / ("dist_scontrol_" + std::to_string(::getpid()));
    fs::remove_all(scratch_);
    fs::create_directories(scratch_);
    {
      std::ofstream f(scratch_ / "scontrol");
      f << "#!/bin/sh\necho \"$@\" > '" << (scratch_ / "args.txt").string() << "'\n" << script << "\n";
    }
    fs::permissions(scratch_ / "scontrol", fs::perms::owner_all);
    ::setenv("PATH", scratch_.c_str(), 1);
    return scratch_;
  }
  static constexpr const char* kVars[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                          "MASTER_ADDR", "MASTER_PORT", "PATH"};
  std::map<std::string, std::string> saved_;
  fs::path scratch_;
};

TEST_F(DistEnvTest, WithoutRankIsASingleProcess) {
  auto e = DistEnv::from_environment();
  EXPECT_FALSE(e.launched);
  EXPECT_EQ(e.world_size, 1);
}

TEST_F(DistEnvTest, ReadsTorchrunVariables) {
  ::setenv("RANK", "5", 1);
  ::setenv("WORLD_SIZE", "8", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  ::setenv("LOCAL_WORLD_SIZE", "4", 1);
  ::setenv("MASTER_ADDR", "node0", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  auto e = DistEnv::from_environment();
  EXPECT_TRUE(e.launched);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "node0");
  EXPECT_EQ(e.master_port, 29500);
}

TEST_F(DistEnvTest, MalformedVariablesAreOneLineErrors) {
  ::setenv("RANK", "4", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  EXPECT_EQ(error(), "RANK=4 is not below WORLD_SIZE=4; ranks are 0..3");
  ::setenv("RANK", "one", 1);
  EXPECT_EQ(error(), "RANK='one' is not an integer; the launcher (torchrun, srun) must set it");
  ::setenv("RANK", "1", 1);
  ::setenv("MASTER_PORT", "70000", 1);
  EXPECT_EQ(error(), "MASTER_PORT=70000 is out of range [1, 65535]");
  ::unsetenv("MASTER_PORT");
  EXPECT_EQ(error(), "MASTER_PORT is not set for a run of WORLD_SIZE=4; set it to a free TCP port on MASTER_ADDR "
                     "(torchrun does)");
  ::unsetenv("RANK");
  EXPECT_EQ(error(), "WORLD_SIZE=4 is set but RANK is not; launch each rank with RANK (torchrun does)");
}

TEST_F(DistEnvTest, SrunTaskTakesSlurmsVariables) {
  set_srun_task(5, 8);
  auto e = DistEnv::from_environment();
  EXPECT_TRUE(e.launched);
  EXPECT_EQ(e.launcher, "srun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "node7");  // no brackets: the text before the first comma, no scontrol
  EXPECT_EQ(e.master_port, 33456);    // 10000 + 123456 % 50000
  ::unsetenv("SLURM_NTASKS");         // older Slurm: SLURM_NPROCS only
  EXPECT_EQ(DistEnv::from_environment().world_size, 8);
  ::unsetenv("SLURM_STEP_NODELIST");  // the job's list when the step's is missing
  ::setenv("SLURM_JOB_NODELIST", "gpu3", 1);
  EXPECT_EQ(DistEnv::from_environment().master_addr, "gpu3");
}

TEST_F(DistEnvTest, TasksPerNodeIsReadInSlurmsCompressedForm) {
  set_srun_task(6, 7);
  ::unsetenv("SLURM_STEP_TASKS_PER_NODE");
  ::setenv("SLURM_TASKS_PER_NODE", "2(x3),1", 1);  // nodes 0..2 run 2 tasks, node 3 runs 1
  ::setenv("SLURM_NODEID", "3", 1);
  ::setenv("SLURM_LOCALID", "0", 1);
  EXPECT_EQ(DistEnv::from_environment().local_world_size, 1);
  ::setenv("SLURM_NODEID", "2", 1);
  EXPECT_EQ(DistEnv::from_environment().local_world_size, 2);
  // The step's layout wins over the job's request: an `srun -n 2` in a job
  // of --ntasks-per-node=4 inherits SLURM_NTASKS_PER_NODE=4.
  set_srun_task(1, 2);
  ::setenv("SLURM_NTASKS_PER_NODE", "4", 1);
  ::setenv("SLURM_STEP_TASKS_PER_NODE", "2", 1);
  EXPECT_EQ(DistEnv::from_environment().local_world_size, 2);
  set_srun_task(5, 8);  // no list: the per-node request
  ::unsetenv("SLURM_STEP_TASKS_PER_NODE");
  ::unsetenv("SLURM_TASKS_PER_NODE");
  ::setenv("SLURM_NTASKS_PER_NODE", "4", 1);
  EXPECT_EQ(DistEnv::from_environment().local_world_size, 4);
}

TEST_F(DistEnvTest, TorchrunVariablesWinOverSlurms) {
  set_srun_task(5, 8);
  // RANK set: torchrun's contract entirely (an sbatch script exporting it keeps working).
  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "3", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  auto t = DistEnv::from_environment();
  EXPECT_EQ(t.launcher, "torchrun");
  EXPECT_EQ(t.rank, 2);
  EXPECT_EQ(t.world_size, 3);
  EXPECT_EQ(t.local_world_size, 3);
  EXPECT_EQ(t.master_addr, "127.0.0.1");
  EXPECT_EQ(t.master_port, 29500);
  // Without RANK each torchrun variable that is set overrides its Slurm counterpart.
  ::unsetenv("RANK");
  ::setenv("WORLD_SIZE", "16", 1);
  ::setenv("LOCAL_WORLD_SIZE", "8", 1);
  ::setenv("LOCAL_RANK", "6", 1);
  ::setenv("MASTER_ADDR", "head", 1);
  auto s = DistEnv::from_environment();
  EXPECT_EQ(s.launcher, "srun");
  EXPECT_EQ(s.rank, 5);  // SLURM_PROCID
  EXPECT_EQ(s.world_size, 16);
  EXPECT_EQ(s.local_world_size, 8);
  EXPECT_EQ(s.local_rank, 6);
  EXPECT_EQ(s.master_addr, "head");
  EXPECT_EQ(s.master_port, 29500);
}

TEST_F(DistEnvTest, BatchScriptOfAJobIsASingleProcess) {
  // sbatch's batch step: SLURM_PROCID=0 and the job's task count, but no job step.
  ::setenv("SLURM_JOB_ID", "77", 1);
  ::setenv("SLURM_PROCID", "0", 1);
  ::setenv("SLURM_NTASKS", "16", 1);
  ::setenv("SLURM_TASKS_PER_NODE", "8(x2)", 1);
  EXPECT_FALSE(DistEnv::from_environment().launched);
  ::setenv("SLURM_STEP_ID", "4294967294", 1);  // Slurm's id for the batch step
  EXPECT_FALSE(DistEnv::from_environment().launched);
  ::setenv("SLURM_STEP_ID", "3", 1);  // a task of step 3
  ::setenv("SLURM_JOB_NODELIST", "n1,n2", 1);
  EXPECT_EQ(DistEnv::from_environment().world_size, 16);
}

TEST_F(DistEnvTest, OneTaskStepIsAPlainSingleProcess) {
  // srun -n 1: no rendezvous, so neither the node list (which would need
  // scontrol, absent from this PATH) nor a port is read.
  set_srun_task(0, 1);
  ::setenv("SLURM_STEP_TASKS_PER_NODE", "1", 1);
  ::setenv("SLURM_STEP_NODELIST", "node[01-02]", 1);
  ::setenv("PATH", "/nonexistent", 1);
  ::unsetenv("SLURM_JOB_ID");
  auto e = DistEnv::from_environment();
  EXPECT_EQ(e.launcher, "srun");
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.master_port, 0);
}

TEST_F(DistEnvTest, BadSlurmValuesAreOneLineErrors) {
  const std::vector<std::pair<std::function<void()>, std::string>> cases = {
      {[] { ::setenv("SLURM_PROCID", "first", 1); },
       "SLURM_PROCID='first' is not an integer; the launcher (torchrun, srun) must set it"},
      {[] { ::setenv("SLURM_PROCID", "8", 1); }, "SLURM_PROCID=8 is not below SLURM_NTASKS=8; ranks are 0..7"},
      {[] { ::setenv("SLURM_NTASKS", "0", 1); }, "SLURM_NTASKS=0 is out of range [1, 2147483647]"},
      {[] {
         ::unsetenv("SLURM_NTASKS");
         ::unsetenv("SLURM_NPROCS");
       },
       "SLURM_PROCID=5 is set but SLURM_NTASKS is not; start ctitan train with srun (or set WORLD_SIZE)"},
      {[] { ::setenv("SLURM_STEP_TASKS_PER_NODE", "4(x2", 1); },
       "SLURM_STEP_TASKS_PER_NODE='4(x2' is not Slurm's tasks-per-node list (like 2(x3),1); start ctitan train "
       "with srun or set LOCAL_WORLD_SIZE"},
      {[] { ::setenv("SLURM_STEP_TASKS_PER_NODE", "4,,4", 1); },
       "SLURM_STEP_TASKS_PER_NODE='4,,4' is not Slurm's tasks-per-node list (like 2(x3),1); start ctitan train "
       "with srun or set LOCAL_WORLD_SIZE"},
      {[] { ::setenv("SLURM_NODEID", "2", 1); },
       "SLURM_NODEID=2 is beyond SLURM_STEP_TASKS_PER_NODE=4(x2) (2 nodes); set LOCAL_WORLD_SIZE"},
      {[] { ::setenv("SLURM_LOCALID", "4", 1); },
       "SLURM_LOCALID=4 is not below this node's 4 tasks (SLURM_STEP_TASKS_PER_NODE=4(x2) at SLURM_NODEID=1)"},
      {[] { ::setenv("SLURM_STEP_TASKS_PER_NODE", "9(x2)", 1); },
       "SLURM_STEP_TASKS_PER_NODE=9(x2) at SLURM_NODEID=1 gives 9 tasks on this node, more than SLURM_NTASKS=8; set "
       "LOCAL_WORLD_SIZE"},
      {[] { ::setenv("SLURM_JOB_ID", "12x", 1); },
       "SLURM_JOB_ID='12x' is not an integer; the launcher (torchrun, srun) must set it"},
      {[] { ::unsetenv("SLURM_JOB_ID"); },
       "MASTER_PORT is not set and neither is SLURM_JOB_ID to derive it from; set MASTER_PORT to a free TCP port "
       "on node7"},
      {[] {
         ::unsetenv("SLURM_STEP_NODELIST");
         ::unsetenv("SLURM_JOB_NODELIST");
       },
       "MASTER_ADDR is not set and neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST names rank 0's node; set "
       "MASTER_ADDR to rank 0's host name"},
      {[] { ::setenv("SLURM_STEP_NODELIST", ",node8", 1); },
       "SLURM_STEP_NODELIST=',node8' names no host; set MASTER_ADDR to rank 0's host name"},
  };
  for (const auto& [set, expected] : cases) {
    set_srun_task(5, 8);
    set();
    const std::string message = error();
    EXPECT_EQ(message, expected);
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST_F(DistEnvTest, BracketedNodeListIsExpandedByScontrol) {
  set_srun_task(5, 8);
  ::setenv("SLURM_STEP_NODELIST", "node[01-02]", 1);
  const fs::path dir = fake_scontrol("printf 'node01\\nnode02\\n'");
  EXPECT_EQ(DistEnv::from_environment().master_addr, "node01");
  std::ifstream args(dir / "args.txt");
  std::string line;
  std::getline(args, line);
  EXPECT_EQ(line, "show hostnames node[01-02]");
  fake_scontrol("echo 'scontrol: error: Unable to create hostlist from node[01-02]' >&2; exit 1");
  EXPECT_EQ(error(), "scontrol show hostnames 'node[01-02]' failed with exit code 1: scontrol: error: Unable to "
                     "create hostlist from node[01-02]; set MASTER_ADDR to rank 0's host name");
  fake_scontrol("exit 0");
  EXPECT_EQ(error(), "scontrol show hostnames 'node[01-02]' printed no host name; set MASTER_ADDR to rank 0's host "
                     "name");
  ::setenv("PATH", (dir / "empty").c_str(), 1);
  EXPECT_EQ(error(), "cannot expand SLURM_STEP_NODELIST=node[01-02]: scontrol: not found on PATH; set MASTER_ADDR "
                     "to rank 0's host name");
  ::setenv("MASTER_ADDR", "head", 1);  // an explicit address needs no scontrol
  EXPECT_EQ(DistEnv::from_environment().master_addr, "head");
}

TEST_F(DistEnvTest, MasterPortIsDerivedFromTheJobId) {
  EXPECT_EQ(slurm_master_port(0), 10000);
  EXPECT_EQ(slurm_master_port(1), 10001);
  EXPECT_EQ(slurm_master_port(49999), 59999);
  EXPECT_EQ(slurm_master_port(50000), 10000);
  EXPECT_EQ(slurm_master_port(4294967295ull), 10000 + 4294967295ull % 50000);  // 27295: job ids are 32-bit
  set_srun_task(0, 2);
  ::setenv("SLURM_JOB_ID", "987654", 1);
  EXPECT_EQ(DistEnv::from_environment().master_port, 47654);
  ::setenv("MASTER_PORT", "29555", 1);  // set: kept
  EXPECT_EQ(DistEnv::from_environment().master_port, 29555);
}

// ---- Flight recorder ----

// Which GPU a rank trains on. Under srun --gpus-per-task=1 every rank sees
// one GPU (its own, through CUDA_VISIBLE_DEVICES) as device 0, whatever its
// LOCAL_RANK; a node whose ranks see all its GPUs gives rank r cuda:r.
TEST(DistDevice, CudaIndexFollowsTheGpusThisProcessSees) {
  EXPECT_EQ(cuda_device_index(0, 1, 1, false), 0);
  EXPECT_EQ(cuda_device_index(3, 8, 8, false), 3);
  EXPECT_EQ(cuda_device_index(3, 4, 8, true), 3);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(cuda_device_index(r, 4, 1, true), 0) << "srun --gpus-per-task=1, rank " << r;
  // More ranks than GPUs: 4 ranks sharing one unmasked GPU, or 2 each.
  EXPECT_THROW(cuda_device_index(1, 4, 1, false), InputError);
  EXPECT_THROW(cuda_device_index(1, 4, 2, true), InputError);
  try {
    cuda_device_index(0, 4, 2, false);
    ADD_FAILURE() << "4 ranks on 2 GPUs were accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "this node runs 4 ranks but has 2 GPUs; launch at most one rank per GPU (--nproc 2), or let ranks "
                 "share GPUs over Gloo with --comm.cuda_backend gloo");
  }
  // comm.cuda_backend = "gloo": ranks share the GPUs round-robin.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(cuda_device_index(r, 4, 1, false, /*share_gpus=*/true), 0) << r;
  for (int r = 0; r < 4; ++r) EXPECT_EQ(cuda_device_index(r, 4, 2, false, /*share_gpus=*/true), r % 2) << r;
  EXPECT_EQ(cuda_device_index(1, 2, 8, false, /*share_gpus=*/true), 1);  // enough GPUs: one each
}

// ---- comm.cuda_backend = "gloo": every tensor staged through host copies ----

// The staged communicator against the same references as the plain one:
// every collective, its in-place and strided outputs, the point-to-point
// ops and a batch of them, on CPU tensors (the staging is the same code for
// CUDA ones, whose host buffers are page-locked). Outputs are written back
// at wait(), not before.
TEST(DistCommStaged, EveryCollectiveMatchesTheReference) {
  const auto staged = [](int) {
    CommOptions o;
    o.stage_through_host = true;
    return o;
  };
  for (int world : {2, 3}) {
    run_group(world, [&](int r, Communicator& c) {
      for (auto dtype : kDtypes)
        for (auto op : kOps) {
          auto t = contribution(r, 37, dtype);
          c.all_reduce(t, op)->wait();
          expect_matches(t, reference_reduce(world, 37, dtype, op), op, "all_reduce " + label(world, dtype, op));
          auto out = torch::empty({5}, dtype);
          c.reduce_scatter(out, contribution(r, 5 * world, dtype), op)->wait();
          expect_matches(out, reference_reduce(world, 5 * world, dtype, op).slice(0, 5 * r, 5 * r + 5), op,
                         "reduce_scatter " + label(world, dtype, op));
        }
      // all_gather into a strided column: untouched until wait().
      auto base = torch::zeros({6 * world, 2});
      auto column = base.select(1, 1);
      WorkPtr w = c.all_gather(column, contribution(r, 6, torch::kFloat));
      EXPECT_TRUE(torch::equal(base, torch::zeros({6 * world, 2}))) << "written before wait()";
      w->wait();
      for (int src = 0; src < world; ++src)
        EXPECT_TRUE(torch::equal(column.slice(0, 6 * src, 6 * src + 6), contribution(src, 6, torch::kFloat))) << src;
      EXPECT_TRUE(torch::equal(base.select(1, 0), torch::zeros({6 * world})));
      // broadcast from every root
      for (int root = 0; root < world; ++root) {
        auto b = contribution(r, 9, torch::kBFloat16);
        c.broadcast(b, root)->wait();
        EXPECT_TRUE(torch::equal(b, contribution(root, 9, torch::kBFloat16))) << "root " << root;
      }
      // all_to_all: chunk s of rank src arrives as chunk src
      auto a2a_in = torch::arange(world * 4, torch::kFloat) + 100 * r, a2a_out = torch::empty({world * 4});
      c.all_to_all(a2a_out, a2a_in)->wait();
      for (int src = 0; src < world; ++src)
        EXPECT_TRUE(torch::equal(a2a_out.slice(0, 4 * src, 4 * src + 4),
                                 torch::arange(4 * r, 4 * r + 4, torch::kFloat) + 100 * src))
            << "all_to_all from " << src;
      // all_to_all_v: rank s sends (s + d) % 3 rows of width 2 to rank d
      std::vector<int64_t> in_splits, out_splits;
      for (int d = 0; d < world; ++d) in_splits.push_back((r + d) % 3), out_splits.push_back((d + r) % 3);
      int64_t in_rows = 0, out_rows = 0;
      for (int d = 0; d < world; ++d) in_rows += in_splits[d], out_rows += out_splits[d];
      auto v_in = torch::full({in_rows, 2}, static_cast<double>(r), torch::kFloat), v_out = torch::empty({out_rows, 2});
      c.all_to_all_v(v_out, v_in, out_splits, in_splits)->wait();
      int64_t row = 0;
      for (int src = 0; src < world; ++src) {
        EXPECT_TRUE(torch::equal(v_out.slice(0, row, row + out_splits[src]),
                                 torch::full({out_splits[src], 2}, static_cast<double>(src), torch::kFloat)))
            << "all_to_all_v from " << src;
        row += out_splits[src];
      }
      // a ring of send/recv, then both directions as one batch
      const int next = (r + 1) % world, prev = (r + world - 1) % world;
      auto got = torch::empty({7}, torch::kLong);
      WorkPtr s = c.send(contribution(r, 7, torch::kLong), next), rv = c.recv(got, prev);
      s->wait();
      rv->wait();
      EXPECT_TRUE(torch::equal(got, contribution(prev, 7, torch::kLong)));
      auto from_next = torch::empty({5}), from_prev = torch::empty({5});
      auto works = c.batch_p2p({{P2POp::Kind::kSend, contribution(r, 5, torch::kFloat), next, 1},
                                {P2POp::Kind::kSend, contribution(r, 5, torch::kFloat), prev, 2},
                                {P2POp::Kind::kRecv, from_next, next, 2},
                                {P2POp::Kind::kRecv, from_prev, prev, 1}});
      for (auto& wk : works) wk->wait();
      EXPECT_TRUE(torch::equal(from_next, contribution(next, 5, torch::kFloat)));
      EXPECT_TRUE(torch::equal(from_prev, contribution(prev, 5, torch::kFloat)));
      c.barrier();
    }, staged);
  }
}

TEST(DistFlightRecorder, RingKeepsTheNewestInOrder) {
  FlightRecorder fr(0, 3, "unused.json");
  for (int i = 0; i < 5; ++i) fr.begin("op" + std::to_string(i), "g", i, "fp32");
  fr.end(4, FlightRecorder::State::kCompleted);
  fr.end(0, FlightRecorder::State::kFailed);  // overwritten: ignored
  auto e = fr.entries();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].seq, 2u);
  EXPECT_EQ(e[0].op, "op2");
  EXPECT_EQ(e[2].seq, 4u);
  EXPECT_EQ(e[2].state, FlightRecorder::State::kCompleted);
  EXPECT_EQ(e[0].state, FlightRecorder::State::kScheduled);
  FlightRecorder off(0, 0, "unused.json");
  off.begin("x", "g", 1, "fp32");
  EXPECT_TRUE(off.entries().empty());
}

TEST(DistFlightRecorder, DumpWritesJsonAtomicallyIntoNewFolders) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("dist_fr_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  FlightRecorder fr(3, 4, (dir / "a" / "b" / "rank_3.json").string());
  auto seq = fr.begin("all_gather", "dp_shard", 4 << 20, "bf16");
  fr.end(seq, FlightRecorder::State::kTimedOut);
  fr.begin("reduce_scatter", "dp_shard", 1024, "fp32");
  const std::string path = fr.dump();
  EXPECT_EQ(path, (dir / "a" / "b" / "rank_3.json").string());
  std::ifstream in(path);
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["capacity"], 4);
  EXPECT_EQ(j["recorded"], 2);
  ASSERT_EQ(j["entries"].size(), 2u);
  EXPECT_EQ(j["entries"][0]["op"], "all_gather");
  EXPECT_EQ(j["entries"][0]["bytes"], 4 << 20);
  EXPECT_EQ(j["entries"][0]["dtype"], "bf16");
  EXPECT_EQ(j["entries"][0]["state"], "timed_out");
  EXPECT_TRUE(j["entries"][0]["end_s"].is_number());
  EXPECT_EQ(j["entries"][1]["state"], "scheduled");
  EXPECT_TRUE(j["entries"][1]["end_s"].is_null());
  int files = 0;
  for (const auto& f : fs::directory_iterator(dir / "a" / "b")) files += f.is_regular_file();
  EXPECT_EQ(files, 1);  // no temp file left behind
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ctitan
