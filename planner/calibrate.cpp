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
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "planner/plan.h"
#include "profiling/peak_flops.h"
#include "results/sqlite_stmt.h"
#include "trainer/config/config_loader.h"
#include "trainer/distributed/mesh.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

using results_detail::Statement;

double median_abs(std::vector<double> v) {
  if (v.empty()) return 0;
  for (double& x : v) x = std::fabs(x);
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Nelder-Mead on an unconstrained vector (the callers map it to the spec).
std::vector<double> minimize(const std::function<double(const std::vector<double>&)>& f, std::vector<double> x0,
                             double step, int max_evals) {
  const size_t n = x0.size();
  std::vector<std::vector<double>> s(n + 1, x0);
  for (size_t i = 0; i < n; ++i) s[i + 1][i] += step;
  std::vector<double> fs(n + 1);
  for (size_t i = 0; i <= n; ++i) fs[i] = f(s[i]);
  int evals = static_cast<int>(n + 1);
  while (evals < max_evals) {
    std::vector<size_t> order(n + 1);
    for (size_t i = 0; i <= n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return fs[a] < fs[b]; });
    std::vector<std::vector<double>> s2;
    std::vector<double> f2;
    for (size_t i : order) s2.push_back(s[i]), f2.push_back(fs[i]);
    s = s2, fs = f2;
    if (std::fabs(fs[n] - fs[0]) < 1e-10) break;
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
    ++evals;
    if (fr < fs[0]) {
      const auto xe = along(-2.0);
      const double fe = f(xe);
      ++evals;
      if (fe < fr) s[n] = xe, fs[n] = fe;
      else s[n] = xr, fs[n] = fr;
    } else if (fr < fs[n - 1]) {
      s[n] = xr, fs[n] = fr;
    } else {
      const auto xc = along(0.5);
      const double fc = f(xc);
      ++evals;
      if (fc < fs[n]) {
        s[n] = xc, fs[n] = fc;
      } else {
        for (size_t i = 1; i <= n; ++i) {
          for (size_t j = 0; j < n; ++j) s[i][j] = s[0][j] + 0.5 * (s[i][j] - s[0][j]);
          fs[i] = f(s[i]);
          ++evals;
        }
      }
    }
  }
  return s[static_cast<size_t>(std::min_element(fs.begin(), fs.end()) - fs.begin())];
}

double logistic(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double logit(double p) { return std::log(p / (1.0 - p)); }

// The step-time parameters of a spec as an unconstrained vector and back.
std::vector<double> time_vector(const HardwareSpec& h) {
  const Efficiency& e = h.eff;
  return {std::log(e.gemm), std::log(e.gemm_half_size), std::log(e.attention), std::log(e.memory),
          std::log(std::max(e.kernel_overhead_s, 1e-9)), std::log(e.comm), std::log(std::max(h.intra_node.latency_s, 1e-9)),
          logit(std::clamp(e.overlap, 0.01, 0.99)), std::log(std::max(e.step_overhead_s, 1e-6)), std::log(e.fused_traffic),
          std::log(e.multi_thread)};
}
// Every fitted value stays in the range a spec file may hold (spec_range).
void set_time(HardwareSpec& h, const std::vector<double>& v) {
  Efficiency& e = h.eff;
  const bool cpu = h.kind == "cpu";
  const auto fit = [cpu](const char* key, double x) { return spec_range(key, cpu).clamp(x); };
  e.gemm = fit("gemm", std::exp(v[0]));
  e.gemm_half_size = fit("gemm_half_size", std::exp(v[1]));
  e.attention = fit("attention", std::exp(v[2]));
  e.memory = fit("memory", std::exp(v[3]));
  e.kernel_overhead_s = fit("kernel_overhead", std::exp(v[4]));
  e.comm = fit("comm", std::exp(v[5]));
  h.intra_node.latency_s = fit("latency", std::exp(v[6]));
  e.overlap = logistic(v[7]);
  e.step_overhead_s = fit("step_overhead", std::exp(v[8]));
  e.fused_traffic = std::min(1.0, std::exp(v[9]));
  e.multi_thread = cpu ? fit("multi_thread", std::exp(v[10])) : 1.0;
}
std::vector<double> mem_vector(const HardwareSpec& h) {
  return {std::log(h.eff.activation_factor), std::log(std::max(h.eff.memory_overhead, 1e-4)),
          std::log(std::max(h.eff.memory_fixed_bytes, 1e3))};
}
void set_mem(HardwareSpec& h, const std::vector<double>& v) {
  const bool cpu = h.kind == "cpu";
  h.eff.activation_factor = spec_range("activation_factor", cpu).clamp(std::exp(v[0]));
  h.eff.memory_overhead = spec_range("memory_overhead", cpu).clamp(std::exp(v[1]));
  h.eff.memory_fixed_bytes = spec_range("memory_fixed", cpu).clamp(std::exp(v[2]));
}

PlanRequest request_of(const MeasuredRun& r) {
  PlanRequest q;
  q.cfg = r.cfg;
  q.model = r.model ? *r.model : model_from_config(r.cfg.model);
  q.world_size = r.world_size;
  q.bf16_gemm_widened = r.bf16_gemm_widened;
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
    while (q.step()) {
      MeasuredRun r;
      r.run_id = q.int64(0);
      load_toml_text_into(r.cfg, q.text(1), db_path + ": run " + std::to_string(r.run_id) + "'s config");
      r.world_size = static_cast<int>(q.int64(2));
      r.mem_peak_bytes = static_cast<double>(q.int64(3));
      isa.reset();
      isa.bind_all(r.run_id);
      if (isa.step() && !isa.is_null(0)) r.bf16_gemm_widened = isa.text(0).find("AVX512") == std::string::npos ? 1 : 0;
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

HardwareSpec fit_spec(const HardwareSpec& start, const std::vector<MeasuredRun>& fit, const HardwareSpec* prior,
                      int rounds) {
  // One measurement of the peak for every prediction below.
  HardwareSpec work = start;
  // A weak pull towards the prior's values (log space): parameters the runs
  // do not constrain (latency without latency-bound runs, the fusion factor
  // without compiled runs) stay where the spec had them instead of drifting.
  const std::vector<double> t0 = time_vector(prior ? *prior : start), m0 = mem_vector(prior ? *prior : start);
  // Parameters the prior leaves at their floor (a zero overhead) are free.
  const auto pull = [](const std::vector<double>& v, const std::vector<double>& v0) {
    double sum = 0;
    for (size_t i = 0; i < v.size(); ++i)
      if (v0[i] > std::log(2e-6)) sum += (v[i] - v0[i]) * (v[i] - v0[i]);
    return 1e-3 * sum;
  };
  if (work.kind == "cpu" && work.peak_fp32_flops <= 0) work.peak_fp32_flops = resolve_cpu_peak_flops(at::kFloat, 0).flops;
  std::vector<PlanRequest> req;
  for (const MeasuredRun& r : fit) req.push_back(request_of(r));
  const auto time_loss = [&](const std::vector<double>& v) {
    HardwareSpec s = work;
    set_time(s, v);
    double sum = 0;
    for (size_t i = 0; i < req.size(); ++i) {
      const double e = std::log(predict(req[i], s).time.step / fit[i].step_time_s);
      sum += e * e;
    }
    return sum / static_cast<double>(req.size()) + pull(v, t0);
  };
  std::vector<double> tv = time_vector(work);
  for (int round = 0; round < rounds; ++round) tv = minimize(time_loss, tv, round == 0 ? 0.7 : 0.3, 1500);
  set_time(work, tv);
  const auto mem_loss = [&](const std::vector<double>& v) {
    HardwareSpec s = work;
    set_mem(s, v);
    double sum = 0;
    int n = 0;
    for (size_t i = 0; i < req.size(); ++i) {
      if (fit[i].mem_peak_bytes <= 0) continue;  // a published row without memory
      const double e = predict(req[i], s).memory.total / fit[i].mem_peak_bytes - 1;
      sum += e * e;
      ++n;
    }
    return n > 0 ? sum / n + pull(v, m0) : 0.0;
  };
  const bool any_memory = std::any_of(fit.begin(), fit.end(), [](const MeasuredRun& r) { return r.mem_peak_bytes > 0; });
  if (any_memory) {
    std::vector<double> mv = mem_vector(work);
    for (int round = 0; round < std::min(rounds, 2); ++round) mv = minimize(mem_loss, mv, 0.5, 600);
    set_mem(work, mv);
  }
  if (start.kind == "cpu" && start.peak_fp32_flops <= 0) work.peak_fp32_flops = 0;  // measured again where it is used
  return work;
}

RunErrors run_errors(const HardwareSpec& spec, const MeasuredRun& r) {
  HardwareSpec s = spec;
  if (s.kind == "cpu" && s.peak_fp32_flops <= 0) {
    static const double peak = resolve_cpu_peak_flops(at::kFloat, 0).flops;
    s.peak_fp32_flops = peak;
  }
  const Prediction p = predict(request_of(r), s);
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

CalibrationResult calibrate(const HardwareSpec& start, const std::vector<MeasuredRun>& runs, const std::string& source) {
  CalibrationResult res;
  for (size_t i = 0; i < runs.size(); ++i) (i % 3 == 2 ? res.holdout : res.fit).push_back(runs[i]);
  res.spec = fit_spec(start, res.fit);
  const auto errors = [&](const std::vector<MeasuredRun>& set, std::vector<double>& te, std::vector<double>& me) {
    for (const MeasuredRun& r : set) {
      const RunErrors e = run_errors(res.spec, r);
      te.push_back(e.step);
      me.push_back(e.mem);
    }
  };
  errors(res.fit, res.fit_time_err, res.fit_mem_err);
  errors(res.holdout, res.holdout_time_err, res.holdout_mem_err);
  res.fit_time_median_abs = median_abs_error(res.fit_time_err);
  res.fit_mem_median_abs = median_abs_error(res.fit_mem_err);
  res.holdout_time_median_abs = median_abs_error(res.holdout_time_err);
  res.holdout_mem_median_abs = median_abs_error(res.holdout_mem_err);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "calibrated from %s (%zu runs fitted, %zu held out: step time median error %.1f %%, peak memory %.1f %%)",
                source.c_str(), res.fit.size(), res.holdout.size(), 100 * res.holdout_time_median_abs,
                100 * res.holdout_mem_median_abs);
  res.spec.calibration = buf;
  return res;
}

int calibrate_command(const CalibrationOptions& o, std::ostream& out) {
  const HardwareSpec start = load_hardware(o.hardware);
  const std::vector<MeasuredRun> runs = measured_runs(o.db_path);
  out << "calibrating " << start.name << " from " << runs.size() << " ok runs of " << o.db_path
      << " (two of every three fit, every third held out) ..." << std::endl;
  const auto t0 = std::chrono::steady_clock::now();
  const CalibrationResult r = calibrate(start, runs, fs::path(o.db_path).filename().string());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string path = o.out_path.empty() ? o.db_path + "." + start.name + ".toml" : o.out_path;
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
    j["holdout_step_median_abs_error"] = r.holdout_time_median_abs;
    j["holdout_mem_median_abs_error"] = r.holdout_mem_median_abs;
    j["spec_path"] = path;
    j["calibration"] = r.spec.calibration;
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
  table("held out (predicted by the fitted spec):", r.holdout, r.holdout_time_err, r.holdout_mem_err);
  std::snprintf(line, sizeof line,
                "median absolute error, step time: %.1f %% held out (%.1f %% fitted); peak memory: %.1f %% held out (%.1f %% fitted)\n",
                100 * r.holdout_time_median_abs, 100 * r.fit_time_median_abs, 100 * r.holdout_mem_median_abs,
                100 * r.fit_mem_median_abs);
  out << line;
  out << "fitted efficiencies written to " << path << " (" << secs << " s); use it with ctitan plan RECIPE --hardware "
      << path << "\n";
  return 0;
}

}  // namespace ctitan
