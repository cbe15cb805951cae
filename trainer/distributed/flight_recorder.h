// Flight recorder: each rank remembers its last comm.trace_buf_size
// collectives (op, group, bytes, dtype, start/end, state) in a ring buffer
// and dumps them as JSON to <dump_folder>/<comm.save_traces_folder>/
// <comm.save_traces_file_prefix><rank>.json on a timeout or a failed
// collective, so a hang can be read after the fact: the waiting ranks' last
// entry is still "scheduled" (or "timed_out"); a rank whose log lacks that
// collective is the one they waited for.
// Thread-safe. A capacity of 0 keeps nothing (dump() writes an empty list).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ctitan {

class FlightRecorder {
 public:
  enum class State { kScheduled, kCompleted, kFailed, kTimedOut };
  struct Entry {
    uint64_t seq = 0;
    std::string op, group, dtype;
    int64_t bytes = 0;
    double start_s = 0, end_s = 0;  // seconds since the recorder was created
    State state = State::kScheduled;
  };

  FlightRecorder(int rank, size_t capacity, std::string dump_path);
  uint64_t begin(const std::string& op, const std::string& group, int64_t bytes, const std::string& dtype);
  void end(uint64_t seq, State state);
  // The same, with the time the collective really finished (the backend's
  // completion callback) rather than when the caller noticed.
  void end(uint64_t seq, State state, std::chrono::steady_clock::time_point at);
  uint64_t next_seq() const;
  // [start_s, end_s] of the completed collectives numbered seq >= from_seq
  // that are still in the ring: what a step's communication time is made of.
  std::vector<std::pair<double, double>> completed_intervals(uint64_t from_seq) const;
  // The same, by group (the communicator's name: a mesh dimension, "world").
  std::map<std::string, std::vector<std::pair<double, double>>> completed_intervals_by_group(uint64_t from_seq) const;
  std::vector<Entry> entries() const;  // oldest first
  // Writes the JSON (atomically: temp file + rename); returns the path.
  std::string dump() const;

 private:
  int rank_;
  size_t capacity_;
  std::string dump_path_;
  std::chrono::steady_clock::time_point t0_;
  mutable std::mutex mu_;
  std::vector<Entry> ring_;
  uint64_t next_seq_ = 0;
};

}  // namespace ctitan
