// The gate's decisions: thresholds, one metric's verdict, one point's
// verdict and the overall exit code. I/O (sides, baseline files, Markdown,
// JSON) is in gate_io.cpp.
#include "reports/gate.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "common/errors.h"
#include "reports/format.h"
#include "reports/stats.h"

namespace ctitan {
namespace {

std::string fmt_loss(double v) { return fmt::fixed(v, 4); }

bool is_failure(const std::string& status) { return status == "failed" || status == "timeout" || status == "oom"; }

std::vector<double> medians_of_runs(const std::vector<std::vector<double>>& runs) {
  std::vector<double> out;
  for (const auto& r : runs)
    if (!r.empty()) out.push_back(stats::median(r));
  return out;
}

std::vector<double> pooled(const std::vector<std::vector<double>>& runs) {
  std::vector<double> out;
  for (const auto& r : runs) out.insert(out.end(), r.begin(), r.end());
  return out;
}

std::string metric_names() {
  std::string out;
  for (const GateMetric& m : gate_metrics()) out += (out.empty() ? "" : ", ") + m.name;
  return out;
}

std::string samples_text(size_t nb, size_t nc) { return std::to_string(nb) + " vs " + std::to_string(nc); }

// The verdict from size and significance: within the threshold passes
// (better by more than it, significantly: improved); beyond it is a
// regression only when significant and with enough samples, else
// inconclusive — never a pass.
void decide(MetricCheck& c, const GateMetric& m, double threshold, bool enough, bool significant,
            const GateOptions& opts) {
  const double worse = m.higher_is_better ? -c.change : c.change;  // > 0: the wrong way
  const std::string size = fmt::signed_percent(c.change) + " vs threshold " + fmt::fixed(100 * threshold, 1) + "%";
  if (!(worse > threshold)) {
    if (-worse > threshold && enough && significant) {
      c.verdict = Verdict::improved;
      c.reason = "better by " + size;
    } else {
      c.verdict = Verdict::pass;
      c.reason = "within threshold (" + size + ")";
    }
    return;
  }
  if (!enough) {
    c.verdict = Verdict::inconclusive;
    c.reason = "worse by " + size + ", but too few samples to tell (" + samples_text(c.n_base, c.n_cand) + ", need " +
               std::to_string(opts.min_samples) + " each): add repeats";
  } else if (significant) {
    c.verdict = Verdict::regression;
    c.reason = "worse by " + size + ", significant";
  } else {
    c.verdict = Verdict::inconclusive;
    c.reason = "worse by " + size + ", but not significant at alpha " + fmt::fixed(opts.alpha, 2) +
               " (noise too large for " + samples_text(c.n_base, c.n_cand) + " samples): add repeats";
  }
}

// One value per run (its median), by repeat index.
std::map<int64_t, double> run_values_by_repeat(const GatePoint& p, const std::string& metric) {
  std::map<int64_t, double> out;
  const auto s = p.samples.find(metric);
  const auto r = p.repeats.find(metric);
  if (s == p.samples.end() || r == p.repeats.end()) return out;
  for (size_t i = 0; i < s->second.size() && i < r->second.size(); ++i)
    if (!s->second[i].empty()) out[r->second[i]] = stats::median(s->second[i]);
  return out;
}

// Paired runs: one value per run, matched by repeat index.
MetricCheck compare_paired(const GateMetric& m, const GatePoint& b, const GatePoint& c, const GateOptions& opts) {
  const auto bv = run_values_by_repeat(b, m.name), cv = run_values_by_repeat(c, m.name);
  std::vector<double> base, cand;
  for (const auto& [repeat, v] : bv)
    if (const auto it = cv.find(repeat); it != cv.end()) base.push_back(v), cand.push_back(it->second);
  MetricCheck chk = judge_paired_metric(m, base, cand, opts.threshold(m, c.name()), opts);
  if (base.empty() && (!bv.empty() || !cv.empty())) {  // values, but no repeat on both sides
    chk.verdict = Verdict::missing;
    chk.n_base = bv.size();
    chk.n_cand = cv.size();
    chk.reason = "no complete pair (the runs of the two sides have no repeat in common)";
  }
  return chk;
}

MetricCheck compare_metric(const GateMetric& m, const GatePoint& b, const GatePoint& c, const GateOptions& opts) {
  if (opts.paired) return compare_paired(m, b, c, opts);
  static const std::vector<std::vector<double>> kNone;
  const auto bi = b.samples.find(m.name), ci = c.samples.find(m.name);
  const auto& bruns = bi == b.samples.end() ? kNone : bi->second;
  const auto& cruns = ci == c.samples.end() ? kNone : ci->second;
  const bool by_run = !m.per_step || (bruns.size() >= opts.run_unit_min && cruns.size() >= opts.run_unit_min);
  MetricCheck chk = judge_metric(m, by_run ? medians_of_runs(bruns) : pooled(bruns),
                                 by_run ? medians_of_runs(cruns) : pooled(cruns), opts.threshold(m, c.name()), opts);
  chk.unit = by_run ? "runs" : "steps";
  return chk;
}

}  // namespace

const std::vector<GateMetric>& gate_metrics() {
  static const std::vector<GateMetric> kMetrics = {
      {"tps", "tps/device", true, 0.05, true, fmt::grouped},
      {"step_time", "step time", false, 0.05, true, fmt::seconds},
      {"mfu", "MFU", true, 0.05, true, fmt::mfu_percent},
      {"mem", "peak mem/rank", false, 0.05, false, fmt::bytes},
      {"loss", "final loss", false, 0.02, false, fmt_loss},
  };
  return kMetrics;
}

const GateMetric* find_gate_metric(const std::string& name) {
  static const std::map<std::string, std::string> kAliases = {
      {"memory", "mem"},      {"peak_memory", "mem"},       {"mem_peak_bytes", "mem"}, {"final_loss", "loss"},
      {"loss_final", "loss"}, {"step_time_s", "step_time"}, {"throughput", "tps"}};
  const auto alias = kAliases.find(name);
  const std::string canonical = alias == kAliases.end() ? name : alias->second;
  for (const GateMetric& m : gate_metrics())
    if (m.name == canonical) return &m;
  return nullptr;
}

ThresholdRule parse_threshold_rule(const std::string& text) {
  const auto eq = text.rfind('=');
  if (eq == std::string::npos || eq + 1 == text.size())
    throw InputError("--threshold '" + text + "' needs [POINT_GLOB:]METRIC=VALUE, e.g. tps=5% or '*ws=8*:mem=10%'");
  const std::string lhs = text.substr(0, eq), value = text.substr(eq + 1);
  const auto colon = lhs.rfind(':');
  ThresholdRule rule;
  rule.point_glob = colon == std::string::npos ? "" : lhs.substr(0, colon);
  const std::string metric = colon == std::string::npos ? lhs : lhs.substr(colon + 1);
  const GateMetric* m = find_gate_metric(metric);
  if (!m) throw InputError("--threshold '" + text + "': unknown metric '" + metric + "'; metrics: " + metric_names());
  rule.metric = m->name;
  const bool percent = value.back() == '%';
  const std::string digits = percent ? value.substr(0, value.size() - 1) : value;
  char* end = nullptr;
  const double v = std::strtod(digits.c_str(), &end);
  if (digits.empty() || end != digits.c_str() + digits.size() || !(v >= 0))
    throw InputError("--threshold '" + text + "': '" + value + "' is not a threshold; write 5% or 0.05");
  rule.threshold = percent ? v / 100.0 : v;
  if (rule.threshold > 10)
    throw InputError("--threshold '" + text + "': " + value + " is a fraction above 10 (1000%); did you mean " + value +
                     "%?");
  return rule;
}

double GateOptions::threshold(const GateMetric& metric, const std::string& point_name) const {
  double t = metric.default_threshold;
  for (const ThresholdRule& r : thresholds)
    if (r.metric == metric.name && (r.point_glob.empty() || fnmatch(r.point_glob.c_str(), point_name.c_str(), 0) == 0))
      t = r.threshold;
  return t;
}

std::string GatePoint::name() const { return (label.empty() ? "(base)" : label) + " ws=" + std::to_string(world_size); }

std::string to_string(Verdict v) {
  switch (v) {
    case Verdict::pass: return "pass";
    case Verdict::improved: return "improved";
    case Verdict::skipped: return "skipped";
    case Verdict::inconclusive: return "inconclusive";
    case Verdict::missing: return "missing";
    case Verdict::regression: return "regression";
  }
  return "?";
}

MetricCheck judge_metric(const GateMetric& m, const std::vector<double>& base, const std::vector<double>& cand,
                         double threshold, const GateOptions& opts) {
  MetricCheck c;
  c.metric = m.name;
  c.threshold = threshold;
  c.n_base = base.size();
  c.n_cand = cand.size();
  if (base.empty() && cand.empty()) {
    c.verdict = Verdict::skipped;
    c.reason = "not measured on either side";
    return c;
  }
  if (base.empty() || cand.empty()) {
    c.verdict = Verdict::missing;
    c.reason = std::string("no values in the ") + (base.empty() ? "baseline" : "candidate");
    return c;
  }
  c.base_median = stats::median(base);
  c.cand_median = stats::median(cand);
  if (c.base_median != 0) {
    c.change = c.cand_median / c.base_median - 1;
  } else {
    c.change = c.cand_median == 0 ? 0.0 : std::copysign(INFINITY, c.cand_median);
  }

  // Significance, when the sample sizes allow it: the U test where it can
  // reach alpha, else the bootstrap interval.
  const bool enough = c.n_base >= opts.min_samples && c.n_cand >= opts.min_samples;
  bool significant = false;
  if (c.n_base >= 2 && c.n_cand >= 2) {
    if (stats::mann_whitney_min_p(c.n_base, c.n_cand) <= opts.alpha) {
      const stats::UTest u = stats::mann_whitney_u(base, cand);
      c.test = u.method == stats::UMethod::exact ? "U exact" : "U normal";
      c.p_value = u.p_value;
      significant = u.p_value <= opts.alpha;
    } else {
      const stats::Interval ci = stats::bootstrap_relative_median_change(base, cand, opts.alpha);
      c.test = "bootstrap";
      c.ci_lo = ci.lo;
      c.ci_hi = ci.hi;
      significant = ci.lo > 0 || ci.hi < 0;
    }
  }
  decide(c, m, threshold, enough, significant, opts);
  return c;
}

MetricCheck judge_paired_metric(const GateMetric& m, const std::vector<double>& base, const std::vector<double>& cand,
                                double threshold, const GateOptions& opts) {
  MetricCheck c;
  c.metric = m.name;
  c.threshold = threshold;
  c.unit = "pairs";
  c.n_base = base.size();
  c.n_cand = cand.size();
  if (base.empty() && cand.empty()) {
    c.verdict = Verdict::skipped;
    c.reason = "not measured on either side";
    return c;
  }
  if (base.size() != cand.size() || base.empty()) {
    c.verdict = Verdict::missing;
    c.reason = "no complete pair (a run of one side failed or lacks the metric)";
    return c;
  }
  c.base_median = stats::median(base);
  c.cand_median = stats::median(cand);
  std::vector<double> log_ratio;
  for (size_t i = 0; i < base.size(); ++i)
    if (base[i] > 0 && cand[i] > 0) log_ratio.push_back(std::log(cand[i] / base[i]));
  if (log_ratio.size() != base.size()) {
    c.verdict = Verdict::missing;
    c.reason = "a pair has a non-positive value; no ratio";
    return c;
  }
  // The change is the median paired ratio: each pair shares the machine's
  // state of the moment, so drift cancels within it.
  c.change = std::exp(stats::median(log_ratio)) - 1;
  const stats::WilcoxonTest w = stats::wilcoxon_signed_rank(log_ratio);
  c.test = "Wilcoxon";
  c.p_value = w.p_value;
  const bool enough = log_ratio.size() >= opts.min_samples;
  const bool significant = w.n >= 1 && w.p_value <= opts.alpha;
  decide(c, m, threshold, enough, significant, opts);
  // The smallest shift of these pairs' noise (re-centred on 0) that the test
  // would call significant: what this many pairs on this machine can see.
  if (stats::wilcoxon_min_p(log_ratio.size()) <= opts.alpha) {
    const double centre = stats::median(log_ratio);
    for (int step = 1; step <= 2000; ++step) {  // 0.1 % steps up to +100 %
      const double shift = std::log1p(step * 0.001);
      std::vector<double> shifted;
      for (double d : log_ratio) shifted.push_back(d - centre + shift);
      if (stats::wilcoxon_signed_rank(shifted).p_value <= opts.alpha) {
        c.detectable = step * 0.001;
        break;
      }
    }
    if (!std::isnan(c.detectable))
      c.reason += "; with this noise " + std::to_string(log_ratio.size()) + " pairs detect changes of " +
                  fmt::fixed(100 * c.detectable, 1) + "% or more";
  }
  if (c.verdict == Verdict::inconclusive && stats::wilcoxon_min_p(log_ratio.size()) > opts.alpha) {
    size_t need = log_ratio.size();
    while (stats::wilcoxon_min_p(need) > opts.alpha) ++need;
    c.reason += " (" + std::to_string(log_ratio.size()) + " pairs can never reach alpha " + fmt::fixed(opts.alpha, 2) +
                ": at least " + std::to_string(need) + " needed)";
  }
  return c;
}

GateResult run_gate(const GateSide& base, const GateSide& cand, const GateOptions& opts) {
  GateResult r;
  r.baseline = base.description;
  r.candidate = cand.description;
  r.options = opts;
  for (const std::string& name : opts.metrics)
    if (!find_gate_metric(name))
      throw InputError("--metrics: unknown metric '" + name + "'; metrics: " + metric_names());

  const auto key = [&](const GatePoint& p) {
    return opts.match_by_world_size ? "ws=" + std::to_string(p.world_size) : p.name();
  };
  std::map<std::string, const GatePoint*> base_by_key;
  for (const GatePoint& p : base.points) base_by_key.emplace(key(p), &p);
  std::set<std::string> seen;

  for (const GatePoint& c : cand.points) {
    seen.insert(key(c));
    PointCheck pc;
    pc.name = c.name();
    pc.label = c.label;
    pc.world_size = c.world_size;
    pc.cand_status = c.status;
    const auto it = base_by_key.find(key(c));
    if (it == base_by_key.end()) {
      pc.status_verdict = pc.verdict = Verdict::missing;
      pc.reason = "only in the candidate: no baseline to compare with";
      r.points.push_back(std::move(pc));
      continue;
    }
    const GatePoint& b = *it->second;
    pc.base_status = b.status;
    const bool base_has_data = !b.samples.empty(), cand_has_data = !c.samples.empty();
    if (is_failure(c.status) && !is_failure(b.status) && base_has_data) {
      pc.status_verdict = Verdict::regression;
      pc.reason = b.status + " \u2192 " + c.status + (c.error.empty() ? "" : ": " + c.error);
    } else if (!base_has_data && !cand_has_data) {
      const bool infeasible = b.status == "infeasible" && c.status == "infeasible";
      pc.status_verdict = infeasible ? Verdict::skipped : Verdict::missing;
      pc.reason = infeasible ? "infeasible on both sides"
                             : "no ok run on either side (" + b.status + " \u2192 " + c.status + ")";
    } else if (!cand_has_data) {
      pc.status_verdict = Verdict::missing;
      pc.reason = "no ok run in the candidate (" + c.status + ")";
    } else if (!base_has_data) {
      pc.reason = "fixed: the baseline had no ok run (" + b.status + ")";
    }
    pc.verdict = pc.status_verdict;
    if (base_has_data && cand_has_data) {
      for (const GateMetric& m : gate_metrics()) {
        if (!opts.metrics.empty() && std::find(opts.metrics.begin(), opts.metrics.end(), m.name) == opts.metrics.end())
          continue;
        pc.metrics.push_back(compare_metric(m, b, c, opts));
        // A metric without values on either side (skipped) hides nothing,
        // not even an improvement of another metric.
        if (pc.metrics.back().verdict != Verdict::skipped) pc.verdict = std::max(pc.verdict, pc.metrics.back().verdict);
      }
    }
    if (pc.verdict == Verdict::skipped && !pc.metrics.empty()) pc.verdict = Verdict::pass;
    r.points.push_back(std::move(pc));
  }
  for (const GatePoint& b : base.points) {
    if (seen.count(key(b))) continue;
    PointCheck pc;
    pc.name = b.name();
    pc.label = b.label;
    pc.world_size = b.world_size;
    pc.base_status = b.status;
    pc.status_verdict = pc.verdict = Verdict::missing;
    pc.reason = "only in the baseline: the candidate did not run it";
    r.points.push_back(std::move(pc));
  }

  for (const auto& [k, base_values] : base.env) {
    const auto it = cand.env.find(k);
    if (it == cand.env.end() || it->second == base_values || base_values.empty() || it->second.empty()) continue;
    const auto join = [](const std::set<std::string>& s) {
      std::string out;
      for (const auto& v : s) out += (out.empty() ? "" : ", ") + v;
      return out;
    };
    r.env.push_back({k, join(base_values), join(it->second)});
  }

  Verdict worst = Verdict::pass;
  for (const PointCheck& p : r.points) worst = std::max(worst, p.verdict);
  const bool env_blocks = !r.env.empty() && !opts.allow_env_mismatch;
  // Numbers from different machines or LibTorch builds are not comparable:
  // that outranks everything, even a regression (which the summary still lists).
  if (env_blocks || worst == Verdict::inconclusive || worst == Verdict::missing) {
    r.verdict = "needs action";
    r.exit_code = kGateExitNeedsAction;
  }
  if (!env_blocks && worst == Verdict::regression) {
    r.verdict = "regression";
    r.exit_code = kGateExitRegression;
  }
  if (!env_blocks && worst <= Verdict::skipped) {
    const bool improved = std::any_of(r.points.begin(), r.points.end(),
                                      [](const PointCheck& p) { return p.verdict == Verdict::improved; });
    r.verdict = improved ? "improved" : "pass";
    r.exit_code = improved ? kGateExitImproved : kGateExitPass;
  }
  return r;
}

std::vector<double> paired_log_ratios(const GatePoint& base, const GatePoint& cand, const std::string& metric) {
  const auto bv = run_values_by_repeat(base, metric), cv = run_values_by_repeat(cand, metric);
  std::vector<double> out;
  for (const auto& [repeat, v] : bv)
    if (const auto it = cv.find(repeat); it != cv.end() && v > 0 && it->second > 0) out.push_back(std::log(it->second / v));
  return out;
}

double recommend_threshold(const std::vector<double>& aa_log_ratios, size_t gate_pairs, double alpha, uint64_t seed) {
  if (aa_log_ratios.empty() || gate_pairs == 0) return std::numeric_limits<double>::quiet_NaN();
  std::mt19937_64 gen(seed);
  constexpr int kResamples = 4000;
  std::vector<double> medians;
  std::vector<double> draw(gate_pairs);
  for (int k = 0; k < kResamples; ++k) {
    for (double& d : draw) {
      const double v = aa_log_ratios[gen() % aa_log_ratios.size()];
      d = (gen() & 1) ? v : -v;  // A/A: either sign equally likely
    }
    medians.push_back(std::abs(stats::median(draw)));
  }
  const double q = stats::quantile(medians, 1 - alpha);
  return std::max(0.01, std::ceil(std::expm1(q) * 100 - 1e-9) / 100);
}

}  // namespace ctitan
