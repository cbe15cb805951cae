#include "profiling/gpu_activity.h"

#include "profiling/trace_analysis.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>

namespace ctitan {

std::string demangle_kernel_name(std::string_view name) {
  if (name.rfind("_Z", 0) != 0) return std::string(name);
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(std::string(name).c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

namespace {

// The kernel's own (qualified) name in a demangled signature: the text
// before the first '(' or '<', less a return type ("void ", which template
// kernels carry). Template arguments and parameters are not the kernel:
// "at::native::f<ncclFoo>(...)" is not NCCL's.
std::string_view kernel_identifier(std::string_view name) {
  name = name.substr(0, name.find_first_of("(<"));
  const size_t space = name.rfind(' ');
  return space == std::string_view::npos ? name : name.substr(space + 1);
}

// A mangled name the demangler refused (truncated, or a newer ABI): the
// source name of `_Z<len><identifier>...` is the `len` characters after the
// length; nested names (`_ZN...`) are never NCCL's kernels.
std::string_view mangled_identifier(std::string_view name) {
  size_t i = 2, len = 0;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) len = 10 * len + (name[i++] - '0');
  return i == 2 ? std::string_view() : name.substr(i, len);
}

}  // namespace

bool is_nccl_kernel(std::string_view name) {
  if (name.rfind("_Z", 0) == 0) {
    const std::string demangled = demangle_kernel_name(name);
    if (demangled.rfind("_Z", 0) == 0) return mangled_identifier(name).rfind("nccl", 0) == 0;
    return kernel_identifier(demangled).rfind("nccl", 0) == 0;
  }
  return kernel_identifier(name).rfind("nccl", 0) == 0;
}

namespace {

const char* category(const GpuActivity& a) {
  switch (a.kind) {
    case GpuActivity::Kind::kKernel: return a.nccl ? trace_cat::kGpuNccl : trace_cat::kGpuKernel;
    case GpuActivity::Kind::kMemcpy: return trace_cat::kGpuMemcpy;
    case GpuActivity::Kind::kMemset: return trace_cat::kGpuMemset;
    case GpuActivity::Kind::kSync: return trace_cat::kGpuSync;
  }
  return trace_cat::kGpuKernel;
}

}  // namespace

std::vector<TraceEvent> gpu_activity_events(const std::vector<GpuActivity>& acts,
                                            std::unordered_map<int64_t, std::string>& track_names) {
  std::vector<TraceEvent> out;
  out.reserve(acts.size());
  for (const GpuActivity& a : acts) {
    const int64_t track = kGpuTrackBase + 1000 * static_cast<int64_t>(a.device) + a.stream;
    track_names.emplace(track, "GPU " + std::to_string(a.device) + " stream " + std::to_string(a.stream));
    nlohmann::json args = {{"device", a.device}, {"stream", a.stream}, {"correlation", a.correlation}};
    if (a.kind == GpuActivity::Kind::kMemcpy || a.kind == GpuActivity::Kind::kMemset) args["bytes"] = a.bytes;
    out.push_back({a.name, category(a), 'X', a.start_ns, std::max<int64_t>(a.end_ns - a.start_ns, 0), track,
                   std::move(args)});
  }
  return out;
}

StepBreakdown gpu_step_breakdown(const std::vector<GpuActivity>& acts, int64_t begin_ns, int64_t end_ns) {
  Intervals compute, comm;
  for (const GpuActivity& a : acts) {
    if (a.kind == GpuActivity::Kind::kSync) continue;
    (a.nccl ? comm : compute).push_back({static_cast<double>(a.start_ns), static_cast<double>(a.end_ns)});
  }
  const Interval window{static_cast<double>(begin_ns), static_cast<double>(end_ns)};
  const Intervals c = interval_clip(interval_union(std::move(compute)), window);
  const Intervals n = interval_clip(interval_union(std::move(comm)), window);
  Intervals both = c;
  both.insert(both.end(), n.begin(), n.end());
  StepBreakdown s;
  s.gpu = true;
  s.step_s = (window.end - window.begin) / 1e9;
  s.compute_s = interval_length(c) / 1e9;
  s.comm_s = interval_length(n) / 1e9;
  s.exposed_comm_s = interval_length(interval_subtract(n, c)) / 1e9;
  s.idle_s = std::max(0.0, s.step_s - interval_length(interval_union(std::move(both))) / 1e9);
  return s;
}

double gpu_busy_seconds(const std::vector<GpuActivity>& acts, int64_t begin_ns, int64_t end_ns) {
  Intervals busy;
  for (const GpuActivity& a : acts)
    if (a.kind != GpuActivity::Kind::kSync) busy.push_back({static_cast<double>(a.start_ns), static_cast<double>(a.end_ns)});
  const Interval window{static_cast<double>(begin_ns), static_cast<double>(end_ns)};
  return interval_length(interval_clip(interval_union(std::move(busy)), window)) / 1e9;
}

}  // namespace ctitan
