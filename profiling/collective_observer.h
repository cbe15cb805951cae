// How the communicator tells the profiler about each collective, without
// trainer/distributed depending on the tracer: comm.cpp includes only this header.
//
// The communicator calls issued() when a collective goes to the backend,
// wait_returned() each time a caller's wait() returns (with how long it
// blocked), and settled() once the collective is known to be done, with the
// time the backend finished (its completion callback; for works without one,
// when wait() noticed). Calls may come from any thread.
//
// collective_observer() is one relaxed atomic load; it is null unless a
// profiler is installed, and issued() returns 0 ("not traced") while the
// profiler is installed but not recording, so the communicator skips the
// other two calls for that collective. An installed observer lives until the
// process exits.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ctitan {

class CollectiveObserver {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~CollectiveObserver() = default;
  // op: "all_gather"; group: the communicator's name; bytes: the larger buffer of
  // the call (as the flight recorder counts it); dtype: "bf16". Returns a token, 0 = not traced.
  virtual uint64_t issued(const char* op, const std::string& group, int64_t bytes, const std::string& dtype) = 0;
  virtual void wait_returned(uint64_t token, TimePoint wait_began, TimePoint wait_ended) = 0;
  virtual void settled(uint64_t token, TimePoint finished, bool ok) = 0;
};

CollectiveObserver* collective_observer();
void set_collective_observer(CollectiveObserver* observer);

}  // namespace ctitan
