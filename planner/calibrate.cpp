#include "planner/calibrate.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "planner/plan.h"
#include "results/sqlite_stmt.h"
#include "trainer/config/config_loader.h"
#include "trainer/distributed/mesh.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

using results_detail::Statement;

// The weight of the pull towards the prior (fit_spec), per squared log unit
// of each constant (3x what it was when GEMM efficiency pinned at 1 and 50 us
// moved into the kernel overhead); the data term is the mean squared log error.
constexpr double kPriorPull = 3e-3;
// The weight of a vector's distance beyond the ranges (log units squared).
constexpr double kOutOfRange = 1.0;
// Rows above which the first round fits an evenly spread subsample.
constexpr size_t kSubsampleRows = 160;

double median_abs(std::vector<double> v) {
  if (v.empty()) return 0;
  for (double& x : v) x = std::fabs(x);
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Nelder-Mead on an unconstrained vector (the callers map it to the spec).
// Stops at max_evals, when the simplex has collapsed, or when the best value
// has not improved by a relative 1e-5 over the last `patience` evaluations
// (the long flat tail of a fit costs most of its evaluations and moves no
// prediction). `on_eval` sees every evaluation (progress).
std::vector<double> minimize(const std::function<double(const std::vector<double>&)>& f0, std::vector<double> x0,
                             double step, int max_evals, const std::function<void(double)>& on_eval = {}) {
  const size_t n = x0.size();
  const int patience = 8 * static_cast<int>(n + 1);
  double best = std::numeric_limits<double>::infinity(), best_at_mark = best;
  int evals = 0, mark = 0;
  const auto f = [&](const std::vector<double>& x) {
    const double y = f0(x);
    ++evals;
    best = std::min(best, y);
    if (on_eval) on_eval(best);
    return y;
  };
  std::vector<std::vector<double>> s(n + 1, x0);
  for (size_t i = 0; i < n; ++i) s[i + 1][i] += step;
  std::vector<double> fs(n + 1);
  for (size_t i = 0; i <= n; ++i) fs[i] = f(s[i]);
  best_at_mark = best, mark = evals;
  while (evals < max_evals) {
    std::vector<size_t> order(n + 1);
    for (size_t i = 0; i <= n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return fs[a] < fs[b]; });
    std::vector<std::vector<double>> s2;
    std::vector<double> f2;
    for (size_t i : order) s2.push_back(s[i]), f2.push_back(fs[i]);
    s = s2, fs = f2;
    if (std::fabs(fs[n] - fs[0]) < 1e-10 + 1e-8 * std::fabs(fs[0])) break;
    if (evals - mark >= patience) {
      if (best_at_mark - best < 1e-5 * std::fabs(best_at_mark)) break;
      best_at_mark = best, mark = evals;
    }
    std::vector<double> c(n, 0.0);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) c[j] += s[i][j] / static_cast<double>(n);
    const auto along = [&](double t) {
      std::vector<double> p(n);
      for (size_t j = 0; j < n; ++j) p[j] = c[j] + t * (s[n][j] - c[j]);
      return p;
    };
    const auto xr = along(-1.0);
    const double fr = f(xr);
    if (fr < fs[0]) {
      const auto xe = along(-2.0);
      const double fe = f(xe);
      if (fe < fr) s[n] = xe, fs[n] = fe;
      else s[n] = xr, fs[n] = fr;
    } else if (fr < fs[n - 1]) {
      s[n] = xr, fs[n] = fr;
    } else {
      const auto xc = along(0.5);
      const double fc = f(xc);
      if (fc < fs[n]) {
        s[n] = xc, fs[n] = fc;
      } else {
        for (size_t i = 1; i <= n; ++i) {
          for (size_t j = 0; j < n; ++j) s[i][j] = s[0][j] + 0.5 * (s[i][j] - s[0][j]);
          fs[i] = f(s[i]);
        }
      }
    }
  }
  return s[static_cast<size_t>(std::min_element(fs.begin(), fs.end()) - fs.begin())];
}

double logistic(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double logit(double p) { return std::log(p / (1.0 - p)); }

// A fitted constant as an unconstrained number: its log (as the fit has
// always moved it: a ratio moves it as much anywhere), the overlap's logit.
// The spec gets the value clamped into its physical range (fit_bound), and
// the loss adds out_of_range() for a vector beyond it, so the simplex comes
// back instead of walking a flat clamped plateau. A zero (a free overhead)
// starts at 1e-4 of its range's top.
bool is_fraction(const char* key) { return std::string(key) == "overlap"; }
double to_free(const char* key, const FitBound& b, double x) {
  if (is_fraction(key)) return logit(std::clamp(x, 0.01, 0.99));
  return std::log(std::clamp(x, b.lo > 0 ? b.lo : 1e-4 * b.hi, b.hi));
}
double from_free(const char* key, const FitBound& b, double v) {
  if (is_fraction(key)) return std::clamp(logistic(v), b.lo, b.hi);
  return std::clamp(std::exp(v), b.lo, b.hi);
}
double beyond(const char* key, const FitBound& b, double v) {
  if (is_fraction(key)) return 0;
  const double lo = b.lo > 0 ? std::log(b.lo) : -std::numeric_limits<double>::infinity(), hi = std::log(b.hi);
  return v - std::clamp(v, lo, hi);
}

// The step-time constants, in vector order, and the memory ones.
const char* const kTimeKeys[] = {"gemm",    "gemm_half_size", "attention",     "memory",        "kernel_overhead", "comm",
                                 "latency", "overlap",        "step_overhead", "fused_traffic", "multi_thread",    "dispatch"};
const char* const kMemKeys[] = {"activation_factor", "memory_overhead", "memory_fixed"};

// The step-time parameters of a spec as an unconstrained vector and back.
std::vector<double> time_vector(const HardwareSpec& h) {
  const Efficiency& e = h.eff;
  const bool cpu = h.kind == "cpu";
  // A spec without `dispatch` (0: its kernels cost kernel_overhead_s) keeps
  // a placeholder the loss does not see.
  const double x[] = {e.gemm,    e.gemm_half_size,     e.attention,       e.memory,         e.kernel_overhead_s,
                      e.comm,    h.intra_node.latency_s, e.overlap,       e.step_overhead_s, e.fused_traffic,
                      e.multi_thread, e.dispatch > 0 ? e.dispatch : 1.0};
  std::vector<double> v;
  for (size_t i = 0; i < std::size(kTimeKeys); ++i) v.push_back(to_free(kTimeKeys[i], fit_bound(kTimeKeys[i], cpu), x[i]));
  return v;
}
void set_time(HardwareSpec& h, const std::vector<double>& v) {
  Efficiency& e = h.eff;
  const bool cpu = h.kind == "cpu";
  double unused = 0;
  double* x[] = {&e.gemm,    &e.gemm_half_size,      &e.attention,     &e.memory,          &e.kernel_overhead_s,
                 &e.comm,    &h.intra_node.latency_s, &e.overlap,       &e.step_overhead_s, &e.fused_traffic,
                 &e.multi_thread, e.dispatch > 0 ? &e.dispatch : &unused};
  for (size_t i = 0; i < std::size(kTimeKeys); ++i) *x[i] = from_free(kTimeKeys[i], fit_bound(kTimeKeys[i], cpu), v[i]);
  if (!cpu) e.multi_thread = 1.0;
}
std::vector<double> mem_vector(const HardwareSpec& h) {
  const bool cpu = h.kind == "cpu";
  const double x[] = {h.eff.activation_factor, h.eff.memory_overhead, h.eff.memory_fixed_bytes};
  std::vector<double> v;
  for (size_t i = 0; i < std::size(kMemKeys); ++i) v.push_back(to_free(kMemKeys[i], fit_bound(kMemKeys[i], cpu), x[i]));
  return v;
}
void set_mem(HardwareSpec& h, const std::vector<double>& v) {
  const bool cpu = h.kind == "cpu";
  double* x[] = {&h.eff.activation_factor, &h.eff.memory_overhead, &h.eff.memory_fixed_bytes};
  for (size_t i = 0; i < std::size(kMemKeys); ++i) *x[i] = from_free(kMemKeys[i], fit_bound(kMemKeys[i], cpu), v[i]);
}
// How far a vector lies beyond the ranges (squared, in log units).
double out_of_range(const char* const* keys, const std::vector<double>& v, bool cpu) {
  double sum = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double d = beyond(keys[i], fit_bound(keys[i], cpu), v[i]);
    sum += d * d;
  }
  return sum;
}

PlanRequest request_of(const MeasuredRun& r) {
  PlanRequest q;
  q.cfg = r.cfg;
  q.model = r.model ? *r.model : model_from_config(r.cfg.model);
  q.world_size = r.world_size;
  q.bf16_gemm_widened = r.bf16_gemm_widened;
  q.machine = r.machine;
  q.framework = r.framework;
  return q;
}

std::string label_of(const JobConfig& c, int ws) {
  const MeshShape s = resolve_mesh_shape(c.parallelism, ws);
  std::string l = "ws=" + std::to_string(ws) + " " + s.describe();
  if (c.parallelism.enable_async_tensor_parallel) l += " async-tp";
  if (s.pp > 1) l += " " + c.parallelism.pipeline_parallel_schedule;
  l += " ac=" + c.activation_checkpoint.mode;
  if (!c.model.converters.empty()) l += " float8";
  if (c.compile.enable) l += " compile";
  l += " bs=" + std::to_string(c.training.local_batch_size) + " seq=" + std::to_string(c.training.seq_len);
  return l;
}

}  // namespace

std::vector<MeasuredRun> measured_runs(const std::string& db_path) {
  std::error_code ec;
  if (!fs::is_regular_file(db_path, ec))
    throw InputError("ctitan plan --calibrate: " + db_path + " is not a results database file (run a sweep with --db first)");
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    const std::string why = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    throw InputError("ctitan plan --calibrate: cannot open " + db_path + ": " + why);
  }
  std::vector<MeasuredRun> runs;
  try {
    Statement q(db, db_path,
                "SELECT r.id, r.config_toml, r.world_size, s.mem_peak_bytes FROM runs r JOIN summaries s ON s.run_id = r.id "
                "WHERE r.status = 'ok' AND s.mem_peak_bytes > 0 ORDER BY r.id");
    Statement steps(db, db_path, "SELECT step_time_s FROM steps WHERE run_id = ? AND rank = 0 AND step > ? ORDER BY step");
    Statement isa(db, db_path, "SELECT value FROM env WHERE run_id = ? AND key = 'aten_cpu_capability'");
    Statement probe(db, db_path, "SELECT key, value FROM env WHERE run_id = ? AND key LIKE 'machine_probe.%'");
    while (q.step()) {
      MeasuredRun r;
      r.run_id = q.int64(0);
      load_toml_text_into(r.cfg, q.text(1), db_path + ": run " + std::to_string(r.run_id) + "'s config");
      r.world_size = static_cast<int>(q.int64(2));
      r.mem_peak_bytes = static_cast<double>(q.int64(3));
      isa.reset();
      isa.bind_all(r.run_id);
      if (isa.step() && !isa.is_null(0)) r.bf16_gemm_widened = isa.text(0).find("AVX512") == std::string::npos ? 1 : 0;
      probe.reset();
      probe.bind_all(r.run_id);
      nlohmann::json figures = nlohmann::json::object();
      while (probe.step())
        if (!probe.is_null(1)) figures[probe.text(0).substr(std::string("machine_probe.").size())] = probe.text(1);
      r.machine = MachineProbe::from_json(figures);
      steps.reset();
      steps.bind_all(r.run_id, r.cfg.metrics.warmup_steps > 0 ? r.cfg.metrics.warmup_steps : int64_t{1});
      std::vector<double> t;
      while (steps.step())
        if (!steps.is_null(0)) t.push_back(steps.real(0));
      if (t.empty()) continue;
      std::sort(t.begin(), t.end());
      r.step_time_s = t[t.size() / 2];
      r.label = label_of(r.cfg, r.world_size);
      runs.push_back(std::move(r));
    }
  } catch (const std::exception& e) {
    sqlite3_close(db);
    throw InputError("ctitan plan --calibrate: " + db_path + ": " + e.what());
  }
  sqlite3_close(db);
  if (runs.size() < 6)
    throw InputError("ctitan plan --calibrate: " + db_path + " has " + std::to_string(runs.size()) +
                     " ok runs with step times and peaks; calibration needs at least 6 (run a sweep, e.g. recipes/sweeps/calibrate_cpu.toml)");
  return runs;
}

FitBound fit_bound(const std::string& key, bool cpu) {
  // A GPU's efficiencies are fractions of its datasheet peaks: (0, 1]. A cpu
  // spec's are ratios to its machine's probe (trainer/machine_probe.h: a
  // model's GEMMs, blocked differently and on several threads per rank, can
  // beat the probe's square one), so they may exceed 1, within [0.01, 8];
  // `dispatch` counts probed dispatches per kernel, 0.5 to 50. A kernel's launch overhead is a few
  // microseconds on a GPU (at most 20) and an op's dispatch on a CPU at most
  // 50; the rest are what a step, a link or an allocator can physically be.
  static const std::map<std::string, FitBound> gpu = {
      {"gemm", {0.02, 1}},          {"attention", {0.02, 1}},  {"memory", {0.02, 1}},
      {"comm", {0.02, 1}},          {"fp8_gemm", {0.02, 1}},   {"overlap", {0, 1}},
      {"kernel_overhead", {0, 20e-6}}, {"latency", {0.5e-6, 100e-6}}, {"step_overhead", {0, 2}},
      {"gemm_half_size", {8, 8192}}, {"fused_traffic", {0.05, 1}}, {"multi_thread", {0.25, 4}},
      {"dispatch", {0.5, 50}},
      {"activation_factor", {0.25, 8}}, {"memory_overhead", {0, 1}}, {"memory_fixed", {0, 16.0 * (1 << 30)}}};
  static const std::map<std::string, FitBound> cpu_only = {
      {"gemm", {0.01, 8}},          {"attention", {0.01, 8}},  {"memory", {0.01, 8}},
      {"comm", {0.01, 8}},          {"fp8_gemm", {0.01, 8}},   {"kernel_overhead", {0, 50e-6}},
      {"latency", {1e-6, 5e-3}},    {"step_overhead", {0, 10}}};
  if (cpu)
    if (auto it = cpu_only.find(key); it != cpu_only.end()) return it->second;
  if (auto it = gpu.find(key); it != gpu.end()) return it->second;
  throw std::logic_error("fit_bound: no range for '" + key + "'");
}

std::vector<std::pair<std::string, double>> fitted_constants(const HardwareSpec& h) {
  const Efficiency& e = h.eff;
  return {{"gemm", e.gemm},
          {"gemm_half_size", e.gemm_half_size},
          {"attention", e.attention},
          {"memory", e.memory},
          {"kernel_overhead", e.kernel_overhead_s},
          {"comm", e.comm},
          {"latency", h.intra_node.latency_s},
          {"overlap", e.overlap},
          {"step_overhead", e.step_overhead_s},
          {"fused_traffic", e.fused_traffic},
          {"multi_thread", e.multi_thread},
          {"dispatch", e.dispatch},
          {"activation_factor", e.activation_factor},
          {"memory_overhead", e.memory_overhead},
          {"memory_fixed", e.memory_fixed_bytes}};
}

HardwareSpec fit_spec(const HardwareSpec& start, const std::vector<MeasuredRun>& fit, const HardwareSpec* prior,
                      int rounds) {
  FitOptions o;
  o.prior = prior;
  o.rounds = rounds;
  return fit_spec(start, fit, o);
}

HardwareSpec fit_spec(const HardwareSpec& start, const std::vector<MeasuredRun>& fit, const FitOptions& o) {
  // One measurement of the peak for every prediction below.
  HardwareSpec work = start;
  const HardwareSpec& p0 = o.prior ? *o.prior : start;
  // The pull towards the prior (log units, the overlap's logit): the same
  // weight for every constant and either way (a ratio up costs what the
  // same ratio down does), so the runs move a constant only as far as they
  // need and two constants the runs cannot tell apart (GEMM efficiency and
  // a per-kernel overhead) do not trade one against the other. A constant
  // the prior leaves at zero (a free overhead) is not pulled; `dispatch`
  // at zero (unused) is held at its placeholder.
  const bool cpu = work.kind == "cpu";
  const auto anchors = [&p0](const std::vector<double>& v0, const char* const* keys) {
    std::vector<double> a = v0;
    for (size_t i = 0; i < a.size(); ++i)
      for (const auto& [k, x] : fitted_constants(p0))
        if (k == keys[i] && x <= 0 && k != "dispatch") a[i] = std::nan("");
    return a;
  };
  const std::vector<double> t0 = anchors(time_vector(p0), kTimeKeys), m0 = anchors(mem_vector(p0), kMemKeys);
  const auto pull = [cpu](const std::vector<double>& v, const std::vector<double>& v0, const char* const* keys) {
    double sum = 0;
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isnan(v0[i])) sum += (v[i] - v0[i]) * (v[i] - v0[i]);
    return kPriorPull * sum + kOutOfRange * out_of_range(keys, v, cpu);
  };
  std::vector<PlanRequest> req;
  for (const MeasuredRun& r : fit) req.push_back(request_of(r));
  // Many rows: the first round fits an evenly spread subsample (the
  // simplex's long walk), the later ones polish on every row from there.
  std::vector<size_t> all(req.size()), sub;
  for (size_t i = 0; i < req.size(); ++i) all[i] = i;
  const size_t every = (req.size() + kSubsampleRows - 1) / kSubsampleRows;
  for (size_t i = 0; i < req.size(); i += std::max<size_t>(every, 1)) sub.push_back(i);
  // Progress: one line on stderr every few seconds.
  const auto t_start = std::chrono::steady_clock::now();
  auto last_line = t_start;
  int evals = 0;
  std::string stage;
  size_t rows_now = 0;
  const auto on_eval = [&](double best) {
    ++evals;
    if (!o.progress) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_line < std::chrono::seconds(3)) return;
    last_line = now;
    std::fprintf(stderr, "  calibrate%s%s: %s, %zu rows, %d evaluations, loss %.5g (%.0f s)\n", o.label.empty() ? "" : " ",
                 o.label.c_str(), stage.c_str(), rows_now, evals, best,
                 std::chrono::duration<double>(now - t_start).count());
  };
  const auto time_loss = [&](const std::vector<size_t>& rows) {
    return [&, rows](const std::vector<double>& v) {
      HardwareSpec s = work;
      set_time(s, v);
      double sum = 0;
      for (size_t i : rows) {
        const double e = std::log(predict(req[i], s).time.step / fit[i].step_time_s);
        sum += e * e;
      }
      return sum / static_cast<double>(rows.size()) + pull(v, t0, kTimeKeys);
    };
  };
  const auto mem_loss = [&](const std::vector<size_t>& rows) {
    return [&, rows](const std::vector<double>& v) {
      HardwareSpec s = work;
      set_mem(s, v);
      double sum = 0;
      int n = 0;
      for (size_t i : rows) {
        if (fit[i].mem_peak_bytes <= 0) continue;  // a published row without memory
        const double e = predict(req[i], s).memory.total / fit[i].mem_peak_bytes - 1;
        sum += e * e;
        ++n;
      }
      return n > 0 ? sum / n + pull(v, m0, kMemKeys) : 0.0;
    };
  };
  // Many rows: o.rounds restarts on the subsample, then one polish on all.
  const bool subsample = sub.size() < all.size();
  const int rounds = std::max(o.rounds, 1) + (subsample ? 1 : 0);
  std::vector<double> tv = time_vector(work);
  for (int round = 0; round < rounds; ++round) {
    const bool first = round == 0, polish = subsample && round == rounds - 1;
    const std::vector<size_t>& rows = polish || !subsample ? all : sub;
    rows_now = rows.size();
    stage = "step time, round " + std::to_string(round + 1) + "/" + std::to_string(rounds);
    tv = minimize(time_loss(rows), tv, first ? 0.7 : polish ? 0.1 : 0.3, first ? 900 : polish ? 250 : 500, on_eval);
    if (o.on_round) {
      HardwareSpec s = work;
      set_time(s, tv);
      o.on_round(s, stage);
    }
  }
  set_time(work, tv);
  const bool any_memory = std::any_of(fit.begin(), fit.end(), [](const MeasuredRun& r) { return r.mem_peak_bytes > 0; });
  if (any_memory) {
    std::vector<double> mv = mem_vector(work);
    const int mem_rounds = std::max(std::min(o.rounds, 2), 1) + (subsample ? 1 : 0);
    for (int round = 0; round < mem_rounds; ++round) {
      const bool first = round == 0, polish = subsample && round == mem_rounds - 1;
      const std::vector<size_t>& rows = polish || !subsample ? all : sub;
      rows_now = rows.size();
      stage = "peak memory, round " + std::to_string(round + 1) + "/" + std::to_string(mem_rounds);
      mv = minimize(mem_loss(rows), mv, first ? 0.5 : polish ? 0.1 : 0.2, first ? 400 : 150, on_eval);
      if (o.on_round) {
        HardwareSpec s = work;
        set_mem(s, mv);
        o.on_round(s, stage);
      }
    }
    set_mem(work, mv);
  }
  if (o.progress)
    std::fprintf(stderr, "  calibrate%s%s: fitted %zu rows, %d evaluations (%.0f s)\n", o.label.empty() ? "" : " ",
                 o.label.c_str(), fit.size(), evals,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count());
  return work;
}

RunErrors run_errors(const HardwareSpec& spec, const MeasuredRun& r) {
  const Prediction p = predict(request_of(r), spec);
  RunErrors e;
  e.step = p.time.step / r.step_time_s - 1;
  e.mem = r.mem_peak_bytes > 0 ? p.memory.total / r.mem_peak_bytes - 1 : std::nan("");
  return e;
}

double median_abs_error(const std::vector<double>& errors) {
  std::vector<double> v;
  for (double e : errors)
    if (!std::isnan(e)) v.push_back(e);
  return median_abs(v);
}

Holdout parse_holdout(const std::string& text) {
  if (text == "every-third") return Holdout::every_third;
  if (text == "largest") return Holdout::largest;
  throw InputError("ctitan plan --holdout: '" + text + "' is not a holdout rule; give every-third or largest");
}

namespace {

// The largest models (by parameter count) and world sizes: the upper half
// of the distinct values of each (at least the largest, when there are two
// or more). Fills `why` for the held-out runs.
std::vector<bool> largest_runs(const std::vector<MeasuredRun>& runs, std::vector<std::string>& why) {
  std::vector<int64_t> params;
  for (const MeasuredRun& r : runs) params.push_back((r.model ? *r.model : model_from_config(r.cfg.model)).params());
  const auto cut = [](std::vector<int64_t> v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    if (v.size() < 2) return std::numeric_limits<int64_t>::max();
    return v[v.size() - v.size() / 2];  // the smallest held-out value
  };
  std::vector<int64_t> worlds;
  for (const MeasuredRun& r : runs) worlds.push_back(r.world_size);
  const int64_t p_cut = cut(params), w_cut = cut(worlds);
  std::vector<bool> out(runs.size());
  why.assign(runs.size(), "");
  char buf[160];
  for (size_t i = 0; i < runs.size(); ++i) {
    std::string w;
    if (params[i] >= p_cut) {
      std::snprintf(buf, sizeof buf, "model %.3g M params >= %.3g M (largest models)", params[i] / 1e6, p_cut / 1e6);
      w = buf;
    }
    if (runs[i].world_size >= w_cut) {
      std::snprintf(buf, sizeof buf, "world size %d >= %lld (largest world sizes)", runs[i].world_size,
                    static_cast<long long>(w_cut));
      w += (w.empty() ? "" : "; ") + std::string(buf);
    }
    out[i] = !w.empty();
    why[i] = w;
  }
  return out;
}

}  // namespace

std::vector<RunErrors> cross_validate(const HardwareSpec& start, const std::vector<MeasuredRun>& runs, size_t folds,
                                      FitOptions fit, const std::function<void(size_t)>& on_fold) {
  std::vector<RunErrors> cv(runs.size());
  for (size_t f = 0; f < folds; ++f) {
    std::vector<MeasuredRun> train;
    for (size_t i = 0; i < runs.size(); ++i)
      if (i % folds != f) train.push_back(runs[i]);
    fit.label = "fold " + std::to_string(f + 1) + "/" + std::to_string(folds);
    const HardwareSpec without = fit_spec(start, train, fit);
    for (size_t i = f; i < runs.size(); i += folds) cv[i] = run_errors(without, runs[i]);
    if (on_fold) on_fold(f);
  }
  return cv;
}

bool three_fold(size_t runs) { return runs >= 6 && runs <= kThreeFoldMaxRuns; }

std::string holdout_rule(Holdout holdout, size_t runs) {
  if (holdout == Holdout::largest) return "the largest models and world sizes held out, the smaller ones fit";
  if (three_fold(runs)) return "3-fold: each third held out in turn, the spec then fitted on all";
  return "two of every three fit, every third held out";
}

CalibrationResult calibrate(const HardwareSpec& start, const std::vector<MeasuredRun>& runs, const std::string& source,
                            Holdout holdout, const FitOptions& fit) {
  CalibrationResult res;
  if (holdout == Holdout::largest) {
    std::vector<std::string> why;
    const std::vector<bool> out = largest_runs(runs, why);
    for (size_t i = 0; i < runs.size(); ++i) {
      (out[i] ? res.holdout : res.fit).push_back(runs[i]);
      if (out[i]) res.holdout_why.push_back(why[i]);
    }
    if (res.holdout.empty())
      throw InputError("ctitan plan --holdout largest: every run has the same model size and world size, so none is "
                       "larger than the others; use --holdout every-third");
    if (res.fit.size() < 3)
      throw InputError("ctitan plan --holdout largest: " + std::to_string(res.fit.size()) +
                       " runs are smaller than the largest models and world sizes; fitting needs at least 3 (use "
                       "--holdout every-third)");
    res.rule = "the largest models and world sizes held out, the smaller ones fit";
  } else if (three_fold(runs.size())) {
    // Every run is held out once: each third (every third run by id) is
    // predicted by a fit of the other two; the spec is then fitted on all.
    res.fit = runs;
    FitOptions fold_fit;
    fold_fit.prior = fit.prior;
    fold_fit.rounds = fit.rounds;
    fold_fit.progress = fit.progress;
    const std::vector<RunErrors> cv = cross_validate(start, runs, 3, fold_fit);
    for (size_t fold = 0; fold < 3; ++fold)  // held out fold by fold, as the folds ran
      for (size_t i = fold; i < runs.size(); i += 3) {
        res.holdout.push_back(runs[i]);
        res.holdout_why.push_back("fold " + std::to_string(fold + 1) + "/3");
        res.holdout_time_err.push_back(cv[i].step);
        res.holdout_mem_err.push_back(cv[i].mem);
      }
    res.rule = holdout_rule(holdout, runs.size());
  } else {
    for (size_t i = 0; i < runs.size(); ++i) {
      (i % 3 == 2 ? res.holdout : res.fit).push_back(runs[i]);
      if (i % 3 == 2) res.holdout_why.push_back("every third run");
    }
    res.rule = holdout_rule(holdout, runs.size());
  }
  FitOptions final_fit = fit;
  if (final_fit.label.empty() && res.holdout_why.size() == runs.size()) final_fit.label = "all runs";
  res.spec = fit_spec(start, res.fit, final_fit);
  const auto errors = [&](const std::vector<MeasuredRun>& set, std::vector<double>& te, std::vector<double>& me) {
    for (const MeasuredRun& r : set) {
      const RunErrors e = run_errors(res.spec, r);
      te.push_back(e.step);
      me.push_back(e.mem);
    }
  };
  errors(res.fit, res.fit_time_err, res.fit_mem_err);
  if (res.holdout_time_err.empty()) errors(res.holdout, res.holdout_time_err, res.holdout_mem_err);
  res.fit_time_median_abs = median_abs_error(res.fit_time_err);
  res.fit_mem_median_abs = median_abs_error(res.fit_mem_err);
  res.holdout_time_median_abs = median_abs_error(res.holdout_time_err);
  res.holdout_mem_median_abs = median_abs_error(res.holdout_mem_err);
  // log(measured / predicted tokens/s) = log(predicted / measured step time):
  // the spread every later prediction's interval is drawn from.
  std::vector<double> log_tps_err;
  for (double e : res.holdout_time_err)
    if (std::isfinite(e) && e > -1) log_tps_err.push_back(std::log1p(e));
  res.spec.tps_error = log_spread(log_tps_err);
  char buf[512];
  if (res.holdout.size() == runs.size())
    std::snprintf(buf, sizeof buf,
                  "calibrated from %s (%zu runs fitted, each held out once in 3 folds: step time median error %.1f %%, "
                  "peak memory %.1f %%)",
                  source.c_str(), res.fit.size(), 100 * res.holdout_time_median_abs, 100 * res.holdout_mem_median_abs);
  else
    std::snprintf(buf, sizeof buf,
                  "calibrated from %s (%zu runs fitted, %zu held out%s: step time median error %.1f %%, peak memory %.1f %%)",
                  source.c_str(), res.fit.size(), res.holdout.size(),
                  holdout == Holdout::largest ? " (the largest models and world sizes)" : "",
                  100 * res.holdout_time_median_abs, 100 * res.holdout_mem_median_abs);
  res.spec.calibration = buf;
  return res;
}

int calibrate_command(const CalibrationOptions& o, std::ostream& out) {
  const HardwareSpec start = load_hardware(o.hardware);
  const std::vector<MeasuredRun> runs = measured_runs(o.db_path);
  const std::string path = o.out_path.empty() ? o.db_path + "." + start.name + ".toml" : o.out_path;
  out << "calibrating " << start.name << " from " << runs.size() << " ok runs of " << o.db_path << " ("
      << holdout_rule(o.holdout, runs.size()) << ") ..." << std::endl;
  const auto t0 = std::chrono::steady_clock::now();
  // After each round the spec so far is written (atomically): a calibration
  // stopped halfway leaves a usable spec that says it is partial.
  FitOptions fo;
  fo.progress = o.progress;
  fo.on_round = [&](const HardwareSpec& s, const std::string& stage) {
    HardwareSpec partial = s;
    partial.calibration = "partial calibration from " + fs::path(o.db_path).filename().string() + " (" + stage +
                          " done; the held-out error not yet computed)";
    partial.tps_error = LogSpread{};  // no interval before the held-out runs are predicted
    save_hardware(partial, path);
    if (o.progress) std::fprintf(stderr, "  calibrate: %s done, spec so far written to %s\n", stage.c_str(), path.c_str());
  };
  const CalibrationResult r = calibrate(start, runs, fs::path(o.db_path).filename().string(), o.holdout, fo);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  save_hardware(r.spec, path);
  if (o.json) {
    nlohmann::json j;
    const auto rows = [&](const std::vector<MeasuredRun>& set, const std::vector<double>& te, const std::vector<double>& me) {
      nlohmann::json a = nlohmann::json::array();
      for (size_t i = 0; i < set.size(); ++i)
        a.push_back({{"run_id", set[i].run_id}, {"label", set[i].label}, {"measured_step_s", set[i].step_time_s},
                     {"predicted_step_s", set[i].step_time_s * (1 + te[i])}, {"step_error", te[i]},
                     {"measured_mem_bytes", set[i].mem_peak_bytes}, {"predicted_mem_bytes", set[i].mem_peak_bytes * (1 + me[i])},
                     {"mem_error", me[i]}});
      return a;
    };
    j["fit"] = rows(r.fit, r.fit_time_err, r.fit_mem_err);
    j["holdout"] = rows(r.holdout, r.holdout_time_err, r.holdout_mem_err);
    for (size_t i = 0; i < r.holdout.size(); ++i) j["holdout"][i]["why"] = r.holdout_why[i];
    j["holdout_rule"] = r.rule;
    j["holdout_step_median_abs_error"] = r.holdout_time_median_abs;
    j["holdout_mem_median_abs_error"] = r.holdout_mem_median_abs;
    j["spec_path"] = path;
    j["calibration"] = r.spec.calibration;
    j["tps_log_error"] = {{"n", r.spec.tps_error.n}, {"mean", r.spec.tps_error.mean}, {"sd", r.spec.tps_error.sd}};
    out << j.dump(2) << "\n";
    return 0;
  }
  char line[512];
  const auto table = [&](const char* title, const std::vector<MeasuredRun>& set, const std::vector<double>& te,
                         const std::vector<double>& me) {
    out << title << "\n";
    std::snprintf(line, sizeof line, "  %-6s %-58s %10s %10s %7s %9s %9s %7s\n", "run", "point", "measured", "predicted",
                  "err", "mem MiB", "pred MiB", "err");
    out << line;
    for (size_t i = 0; i < set.size(); ++i) {
      std::snprintf(line, sizeof line, "  %-6lld %-58s %8.1fms %8.1fms %+6.1f%% %9.1f %9.1f %+6.1f%%\n",
                    static_cast<long long>(set[i].run_id), set[i].label.substr(0, 58).c_str(), set[i].step_time_s * 1e3,
                    set[i].step_time_s * (1 + te[i]) * 1e3, 100 * te[i], set[i].mem_peak_bytes / 1048576.0,
                    set[i].mem_peak_bytes * (1 + me[i]) / 1048576.0, 100 * me[i]);
      out << line;
    }
  };
  table("fitted on:", r.fit, r.fit_time_err, r.fit_mem_err);
  table(("held out (" + r.rule + "; predicted by the fitted spec):").c_str(), r.holdout, r.holdout_time_err,
        r.holdout_mem_err);
  if (o.holdout == Holdout::largest) {
    out << "why each was held out:\n";
    for (size_t i = 0; i < r.holdout.size(); ++i)
      out << "  " << r.holdout[i].run_id << "  " << r.holdout_why[i] << "\n";
  }
  std::snprintf(line, sizeof line,
                "median absolute error, step time: %.1f %% held out (%.1f %% fitted); peak memory: %.1f %% held out (%.1f %% fitted)\n",
                100 * r.holdout_time_median_abs, 100 * r.fit_time_median_abs, 100 * r.holdout_mem_median_abs,
                100 * r.fit_mem_median_abs);
  out << line;
  if (const auto iv = interval80(1.0, r.spec.tps_error)) {
    std::snprintf(line, sizeof line,
                  "80 %% interval of a prediction (tokens/s), from the %d held-out runs: x%.3f to x%.3f of it\n",
                  r.spec.tps_error.n, iv->first, iv->second);
    out << line;
  } else {
    out << "no interval: " << r.spec.tps_error.n << " held-out runs, an interval needs "
        << LogSpread::kMinForInterval << "\n";
  }
  out << "fitted efficiencies written to " << path << " (" << secs << " s); use it with ctitan plan RECIPE --hardware "
      << path << "\n";
  return 0;
}

}  // namespace ctitan
