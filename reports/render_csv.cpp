// CSV (RFC 4180): one row per point with raw numbers (no units, no
// thousands separators) for spreadsheets and pandas; empty cell = no value.
// The planner's prediction comes last: pred_tps (tokens/s per device),
// pred_mem_peak_bytes (per rank), their errors in percent (predicted /
// measured − 1) and the spec they were predicted on.
//
// Then `name` and `layout` (reports/aliases.h), the names the Markdown and
// HTML reports print, and — where a section trains several models
// (reports/models.h) — `model` last: speedup and baseline are then per
// model, and the effect rows end with their model too. After a blank line, the effects (one row per setting
// and value: knob_effects) and the spec's stacked chain (chain_step ≥ 1):
// median paired ratios of tokens/s and peak memory with their intervals.
// After another blank line, a [quality] sweep's points (one row each):
// seeds, tokens and time to target (mean, 95 % t interval, olympic mean),
// final loss, and against the quality baseline the verdict, the speedup at
// equal quality, the tokens/s ratio and the final loss's paired difference.
//
// Text cells (sweep, labels, stack name, error, predicted_on) carry what a
// spec or a run wrote: one starting with '=', '+', '-', '@', a tab or a CR
// would be a formula to Excel / LibreOffice / Sheets (OWASP "CSV
// injection"), so it gets a leading "'" and quotes. A text cell that is a
// plain number ("-3", "-1.5e-3") is left as it is, and the number columns
// are numbers: their negative values stay numbers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "reports/format.h"
#include "reports/report.h"

namespace ctitan {
namespace {

std::string quote(const std::string& s) { return fmt::csv_cell(s); }

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string num(const std::optional<double>& v) { return v ? num(*v) : ""; }
// A fraction as a percentage (the predictions' errors): 0.123 → 12.3.
std::string pct(const std::optional<double>& v) { return v ? num(100 * *v) : ""; }

}  // namespace

std::string render_csv(const Report& r) {
  std::ostringstream out;
  const bool models = std::any_of(r.sections.begin(), r.sections.end(),
                                  [](const SectionReport& s) { return s.several_models(); });
  out << "sweep,label,recipe,world_size,repeats,ok_runs,status,tps_median,tps_p10,tps_p90,tps_q1,tps_q3,tps_n,"
         "tflops,mfu_pct,mem_peak_bytes,loss_final,compute_s,comm_s,exposed_comm_s,idle_s,speedup,baseline,"
         "stack_index,stack_name,point_key,error,pred_tps,pred_tps_err_pct,pred_mem_peak_bytes,pred_mem_err_pct,"
         "predicted_on,name,layout,wall_s,goodput,time_to_1b_tokens_s,straggler_rank,straggler_share,straggler_marked,"
         "mfu_by_dtype_pct,useful_mfu_pct,peak_flops_source"
      << (models ? ",model" : "") << "\n";
  for (const SectionReport& sec : r.sections) {
    for (const PointStats& p : sec.points) {
      const bool tps = p.tps.n > 0;
      out << quote(sec.title) << "," << quote(p.label) << "," << quote(p.display_label) << "," << p.world_size << ","
          << p.repeats << "," << p.ok_runs << "," << quote(p.status) << "," << (tps ? num(p.tps.median) : "") << ","
          << (tps ? num(p.tps.p10) : "") << "," << (tps ? num(p.tps.p90) : "") << "," << (tps ? num(p.tps.q1) : "")
          << "," << (tps ? num(p.tps.q3) : "") << "," << p.tps.n << "," << num(p.tflops) << "," << num(p.mfu) << ","
          << num(p.mem_peak_bytes) << "," << num(p.loss_final) << "," << num(p.compute_s) << "," << num(p.comm_s) << ","
          << num(p.exposed_comm_s) << "," << num(p.idle_s) << "," << num(p.speedup) << ","
          << (p.baseline ? "true" : "false") << "," << p.stack_index << "," << quote(p.stack_name) << "," << quote(p.point_key)
          << "," << quote(p.error) << "," << num(p.pred_tps) << "," << pct(p.pred_tps_error()) << ","
          << num(p.pred_mem_peak_bytes) << "," << pct(p.pred_mem_error()) << "," << quote(p.predicted_on) << ","
          << quote(p.short_label) << "," << quote(p.layout) << "," << num(p.wall_s) << "," << num(p.goodput) << ","
          << num(p.time_to_tokens_s(1e9)) << ","
          << (p.straggler_rank ? std::to_string(*p.straggler_rank) : "") << "," << num(p.straggler_share) << ","
          << (p.straggler_share ? (p.straggler_marked ? "true" : "false") : "") << "," << num(p.mfu_by_dtype) << ","
          << num(p.useful_mfu) << "," << quote(p.peak_source);
      if (models) out << "," << quote(p.model);
      out << "\n";
    }
  }
  bool header = false;
  const auto effect_row = [&](const SectionReport& sec, const KnobEffect& e, size_t step, double cum_tps,
                              double cum_mem) {
    if (!header) {
      out << "\nsweep,chain_step,key,from,to,setting,versus,pairs,candidates,tps_ratio,tps_lo,tps_hi,mem_ratio,mem_lo,"
             "mem_hi,level,cumulative_tps,cumulative_mem"
          << (models ? ",model" : "") << "\n";
      header = true;
    }
    const auto r = [&](const PairedRatio& x, double v) { return x.n ? num(v) : std::string(); };
    out << quote(sec.title) << "," << step << "," << quote(e.key) << "," << quote(e.from) << "," << quote(e.to) << ","
        << quote(e.label) << "," << quote(e.versus) << "," << e.pairs.size() << "," << e.candidates << ","
        << r(e.tps, e.tps.median) << "," << r(e.tps, e.tps.lo) << "," << r(e.tps, e.tps.hi) << ","
        << r(e.mem, e.mem.median) << "," << r(e.mem, e.mem.lo) << "," << r(e.mem, e.mem.hi) << ","
        << r(e.tps, e.tps.level) << "," << (step ? num(cum_tps) : "") << "," << (step ? num(cum_mem) : "")
        << (models ? "," : "") << (models ? quote(e.model) : "") << "\n";
  };
  for (const SectionReport& sec : r.sections) {
    for (const KnobEffect& e : sec.effects) effect_row(sec, e, 0, 1, 1);
    for (size_t i = 0, step = 0; i < sec.chain.size(); ++i) {
      if (i > 0 && sec.chain[i - 1].effect.model != sec.chain[i].effect.model) step = 0;  // each model's chain
      effect_row(sec, sec.chain[i].effect, ++step, sec.chain[i].cumulative_tps, sec.chain[i].cumulative_mem);
    }
  }
  // A [quality] sweep's points: seeds, tokens and time to target (mean,
  // 95 % t interval, olympic mean; empty: not reached), and against the
  // quality baseline the verdict and the speedup at equal quality.
  bool quality_header = false;
  for (const SectionReport& sec : r.sections)
    for (const QualityRow& q : sec.quality) {
      if (!quality_header) {
        out << "\nsweep,point,name,seeds,reached,target_loss,tokens_to_target,tokens_lo,tokens_hi,tokens_olympic,"
               "time_to_target_s,time_lo,time_hi,time_olympic_s,final_loss,baseline_point,verdict,"
               "speedup_at_equal_quality,tps_ratio,final_loss_diff,final_loss_diff_lo,final_loss_diff_hi\n";
        quality_header = true;
      }
      const SeedSet& s = q.seeds;
      const auto mean = [&](const stats::MeanInterval& m) {
        return s.reached ? num(m.mean) + "," + num(m.lo) + "," + num(m.hi) : std::string(",,");
      };
      const auto finite = [](const std::optional<double>& v) {
        return v && std::isfinite(*v) ? v : std::optional<double>();
      };
      const PointStats& p = sec.points[q.point];
      out << quote(sec.title) << "," << p.row << "," << quote(p.short_label) << "," << s.seeds.size() << ","
          << s.reached << "," << num(s.target) << "," << mean(s.tokens) << "," << num(finite(s.tokens_olympic)) << ","
          << mean(s.seconds) << "," << num(finite(s.seconds_olympic)) << "," << num(s.final_loss) << ","
          << (q.baseline ? std::to_string(sec.points[*q.baseline].row) : "") << ","
          << quote(q.vs ? to_string(q.vs->verdict) : "baseline") << ","
          << num(q.vs ? q.vs->speedup_at_quality : std::nullopt) << "," << num(q.tps_ratio) << ",";
      if (q.vs && q.vs->final_diff.n >= 2)
        out << num(q.vs->final_diff.mean) << "," << num(q.vs->final_diff.lo) << "," << num(q.vs->final_diff.hi);
      else
        out << ",,";
      out << "\n";
    }
  return out.str();
}

}  // namespace ctitan
