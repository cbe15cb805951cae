// One self-contained HTML file: inline CSS, SVG and a few dozen lines of
// plain JavaScript, no external resource, so it opens from disk, from a CI
// artifact or an e-mail. Each section answers first and details after:
// the summary (fastest point and Pareto front per world size, as scatter
// panels and tables), what each setting buys (forest plot and table), the
// spec's stacked chain, then every point in a table that sorts (click a
// header) and filters (type "f8 b2"), with the rarely needed columns behind
// a toggle; then small multiples — throughput and memory per world size,
// loss curves per numerics group (the others faint), scaling efficiency with
// the ideal line. Without JavaScript everything is still there; only sort
// and filter need it. Colours are Okabe–Ito with dash patterns and marker
// shapes, so series stay apart in grey-scale.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "reports/aliases.h"
#include "reports/format.h"
#include "reports/render_common.h"
#include "reports/report.h"
#include "reports/svg.h"

namespace ctitan {
namespace {

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}"
    "h1{font-size:22px}h2{font-size:19px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:36px}"
    "h3{font-size:16px;margin-top:28px}h4{font-size:14px;margin:16px 0 4px}.meta,.note{color:#555;font-size:13px}"
    ".wide{overflow-x:auto}table{border-collapse:collapse;font-size:13px;margin:8px 0 16px}"
    "th,td{border:1px solid #d0d0d0;padding:3px 8px;vertical-align:top}th{background:#f3f3f3;text-align:left}"
    "td{overflow-wrap:anywhere}td.r,th.r{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "tr.base td{background:#fff6e0}tr.bad td{background:#fde8e8}figure{margin:12px 0}svg{max-width:100%;height:auto}"
    "table.sortable thead th{position:sticky;top:0;z-index:1;cursor:pointer;box-shadow:0 1px 0 #bbb}"
    "table.sortable th[aria-sort=ascending]::after{content:' \\25B2'}"
    "table.sortable th[aria-sort=descending]::after{content:' \\25BC'}"
    "table.compact .opt{display:none}.controls{font-size:13px;margin:6px 0}.controls input[type=search]{width:18em}"
    ".panels{display:flex;flex-wrap:wrap;gap:12px}.panels figure{flex:1 1 560px;max-width:100%;margin:0}"
    "nav.toc{font-size:13px;background:#f7f7f7;border:1px solid #e0e0e0;padding:6px 14px;margin:12px 0}"
    "nav.toc ol{margin:4px 0;padding-left:20px}nav.toc a{color:#0060a0}"
    ".answer{font-size:14px;margin:6px 0}";

// Sort by a header click (numbers by value: units and thousands separators
// understood), filter by words typed (every word must appear in the row),
// and the "all columns" toggle.
constexpr const char* kScript = R"JS(
(function () {
  function num(t) {
    t = t.replace(/\u2212/g, '-').replace(/,/g, '');
    var m = t.match(/-?\d+(\.\d+)?(e[-+]?\d+)?/);
    if (!m) return null;
    var v = parseFloat(m[0]);
    if (/GiB/.test(t)) v *= 1073741824; else if (/MiB/.test(t)) v *= 1048576; else if (/KiB/.test(t)) v *= 1024;
    if (/\d ms\b/.test(t)) v /= 1e3; else if (/\d \u00b5s\b/.test(t)) v /= 1e6;
    return v;
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.tabIndex = 0;
      function sort() {
        var dir = th.getAttribute('aria-sort') === 'descending' ? 1 : -1;
        if (!th.hasAttribute('aria-sort') && !th.classList.contains('r')) dir = 1;
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', dir > 0 ? 'ascending' : 'descending');
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var numeric = th.classList.contains('r');  // right-aligned columns hold numbers; the others text
        rows.sort(function (a, b) {
          var x = a.cells[col].textContent, y = b.cells[col].textContent;
          var nx = numeric ? num(x) : null, ny = numeric ? num(y) : null;
          if (nx !== null && ny !== null && nx !== ny) return dir * (nx - ny);
          if (nx !== null && ny === null) return -1;
          if (ny !== null && nx === null) return 1;
          return dir * x.localeCompare(y);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener('click', sort);
      th.addEventListener('keydown', function (e) { if (e.key === 'Enter') sort(); });
    });
  });
  document.querySelectorAll('input.filter').forEach(function (input) {
    var table = document.getElementById(input.dataset.table), count = document.getElementById(input.dataset.table + '-count');
    input.addEventListener('input', function () {
      var words = input.value.toLowerCase().split(/\s+/).filter(Boolean), shown = 0, rows = table.tBodies[0].rows;
      Array.prototype.forEach.call(rows, function (r) {
        var text = r.textContent.toLowerCase();
        r.hidden = !words.every(function (w) { return text.indexOf(w) >= 0; });
        if (!r.hidden) shown++;
      });
      if (count) count.textContent = shown + ' of ' + rows.length + ' points';
    });
  });
  document.querySelectorAll('input.allcols').forEach(function (box) {
    var table = document.getElementById(box.dataset.table);
    box.addEventListener('change', function () { table.classList.toggle('compact', !box.checked); });
  });
})();
)JS";

void write_table(std::ostringstream& out, const render::Table& t, const std::vector<std::string>& row_classes = {}) {
  render::write_html_table(out, t, row_classes);
}

// "#12 compile b2": the number is the points table's row.
std::string point_name(const PointStats& p) {
  std::string name = "#";  // appended piecewise: GCC 12 -O3 warns falsely on "#" + std::string
  name += std::to_string(p.row);
  name += " " + p.short_label;
  return name;
}

bool measured(const PointStats& p) { return p.tps.n > 0; }

// Bytes in MiB or GiB, whichever suits the largest value.
struct MemUnit {
  double bytes;
  const char* name;
};
MemUnit mem_unit(const SectionReport& sec) {
  double max_b = 0;
  for (const PointStats& p : sec.points) max_b = std::max(max_b, p.mem_peak_bytes.value_or(0));
  return max_b >= 1024.0 * 1024 * 1024 ? MemUnit{1024.0 * 1024 * 1024, "GiB"} : MemUnit{1024.0 * 1024, "MiB"};
}

std::string pareto_scatter(const SectionReport& sec, const WorldSummary& s) {
  const MemUnit unit = mem_unit(sec);
  std::vector<svg::ScatterPoint> pts;
  std::vector<size_t> index_of;  // point index → position in pts
  std::map<size_t, size_t> at;
  for (size_t i = 0; i < sec.points.size(); ++i) {
    const PointStats& p = sec.points[i];
    if (p.world_size != s.world_size || p.status != "ok" || !measured(p) || !p.mem_peak_bytes) continue;
    if (!s.model.empty() && p.model != s.model) continue;  // another model's points: not on this front
    const bool on = std::find(s.front.begin(), s.front.end(), i) != s.front.end();
    at[i] = pts.size();
    pts.push_back({*p.mem_peak_bytes / unit.bytes, p.tps.median, point_name(p), on ? "" : "#" + std::to_string(p.row),
                   fmt::grouped(p.tps.median) + " tokens/s per device, " + fmt::bytes(*p.mem_peak_bytes), on});
  }
  std::vector<size_t> front;
  for (size_t i : s.front) front.push_back(at[i]);
  return svg::scatter("World size " + std::to_string(s.world_size) + (s.model.empty() ? "" : ", " + s.model) +
                          ": tokens/s per device against peak memory",
                      pts, front, std::string("peak memory per rank (") + unit.name + ")", "tokens/s per device", 640);
}

std::string forest(const SectionReport& sec) {
  std::vector<svg::ForestRow> rows;
  for (const KnobEffect& e : sec.effects) {
    if (e.tps.n < 2) continue;  // one pair has no interval: the table shows it
    svg::ForestRow r{(e.model.empty() ? "" : e.model + ": ") + e.label + " vs " + e.versus + " (" +
                         std::to_string(e.pairs.size()) +
                         (e.pairs.size() == 1 ? " pair)" : " pairs)"),
                     {}};
    for (const PairedRatio* x : {&e.tps, &e.mem}) {
      if (x->n == 0) {
        r.cells.emplace_back();
        continue;
      }
      std::string text = fmt::ratio(x->median);
      if (x->n > 1) text += " [" + fmt::ratio(x->lo) + ", " + fmt::ratio(x->hi) + "]";
      r.cells.push_back(svg::Estimate{x->median, x->lo, x->hi, text});
    }
    rows.push_back(std::move(r));
  }
  return svg::forest_plot("What each setting buys: median paired ratio and its interval", {"tokens/s per device",
                          "peak memory per rank"}, rows);
}

// The planner's predictions the sweep stored, against what was measured: one
// point per measured point, on the diagonal where the prediction is exact.
std::string prediction_scatter(const SectionReport& sec, bool memory) {
  std::vector<svg::ScatterPoint> pts;
  for (const PointStats& p : sec.points) {
    std::optional<double> m = p.mem_peak_bytes, pred = p.pred_mem_peak_bytes;
    if (!memory) {
      m = measured(p) ? std::optional<double>(p.tps.median) : std::nullopt;
      pred = p.pred_tps;
    }
    if (p.row == 0 || !m || !pred) continue;
    const double unit = memory ? 1024.0 * 1024 : 1;
    const std::optional<double> err = memory ? p.pred_mem_error() : p.pred_tps_error();
    pts.push_back({*m / unit, *pred / unit, point_name(p), "#" + std::to_string(p.row),
                   "measured " + (memory ? fmt::bytes(*m) : fmt::grouped(*m)) + ", predicted " +
                       (memory ? fmt::bytes(*pred) : fmt::grouped(*pred)) +
                       (err ? ", error " + fmt::signed_percent(*err) : ""),
                   false});
  }
  const std::string what = memory ? "peak memory per rank (MiB)" : "tokens/s per device";
  return svg::scatter(std::string("Predicted against measured ") + (memory ? "peak memory" : "tokens/s") +
                          " (on the dashed line: exact)",
                      pts, {}, "measured " + what, "predicted " + what, 640, true);
}

// A world size's panels, of one model where the section has several ("": every point).
std::string panel_title(int64_t ws, const std::string& model, const std::string& what) {
  return "World size " + std::to_string(ws) + (model.empty() ? "" : ", " + model) + ": " + what;
}

std::string throughput_panel(const SectionReport& sec, int64_t ws, const std::string& model) {
  std::vector<svg::Bar> bars;
  for (const PointStats& p : sec.points) {
    if (!measured(p) || p.world_size != ws || (!model.empty() && p.model != model)) continue;
    svg::Bar b{point_name(p), p.tps.median, std::nullopt, std::nullopt, fmt::grouped(p.tps.median), p.baseline};
    if (p.tps.n > 1) b.lo = p.tps.p10, b.hi = p.tps.p90;
    bars.push_back(b);
  }
  return svg::bar_chart(panel_title(ws, model, "tokens/s per device (median, p10\u2013p90)"), "tokens/s per device",
                        bars, 640);
}

std::string memory_panel(const SectionReport& sec, int64_t ws, const std::string& model) {
  const MemUnit unit = mem_unit(sec);
  std::vector<svg::Bar> bars;
  for (const PointStats& p : sec.points)
    if (p.mem_peak_bytes && p.world_size == ws && p.row > 0 && (model.empty() || p.model == model))
      bars.push_back({point_name(p), *p.mem_peak_bytes / unit.bytes, std::nullopt, std::nullopt,
                      fmt::bytes(*p.mem_peak_bytes), p.baseline});
  return svg::bar_chart(panel_title(ws, model, "peak memory per rank"), unit.name, bars, 640);
}

// Settings that change the numbers a step computes (not how fast): all but
// the layout, compile and activation checkpointing, which ctitan keeps
// exact against one process.
bool changes_numerics(const std::string& key) {
  return !alias::is_layout_key(key) && key != "compile.enable" && key.rfind("activation_checkpoint.", 0) != 0 &&
         key != "build";
}

// Loss curves grouped by the numerics settings: one panel per group, its
// curves in colour (identical curves collapsed into one legend entry), the
// other groups' faint behind them.
std::string loss_panels(const SectionReport& sec) {
  std::vector<size_t> numerics;
  for (size_t k = 0; k < sec.varying_keys.size(); ++k)
    if (changes_numerics(sec.varying_keys[k])) numerics.push_back(k);
  std::vector<std::string> group_names;
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < sec.points.size(); ++i) {
    const PointStats& p = sec.points[i];
    if (p.loss_curve.empty()) continue;
    std::string g;
    for (size_t k : numerics)
      if (!p.settings[k].empty()) g += (g.empty() ? "" : " ") + alias::value_name(sec.varying_keys[k], p.settings[k]);
    if (g.empty()) g = "every point";
    auto it = std::find(group_names.begin(), group_names.end(), g);
    if (it == group_names.end()) {
      group_names.push_back(g);
      groups.emplace_back();
      it = group_names.end() - 1;
    }
    groups[static_cast<size_t>(it - group_names.begin())].push_back(i);
  }
  if (groups.empty()) return svg::line_chart("Loss curves", {}, {});
  const auto curve = [&](size_t i) {
    svg::Series s{point_name(sec.points[i]), {}};
    for (const auto& [step, loss] : sec.points[i].loss_curve) s.points.emplace_back(static_cast<double>(step), loss);
    return s;
  };
  const auto same = [](const svg::Series& a, const svg::Series& b) {
    if (a.points.size() != b.points.size()) return false;
    for (size_t j = 0; j < a.points.size(); ++j)
      if (a.points[j].first != b.points[j].first ||
          std::fabs(a.points[j].second - b.points[j].second) > 1e-5 * std::fabs(b.points[j].second))
        return false;
    return true;
  };
  std::ostringstream out;
  out << "<div class=\"panels\">";
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<svg::Series> series;
    for (size_t h = 0; h < groups.size(); ++h)
      if (h != g)
        for (size_t i : groups[h]) {
          svg::Series s = curve(i);
          s.faint = true;
          series.push_back(std::move(s));
        }
    std::vector<svg::Series> mine;  // identical curves (same numerics, same global batch) share one entry
    std::vector<std::vector<std::string>> members;
    for (size_t i : groups[g]) {
      svg::Series s = curve(i);
      const auto it = std::find_if(mine.begin(), mine.end(), [&](const svg::Series& m) { return same(m, s); });
      if (it == mine.end()) {
        mine.push_back(s);
        members.push_back({s.name});
      } else {
        members[static_cast<size_t>(it - mine.begin())].push_back(s.name);
      }
    }
    for (size_t m = 0; m < mine.size(); ++m) {
      std::string name;
      for (const std::string& n : members[m]) name += (name.empty() ? "" : ", ") + n;
      mine[m].name = name;
      series.push_back(std::move(mine[m]));
    }
    out << "<figure>"
        << svg::line_chart("Loss: " + group_names[g] + " (the other groups faint)", series,
                           {"step", "loss", false, false, 640, 220})
        << "</figure>";
  }
  out << "</div>\n";
  return out.str();
}

// A quality point's validation-loss band over seeds (median line, min–max
// shaded) against its baseline's, over training tokens, with the target.
std::string quality_panels(const SectionReport& sec) {
  const auto series_of = [&](const QualityRow& q) {
    svg::Series s{point_name(sec.points[q.point]) + " (" + std::to_string(q.seeds.seeds.size()) + " seeds)", {}};
    for (const BandRow& b : q.seeds.band) {
      if (!std::isfinite(b.median)) continue;
      s.points.emplace_back(b.train_tokens, b.median);
      s.band.emplace_back(b.train_tokens, b.min, b.max);
    }
    return s;
  };
  std::ostringstream out;
  out << "<div class=\"panels\">";
  for (const QualityRow& q : sec.quality) {
    if (!q.baseline) continue;
    const QualityRow* base = sec.quality_of(*q.baseline);
    std::vector<svg::Series> series = {series_of(*base), series_of(q)};
    if (q.seeds.target && !series[0].points.empty()) {
      svg::Series target{"target " + fmt::fixed(*q.seeds.target, 2), {}};
      double lo = series[0].points.front().first, hi = series[0].points.back().first;
      for (const auto& [x, y] : series[1].points) lo = std::min(lo, x), hi = std::max(hi, x);
      target.points = {{lo, *q.seeds.target}, {hi, *q.seeds.target}};
      target.dashed = true;
      series.push_back(std::move(target));
    }
    out << "<figure>"
        << svg::line_chart(point_name(sec.points[q.point]) + ": " + to_string(q.vs->verdict), series,
                           {"training tokens", "validation loss", false, false, 640, 220})
        << "</figure>";
  }
  out << "</div>\n";
  return out.str();
}

std::string scaling_chart(const SectionReport& sec) {
  std::vector<svg::Series> series;
  std::set<double> sizes;
  for (const ScalingSeries& s : sec.scaling) {
    svg::Series line{s.label, {}};
    const double base = sec.points[s.rows.front()].tps.median;
    for (size_t i : s.rows) {
      line.points.emplace_back(static_cast<double>(sec.points[i].world_size),
                               base > 0 ? 100 * sec.points[i].tps.median / base : 0);
      sizes.insert(static_cast<double>(sec.points[i].world_size));
    }
    series.push_back(std::move(line));
  }
  if (!sizes.empty()) {
    svg::Series ideal{"ideal (tokens/s per device constant)", {}};
    for (double ws : sizes) ideal.points.emplace_back(ws, 100);
    ideal.dashed = true;
    series.push_back(std::move(ideal));
  }
  return svg::line_chart("Scaling efficiency: tokens/s per device relative to each recipe's smallest world size",
                         series, {"world size", "efficiency (%)", true, true, 1000, 260});
}

std::string anchor(size_t section, const std::string& part) {
  return "s" + std::to_string(section + 1) + (part.empty() ? "" : "-" + part);
}

// Where each point's wall clock went: one 100 % bar per point, the goodput table's parts.
std::string goodput_bars(const SectionReport& sec) {
  std::vector<std::string> names;
  for (const auto& [part, name] : render::goodput_columns()) names.push_back(name);
  std::vector<svg::StackedRow> rows;
  for (const PointStats& p : sec.points) {
    if (p.row == 0 || p.goodput_parts.empty() || !p.wall_s) continue;
    svg::StackedRow r{point_name(p), {}, fmt::seconds(*p.wall_s)};
    for (const auto& [part, name] : render::goodput_columns()) {
      double v = 0;
      for (const auto& [n, s] : p.goodput_parts)
        if (n == part) v = s;
      r.values.push_back(v);
    }
    rows.push_back(std::move(r));
  }
  // Steady steps green (the good part), stalls and waits warm, bookkeeping grey.
  static const std::vector<std::string> colors = {"#999999", "#56B4E9", "#E69F00", "#009E73", "#D55E00",
                                                  "#CC79A7", "#0072B2", "#7FB8DA", "#F0E442", "#555555"};
  return svg::stacked_shares("Where the wall clock went: each run's parts, as shares of its wall clock", names, rows,
                             1000, colors);
}

// Each multi-rank point's busy time per rank and steady step (its worst
// run), as a ratio to that step's median over the ranks on one scale for
// every panel (1x light to 1.5x dark): an even run stays pale, a straggler
// is a dark row.
std::string rank_heat_maps(const SectionReport& sec) {
  const auto ratio = [](double r) { return fmt::fixed(r, 2) + "\u00d7"; };
  std::ostringstream out;
  out << "<div class=\"panels\">";
  for (const PointStats& p : sec.points) {
    if (p.row == 0 || p.rank_busy.empty()) continue;
    const size_t ranks = p.rank_busy.front().size();
    std::vector<std::string> rows, cols;
    std::vector<std::vector<double>> grid(ranks);
    for (size_t r = 0; r < ranks; ++r) rows.push_back("rank " + std::to_string(r));
    for (size_t i = 0; i < p.rank_busy.size(); ++i) {
      cols.push_back(std::to_string(p.rank_busy_steps[i]));
      std::vector<double> finite;
      for (double b : p.rank_busy[i])
        if (std::isfinite(b)) finite.push_back(b);
      const double median = finite.empty() ? std::nan("") : stats::median(finite);
      for (size_t r = 0; r < ranks; ++r)
        grid[r].push_back(r < p.rank_busy[i].size() && median > 0 ? p.rank_busy[i][r] / median : std::nan(""));
    }
    out << "<figure>"
        << svg::heat_map(point_name(p) + ": busy time, \u00d7 the step's median" +
                             (p.straggler_marked ? " (marked)" : ""),
                         rows, cols, grid, ratio, 1.0, 1.5, 480)
        << "</figure>";
  }
  out << "</div>\n";
  return out.str();
}

void write_toc(std::ostringstream& out, const Report& r) {
  out << "<nav class=\"toc\"><b>Contents</b><ol>";
  for (size_t i = 0; i < r.sections.size(); ++i) {
    const SectionReport& sec = r.sections[i];
    out << "<li><a href=\"#" << anchor(i, "") << "\">" << fmt::html_escape(sec.title) << "</a>: ";
    std::vector<std::pair<std::string, std::string>> parts;
    if (!sec.summary.empty()) parts.emplace_back("summary", "summary");
    if (!sec.effects.empty()) parts.emplace_back("effects", "what each setting buys");
    if (!sec.chain.empty()) parts.emplace_back("chain", "stacked chain");
    if (!sec.quality.empty()) parts.emplace_back("quality", "quality");
    parts.emplace_back("points", "all points");
    if (render::has_predictions(sec)) parts.emplace_back("predicted", "predicted vs measured");
    if (!sec.paired.empty()) parts.emplace_back("paired", "paired speedup");
    if (render::has_goodput(sec)) parts.emplace_back("goodput", "wall clock");
    if (render::has_rank_timing(sec)) parts.emplace_back("ranks", "ranks");
    parts.emplace_back("charts", "charts");
    if (!sec.stacks.empty()) parts.emplace_back("stacks", "stacked tables");
    if (!sec.scaling.empty()) parts.emplace_back("scaling", "scaling");
    for (size_t k = 0; k < parts.size(); ++k)
      out << (k ? " \u00b7 " : "") << "<a href=\"#" << anchor(i, parts[k].first) << "\">" << parts[k].second << "</a>";
    out << "</li>";
  }
  out << "</ol></nav>\n";
}

std::vector<int64_t> world_sizes(const SectionReport& sec) {
  std::set<int64_t> out;
  for (const PointStats& p : sec.points)
    if (p.row > 0) out.insert(p.world_size);
  return {out.begin(), out.end()};
}

void write_section(std::ostringstream& out, const SectionReport& sec, size_t index) {
  const auto h3 = [&](const std::string& part, const std::string& title) {
    out << "<h3 id=\"" << anchor(index, part) << "\">" << fmt::html_escape(title) << "</h3>\n";
  };
  out << "<section><h2 id=\"" << anchor(index, "") << "\">" << fmt::html_escape(sec.title) << "</h2>\n";
  if (!sec.environment.empty()) {
    out << "<p class=\"meta\">";
    for (size_t i = 0; i < sec.environment.size(); ++i)
      out << (i ? " \u00b7 " : "") << fmt::html_escape(sec.environment[i]);
    out << "</p>\n";
  }
  if (!sec.common.empty()) out << "<p class=\"meta\">Every point: " << fmt::html_escape(render::common_line(sec)) << "</p>\n";
  if (!sec.summary.empty()) {
    h3("summary", "Summary: the fastest point and the Pareto front, per world size");
    out << "<ul class=\"answer\">";
    for (const WorldSummary& s : sec.summary) {
      const PointStats& f = sec.points[s.fastest];
      out << "<li>World size " << s.world_size << (s.model.empty() ? "" : ", " + fmt::html_escape(s.model))
          << ": fastest <b>" << fmt::html_escape(point_name(f)) << "</b>, "
          << fmt::html_escape(fmt::grouped(f.tps.median)) << " tokens/s per device at "
          << fmt::html_escape(fmt::bytes(*f.mem_peak_bytes)) << "; " << s.front.size()
          << (s.front.size() == 1 ? " point" : " points") << " on the front.</li>";
    }
    out << "</ul>\n<div class=\"panels\">";
    for (const WorldSummary& s : sec.summary) out << "<figure>" << pareto_scatter(sec, s) << "</figure>";
    out << "</div>\n";
    for (const WorldSummary& s : sec.summary) {
      out << "<h4>" << fmt::html_escape(render::summary_title(s)) << "</h4>\n";
      write_table(out, render::summary_table(sec, s), {});
    }
    out << "<p class=\"note\">" << fmt::html_escape(render::summary_note()) << "</p>\n";
    if (sec.several_models()) out << "<p class=\"note\">" << fmt::html_escape(render::models_note(sec)) << "</p>\n";
  }
  if (const std::vector<std::string> flags = render::straggler_flags(sec); !flags.empty()) {
    out << "<ul class=\"warn\">";
    for (const std::string& f : flags) out << "<li>" << fmt::html_escape(f) << "</li>";
    out << "</ul>\n";
  }
  if (!sec.effects.empty()) {
    h3("effects", "What each setting buys");
    out << "<figure>" << forest(sec) << "</figure>\n<p class=\"note\">The plot shows the settings with at least two "
           "pairs; the table has them all.</p>\n";
    write_table(out, render::effects_table(sec));
    out << "<p class=\"note\">" << fmt::html_escape(render::effects_note()) << "</p>\n";
  }
  if (!sec.chain.empty()) {
    h3("chain", render::chain_title(sec));
    write_table(out, render::chain_table(sec));
  }
  if (!sec.chain_note.empty()) out << "<p class=\"note\">No stacked chain: " << fmt::html_escape(sec.chain_note) << "</p>\n";
  if (!sec.quality.empty()) {
    h3("quality", render::quality_title(sec));
    const std::vector<std::string> flags = render::quality_flags(sec);
    if (!flags.empty()) {
      out << "<ul class=\"warn\">";
      for (const std::string& f : flags) out << "<li>" << fmt::html_escape(f) << "</li>";
      out << "</ul>\n";
    }
    out << quality_panels(sec);
    write_table(out, render::quality_table(sec));
    out << "<p class=\"note\">" << fmt::html_escape(render::quality_note(sec)) << "</p>\n";
  }
  h3("points", "All points");
  const render::Table points = render::points_table(sec);
  const std::string id = anchor(index, "table");
  out << "<div class=\"controls\"><label>Filter <input type=\"search\" class=\"filter\" data-table=\"" << id
      << "\" placeholder=\"e.g. fsdp2 f8 b2\"></label> <span id=\"" << id << "-count\">" << points.rows.size()
      << " points</span> \u00b7 <label><input type=\"checkbox\" class=\"allcols\" data-table=\"" << id
      << "\"> all columns</label> \u00b7 click a header to sort</div>\n";
  std::vector<std::string> classes;
  for (size_t i : points.points) {
    const PointStats& p = sec.points[i];
    classes.push_back(p.baseline ? "base" : p.status != "ok" ? "bad" : "");
  }
  render::write_html_sortable_table(out, points, id, classes);
  out << "<p class=\"note\">tps/device: tokens/s per device, median over the steady-state steps (after warmup) of "
         "every ok repeat; n = steps pooled; p10\u2013p90 in brackets. Peak memory, final loss and the "
         "communication split are medians over repeats. Speedup vs the baseline row"
      << (sec.several_models() ? " of the same model" : "") << (sec.baseline_label.empty() ? "" : " (" + fmt::html_escape(sec.baseline_label) + ")")
      << " at the same world size (highlighted).";
  if (render::has_predictions(sec)) out << " " << fmt::html_escape(render::prediction_note(sec));
  out << "</p>\n";
  if (render::has_predictions(sec)) {
    h3("predicted", "Predicted against measured");
    out << "<div class=\"panels\"><figure>" << prediction_scatter(sec, false) << "</figure><figure>"
        << prediction_scatter(sec, true) << "</figure></div>\n";
    if (!sec.learning.empty()) {
      out << "<h4>How the planner learned over the sweep</h4>\n";
      write_table(out, render::learning_table(sec));
      out << "<p class=\"note\">" << fmt::html_escape(render::learning_note()) << "</p>\n";
    }
  }
  if (!sec.paired.empty()) {
    h3("paired", render::paired_title(sec));
    write_table(out, render::paired_table(sec));
    out << "<p class=\"note\">" << fmt::html_escape(render::paired_note()) << "</p>\n";
  }
  if (render::has_goodput(sec)) {
    h3("goodput", "Where the wall clock went");
    out << "<figure>" << goodput_bars(sec) << "</figure>\n";
    write_table(out, render::goodput_table(sec));
    out << "<p class=\"note\">" << fmt::html_escape(render::goodput_note()) << "</p>\n";
  }
  if (render::has_rank_timing(sec)) {
    h3("ranks", "Ranks: who the others waited for");
    out << rank_heat_maps(sec);
    write_table(out, render::ranks_table(sec));
    out << "<p class=\"note\">" << fmt::html_escape(render::ranks_note()) << "</p>\n";
  }
  h3("charts", "Throughput and memory by world size");
  out << "<div class=\"panels\">";
  for (int64_t ws : world_sizes(sec))
    for (const std::string& model : sec.several_models() ? sec.models : std::vector<std::string>{""}) {
      if (std::none_of(sec.points.begin(), sec.points.end(), [&](const PointStats& p) {
            return p.row > 0 && p.world_size == ws && (model.empty() || p.model == model);
          }))
        continue;  // no point of this model at this world size
      out << "<figure>" << throughput_panel(sec, ws, model) << "</figure><figure>" << memory_panel(sec, ws, model)
          << "</figure>";
    }
  out << "</div>\n<h4>Loss curves, grouped by the settings that change the numbers</h4>\n" << loss_panels(sec);
  for (size_t k = 0; k < sec.stacks.size(); ++k) {
    if (k == 0) h3("stacks", "Stacked optimizations");
    out << "<h4>" << fmt::html_escape(render::stack_title(sec.stacks[k])) << "</h4>\n";
    write_table(out, render::stack_table(sec, sec.stacks[k]));
  }
  if (!sec.scaling.empty()) {
    h3("scaling", "Scaling");
    out << "<figure>" << scaling_chart(sec) << "</figure>\n";
    write_table(out, render::scaling_table(sec));
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
  write_toc(out, r);
  for (size_t i = 0; i < r.sections.size(); ++i) write_section(out, r.sections[i], i);
  out << "<script>" << kScript << "</script>\n</body></html>\n";
  return out.str();
}

}  // namespace ctitan
