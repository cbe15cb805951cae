#include "profiling/op_profiler.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdlib>
#include <ctime>
#include <memory>
#include <set>

namespace ctitan {
namespace {

namespace kp = torch::autograd::profiler;

kp::ProfilerConfig kineto_config() {
  return kp::ProfilerConfig(kp::ProfilerState::KINETO, /*report_input_shapes=*/true, /*profile_memory=*/false);
}

const std::set<kp::ActivityType>& cpu_only() {
  static const std::set<kp::ActivityType> a{kp::ActivityType::CPU};
  return a;
}

void quiet_kineto() { ::setenv("KINETO_LOG_LEVEL", "6", /*overwrite=*/0); }

// CLOCK_MONOTONIC - CLOCK_REALTIME, read back to back.
int64_t realtime_to_monotonic_ns() {
  timespec m{}, r{};
  clock_gettime(CLOCK_REALTIME, &r);
  clock_gettime(CLOCK_MONOTONIC, &m);
  return (m.tv_sec - r.tv_sec) * 1'000'000'000LL + (m.tv_nsec - r.tv_nsec);
}

// RecordFunction fallback: the op's start time travels in the observer context.
struct OpStart final : at::ObserverContext {
  int64_t ns = 0;
};

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction&) {
  auto ctx = std::make_unique<OpStart>();
  ctx->ns = trace_now_ns();
  return ctx;
}

void on_op_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  if (ctx == nullptr) return;
  Tracer::get().complete(fn.name(), trace_cat::kCpuOp, static_cast<OpStart*>(ctx)->ns, trace_now_ns(), nullptr,
                         kOpTrackBase + current_thread_tid());
}

std::string first_line(const std::exception& e) {
  const auto* c10e = dynamic_cast<const c10::Error*>(&e);
  std::string s = c10e ? c10e->what_without_backtrace() : e.what();
  return s.substr(0, s.find('\n'));
}

}  // namespace

const char* OpProfiler::name(Source s) {
  switch (s) {
    case Source::kKineto: return "kineto";
    case Source::kRecordFunction: return "record_function";
    case Source::kNone: return "none";
  }
  return "none";
}

OpProfiler::~OpProfiler() {
  if (!running_) return;
  try {
    stop({});
  } catch (...) {
  }
}

void OpProfiler::avoid_kineto(std::string why) {
  if (source_ != Source::kKineto || running_) return;
  source_ = Source::kRecordFunction;
  fallback_reason_ = std::move(why);
}

void OpProfiler::prepare() {
  if (source_ != Source::kKineto || prepared_) return;
  quiet_kineto();
  try {
    kp::prepareProfiler(kineto_config(), cpu_only());
    prepared_ = true;
  } catch (const std::exception& e) {
    fallback_reason_ = "Kineto failed to prepare: " + first_line(e);
    source_ = Source::kRecordFunction;
  }
}

void OpProfiler::start() {
  if (running_) return;
  if (source_ == Source::kKineto) {
    prepare();
    if (source_ == Source::kKineto) {
      try {
        kp::enableProfiler(kineto_config(), cpu_only());
        running_ = true;
        prepared_ = false;  // Kineto prepares once per profile
        return;
      } catch (const std::exception& e) {
        fallback_reason_ = "Kineto failed to start: " + first_line(e);
        source_ = Source::kRecordFunction;
      }
    }
  }
  if (source_ == Source::kRecordFunction) {
    callback_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback(&on_op_start, &on_op_end)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE}));
    running_ = true;
  }
}

std::vector<TraceEvent> OpProfiler::stop(const std::unordered_map<uint64_t, int64_t>& torch_tids) {
  std::vector<TraceEvent> out;
  if (!running_) return out;
  running_ = false;
  if (source_ == Source::kRecordFunction) {
    at::removeCallback(callback_);
    return out;  // its events went straight to the tracer
  }
  std::unique_ptr<kp::ProfilerResult> result = kp::disableProfiler();
  if (!result) return out;
  const int64_t offset = realtime_to_monotonic_ns();
  out.reserve(result->events().size());
  for (const kp::KinetoEvent& e : result->events()) {
    if (e.isHiddenEvent()) continue;
    const auto it = torch_tids.find(e.startThreadId());
    const int64_t tid = kOpTrackBase + (it != torch_tids.end() ? it->second
                                                                : kUnknownThread + static_cast<int64_t>(e.startThreadId()));
    nlohmann::json args;
    if (e.hasShapes() && !e.shapes().empty()) args["Input Dims"] = e.shapes().vec();
    if (e.hasTypes() && !e.dtypes().empty()) args["Input type"] = e.dtypes().vec();
    // libkineto's ActivityType: 0 = CPU op, 1 = user annotation.
    const char* cat = e.activityType() == 1 ? "user_annotation" : trace_cat::kCpuOp;
    out.push_back({e.name(), cat, 'X', static_cast<int64_t>(e.startNs()) + offset,
                   static_cast<int64_t>(e.durationNs()), tid, std::move(args)});
  }
  return out;
}

}  // namespace ctitan
