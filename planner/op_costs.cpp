#include "planner/op_costs.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/errors.h"
#include "common/quantile.h"
#include "planner/model_desc.h"
#include "planner/plan.h"
#include "profiling/peak_flops.h"
#include "trainer/config/config_loader.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

std::vector<int64_t> dims_of(const nlohmann::json& args, size_t i) {
  if (!args.is_object() || !args.contains("Input Dims")) return {};
  const nlohmann::json& d = args["Input Dims"];
  if (!d.is_array() || i >= d.size() || !d[i].is_array()) return {};
  std::vector<int64_t> out;
  for (const nlohmann::json& v : d[i])
    if (v.is_number_integer()) out.push_back(v.get<int64_t>());
  return out;
}

std::string dtype_of(const nlohmann::json& args, size_t i) {
  if (!args.is_object() || !args.contains("Input type")) return "";
  const nlohmann::json& t = args["Input type"];
  return t.is_array() && i < t.size() && t[i].is_string() ? t[i].get<std::string>() : "";
}

double element_bytes(const std::string& dtype) {
  if (dtype.find("BFloat16") != std::string::npos || dtype.find("Half") != std::string::npos) return 2;
  if (dtype.find("Float8") != std::string::npos || dtype.find("char") != std::string::npos) return 1;
  if (dtype == "double" || dtype == "long int" || dtype.find("int64") != std::string::npos) return 8;
  return 4;  // float, int, and unrecorded dtypes
}

bool contains_attention(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name.find("attention") != std::string::npos;
}

double median(const std::vector<double>& v) { return v.empty() ? 0 : quantile(v, 0.5); }

// What a real run's trace can hold: no traced event lasts a day, and no
// tensor has more than 2^48 elements (256 TiB at one byte each, more than
// any device or host holds).
constexpr double kMaxEventUs = 86400e6;
constexpr double kMaxTensorElements = 281474976710656.0;  // 2^48

// "event 12 ('aten::mm')" for messages: the index in traceEvents and the
// name, cut short and printable.
std::string event_label(const nlohmann::json& e, size_t index) {
  std::string name = e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
  if (name.size() > 60) name = name.substr(0, 57) + "...";
  for (char& c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return "event " + std::to_string(index) + " ('" + name + "')";
}

std::string number_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// An event's "ts" or "dur" (microseconds): a finite number, a time >= 0 and
// a duration > 0 and under a day. InputError naming the event otherwise.
double event_us(const nlohmann::json& e, const char* key, size_t index) {
  const bool duration = std::string(key) == "dur";
  if (!e.contains(key) || !e[key].is_number())
    throw InputError(event_label(e, index) + " has no number \"" + key + "\"");
  const double v = e[key].get<double>();
  if (!std::isfinite(v) || v < 0 || (duration && (v <= 0 || v > kMaxEventUs)))
    throw InputError(event_label(e, index) + " has \"" + key + "\" = " + number_text(v) + ": " +
                     (duration ? "a duration is a positive number of microseconds, under a day"
                               : "a time is a finite number of microseconds, not negative"));
  return v;
}

// An op's "Input Dims": every size a whole number in [0, 2^48], every
// tensor's element count at most 2^48. InputError naming the event otherwise.
void check_input_dims(const nlohmann::json& e, size_t index) {
  if (!e.contains("args") || !e["args"].is_object() || !e["args"].contains("Input Dims")) return;
  const nlohmann::json& dims = e["args"]["Input Dims"];
  if (!dims.is_array()) throw InputError(event_label(e, index) + " has \"Input Dims\" that are not a list of shapes");
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!dims[i].is_array()) continue;  // a scalar argument
    double elements = 1;
    for (const nlohmann::json& d : dims[i]) {
      if (d.is_array()) continue;  // a tensor list's shapes (not read)
      const bool whole = d.is_number_integer() || (d.is_number() && std::nearbyint(d.get<double>()) == d.get<double>());
      const double v = d.is_number() ? d.get<double>() : NAN;
      if (!whole || !(v >= 0) || v > kMaxTensorElements)
        throw InputError(event_label(e, index) + " has input " + std::to_string(i) + " of shape " + dims[i].dump() +
                         "; a size is a whole number from 0 to 2^48");
      elements *= v;
    }
    if (elements > kMaxTensorElements)
      throw InputError(event_label(e, index) + " has input " + std::to_string(i) + " of shape " + dims[i].dump() +
                       ", " + number_text(elements) + " elements; no tensor holds more than 2^48");
  }
}

}  // namespace

const char* op_class_name(OpClass c) {
  switch (c) {
    case OpClass::gemm: return "gemm";
    case OpClass::attention: return "attention";
    case OpClass::elementwise: return "elementwise";
    case OpClass::view: return "view";
    case OpClass::collective: return "collective";
  }
  return "?";
}

LinearLaw fit_linear_law(const std::vector<std::pair<double, double>>& work_seconds) {
  LinearLaw law;
  std::vector<std::pair<double, double>> s;
  for (const auto& [x, t] : work_seconds)
    if (t > 0 && x >= 0 && std::isfinite(x) && std::isfinite(t)) s.emplace_back(x, t);
  law.n = s.size();
  if (s.empty()) return law;
  const bool same_work = std::all_of(s.begin(), s.end(), [&](const auto& p) { return p.first == s.front().first; });
  if (same_work) {  // one size: no slope to fit. Its typical (median) time is all throughput, or all fixed cost
    std::vector<double> t;  // when there is no work (views)
    for (const auto& p : s) t.push_back(p.second);
    const double x = s.front().first;
    (x > 0 ? law.per_unit_s : law.fixed_s) = x > 0 ? median(t) / x : median(t);
    std::vector<double> err;
    for (double v : t) err.push_back(std::fabs(law.predict(x) / v - 1));
    law.median_abs_err = median(err);
    return law;
  }
  // Weighted least squares on the relative error: weights 1/t².
  double sw = 0, sx = 0, sxx = 0, st = 0, sxt = 0;
  for (const auto& [x, t] : s) {
    const double w = 1 / (t * t);
    sw += w, sx += w * x, sxx += w * x * x, st += w * t, sxt += w * x * t;
  }
  const double det = sw * sxx - sx * sx;
  double a = 0, b = 0;
  if (det > 1e-300 * sw * sxx && det > 0) {
    a = (st * sxx - sx * sxt) / det;
    b = (sw * sxt - sx * st) / det;
  }
  if (!(det > 0) || a < 0) {  // no fixed part (or x does not vary): t = b·x
    a = 0;
    b = sxx > 0 ? sxt / sxx : 0;
  }
  if (b < 0 || (b == 0 && a == 0)) {  // no throughput term: t = a
    b = 0;
    a = st / sw;
  }
  law.fixed_s = a;
  law.per_unit_s = b;
  std::vector<double> err;
  for (const auto& [x, t] : s) err.push_back(std::fabs(law.predict(x) / t - 1));
  law.median_abs_err = median(err);
  return law;
}

bool classify_op(const std::string& name, const nlohmann::json& args, OpSample& out) {
  out.name = name;
  static const std::set<std::string> kGemm = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                                              "aten::_scaled_mm"};
  if (kGemm.count(name)) {
    // The two matrices: mm/bmm/_scaled_mm take them first, addmm/baddbmm after the bias.
    const size_t first = name == "aten::addmm" || name == "aten::baddbmm" ? 1 : 0;
    const std::vector<int64_t> a = dims_of(args, first), b = dims_of(args, first + 1);
    if (a.size() < 2 || b.size() < 2 || a.size() != b.size()) return false;
    double flops = 2.0 * static_cast<double>(a[a.size() - 2]) * static_cast<double>(a.back()) *
                   static_cast<double>(b.back());
    for (size_t i = 0; i + 2 < a.size(); ++i) flops *= static_cast<double>(a[i]);  // batch
    out.cls = OpClass::gemm;
    out.work = flops;
    out.min_dim = static_cast<double>(std::min({a[a.size() - 2], a.back(), b.back()}));
    out.dtype = dtype_of(args, first);
    return flops > 0;
  }
  if (contains_attention(name)) {
    const std::vector<int64_t> q = dims_of(args, 0), k = dims_of(args, 1);
    if (q.size() != 4 || k.size() != 4) return false;
    out.cls = OpClass::attention;
    out.work = 4.0 * static_cast<double>(q[0]) * static_cast<double>(q[1]) * static_cast<double>(q[2]) *
               static_cast<double>(k[2]) * static_cast<double>(q[3]);
    out.dtype = name.find("ackward") != std::string::npos ? "backward" : "forward";
    out.min_dim = static_cast<double>(q[3]);
    return out.work > 0;
  }
  // Ops that only make a new tensor header: what they cost is dispatch.
  static const std::set<std::string> kView = {
      "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias", "aten::t", "aten::transpose",
      "aten::permute", "aten::expand", "aten::as_strided", "aten::slice", "aten::select", "aten::unsqueeze",
      "aten::squeeze", "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::detach", "aten::alias",
      "aten::split", "aten::chunk", "aten::narrow", "aten::unbind", "aten::resolve_conj", "aten::resolve_neg",
      "aten::lift_fresh", "aten::numpy_T", "aten::flatten", "aten::unflatten", "aten::view_as", "aten::expand_as",
      "aten::split_with_sizes", "aten::contiguous", "aten::result_type", "aten::is_nonzero", "aten::item",
      "aten::_local_scalar_dense", "aten::size", "aten::stride"};
  if (kView.count(name)) {
    out.cls = OpClass::view;
    out.work = 0;
    return true;
  }
  if (name.rfind("aten::", 0) != 0 || !args.is_object() || !args.contains("Input Dims")) return false;
  double bytes = 0;
  for (size_t i = 0; i < args["Input Dims"].size(); ++i) {
    const std::vector<int64_t> d = dims_of(args, i);
    if (d.empty()) continue;
    double n = 1;
    for (int64_t v : d) n *= static_cast<double>(v);
    bytes += n * element_bytes(dtype_of(args, i));
  }
  out.cls = OpClass::elementwise;
  out.work = bytes;
  return true;
}

TraceSamples trace_samples(const nlohmann::json& trace) {
  TraceSamples out;
  if (trace.contains("ctitan") && trace["ctitan"].is_object())
    out.op_source = trace["ctitan"].value("op_source", std::string());
  const nlohmann::json& events = trace.contains("traceEvents") ? trace["traceEvents"] : trace;
  if (!events.is_array()) return out;
  struct Op {
    double ts, dur;
    const nlohmann::json* e;
  };
  std::map<std::pair<int64_t, int64_t>, std::vector<Op>> tracks;  // (pid, tid) → cpu ops
  for (size_t index = 0; index < events.size(); ++index) {
    const nlohmann::json& e = events[index];
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string() || e["ph"] != "X") continue;
    const std::string cat = e.contains("cat") && e["cat"].is_string() ? e["cat"].get<std::string>() : "";
    if (cat != "step" && cat != "collective" && cat != "compute" && cat != "data" && cat != "optimizer" &&
        cat != "cpu_op")
      continue;
    // Every time read is a real one: a negative, zero, infinite or
    // day-long duration, or a shape no tensor has, is a damaged trace.
    const double dur_us = event_us(e, "dur", index);
    const double ts_us = event_us(e, "ts", index);
    if (cat == "cpu_op") check_input_dims(e, index);
    if (cat == "step") {
      ++out.steps;
      out.step_seconds += dur_us * 1e-6;
      out.step_spans.push_back({e.value("name", ""), ts_us, dur_us});
    } else if (cat == "collective") {
      const nlohmann::json args = e.value("args", nlohmann::json::object());
      const double bytes = args.is_object() ? args.value("bytes", 0.0) : 0.0;
      // Per collective and group ("all_gather dp_shard"): their links and sizes differ.
      const std::string kind = args.is_object() && args.contains("op")
                                   ? args.value("op", std::string()) + " " + args.value("group", std::string())
                                   : e.value("name", "");
      if (!std::isfinite(bytes) || bytes > kMaxTensorElements * 8)
        throw InputError(event_label(e, index) + " moves " + number_text(bytes) + " bytes; no collective moves more "
                         "than 2^51");
      if (bytes > 0)
        out.ops.push_back({e.value("name", ""), OpClass::collective, kind, bytes, dur_us * 1e-6, 0, ts_us});
    } else if (cat == "compute" || cat == "data" || cat == "optimizer") {
      out.scopes.push_back({e.value("name", ""), ts_us, dur_us});
    } else if (cat == "cpu_op") {
      tracks[{e.value("pid", int64_t{0}), e.value("tid", int64_t{0})}].push_back({ts_us, dur_us, &e});
    }
  }
  // Leaves only: an op with an op nested inside it is counted through its children
  // (aten::linear through its addmm). A GEMM or attention op counts whole: what runs
  // inside it is its kernel.
  for (auto& [track, ops] : tracks) {
    std::sort(ops.begin(), ops.end(), [](const Op& a, const Op& b) { return a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur; });
    std::vector<bool> counted_parent(ops.size(), false);  // inside a counted gemm / attention op
    for (size_t i = 0; i < ops.size(); ++i) {
      const nlohmann::json& e = *ops[i].e;
      const bool leaf = i + 1 >= ops.size() || ops[i + 1].ts >= ops[i].ts + ops[i].dur;
      OpSample s;
      const std::string name = e.value("name", "");
      const nlohmann::json args = e.value("args", nlohmann::json::object());
      if (counted_parent[i] || !classify_op(name, args, s)) continue;
      if (s.cls == OpClass::elementwise && !leaf) continue;
      s.seconds = ops[i].dur * 1e-6;
      s.ts_us = ops[i].ts;
      out.ops.push_back(s);
      if (s.cls == OpClass::gemm || s.cls == OpClass::attention)
        for (size_t j = i + 1; j < ops.size() && ops[j].ts < ops[i].ts + ops[i].dur; ++j) counted_parent[j] = true;
    }
  }
  // Step time no classified op accounts for: the framework's own host work
  // (autograd engine, composite-op dispatch, the optimizer loop).
  double classified = 0;
  for (const OpSample& o : out.ops)
    if (o.cls != OpClass::collective) classified += o.seconds;
  out.gap_seconds = std::max(0.0, out.step_seconds - classified);
  return out;
}

OpCostModel fit_op_costs(const TraceSamples& samples) {
  OpCostModel m;
  m.steps = samples.steps;
  m.step_seconds = samples.steps ? samples.step_seconds / static_cast<double>(samples.steps) : 0;
  std::map<std::pair<int, std::string>, std::vector<std::pair<double, double>>> groups;
  for (const OpSample& s : samples.ops)
    groups[{static_cast<int>(s.cls), s.cls == OpClass::gemm || s.cls == OpClass::attention ||
                                             s.cls == OpClass::collective
                                         ? s.dtype
                                     : s.cls == OpClass::elementwise                      ? s.name
                                                                                          : ""}]
        .emplace_back(s.work, s.seconds);
  for (const auto& [key, xy] : groups) {
    if (xy.size() < 2) continue;
    OpClassFit f{static_cast<OpClass>(key.first), key.second, fit_linear_law(xy), 0};
    double total = 0;
    for (const auto& p : xy) total += p.second;
    f.seconds_per_step = samples.steps ? total / static_cast<double>(samples.steps) : total;
    m.fits.push_back(f);
  }
  return m;
}

namespace {

// A measured rate may pass the peak by this much (a CPU's peak is itself a
// measurement, of one GEMM size, at one moment's clock), not more.
constexpr double kPeakSlack = 1.1;

// The peak FLOP/s of the hardware a run was traced on, and where it came
// from: its MFU's denominator (summary.json peak_flops; on a CPU measured by
// the run in its GEMM dtype at its threads, or metrics.peak_tflops). For a
// CPU run only: a GPU run's cpu_op times are kernel launches, not kernels.
// {0, ""} where the run recorded none (stopped before its summary).
std::pair<double, std::string> traced_peak(const fs::path& dir) {
  std::ifstream in(dir / "summary.json");
  if (!in) return {0, ""};
  try {
    const nlohmann::json s = nlohmann::json::parse(in);
    if (!s.is_object() || !s.contains("device") || s["device"] != "cpu" || !s.contains("peak_flops") ||
        !s["peak_flops"].is_number())
      return {0, ""};
    const double peak = s["peak_flops"].get<double>();
    const std::string source = s.contains("peak_flops_source") && s["peak_flops_source"].is_string()
                                   ? s["peak_flops_source"].get<std::string>()
                                   : "";
    return {std::isfinite(peak) && peak > 0 ? peak : 0, source};
  } catch (const nlohmann::json::exception&) {
    return {0, ""};
  }
}

// A class's law (GEMMs per dtype, attention per direction) fitted to the
// traced ops; the FLOP/s it implies (the class's work over the time the law
// gives its ops; attention at its causal half) must not pass the peak.
void check_below_peak(const TraceSamples& samples, double peak, const std::string& source,
                      const std::string& run_dir) {
  if (!(peak > 0)) return;
  std::map<std::pair<int, std::string>, std::vector<const OpSample*>> groups;
  for (const OpSample& o : samples.ops)
    if ((o.cls == OpClass::gemm || o.cls == OpClass::attention) && o.seconds > 0 && o.work > 0)
      groups[{static_cast<int>(o.cls), o.dtype}].push_back(&o);
  for (const auto& [key, ops] : groups) {
    const bool attention = key.first == static_cast<int>(OpClass::attention);
    std::vector<std::pair<double, double>> xy;
    const OpSample* largest = ops.front();
    for (const OpSample* o : ops) {
      xy.emplace_back(attention ? o->work / 2 : o->work, o->seconds);
      if (o->work > largest->work) largest = o;
    }
    const LinearLaw law = fit_linear_law(xy);
    double work = 0, time = 0;
    for (const auto& [w, t] : xy) work += w, time += law.predict(w);
    const double rate = time > 0 ? work / time : INFINITY;
    if (rate <= kPeakSlack * peak) continue;
    throw InputError("ctitan plan --profile: " + run_dir + ": the traced " + op_class_name(static_cast<OpClass>(key.first)) +
                     " ops (" + (key.second.empty() ? "-" : key.second) + ", " + std::to_string(ops.size()) +
                     ", the largest " + largest->name + " of " + number_text(largest->work) + " FLOPs) do " +
                     number_text(rate) + " FLOP/s by their fitted law, more than the peak of the hardware they ran on (" +
                     number_text(peak) + " FLOP/s, summary.json peak_flops" + (source.empty() ? "" : ", " + source) +
                     "); their durations or Input Dims are not a real run's: record the run again");
  }
}

}  // namespace

TraceSamples run_trace_samples(const std::string& run_dir, std::vector<std::string>* files_read) {
  const fs::path dir(run_dir);
  if (!fs::is_directory(dir))
    throw InputError("ctitan plan --profile: " + run_dir + " is not a run directory; give the folder `ctitan train` "
                     "wrote (job.dump_folder)");
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec))
    if (it->is_regular_file() && it->path().filename() == "rank0_trace.json" &&
        it->path().parent_path().filename().string().rfind("iteration_", 0) == 0)
      files.push_back(it->path());
  std::sort(files.begin(), files.end());
  if (files.empty())
    throw InputError("ctitan plan --profile: " + run_dir + " has no trace (no iteration_N/rank0_trace.json); "
                     "record one with `ctitan train ... --profiling.enable_profiling --profiling.profile_freq N`");
  TraceSamples all;
  for (const fs::path& f : files) {
    std::ifstream in(f);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw InputError("ctitan plan --profile: " + f.string() + " is not a readable trace (" + e.what() +
                       "); record the run again");
    }
    TraceSamples s;
    try {
      s = trace_samples(j);
    } catch (const InputError& e) {
      throw InputError("ctitan plan --profile: " + f.string() + ": " + e.what() +
                       "; the trace is damaged: record the run again");
    } catch (const nlohmann::json::exception& e) {  // a field of another type than a trace's
      throw InputError("ctitan plan --profile: " + f.string() + " is not a readable trace (" + e.what() +
                       "); record the run again");
    }
    all.ops.insert(all.ops.end(), s.ops.begin(), s.ops.end());
    all.scopes.insert(all.scopes.end(), s.scopes.begin(), s.scopes.end());
    all.step_spans.insert(all.step_spans.end(), s.step_spans.begin(), s.step_spans.end());
    all.steps += s.steps;
    all.step_seconds += s.step_seconds;
    if (all.op_source.empty()) all.op_source = s.op_source;
    if (files_read) files_read->push_back(f.string());
  }
  if (std::none_of(all.ops.begin(), all.ops.end(), [](const OpSample& s) { return s.cls != OpClass::collective; }))
    throw InputError("ctitan plan --profile: the traces in " + run_dir + " hold no LibTorch op with input shapes "
                     "(the op profiler did not run); record them again with profiling.enable_profiling");
  const auto [peak, source] = traced_peak(dir);
  check_below_peak(all, peak, source, run_dir);
  return all;
}

OpCostModel op_costs_from_run(const std::string& run_dir) {
  std::vector<std::string> files;
  OpCostModel m = fit_op_costs(run_trace_samples(run_dir, &files));
  m.run_dir = run_dir;
  m.traces = files;
  return m;
}

DerivedEfficiency efficiency_from_samples(const TraceSamples& samples, const Efficiency& start, double peak_flops,
                                          double bandwidth) {
  DerivedEfficiency d{start, {}};
  // GEMM: t = a · flops · (1 + h/x), the planner's law; for each h on a
  // log grid the best a is closed-form (least squares on the relative
  // error), and the h with the smallest error wins.
  std::vector<const OpSample*> gemms;
  std::vector<double> fixed_costs;
  double ew_bytes = 0, ew_seconds = 0;
  std::vector<double> attn_rate;  // forward attention: causal FLOPs per second
  std::vector<OpSample> elementwise;
  for (const OpSample& s : samples.ops) {
    if (s.seconds <= 0) continue;
    if (s.cls == OpClass::gemm && s.min_dim > 0) {
      gemms.push_back(&s);
    } else if (s.cls == OpClass::attention && s.dtype == "forward" && s.min_dim > 0) {
      attn_rate.push_back(s.work / 2 / s.seconds);
    } else if (s.cls == OpClass::view) {
      fixed_costs.push_back(s.seconds);
    } else if (s.cls == OpClass::elementwise) {
      elementwise.push_back(s);
    }
  }
  // The half size is a size curve: it needs GEMMs of several sizes (the
  // smallest dimension spanning 4x or more). A run whose GEMMs are nearly all
  // of one size (debugmodel's: min(M, N, K) = dim) keeps `start`'s and
  // measures the efficiency alone (spec_from_run: on a CPU, this machine's
  // GEMM size curve).
  double dim_lo = INFINITY, dim_hi = 0;
  for (const OpSample* g : gemms) dim_lo = std::min(dim_lo, g->min_dim), dim_hi = std::max(dim_hi, g->min_dim);
  const bool sizes = dim_hi >= 4 * dim_lo || start.gemm_half_size <= 0;
  if (gemms.size() >= 3 && peak_flops > 0) {
    double best_err = INFINITY, best_a = 0, best_h = 0;
    for (double h = sizes ? 0.5 : start.gemm_half_size; h <= (sizes ? 1e5 : start.gemm_half_size); h *= 1.05) {
      double num = 0, den = 0;
      for (const OpSample* g : gemms) {
        const double u = g->work * (1 + h / g->min_dim);
        num += u / g->seconds, den += u * u / (g->seconds * g->seconds);
      }
      const double a = num / den;
      double err = 0;
      for (const OpSample* g : gemms) {
        const double r = a * g->work * (1 + h / g->min_dim) / g->seconds - 1;
        err += r * r;
      }
      if (err < best_err) best_err = err, best_a = a, best_h = h;
    }
    d.eff.gemm = 1 / (best_a * peak_flops);
    d.eff.gemm_half_size = best_h;
    d.measured.push_back("gemm");
    if (sizes) d.measured.push_back("gemm_half_size");
  }
  if (!fixed_costs.empty()) {
    d.eff.kernel_overhead_s = median(fixed_costs);
    d.measured.push_back("kernel_overhead_s");
  }
  // Element-wise: each op's bytes over its time beyond the dispatch cost.
  for (const OpSample& s : elementwise) {
    ew_bytes += s.work;
    ew_seconds += std::max(s.seconds - d.eff.kernel_overhead_s, 0.1 * s.seconds);
  }
  if (ew_seconds > 0 && ew_bytes > 0 && bandwidth > 0) {
    d.eff.memory = ew_bytes / ew_seconds / bandwidth;
    d.measured.push_back("memory");
  }
  if (!attn_rate.empty() && peak_flops > 0) {
    // The planner applies attention · Dh/(Dh + half/4); the head dim of the measured ops.
    double dh = 0;
    for (const OpSample& s : samples.ops)
      if (s.cls == OpClass::attention && s.dtype == "forward") dh = s.min_dim;
    const double sat = dh / (dh + d.eff.gemm_half_size / 4);
    d.eff.attention = median(attn_rate) / peak_flops / sat;
    d.measured.push_back("attention");
  }
  return d;
}

HardwareSpec spec_from_run(const HardwareSpec& start, const TraceSamples& traced, const JobConfig& run_cfg,
                           int64_t run_world_size, const std::string& run_dir, double untraced_step_s) {
  HardwareSpec hw = resolved_for_plan(start);  // a cpu spec's zeros: this machine's probe
  // The profiler slows every op a little: scale the trace to the untraced step time.
  TraceSamples samples = traced;
  const double traced_step = samples.steps ? samples.step_seconds / static_cast<double>(samples.steps) : 0;
  const double slowdown = untraced_step_s > 0 && traced_step > untraced_step_s ? untraced_step_s / traced_step : 1.0;
  for (OpSample& o : samples.ops) o.seconds *= slowdown;
  samples.step_seconds *= slowdown;
  samples.gap_seconds *= slowdown;
  const RankRates rates = rank_rates(hw, run_cfg, run_world_size);
  DerivedEfficiency d = efficiency_from_samples(samples, hw.eff, rates.peak_flops, rates.bandwidth);
  // A CPU run whose GEMMs are nearly all of one size cannot say how their
  // efficiency grows with size: this machine's GEMMs of 16 … 1024 do
  // (measure_cpu_gemm_half_size), not the spec's curve, fitted elsewhere.
  const auto has = [&d](const char* m) { return std::find(d.measured.begin(), d.measured.end(), m) != d.measured.end(); };
  const bool probed = hw.kind == "cpu" && has("gemm") && !has("gemm_half_size");
  if (probed) {
    std::string dtype;
    for (const OpSample& o : samples.ops)
      if (o.cls == OpClass::gemm) dtype = o.dtype;
    Efficiency start_eff = hw.eff;
    start_eff.gemm_half_size = measure_cpu_gemm_half_size(dtype.find("BFloat16") != std::string::npos ? at::kBFloat16
                                                          : dtype.find("Half") != std::string::npos   ? at::kHalf
                                                                                                      : at::kFloat);
    d = efficiency_from_samples(samples, start_eff, rates.peak_flops, rates.bandwidth);
  }
  hw.eff = d.eff;
  // Its GEMM efficiency is the peak's under the half-size law it fitted,
  // not a ratio to the probe's rate by size.
  hw.probed_gemms.clear();
  // A measured per-op cost replaces the probe's dispatch multiple.
  if (has("kernel_overhead_s")) hw.eff.dispatch = 0;
  std::vector<std::string> measured = d.measured;
  if (probed) {
    char h[96];
    std::snprintf(h, sizeof h, "gemm_half_size %.0f from this CPU's GEMMs of 16-1024", d.eff.gemm_half_size);
    measured.push_back(h);
  }
  std::erase_if(measured, [](const std::string& m) { return m == "attention" || m == "memory"; });
  if (samples.steps > 0) {
    // The run's own plan against what its trace measured, class by class.
    const double steps = static_cast<double>(samples.steps);
    double attn = 0, elem = 0, views = 0;
    for (const OpSample& s : samples.ops) {
      if (s.cls == OpClass::attention) attn += s.seconds / steps;
      if (s.cls == OpClass::elementwise) elem += s.seconds / steps;
      if (s.cls == OpClass::view) views += s.seconds / steps;
    }
    hw.eff.step_overhead_s = 0;
    PlanRequest q;
    q.cfg = run_cfg;
    q.model = model_from_config(run_cfg.model);
    q.world_size = static_cast<int>(run_world_size);
    // Each planned time is inversely proportional to its efficiency, save
    // terms the efficiency does not touch (the element-wise time of a
    // non-flash attention's scores): a few rounds of rescaling converge, or
    // stop where those terms alone exceed the measured time.
    const bool cpu = hw.kind == "cpu";
    const auto scale = [&](double& eff, double planned, double seen, const char* range) {
      if (planned > 0 && seen > 0) eff = spec_range(range, cpu).clamp(eff * planned / seen);
    };
    if (views > 0) hw.eff.dispatch = 0;  // the per-op cost is fitted to the trace's below
    for (int round = 0; round < 6; ++round) {
      const TimeBreakdown t = predict(q, hw).time;
      scale(hw.eff.attention, t.attention, attn, "attention");
      scale(hw.eff.memory, t.elementwise, elem, "memory");
      if (views > 0) scale(hw.eff.kernel_overhead_s, t.kernel_overhead, views, "kernel_overhead");
    }
    if (attn > 0) measured.push_back("attention");
    if (elem > 0) measured.push_back("memory");
    if (views > 0 && std::find(measured.begin(), measured.end(), "kernel_overhead_s") == measured.end())
      measured.push_back("kernel_overhead_s");
    hw.eff.step_overhead_s = spec_range("step_overhead", hw.kind == "cpu").clamp(samples.gap_seconds / steps);
    measured.push_back("step_overhead_s");
  }
  std::string names;
  for (const std::string& m : measured) names += (names.empty() ? "" : ", ") + m;
  hw.calibration = "measured from the traced ops of " + run_dir + " (" + (names.empty() ? "nothing" : names) +
                   "); the rest " + start.calibration;
  return hw;
}

namespace {

// measure_units over the whole of `samples`, the mean of its steps.
MeasuredUnits measure_units_mean(const TraceSamples& samples, double slowdown) {
  MeasuredUnits mu;
  std::vector<double> views;
  std::vector<const OpSample*> ops;
  for (const OpSample& o : samples.ops) {
    if (o.cls == OpClass::collective) continue;
    if (o.cls == OpClass::view) views.push_back(o.seconds);
    ops.push_back(&o);
  }
  std::sort(ops.begin(), ops.end(), [](const OpSample* a, const OpSample* b) { return a->ts_us < b->ts_us; });
  const double dispatch = median(views);
  // One span's classes: GEMM, attention and element-wise time beyond each op's
  // dispatch; the rest of the span is fixed host work.
  struct Split {
    double gemm = 0, attn = 0, elem = 0, fixed = 0;
  };
  const auto split = [&](const TraceScope& sc) {
    Split out;
    const auto first = std::lower_bound(ops.begin(), ops.end(), sc.ts_us,
                                        [](const OpSample* o, double ts) { return o->ts_us < ts; });
    for (auto it = first; it != ops.end() && (*it)->ts_us < sc.ts_us + sc.dur_us; ++it) {
      const OpSample& o = **it;
      const double work = std::max(o.seconds - dispatch, 0.1 * o.seconds);
      if (o.cls == OpClass::gemm) out.gemm += work;
      if (o.cls == OpClass::attention) out.attn += work;
      if (o.cls == OpClass::elementwise) out.elem += work;
    }
    out.fixed = std::max(0.0, sc.dur_us * 1e-6 - out.gemm - out.attn - out.elem);
    return out;
  };
  double block_f = 0, block_b = 0, units_s = 0;
  const auto add = [](UnitTimes& u, const Split& s, bool forward) {
    (forward ? u.gemm_f : u.gemm_b) += s.gemm;
    (forward ? u.attn_f : u.attn_b) += s.attn;
    (forward ? u.elem_f : u.elem_b) += s.elem;
    (forward ? u.fixed_f : u.fixed_b) += s.fixed;
  };
  for (const TraceScope& sc : samples.scopes) {
    const bool fwd = sc.name.rfind("forward ", 0) == 0, bwd = sc.name.rfind("backward ", 0) == 0;
    const std::string unit = fwd ? sc.name.substr(8) : bwd ? sc.name.substr(9) : sc.name;
    if (sc.name == "data") continue;  // in the step's fixed rest
    const Split s = split(sc);
    units_s += sc.dur_us * 1e-6;
    if ((fwd || bwd) && unit.rfind("layers.", 0) == 0) {
      add(mu.block, s, fwd);
      (fwd ? block_f : block_b) += 1;
    } else if ((fwd || bwd) && unit == "tok_embeddings") {
      add(mu.embedding, s, fwd);
    } else if ((fwd || bwd) && unit == "norm+output") {
      add(mu.head, s, fwd);
    } else if (unit == "accumulate_grads" || unit == "clip_grad_norm" || unit == "optimizer") {
      mu.param_s += s.gemm + s.attn + s.elem;
      mu.param_fixed_s += s.fixed;
    } else {
      units_s -= sc.dur_us * 1e-6;  // a span of another kind: the step's rest
    }
  }
  const double steps = std::max<double>(1, static_cast<double>(samples.steps));
  const auto per = [](UnitTimes& u, double nf, double nb) {
    const double f = nf > 0 ? 1 / nf : 0, b = nb > 0 ? 1 / nb : 0;
    u.gemm_f *= f, u.attn_f *= f, u.elem_f *= f, u.fixed_f *= f;
    u.gemm_b *= b, u.attn_b *= b, u.elem_b *= b, u.fixed_b *= b;
  };
  per(mu.block, block_f, block_b);
  per(mu.embedding, steps, steps);
  per(mu.head, steps, steps);
  mu.param_s /= steps;
  mu.param_fixed_s /= steps;
  mu.step_fixed_s = std::max(0.0, samples.step_seconds - units_s) / steps;
  for (UnitTimes* u : {&mu.block, &mu.embedding, &mu.head})
    for (double* x : {&u->gemm_f, &u->gemm_b, &u->attn_f, &u->attn_b, &u->elem_f, &u->elem_b, &u->fixed_f, &u->fixed_b})
      *x *= slowdown;
  mu.param_s *= slowdown;
  mu.param_fixed_s *= slowdown;
  mu.step_fixed_s *= slowdown;
  return mu;
}

// Every figure of a MeasuredUnits, for field-wise medians.
std::vector<double*> measured_fields(MeasuredUnits& mu) {
  std::vector<double*> v;
  for (UnitTimes* u : {&mu.block, &mu.embedding, &mu.head})
    for (double* x : {&u->gemm_f, &u->gemm_b, &u->attn_f, &u->attn_b, &u->elem_f, &u->elem_b, &u->fixed_f, &u->fixed_b})
      v.push_back(x);
  for (double* x : {&mu.param_s, &mu.param_fixed_s, &mu.step_fixed_s}) v.push_back(x);
  return v;
}

}  // namespace

MeasuredUnits measure_units(const TraceSamples& samples, double slowdown) {
  if (samples.step_spans.size() < 3) return measure_units_mean(samples, slowdown);
  // One TraceSamples per traced step: its ops and spans (the views of the
  // whole, for the dispatch cost, stay with every step).
  std::vector<MeasuredUnits> per_step;
  for (const TraceScope& st : samples.step_spans) {
    TraceSamples one;
    const auto inside = [&st](double ts) { return ts >= st.ts_us && ts < st.ts_us + st.dur_us; };
    for (const OpSample& o : samples.ops)
      if (inside(o.ts_us) || o.cls == OpClass::view) one.ops.push_back(o);
    for (const TraceScope& sc : samples.scopes)
      if (inside(sc.ts_us)) one.scopes.push_back(sc);
    one.steps = 1;
    one.step_seconds = st.dur_us * 1e-6;
    per_step.push_back(measure_units_mean(one, slowdown));
  }
  MeasuredUnits out = per_step.front();
  const std::vector<double*> dst = measured_fields(out);
  for (size_t f = 0; f < dst.size(); ++f) {
    std::vector<double> xs;
    for (MeasuredUnits& m : per_step) xs.push_back(*measured_fields(m)[f]);
    *dst[f] = median(xs);
  }
  return out;
}

namespace {

// A run's tokens per micro-batch: its whole local batch, or one pipeline
// micro-batch where the run is pipelined.
double tokens_per_micro_batch(const JobConfig& cfg) {
  const int64_t batch = cfg.parallelism.pipeline_parallel_degree > 1 ? cfg.parallelism.pipeline_parallel_microbatch_size
                                                                     : cfg.training.local_batch_size;
  return static_cast<double>(batch * cfg.training.seq_len);
}

}  // namespace

MeasuredUnits measured_units_from_run(const HardwareSpec& hw, const TraceSamples& samples, const JobConfig& run_cfg,
                                      int64_t threads, const std::string& run_dir, double untraced_step_s) {
  const double traced_step = samples.steps ? samples.step_seconds / static_cast<double>(samples.steps) : 0;
  const double slowdown = untraced_step_s > 0 && traced_step > untraced_step_s ? untraced_step_s / traced_step : 1.0;
  MeasuredUnits mu = measure_units(samples, slowdown);
  mu.run_dir = run_dir;
  mu.tokens = tokens_per_micro_batch(run_cfg);
  const ModelDesc model = model_from_config(run_cfg.model);
  mu.dim = static_cast<double>(model.dim);
  mu.vocab = static_cast<double>(model.vocab_size);
  PlanRequest q;
  q.cfg = run_cfg;
  q.model = model_from_config(run_cfg.model);
  q.world_size = 1;
  if (hw.kind == "cpu" && threads > 0) {
    const double cores = hw.cores > 0 ? hw.cores : std::max(1u, std::thread::hardware_concurrency());
    q.rate_world_size = std::max(1, static_cast<int>(std::lround(cores / static_cast<double>(threads))));
  }
  const Prediction p = predict(q, hw);
  mu.planned_block = p.block;
  mu.planned_head = p.head;
  mu.planned_embedding = p.embedding;
  mu.planned_param_elems = p.rank_param_elems;
  mu.planned_units = p.rank_units;
  mu.planned_overhead_mult = p.overhead_mult;
  mu.planned_bandwidth = p.bandwidth;
  return mu;
}

double corun_factor(const MeasuredUnits& alone, const MeasuredUnits& side_by_side, const std::string& run_dir) {
  const auto total = [](const UnitTimes& u) {
    return u.gemm_f + u.gemm_b + u.attn_f + u.attn_b + u.elem_f + u.elem_b + u.fixed_f + u.fixed_b;
  };
  const double a = total(alone.block), b = total(side_by_side.block);
  if (a <= 0 || b <= 0)
    throw InputError("ctitan plan --profile: " + run_dir + " has no traced TransformerBlock to compare with the "
                     "single-process run; record it with profiling.enable_profiling");
  const double r = b / a;
  if (r < 0.5 || r > 4) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "ctitan plan --profile: a block in %s took %.2fx its time in the single-process run; the two runs "
                  "must train one model on one batch shape (give a multi-rank run of the first run's recipe)",
                  run_dir.c_str(), r);
    throw InputError(line);
  }
  return r;
}

namespace {

// A run's world size and median untraced step time from its summary.json;
// {0, 0} where it has none (stopped early) or it does not parse.
std::pair<int64_t, double> run_summary(const fs::path& dir) {
  try {
    std::ifstream in(dir / "summary.json");
    const nlohmann::json summary = nlohmann::json::parse(in);
    return {summary.value("world_size", int64_t{0}), summary.value("step_time_median_s", 0.0)};
  } catch (const nlohmann::json::exception&) {
    return {0, 0.0};
  }
}

}  // namespace

bool profiled_run(const std::string& run_dir, std::shared_ptr<const MeasuredUnits> units, ProfiledRun& out) {
  const fs::path dir(run_dir);
  const auto [world, step] = run_summary(dir);
  if (step <= 0 || world < 2 || !fs::is_regular_file(dir / "config.toml")) return false;
  out.run_dir = run_dir;
  out.step_s = step;
  out.request = PlanRequest{};
  out.request.cfg = parse_job_config({"--job.config_file", (dir / "config.toml").string()});
  out.request.model = model_from_config(out.request.cfg.model);
  out.request.world_size = static_cast<int>(world);
  out.request.measured = std::move(units);
  return true;
}

LinkFit fit_link_to_runs(const HardwareSpec& spec, const std::vector<ProfiledRun>& runs) {
  const HardwareSpec hw = resolved_for_plan(spec);  // a cpu spec's zeros: this machine's probe
  LinkFit fit{hw, hw.intra_node.latency_s, hw.intra_node.bandwidth * hw.eff.comm, 0};
  if (runs.empty()) return fit;
  const bool both = runs.size() > 1;
  const auto spec_with = [&](double lat, double bw) {
    HardwareSpec h = hw;
    h.eff.comm = 1;
    for (Link* l : {&h.intra_node, &h.inter_node}) l->latency_s = lat, l->bandwidth = bw;
    // The link is this fit's now, not the probe's.
    std::erase_if(h.probed, [](const std::string& k) { return k.find("_node.") != std::string::npos; });
    return h;
  };
  const double spec_bw = fit.bandwidth;
  const auto error = [&](double lat, double bw) {
    const HardwareSpec h = spec_with(lat, both ? bw : spec_bw);
    double e = 0;
    for (const ProfiledRun& r : runs) {
      const double x = std::log(predict(r.request, h).time.step / r.step_s);
      e += x * x;
    }
    return e;
  };
  // Exponents (decades) of the best point on a grid around (l0, b0).
  double best = INFINITY, lat_exp = 0, bw_exp = std::log10(fit.bandwidth);
  const auto search = [&](double l_lo, double l_hi, double b_lo, double b_hi, double step) {
    double bl = lat_exp, bb = bw_exp;
    for (double l = l_lo; l <= l_hi + 1e-9; l += step)
      for (double b = both ? b_lo : bw_exp; b <= (both ? b_hi : bw_exp) + 1e-9; b += step) {
        const double e = error(std::pow(10.0, l), std::pow(10.0, b));
        if (e < best) best = e, bl = l, bb = b;
      }
    lat_exp = bl, bw_exp = bb;
  };
  search(-5, -1, 7, 10, 0.1);
  search(lat_exp - 0.1, lat_exp + 0.1, bw_exp - 0.1, bw_exp + 0.1, 0.005);
  search(lat_exp - 0.005, lat_exp + 0.005, bw_exp - 0.005, bw_exp + 0.005, 0.0005);
  fit.latency_s = std::pow(10.0, lat_exp);
  if (both) fit.bandwidth = std::pow(10.0, bw_exp);
  fit.spec = spec_with(fit.latency_s, fit.bandwidth);
  fit.rms_log_error = std::sqrt(best / static_cast<double>(runs.size()));
  std::string names;
  for (const ProfiledRun& r : runs) names += (names.empty() ? "" : ", ") + r.run_dir;
  char line[200];
  std::snprintf(line, sizeof line, "; the link fitted to the step times of %zu multi-rank run%s (latency %.0f us, "
                "bandwidth %.2f GB/s, %.1f %% rms): ", runs.size(), runs.size() == 1 ? "" : "s", 1e6 * fit.latency_s,
                fit.bandwidth / 1e9, 100 * fit.rms_log_error);
  fit.spec.calibration += line + names;
  return fit;
}

namespace {

// `hw` with the efficiencies a run's traced ops imply, on the rates one of
// that run's ranks had, and (a single process) its units.
// The threads a run's ranks used (env.json; 0: unknown, the rate of a
// process alone on the machine).
int64_t run_threads(const fs::path& dir) {
  try {
    std::ifstream in(dir / "env.json");
    return nlohmann::json::parse(in).value("num_threads", int64_t{0});
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
}

JobConfig run_config(const fs::path& dir) {
  if (!fs::is_regular_file(dir / "config.toml"))
    throw InputError("ctitan plan --profile: " + dir.string() + " has traces but no config.toml; give the run directory "
                     "`ctitan train` wrote");
  return parse_job_config({"--job.config_file", (dir / "config.toml").string()});
}

HardwareSpec spec_measured_from_run(const HardwareSpec& hw, const std::string& run_dir,
                                    std::shared_ptr<const MeasuredUnits>* units) {
  const fs::path dir(run_dir);
  const TraceSamples samples = run_trace_samples(run_dir);  // the one-line refusals first
  const JobConfig run_cfg = run_config(dir);
  // A run stopped before its summary: traces are rank 0's of one process.
  auto [run_world, untraced_step_s] = run_summary(dir);
  if (run_world < 1) run_world = 1;
  const HardwareSpec spec = spec_from_run(hw, samples, run_cfg, run_world, run_dir, untraced_step_s);
  // A single process's units hold no communication waits: its compute, unit
  // by unit, is what the recipe's compute is scaled from.
  if (units && run_world == 1)
    *units = std::make_shared<const MeasuredUnits>(
        measured_units_from_run(spec, samples, run_cfg, run_threads(dir), run_dir, untraced_step_s));
  return spec;
}

}  // namespace

MeasuredPlanning measured_planning(const HardwareSpec& hw, const std::vector<std::string>& run_dirs) {
  MeasuredPlanning out;
  if (run_dirs.empty()) {
    out.spec = hw;
    return out;
  }
  out.spec = spec_measured_from_run(hw, run_dirs.front(), &out.units);
  if (run_dirs.size() == 1) return out;
  if (!out.units)
    throw InputError("ctitan plan --profile: the first run (" + run_dirs.front() + ") must be a single process; its "
                     "units are the measured compute the multi-rank runs' slowdown applies to");
  MeasuredUnits mu = *out.units;
  // Further single processes: the size curve, of the same model at another
  // micro-batch size.
  std::vector<std::string> multi;
  const std::string model = describe(model_from_config(run_config(run_dirs.front()).model));
  for (size_t i = 1; i < run_dirs.size(); ++i) {
    const fs::path dir(run_dirs[i]);
    const auto [world, untraced_step_s] = run_summary(dir);
    if (world != 1 || untraced_step_s <= 0) {  // refused below unless a finished multi-rank run
      multi.push_back(run_dirs[i]);
      continue;
    }
    const TraceSamples samples = run_trace_samples(run_dirs[i]);
    const JobConfig cfg = run_config(dir);
    // Planned on the first run's spec, as every recipe is.
    const auto other = std::make_shared<const MeasuredUnits>(
        measured_units_from_run(out.spec, samples, cfg, run_threads(dir), run_dirs[i], untraced_step_s));
    const bool same_tokens = other->tokens == mu.tokens ||
                             std::any_of(mu.shapes.begin(), mu.shapes.end(),
                                         [&](const MeasuredShape& s) { return s.tokens == other->tokens; });
    if (describe(model_from_config(cfg.model)) != model || same_tokens)
      throw InputError("ctitan plan --profile: " + run_dirs[i] + " is a single process of another model or of a "
                       "micro-batch size already profiled; a further single-process --profile is the first run's "
                       "model at another training.local_batch_size (its size curve)");
    mu.shapes.push_back({run_dirs[i], other->tokens, other->block, other->head, other->embedding, other->planned_block,
                         other->planned_head, other->planned_embedding});
  }
  std::vector<ProfiledRun> runs;
  for (const std::string& d : multi) {
    ProfiledRun r;
    if (!profiled_run(d, nullptr, r))
      throw InputError("ctitan plan --profile: " + d + " is not a finished multi-rank run (its summary.json names "
                       "more than one rank and a step time, beside its config.toml); after the first, every --profile "
                       "is one, of the same model and batch, or a single process at another micro-batch size");
    runs.push_back(std::move(r));
  }
  mu.corun = runs.empty() ? 1.0 : INFINITY;
  for (const ProfiledRun& r : runs) {
    // Against the single process of its micro-batch size (a pipelined
    // run's: one pipeline micro-batch; the first run's where none is:
    // refused as not comparable when it is another).
    MeasuredUnits alone = *out.units;
    for (const MeasuredShape& sh : mu.shapes)
      if (sh.tokens == tokens_per_micro_batch(r.request.cfg)) alone.block = sh.block;
    const double f = corun_factor(alone, measure_units(run_trace_samples(r.run_dir)), r.run_dir);
    if (f < mu.corun) mu.corun = f, mu.corun_run_dir = r.run_dir;
  }
  out.units = std::make_shared<const MeasuredUnits>(std::move(mu));
  for (ProfiledRun& r : runs) r.request.measured = out.units;
  if (!runs.empty()) out.spec = fit_link_to_runs(out.spec, runs).spec;
  return out;
}

namespace {

std::string fmt_pct(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", v);
  return b;
}

std::string unit_of(OpClass c) { return c == OpClass::gemm || c == OpClass::attention ? "GFLOP" : "GB"; }

}  // namespace

std::string render_op_costs(const OpCostModel& m) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "op-level costs measured in %s (%zu trace file%s, %lld traced step%s, %.1f ms per step)\n",
                m.run_dir.c_str(), m.traces.size(), m.traces.size() == 1 ? "" : "s", static_cast<long long>(m.steps),
                m.steps == 1 ? "" : "s", 1e3 * m.step_seconds);
  out << line;
  std::snprintf(line, sizeof line, "%-12s %-20s %7s %12s %7s %12s %18s %12s\n", "class", "kind", "ops", "ms/step",
                "share", "fixed (us)", "throughput", "median |err|");
  out << line;
  // Element-wise ops are fitted per op; the table shows the 8 that take the most time.
  std::vector<const OpClassFit*> shown, rest;
  std::vector<const OpClassFit*> elementwise;
  for (const OpClassFit& f : m.fits) (f.cls == OpClass::elementwise ? elementwise : shown).push_back(&f);
  std::stable_sort(elementwise.begin(), elementwise.end(),
                   [](const OpClassFit* a, const OpClassFit* b) { return a->seconds_per_step > b->seconds_per_step; });
  for (size_t i = 0; i < elementwise.size(); ++i) (i < 8 ? shown : rest).push_back(elementwise[i]);
  for (const OpClassFit* fp : shown) {
    const OpClassFit& f = *fp;
    const double per_unit = f.law.per_unit_s * 1e9;  // seconds per GFLOP or per GB
    char rate[64] = "-";
    if (per_unit > 0) std::snprintf(rate, sizeof rate, "%.3g %s/s", 1 / per_unit, unit_of(f.cls).c_str());
    // A collective is timed issue to completion, overlapping compute: in flight, not a share of the step.
    const std::string share = f.cls == OpClass::collective ? "-"
                              : m.step_seconds > 0      ? fmt_pct(100 * f.seconds_per_step / m.step_seconds)
                                                        : "0.0%";
    std::snprintf(line, sizeof line, "%-12s %-20s %7zu %12.2f %7s %12.1f %18s %11.1f%%\n", op_class_name(f.cls),
                  f.dtype.empty() ? "-" : f.dtype.c_str(), f.law.n, 1e3 * f.seconds_per_step, share.c_str(),
                  1e6 * f.law.fixed_s, rate, 100 * f.law.median_abs_err);
    out << line;
  }
  if (!rest.empty()) {
    double t = 0;
    size_t n = 0;
    for (const OpClassFit* f : rest) t += f->seconds_per_step, n += f->law.n;
    std::snprintf(line, sizeof line, "%-12s %-20s %7zu %12.2f %6.1f%%   (%zu more element-wise ops, each fitted: --json)\n",
                  "elementwise", "other", n, 1e3 * t, m.step_seconds > 0 ? 100 * t / m.step_seconds : 0.0, rest.size());
    out << line;
  }
  out << "law per class: time = fixed + work / throughput, least squares on the relative error; work is FLOPs "
         "(gemm, attention) or bytes (elementwise inputs, collective payload); collectives are timed issue to "
         "completion (in flight, overlapping compute), so they have no share of the step\n";
  return out.str();
}

nlohmann::json op_costs_json(const OpCostModel& m) {
  nlohmann::json fits = nlohmann::json::array();
  for (const OpClassFit& f : m.fits)
    fits.push_back({{"class", op_class_name(f.cls)},
                    {"dtype", f.dtype},
                    {"ops", f.law.n},
                    {"seconds_per_step", f.seconds_per_step},
                    {"fixed_s", f.law.fixed_s},
                    {"per_unit_s", f.law.per_unit_s},
                    {"unit", f.cls == OpClass::gemm || f.cls == OpClass::attention ? "flop" : "byte"},
                    {"median_abs_err", f.law.median_abs_err}});
  return {{"run_dir", m.run_dir}, {"traces", m.traces}, {"steps", m.steps}, {"step_seconds", m.step_seconds},
          {"fits", fits}};
}

}  // namespace ctitan
