// Ranks as threads of the test process, each with its own communicator
// (Gloo) over one shared HashStore: the in-process form of a distributed
// test (dist_test.cpp, tensor_parallel_test.cpp).
#pragma once

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "trainer/distributed/comm.h"

namespace ctitan::testing {

// Runs fn(rank) on `world` threads; an exception on any rank fails the test.
inline void run_threads(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Runs fn(rank, comm) with one communicator per rank, all in group "world".
inline void run_group(int world, const std::function<void(int, Communicator&)>& fn,
                      const std::function<CommOptions(int)>& options = [](int) { return CommOptions{}; }) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  run_threads(world, [&](int r) {
    auto comm = Communicator::create(c10::make_intrusive<c10d::PrefixStore>("world/0", store), r, world, "world", r,
                                     options(r));
    fn(r, *comm);
  });
}

}  // namespace ctitan::testing
