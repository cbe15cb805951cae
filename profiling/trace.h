// ctitan's range tracer: what the trainer is doing, on which thread, when —
// written as a Chrome trace-event JSON file that Perfetto and
// chrome://tracing open.
//
// The trainer marks ranges with TraceRange (RAII, one "X" complete event
// on the calling thread): step, forward/backward per unit, optimizer, data,
// checkpoint. The communicator reports every collective through
// CollectiveObserver (collective_observer.h); the tracer turns each into an
// event from issue to completion on a track of its own per group ("comm
// dp_shard #0", a second lane when two overlap), with its group, bytes, dtype,
// whether it was waited on and how long the waiter blocked, plus a "wait"
// event on the thread that blocked. LibTorch's ops (op_profiler.h) and GPU
// activity (gpu_activity.h) are converted into the same TraceEvent.
//
// Cost: while not recording, a TraceRange is one relaxed atomic load and the
// communicator sees no observer unless profiling is configured. While
// recording, events go to a per-thread buffer (one uncontended mutex each).
//
// Clock: std::chrono::steady_clock, i.e. CLOCK_MONOTONIC on Linux, shared by
// every process of one host, so ranks of one machine line up without
// correction; each file also records a (monotonic, realtime) anchor pair
// taken at the same instant, which trace_merge.h uses across hosts.
// Thread ids are the kernel's (gettid), pid is the rank.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "profiling/collective_observer.h"

namespace ctitan {

// One event of the trace-event format's JSON Object Format.
struct TraceEvent {
  std::string name, cat;
  char ph = 'X';         // 'X' complete, 'C' counter, 'i' instant ('M' metadata is added by the writer)
  int64_t ts_ns = 0;     // CLOCK_MONOTONIC nanoseconds
  int64_t dur_ns = 0;    // 'X' only
  int64_t tid = 0;       // kernel thread id, or a synthetic track (kCommTrackBase, GPU streams)
  nlohmann::json args;   // null: no args
};

// Categories: the analysis (trace_analysis.h) reads these, nothing else.
namespace trace_cat {
inline constexpr const char* kStep = "step";            // one per training step: the measured step time
inline constexpr const char* kCompute = "compute";      // forward/backward of a unit, loss, clipping, optimizer
inline constexpr const char* kDataParallel = "data_parallel";  // CPU work of DDP/FSDP: (un)packing shards, buckets
inline constexpr const char* kWait = "wait";            // blocked in Work::wait()
inline constexpr const char* kCollective = "collective";  // a collective in flight, issue -> completion
inline constexpr const char* kData = "data";
inline constexpr const char* kCheckpoint = "checkpoint";
inline constexpr const char* kCpuOp = "cpu_op";         // a LibTorch op (Kineto's name for them)
inline constexpr const char* kGpuKernel = "gpu_kernel";
inline constexpr const char* kGpuMemcpy = "gpu_memcpy";
inline constexpr const char* kGpuMemset = "gpu_memset";
inline constexpr const char* kGpuSync = "gpu_sync";
inline constexpr const char* kGpuNccl = "gpu_nccl";     // NCCL kernels: GPU-side communication
inline constexpr const char* kMemory = "memory";        // 'C' counters of the accounting allocator
}  // namespace trace_cat

// Synthetic tracks: far above any kernel thread id (pid_max <= 2^22).
inline constexpr int64_t kCommTrackBase = 100'000'000;  // + 100 * group index + lane
inline constexpr int64_t kGpuTrackBase = 200'000'000;   // + 1000 * device + stream (gpu_activity.h)
// LibTorch's ops get a track of their own beside their thread's ctitan
// ranges: Kineto's clock is converted (see op_profiler.h), so its events
// cannot be trusted to nest with ranges measured on steady_clock to the
// nanosecond. + the thread's tid (+ kUnknownThread + LibTorch's id when the
// tracer never saw that thread).
inline constexpr int64_t kOpTrackBase = 300'000'000;
inline constexpr int64_t kUnknownThread = 90'000'000;

int64_t trace_now_ns();       // steady_clock now, in ns
int64_t current_thread_tid();  // gettid(), cached per thread

namespace trace_detail {
inline std::atomic<bool> g_recording{false};
}

// Process-wide. Thread-safe. Never destroyed (communicator callbacks may
// arrive on backend threads until the process exits).
class Tracer final : public CollectiveObserver {
 public:
  static Tracer& get();  // the first call installs it as the collective observer

  static bool recording() { return trace_detail::g_recording.load(std::memory_order_relaxed); }
  void start();                      // drops anything left over and begins recording
  std::vector<TraceEvent> stop();    // every event since start(), ordered by ts
  void name_thread(const std::string& name);  // the calling thread's track name
  // Thread names seen so far (tid -> name), and LibTorch's thread ids (at::RecordFunction) -> tid.
  std::unordered_map<int64_t, std::string> thread_names() const;
  std::unordered_map<uint64_t, int64_t> torch_thread_ids() const;

  // One 'X' event on the calling thread's track, or on `track` (ignored unless recording).
  void complete(std::string name, const char* cat, int64_t begin_ns, int64_t end_ns, nlohmann::json args = nullptr,
                int64_t track = -1);
  // One 'C' event (a counter track named `name`, one series per key of `values`).
  void counter(const char* name, int64_t ts_ns, nlohmann::json values);

  // CollectiveObserver
  uint64_t issued(const char* op, const std::string& group, int64_t bytes, const std::string& dtype) override;
  void wait_returned(uint64_t token, TimePoint wait_began, TimePoint wait_ended) override;
  void settled(uint64_t token, TimePoint finished, bool ok) override;

 private:
  Tracer() = default;
  struct ThreadBuffer;
  struct Collective {
    std::string op, group, dtype;
    int64_t bytes = 0, issued_ns = 0, settled_ns = -1, blocked_ns = 0;
    int waits = 0;
    bool ok = true;
  };
  ThreadBuffer& buffer();
  std::vector<TraceEvent> collective_events(int64_t stop_ns);

  mutable std::mutex mu_;  // guards threads_ registration, collectives_, names
  std::vector<ThreadBuffer*> threads_;
  std::unordered_map<int64_t, std::string> names_;
  std::unordered_map<uint64_t, int64_t> torch_tids_;
  std::vector<Collective> collectives_;
  uint64_t session_ = 0;  // tokens are session << 32 | (index + 1)
};

// An 'X' event from construction to destruction on the calling thread.
// Name = name + suffix (e.g. "forward " + "layers.3"); built only when recording.
class TraceRange {
 public:
  TraceRange(const char* cat, std::string_view name, std::string_view suffix = {}) {
    if (Tracer::recording()) open(cat, name, suffix);
  }
  ~TraceRange() {
    if (begin_ns_ >= 0) close();
  }
  TraceRange(const TraceRange&) = delete;
  TraceRange& operator=(const TraceRange&) = delete;
  void set_arg(const char* key, nlohmann::json value);  // no-op unless recording

 private:
  void open(const char* cat, std::string_view name, std::string_view suffix);
  void close();
  const char* cat_ = nullptr;
  std::string name_;
  int64_t begin_ns_ = -1;
  nlohmann::json args_;
};

// What a rank's trace file says about itself (the "ctitan" object of the file).
struct TraceFileInfo {
  int rank = 0, world_size = 1;
  int64_t first_step = 0, last_step = 0;
  std::string op_source;        // "kineto", "record_function" or "none"
  std::string gpu_source;       // "cupti" or "CUPTI unavailable: <reason>"
  nlohmann::json extra;         // merged into the object (e.g. the step analysis)
};

// Chrome trace JSON: {"traceEvents": [...], "displayTimeUnit": "ms", "ctitan": {...}}.
// ts/dur in microseconds of CLOCK_MONOTONIC; pid = rank; 'M' events name the
// process ("rank R") and every thread/track.
nlohmann::json chrome_trace(const std::vector<TraceEvent>& events, const TraceFileInfo& info,
                            const std::unordered_map<int64_t, std::string>& thread_names);
// Writes JSON atomically (temp file + rename), creating folders.
void write_json_file(const std::string& path, const nlohmann::json& j);

// The (CLOCK_MONOTONIC, CLOCK_REALTIME) pair at one instant, plus what
// identifies the clock's domain (hostname, /proc boot id).
nlohmann::json clock_anchor();

}  // namespace ctitan
