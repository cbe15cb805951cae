// One self-contained HTML file: inline CSS and SVG, no script, no external
// resource, so it opens from disk, from a CI artifact or an e-mail, and
// reads the same without JavaScript. Tables are the Markdown report's; the
// charts add throughput with p10–p90 error bars, loss curves (the `steps`
// table), peak memory per rank, and scaling.
#include <algorithm>
#include <sstream>

#include "reports/format.h"
#include "reports/render_common.h"
#include "reports/report.h"
#include "reports/svg.h"

namespace ctitan {
namespace {

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:24px;color:#222}"
    "h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}"
    "h3{font-size:15px;margin-top:24px}.meta,.note{color:#555;font-size:13px}"
    ".wide{overflow-x:auto}table{border-collapse:collapse;font-size:13px;margin:8px 0 16px}"
    "th,td{border:1px solid #d0d0d0;padding:3px 8px}th{background:#f3f3f3}"
    "td.r{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}tr.base td{background:#fff6e0}"
    "tr.bad td{background:#fde8e8}figure{margin:12px 0}svg{max-width:100%;height:auto}";

void write_table(std::ostringstream& out, const render::Table& t, const std::vector<std::string>& row_classes = {}) {
  render::write_html_table(out, t, row_classes);
}

// "#12 ws 2 compile=true local_batch_size=2": the number is the table's row.
std::string point_name(const PointStats& p) {
  std::string name = "#";  // appended piecewise: GCC 12 -O3 warns falsely on "#" + std::string
  name += std::to_string(p.row);
  name += " ws " + std::to_string(p.world_size) + " " + p.short_label;
  return name;
}

std::string throughput_chart(const SectionReport& sec) {
  std::vector<svg::Bar> bars;
  for (const PointStats& p : sec.points) {
    if (p.tps.n == 0) continue;
    svg::Bar b{point_name(p), p.tps.median, std::nullopt, std::nullopt, fmt::grouped(p.tps.median), p.baseline};
    if (p.tps.n > 1) b.lo = p.tps.p10, b.hi = p.tps.p90;
    bars.push_back(b);
  }
  return svg::bar_chart("Throughput: tokens/s per device (median, p10\u2013p90 error bars)", "tokens/s per device",
                        bars);
}

std::string memory_chart(const SectionReport& sec) {
  double max_b = 0;
  for (const PointStats& p : sec.points) max_b = std::max(max_b, p.mem_peak_bytes.value_or(0));
  const bool gib = max_b >= 1024.0 * 1024 * 1024;
  const double unit = gib ? 1024.0 * 1024 * 1024 : 1024.0 * 1024;
  std::vector<svg::Bar> bars;
  for (const PointStats& p : sec.points)
    if (p.mem_peak_bytes)
      bars.push_back({point_name(p), *p.mem_peak_bytes / unit, std::nullopt, std::nullopt,
                      fmt::bytes(*p.mem_peak_bytes), p.baseline});
  return svg::bar_chart("Peak memory per rank", gib ? "GiB" : "MiB", bars);
}

std::string loss_chart(const SectionReport& sec) {
  std::vector<svg::Series> series;
  for (const PointStats& p : sec.points) {
    if (p.loss_curve.empty()) continue;
    svg::Series s{point_name(p), {}};
    for (const auto& [step, loss] : p.loss_curve) s.points.emplace_back(static_cast<double>(step), loss);
    series.push_back(std::move(s));
  }
  return svg::line_chart("Loss curves (median over ok repeats)", series, {"step", "loss", false, false});
}

std::string scaling_chart(const SectionReport& sec) {
  std::vector<svg::Series> series;
  for (const ScalingSeries& s : sec.scaling) {
    svg::Series line{s.label, {}};
    for (size_t i : s.rows)
      line.points.emplace_back(static_cast<double>(sec.points[i].world_size), sec.points[i].tps.median);
    series.push_back(std::move(line));
  }
  return svg::line_chart("Scaling: tokens/s per device vs world size", series,
                         {"world size", "tokens/s per device", true, true});
}

void write_section(std::ostringstream& out, const SectionReport& sec) {
  out << "<section><h2>" << fmt::html_escape(sec.title) << "</h2>\n";
  if (!sec.environment.empty()) {
    out << "<p class=\"meta\">";
    for (size_t i = 0; i < sec.environment.size(); ++i)
      out << (i ? " \u00b7 " : "") << fmt::html_escape(sec.environment[i]);
    out << "</p>\n";
  }
  for (const WorldSummary& s : sec.summary) {
    out << "<h3>" << fmt::html_escape(render::summary_title(s)) << "</h3>\n";
    write_table(out, render::summary_table(sec, s), {});
  }
  if (!sec.summary.empty())
    out << "<p class=\"note\">" << fmt::html_escape(render::summary_note()) << "</p>\n<h3>All points</h3>\n";
  const render::Table points = render::points_table(sec);
  std::vector<std::string> classes;
  for (size_t i : points.points) {
    const PointStats& p = sec.points[i];
    classes.push_back(p.baseline ? "base" : p.status != "ok" ? "bad" : "");
  }
  write_table(out, points, classes);
  out << "<p class=\"note\">tps/device: tokens/s per device, median over the steady-state steps (after warmup) of "
         "every ok repeat; n = steps pooled; p10\u2013p90 in brackets. Peak memory, final loss and the "
         "communication split are medians over repeats. Speedup vs the baseline row"
      << (sec.baseline_label.empty() ? "" : " (" + fmt::html_escape(sec.baseline_label) + ")")
      << " at the same world size (highlighted).";
  if (render::has_predictions(sec)) out << " " << fmt::html_escape(render::prediction_note(sec));
  out << "</p>\n";
  if (!sec.paired.empty()) {
    out << "<h3>" << fmt::html_escape(render::paired_title(sec)) << "</h3>\n";
    write_table(out, render::paired_table(sec));
    out << "<p class=\"note\">" << fmt::html_escape(render::paired_note()) << "</p>\n";
  }
  out << "<figure>" << throughput_chart(sec) << "</figure>\n";
  out << "<figure>" << loss_chart(sec) << "</figure>\n";
  out << "<figure>" << memory_chart(sec) << "</figure>\n";
  for (const StackTable& st : sec.stacks) {
    out << "<h3>Stacked optimizations \u2014 " << fmt::html_escape(render::stack_title(st)) << "</h3>\n";
    write_table(out, render::stack_table(sec, st));
  }
  if (!sec.scaling.empty()) {
    out << "<h3>Scaling</h3>\n";
    write_table(out, render::scaling_table(sec));
    out << "<figure>" << scaling_chart(sec) << "</figure>\n";
  }
  const std::pair<const char*, std::vector<std::string>> lists[] = {
      {"Points not ok", render::failure_lines(sec)},
      {"Infeasible here (pruned, not run)", render::infeasible_lines(sec)}};
  for (const auto& [title, lines] : lists) {
    if (lines.empty()) continue;
    out << "<h3>" << title << "</h3><ul>";
    for (const std::string& f : lines) out << "<li>" << fmt::html_escape(f) << "</li>";
    out << "</ul>\n";
  }
  out << "</section>\n";
}

}  // namespace

std::string render_html(const Report& r) {
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      << "<title>ctitan report \u2014 " << fmt::html_escape(r.db_path) << "</title><style>" << kStyle
      << "</style></head><body>\n<h1>ctitan report</h1>\n<p class=\"meta\">Database " << fmt::html_escape(r.db_path)
      << " \u00b7 generated " << fmt::html_escape(r.generated_at) << " \u00b7 ctitan "
      << fmt::html_escape(r.ctitan_version) << "</p>\n";
  for (const SectionReport& sec : r.sections) write_section(out, sec);
  out << "</body></html>\n";
  return out.str();
}

}  // namespace ctitan
