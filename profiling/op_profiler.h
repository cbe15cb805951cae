// LibTorch's own ops (aten::mm, autograd nodes, ...) in ctitan's trace.
//
// Source, in order of preference:
//  - Kineto, through torch::autograd::profiler (profiler_kineto.h) — what
//    torch.profiler uses; CPU activity only (GPU activity is ctitan's CUPTI
//    tracer); input shapes recorded, as TorchTitan's record_shapes=True;
//  - RecordFunction callbacks of ctitan's own, when Kineto cannot start, and
//    whenever ctitan's CUPTI tracer runs (ProfilerSession): asking Kineto for
//    CPU activity only does not keep it off CUPTI on a CUDA host — LibTorch
//    initialises it with cpuOnly = !at::hasCUDA(), so it subscribes to CUPTI
//    and registers its own activity-buffer callbacks (one pair per process),
//    which would take CUPTI's records away from ctitan's tracer.
// Both see the thread that started them (the training thread), where every
// op of a CPU step is dispatched; ATen's intra-op worker threads run chunks
// of those ops, not ops of their own.
//
// Kineto stamps events with CLOCK_REALTIME; they are moved onto the tracer's
// CLOCK_MONOTONIC with an offset read when the profile stops. Kineto's own
// log lines (stage messages, "gpuGetDeviceCount failed" without a GPU) are
// silenced unless KINETO_LOG_LEVEL is set.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "profiling/trace.h"

namespace ctitan {

class OpProfiler {
 public:
  enum class Source { kKineto, kRecordFunction, kNone };
  explicit OpProfiler(Source preferred = Source::kKineto) : source_(preferred) {}
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // Kineto's warm-up (the schedule's warmup steps): sets it up so start() is cheap.
  void prepare();
  void start();  // on the thread whose ops are wanted; falls back to RecordFunction if Kineto fails
  // The ops since start(), as cat "cpu_op" 'X' events on their thread's op track (kOpTrackBase + tid)
  // (torch_tids: LibTorch's thread ids -> kernel tids, from Tracer::torch_thread_ids()).
  std::vector<TraceEvent> stop(const std::unordered_map<uint64_t, int64_t>& torch_tids);
  // Before start(): use RecordFunction instead of Kineto, for this reason.
  void avoid_kineto(std::string why);
  Source source() const { return source_; }
  static const char* name(Source s);
  const std::string& fallback_reason() const { return fallback_reason_; }

 private:
  Source source_;
  bool prepared_ = false, running_ = false;
  uint64_t callback_ = 0;  // RecordFunction handle
  std::string fallback_reason_;
};

}  // namespace ctitan
