#include "profiling/trace_analysis.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace ctitan {

Intervals interval_union(Intervals v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](const Interval& i) { return !(i.end > i.begin); }), v.end());
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  Intervals out;
  for (const Interval& i : v) {
    if (!out.empty() && i.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

Intervals interval_subtract(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t j = 0;
  for (Interval cur : a) {
    while (j < b.size() && b[j].end <= cur.begin) ++j;
    for (size_t k = j; k < b.size() && b[k].begin < cur.end; ++k) {
      if (b[k].begin > cur.begin) out.push_back({cur.begin, b[k].begin});
      cur.begin = std::max(cur.begin, b[k].end);
      if (cur.begin >= cur.end) break;
    }
    if (cur.begin < cur.end) out.push_back(cur);
  }
  return out;
}

Intervals interval_intersect(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].begin, b[j].begin), hi = std::min(a[i].end, b[j].end);
    if (lo < hi) out.push_back({lo, hi});
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

Intervals interval_clip(const Intervals& a, Interval w) { return interval_intersect(a, Intervals{w}); }

double interval_length(const Intervals& v) {
  double s = 0;
  for (const Interval& i : v) s += i.end - i.begin;
  return s;
}

namespace {

// What one rank's events contribute, in microseconds (the file's unit).
struct RankEvents {
  std::vector<std::pair<int64_t, Interval>> steps;  // (step number, window)
  std::map<int64_t, Intervals> compute_by_tid, wait_by_tid;
  Intervals comm, data, gpu_compute, gpu_comm;
};

bool is_gpu_compute(const std::string& cat) {
  return cat == "gpu_kernel" || cat == "gpu_memcpy" || cat == "gpu_memset";
}

int64_t step_number(const nlohmann::json& e) {
  if (auto a = e.find("args"); a != e.end() && a->is_object() && a->contains("step")) return a->at("step").get<int64_t>();
  const std::string name = e.value("name", "");
  const auto space = name.rfind(' ');
  return space == std::string::npos ? 0 : std::stoll(name.substr(space + 1));
}

}  // namespace

std::vector<StepBreakdown> analyze_trace(const nlohmann::json& trace) {
  const nlohmann::json* events = &trace;
  if (trace.is_object()) {
    auto it = trace.find("traceEvents");
    if (it == trace.end() || !it->is_array()) throw std::runtime_error("not a trace-event file: no traceEvents array");
    events = &*it;
  } else if (!trace.is_array()) {
    throw std::runtime_error("not a trace-event file: neither an object nor an array");
  }
  std::map<int64_t, RankEvents> ranks;
  for (const nlohmann::json& e : *events) {
    if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("dur")) continue;
    const std::string cat = e.value("cat", "");
    const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
    const Interval iv{ts, ts + dur};
    RankEvents& r = ranks[e.value("pid", int64_t{0})];
    const int64_t tid = e.value("tid", int64_t{0});
    if (cat == "step") {
      r.steps.emplace_back(step_number(e), iv);
    } else if (cat == "compute" || cat == "data_parallel") {
      r.compute_by_tid[tid].push_back(iv);
    } else if (cat == "wait") {
      r.wait_by_tid[tid].push_back(iv);
    } else if (cat == "collective") {
      r.comm.push_back(iv);
    } else if (cat == "data") {
      r.data.push_back(iv);
    } else if (is_gpu_compute(cat)) {
      r.gpu_compute.push_back(iv);
    } else if (cat == "gpu_nccl") {
      r.gpu_comm.push_back(iv);
    }
  }
  std::vector<StepBreakdown> out;
  for (auto& [pid, r] : ranks) {
    const bool gpu = !r.gpu_compute.empty() || !r.gpu_comm.empty();
    Intervals compute, comm;
    if (gpu) {
      compute = interval_union(r.gpu_compute);
      comm = interval_union(r.gpu_comm);
    } else {
      Intervals per_thread;
      for (auto& [tid, c] : r.compute_by_tid) {
        Intervals busy = interval_subtract(interval_union(c), interval_union(r.wait_by_tid[tid]));
        per_thread.insert(per_thread.end(), busy.begin(), busy.end());
      }
      compute = interval_union(per_thread);
      comm = interval_union(r.comm);
    }
    const Intervals data = interval_union(r.data);
    std::sort(r.steps.begin(), r.steps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [step, w] : r.steps) {
      StepBreakdown s;
      s.rank = pid;
      s.step = step;
      s.gpu = gpu;
      const Intervals c = interval_clip(compute, w), m = interval_clip(comm, w);
      Intervals both = c;
      both.insert(both.end(), m.begin(), m.end());
      s.step_s = (w.end - w.begin) / 1e6;
      s.compute_s = interval_length(c) / 1e6;
      s.comm_s = interval_length(m) / 1e6;
      s.exposed_comm_s = interval_length(interval_subtract(m, c)) / 1e6;
      s.idle_s = s.step_s - interval_length(interval_union(both)) / 1e6;
      s.data_s = interval_length(interval_clip(data, w)) / 1e6;
      out.push_back(s);
    }
  }
  return out;
}

BreakdownMean mean_breakdown(const std::vector<StepBreakdown>& steps) {
  BreakdownMean m;
  for (const StepBreakdown& s : steps) {
    ++m.n;
    m.step_s += s.step_s;
    m.compute_s += s.compute_s;
    m.comm_s += s.comm_s;
    m.exposed_comm_s += s.exposed_comm_s;
    m.idle_s += s.idle_s;
  }
  if (m.n > 0) {
    const double n = static_cast<double>(m.n);
    m.step_s /= n;
    m.compute_s /= n;
    m.comm_s /= n;
    m.exposed_comm_s /= n;
    m.idle_s /= n;
  }
  return m;
}

nlohmann::json to_json(const StepBreakdown& s) {
  return {{"rank", s.rank},         {"step", s.step},           {"step_s", s.step_s},
          {"compute_s", s.compute_s}, {"comm_s", s.comm_s},     {"exposed_comm_s", s.exposed_comm_s},
          {"idle_s", s.idle_s},     {"data_s", s.data_s},       {"source", s.gpu ? "gpu" : "cpu"}};
}

nlohmann::json to_json(const BreakdownMean& m) {
  return {{"steps", m.n},         {"step_s", m.step_s}, {"compute_s", m.compute_s}, {"comm_s", m.comm_s},
          {"exposed_comm_s", m.exposed_comm_s}, {"idle_s", m.idle_s}};
}

std::string format_breakdown_table(const std::vector<StepBreakdown>& steps) {
  std::string out = "rank  step    step_ms  compute_ms   comm_ms  exposed_ms   idle_ms   data_ms\n";
  char line[160];
  for (const StepBreakdown& s : steps) {
    std::snprintf(line, sizeof(line), "%4lld %5lld %10.2f %11.2f %9.2f %11.2f %9.2f %9.2f%s\n",
                  static_cast<long long>(s.rank), static_cast<long long>(s.step), s.step_s * 1e3, s.compute_s * 1e3,
                  s.comm_s * 1e3, s.exposed_comm_s * 1e3, s.idle_s * 1e3, s.data_s * 1e3, s.gpu ? "  (GPU)" : "");
    out += line;
  }
  return out;
}

}  // namespace ctitan
