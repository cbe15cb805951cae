// Flight recorder: a fixed ring of the last `capacity` collectives. Slot
// seq % capacity holds entry seq, so end() finds its entry without a search
// and an entry already overwritten by newer ones is simply gone.
#include "trainer/distributed/flight_recorder.h"
#include "common/errors.h"
#include "common/file_io.h"

#include <unistd.h>

#include <filesystem>
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace ctitan {
namespace {

const char* state_name(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::State::kScheduled: return "scheduled";
    case FlightRecorder::State::kCompleted: return "completed";
    case FlightRecorder::State::kFailed: return "failed";
    case FlightRecorder::State::kTimedOut: return "timed_out";
  }
  return "unknown";
}

}  // namespace

FlightRecorder::FlightRecorder(int rank, size_t capacity, std::string dump_path)
    : rank_(rank), capacity_(capacity), dump_path_(std::move(dump_path)), t0_(std::chrono::steady_clock::now()) {
  ring_.reserve(capacity_);
}

uint64_t FlightRecorder::begin(const std::string& op, const std::string& group, int64_t bytes,
                               const std::string& dtype) {
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t seq = next_seq_++;
  if (capacity_ == 0) return seq;
  Entry e{seq, op, group, dtype, bytes, now, 0.0, State::kScheduled};
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(e));
  } else {
    ring_[seq % capacity_] = std::move(e);
  }
  return seq;
}

void FlightRecorder::end(uint64_t seq, State state) { end(seq, state, std::chrono::steady_clock::now()); }

void FlightRecorder::end(uint64_t seq, State state, std::chrono::steady_clock::time_point at) {
  const double now = std::chrono::duration<double>(at - t0_).count();
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ == 0 || seq >= next_seq_ || next_seq_ - seq > capacity_) return;  // never recorded, or overwritten
  Entry& e = ring_[seq % capacity_];
  e.state = state;
  e.end_s = now;
}

uint64_t FlightRecorder::next_seq() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_seq_;
}

std::vector<std::pair<double, double>> FlightRecorder::completed_intervals(uint64_t from_seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<double, double>> out;
  if (capacity_ == 0) return out;
  const uint64_t first = std::max<uint64_t>(from_seq, next_seq_ > capacity_ ? next_seq_ - capacity_ : 0);
  for (uint64_t seq = first; seq < next_seq_; ++seq) {
    const Entry& e = ring_[seq % capacity_];
    if (e.state == State::kCompleted) out.emplace_back(e.start_s, e.end_s);
  }
  return out;
}

std::map<std::string, std::vector<std::pair<double, double>>> FlightRecorder::completed_intervals_by_group(
    uint64_t from_seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::vector<std::pair<double, double>>> out;
  if (capacity_ == 0) return out;
  const uint64_t first = std::max<uint64_t>(from_seq, next_seq_ > capacity_ ? next_seq_ - capacity_ : 0);
  for (uint64_t seq = first; seq < next_seq_; ++seq) {
    const Entry& e = ring_[seq % capacity_];
    if (e.state == State::kCompleted) out[e.group].emplace_back(e.start_s, e.end_s);
  }
  return out;
}

std::vector<FlightRecorder::Entry> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  if (ring_.empty()) return out;
  out.reserve(ring_.size());
  // Before the ring wraps, slot i holds seq i; after, the oldest is at next_seq_ % capacity.
  const size_t oldest = ring_.size() < capacity_ ? 0 : next_seq_ % capacity_;
  for (size_t i = 0; i < ring_.size(); ++i) out.push_back(ring_[(oldest + i) % ring_.size()]);
  return out;
}

std::string FlightRecorder::dump() const {
  nlohmann::json entries = nlohmann::json::array();
  for (const Entry& e : this->entries()) {
    entries.push_back({{"seq", e.seq},
                       {"op", e.op},
                       {"group", e.group},
                       {"dtype", e.dtype},
                       {"bytes", e.bytes},
                       {"start_s", e.start_s},
                       {"end_s", e.state == State::kScheduled ? nlohmann::json(nullptr) : nlohmann::json(e.end_s)},
                       {"state", state_name(e.state)}});
  }
  uint64_t recorded = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    recorded = next_seq_;
  }
  const nlohmann::json doc = {
      {"version", 1},
      {"rank", rank_},
      {"pid", static_cast<int64_t>(::getpid())},
      {"capacity", capacity_},
      {"recorded", recorded},
      {"dumped_at_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count()},
      {"entries", entries}};

  // Temp file + rename: a reader (or a rank killed mid-dump) never sees half a file.
  const std::filesystem::path path(dump_path_);
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) throw InputError(write_error_line(path.parent_path().string(), ec.value()));
  write_file_atomic(path.string(), doc.dump(1) + "\n");
  return path.string();
}

}  // namespace ctitan
