// Published | predicted | measured, one row per published figure: the
// terminal table of `ctitan plan --validate` and the section `ctitan report
// --published` adds (Markdown, HTML, CSV, JSON).
#include "reports/published.h"
#include "reports/render_common.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "reports/format.h"
#include "reports/svg.h"
#include "reports/stats.h"
#include "results/results_db.h"

namespace ctitan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

using render::Table;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const std::string& s : v) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

// ASCII signs, so the terminal table's columns line up byte for byte.
std::string text_pct(const std::optional<double>& pct) {
  if (!pct) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", *pct);
  return buf;
}

std::string pct_cell(const std::optional<double>& pct) { return pct ? fmt::signed_percent(*pct / 100.0) : "-"; }
std::string tps_cell(const std::optional<double>& v) { return v ? fmt::grouped(*v) : "-"; }
std::string gib_cell(const std::optional<double>& v) { return v ? fmt::fixed(*v, 1) : "-"; }

const PublishedHardware* hardware_of(const PublishedReport& r, const std::string& name) {
  for (const PublishedHardware& h : r.hardware)
    if (h.name == name) return &h;
  return nullptr;
}

std::string predicted_note(const PublishedPoint& p) {
  std::string note;
  if (!p.not_predicted.empty()) {
    note = "not predicted: ";
    note += p.not_predicted;
  }
  if (!p.predicted_fits) note = "does not fit in device memory";
  return note;
}

std::string measured_tps_cell(const PublishedPoint& p) {
  return p.measured_tps ? fmt::grouped(*p.measured_tps) : p.measured_note.empty() ? "not measured" : p.measured_note;
}

// The side-by-side table of the report: each column says what it is.
Table comparison_table(const PublishedReport& r) {
  Table t;
  t.header = {"table",
              "row",
              "GPUs",
              "hardware spec",
              "published tps/GPU",
              "predicted tps/GPU",
              "predicted error",
              "measured tps/GPU",
              "published mem GiB",
              "predicted mem GiB",
              "predicted error",
              "measured mem GiB",
              "measured on",
              "prediction note"};
  t.right = {false, false, true, false, true, true, true, true, true, true, true, true, false, false};
  for (const PublishedPoint& p : r.rows) {
    t.rows.push_back({p.table, p.label, std::to_string(p.world_size), p.hardware, fmt::grouped(p.published_tps),
                      tps_cell(p.predicted_tps), pct_cell(error_pct(p.predicted_tps, p.published_tps)),
                      measured_tps_cell(p), gib_cell(p.published_mem_gib), gib_cell(p.predicted_mem_gib),
                      p.published_mem_gib ? pct_cell(error_pct(p.predicted_mem_gib, *p.published_mem_gib)) : "-",
                      gib_cell(p.measured_mem_gib),
                      p.measured_runs ? p.measured_on + ", " + std::to_string(p.measured_runs) + " runs" : "-",
                      predicted_note(p)});
  }
  return t;
}

std::vector<std::string> hardware_lines(const PublishedReport& r) {
  std::vector<std::string> out;
  for (const PublishedHardware& h : r.hardware) {
    std::string line = h.name;
    line += " (";
    line += h.title + "), calibration: " + h.calibration;
    out.push_back(line);
  }
  return out;
}

std::string median_line(const PublishedReport& r) {
  const ErrorSummary tps = tps_errors(r), mem = mem_errors(r);
  std::string out = "median |error| of predicted vs published: tokens/s per GPU ";
  out += tps.n ? fmt::fixed(tps.median_abs_pct, 1) + "% over " + std::to_string(tps.n) + " rows" : "- (no rows)";
  out += "; memory per GPU ";
  out += mem.n ? fmt::fixed(mem.median_abs_pct, 1) + "% over " + std::to_string(mem.n) + " rows" : "- (no rows)";
  return out;
}

std::vector<std::string> source_lines(const PublishedReport& r) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const PublishedPoint& p : r.rows)
    if (seen.insert(p.table).second) out.push_back(p.table + ": " + p.source);
  return out;
}

constexpr const char* kLegend =
    "Published: the figure the source reports. Predicted: ctitan's planner for the named hardware spec, a "
    "prediction and not a measurement. Measured: ok runs of the same point (config hash and world size) in this "
    "database on a GPU of that spec; \"not measured\" otherwise. Error = (predicted - published) / published.";

nlohmann::json opt(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

}  // namespace

std::optional<double> error_pct(const std::optional<double>& predicted, double published) {
  if (!predicted || !(published > 0)) return std::nullopt;
  return (*predicted - published) / published * 100.0;
}

ErrorSummary tps_errors(const PublishedReport& r) {
  std::vector<double> abs;
  for (const PublishedPoint& p : r.rows)
    if (auto e = error_pct(p.predicted_tps, p.published_tps)) abs.push_back(std::fabs(*e));
  return {abs.empty() ? 0.0 : stats::median(abs), abs.size()};
}

ErrorSummary mem_errors(const PublishedReport& r) {
  std::vector<double> abs;
  for (const PublishedPoint& p : r.rows)
    if (p.published_mem_gib)
      if (auto e = error_pct(p.predicted_mem_gib, *p.published_mem_gib)) abs.push_back(std::fabs(*e));
  return {abs.empty() ? 0.0 : stats::median(abs), abs.size()};
}

void measure_published(const ResultsDb& db, PublishedReport& r) {
  r.db_path = db.path();
  std::map<std::pair<std::string, int64_t>, std::vector<RunRow>> ok_runs;  // (config hash, world size)
  for (RunRow& run : db.runs(-1))
    if (run.status == "ok") ok_runs[{run.config_hash, run.world_size}].push_back(std::move(run));
  for (PublishedPoint& p : r.rows) {
    std::vector<double> tps, mem;
    std::set<std::string> on, elsewhere;
    p.measured_runs = 0;
    if (!p.not_run.empty()) {  // a run of the point's config is ctitan's model, not the row's
      p.measured_note = p.not_run;
      continue;
    }
    static const std::vector<RunRow> kNone;
    auto it = ok_runs.find({p.config_hash, p.world_size});
    for (const RunRow& run : it == ok_runs.end() ? kNone : it->second) {
      std::string gpu;
      for (const auto& [k, v] : db.env(run.id))
        if (k == "gpu_name") gpu = v;
      if (gpu.empty() || p.gpu_match.empty() || lower(gpu).find(p.gpu_match) == std::string::npos) {
        elsewhere.insert(gpu.empty() ? "a CPU" : gpu);
        continue;
      }
      const std::optional<SummaryRow> s = db.summary(run.id);
      if (!s || !s->tps_median) {
        elsewhere.insert(gpu + " without a summary");
        continue;
      }
      ++p.measured_runs;
      on.insert(gpu);
      tps.push_back(*s->tps_median);
      if (s->mem_peak_bytes) mem.push_back(static_cast<double>(*s->mem_peak_bytes) / kGiB);
    }
    p.measured_tps = tps.empty() ? std::nullopt : std::optional<double>(stats::median(tps));
    p.measured_mem_gib = mem.empty() ? std::nullopt : std::optional<double>(stats::median(mem));
    p.measured_on = join({on.begin(), on.end()}, ", ");
    p.measured_note.clear();
    if (tps.empty()) {
      p.measured_note = "not measured";
      if (!elsewhere.empty()) {
        p.measured_note += " (ok runs of this point on ";
        p.measured_note += join({elsewhere.begin(), elsewhere.end()}, ", ") + ", not a " + p.hardware + " GPU)";
      }
    }
  }
}

std::string render_published_text(const PublishedReport& r) {
  std::ostringstream out;
  out << "published vs predicted, per GPU: tokens/s and peak memory (GiB); predicted by ctitan's planner for\n";
  for (const std::string& line : hardware_lines(r)) out << "  " << line << "\n";
  std::vector<std::vector<std::string>> rows = {{"table", "row", "GPUs", "published tps", "predicted tps", "error",
                                                 "published mem", "predicted mem", "error", ""}};
  const std::vector<bool> right = {false, false, true, true, true, true, true, true, true, false};
  for (const PublishedPoint& p : r.rows) {
    std::string note = p.not_predicted.empty() ? "[predicted: " : "[not predicted for ";
    note += p.hardware;
    if (!p.not_predicted.empty()) note += ": " + p.not_predicted;
    if (!p.predicted_fits) note += "; does not fit in device memory";
    note += "]";
    rows.push_back({p.table, p.label, std::to_string(p.world_size), fmt::grouped(p.published_tps),
                    tps_cell(p.predicted_tps), text_pct(error_pct(p.predicted_tps, p.published_tps)),
                    gib_cell(p.published_mem_gib), gib_cell(p.predicted_mem_gib),
                    p.published_mem_gib ? text_pct(error_pct(p.predicted_mem_gib, *p.published_mem_gib)) : "-", note});
  }
  std::vector<size_t> width(right.size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      if (c) line += "  ";
      line += right[c] ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  out << median_line(r) << "\n";
  out << "sources:\n";
  for (const std::string& s : source_lines(r)) out << "  " << s << "\n";
  return out.str();
}

std::string render_published_markdown(const PublishedReport& r) {
  std::ostringstream out;
  out << "### Published reproductions \u2014 published vs predicted vs measured\n\n";
  out << "<sub>" << fmt::md_escape(kLegend) << "</sub>\n\n";
  for (const std::string& line : hardware_lines(r)) out << "- predicted for " << fmt::md_escape(line) << "\n";
  out << "\n";
  render::write_markdown_table(out, comparison_table(r));
  out << fmt::md_escape(median_line(r)) << "\n\n<details><summary>sources</summary>\n\n";
  for (const std::string& s : source_lines(r)) out << "- " << fmt::md_escape(s) << "\n";
  out << "\n</details>\n\n";
  return out.str();
}

// One figure per published table: per row, published | predicted | measured
// tokens/s per GPU side by side (and peak memory where the table has it).
std::string published_figures(const PublishedReport& r) {
  std::vector<std::string> tables;
  for (const PublishedPoint& p : r.rows)
    if (std::find(tables.begin(), tables.end(), p.table) == tables.end()) tables.push_back(p.table);
  const std::vector<std::string> series = {"published", "predicted", "measured"};
  std::ostringstream out;
  out << "<div class=\"panels\">";
  for (const std::string& table : tables) {
    std::vector<svg::BarGroup> tps, mem;
    for (const PublishedPoint& p : r.rows) {
      if (p.table != table) continue;
      const std::string label = p.label + " (" + std::to_string(p.world_size) + " GPUs)";
      tps.push_back({label,
                     {p.published_tps, p.predicted_tps, p.measured_tps},
                     {fmt::grouped(p.published_tps), p.predicted_tps ? fmt::grouped(*p.predicted_tps) : "",
                      measured_tps_cell(p)}});
      if (p.published_mem_gib)
        mem.push_back({label,
                       {p.published_mem_gib, p.predicted_mem_gib, p.measured_mem_gib},
                       {gib_cell(p.published_mem_gib), p.predicted_mem_gib ? gib_cell(p.predicted_mem_gib) : "",
                        p.measured_mem_gib ? gib_cell(p.measured_mem_gib) : "not measured"}});
    }
    out << "<figure>" << svg::grouped_bar_chart(table + ": tokens/s per GPU", "tokens/s per GPU", series, tps, 640)
        << "</figure>";
    if (!mem.empty())
      out << "<figure>" << svg::grouped_bar_chart(table + ": peak memory per GPU", "GiB", series, mem, 640)
          << "</figure>";
  }
  out << "</div>\n";
  return out.str();
}

std::string render_published_html_section(const PublishedReport& r) {
  std::ostringstream out;
  out << "<section><h2>Published reproductions \u2014 published vs predicted vs measured</h2>\n";
  out << published_figures(r);
  out << "<p class=\"note\">" << fmt::html_escape(kLegend) << "</p>\n<ul class=\"meta\">";
  for (const std::string& line : hardware_lines(r)) out << "<li>predicted for " << fmt::html_escape(line) << "</li>";
  out << "</ul>\n";
  render::write_html_table(out, comparison_table(r));
  out << "<p class=\"meta\">" << fmt::html_escape(median_line(r)) << "</p>\n<h3>Sources</h3><ul>";
  for (const std::string& s : source_lines(r)) out << "<li>" << fmt::html_escape(s) << "</li>";
  out << "</ul></section>\n";
  return out.str();
}

std::string render_published_html(const PublishedReport& r) {
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      << "<title>ctitan report \u2014 published reproductions</title><style>"
      << "body{font-family:sans-serif;margin:24px;color:#222}h1{font-size:22px}"
         "h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}"
         ".meta,.note{color:#555;font-size:13px}.wide{overflow-x:auto}"
         "table{border-collapse:collapse;font-size:13px;margin:8px 0 16px}"
         "th,td{border:1px solid #d0d0d0;padding:3px 8px}th{background:#f3f3f3}"
         "td.r{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
         ".panels{display:flex;flex-wrap:wrap;gap:12px}.panels figure{flex:1 1 560px;max-width:100%;margin:0}"
         "svg{max-width:100%;height:auto}"
      << "</style></head><body>\n<h1>ctitan report</h1>\n<p class=\"meta\">"
      << (r.db_path.empty() ? "no results database: nothing measured" : "Database ") << fmt::html_escape(r.db_path)
      << "</p>\n"
      << render_published_html_section(r) << "</body></html>\n";
  return out.str();
}

std::string render_published_csv(const PublishedReport& r) {
  const Table t = comparison_table(r);
  const auto cell = [](const std::string& s) { return fmt::csv_cell(s); };
  std::ostringstream out;
  std::vector<std::string> header;
  for (const std::string& h : t.header) header.push_back(cell(h));
  out << join(header, ",") << "\n";
  for (const auto& row : t.rows) {
    std::vector<std::string> cells;
    for (const std::string& c : row) cells.push_back(cell(c));
    out << join(cells, ",") << "\n";
  }
  return out.str();
}

nlohmann::json render_published_json(const PublishedReport& r) {
  nlohmann::json hw = nlohmann::json::array(), rows = nlohmann::json::array();
  for (const PublishedHardware& h : r.hardware)
    hw.push_back({{"name", h.name}, {"title", h.title}, {"calibration", h.calibration}});
  for (const PublishedPoint& p : r.rows) {
    nlohmann::json row = {
        {"table", p.table},
        {"source", p.source},
        {"label", p.label},
        {"where", p.where},
        {"hardware", p.hardware},
        {"world_size", p.world_size},
        {"config_hash", p.config_hash},
        {"published",
         {{"tps", p.published_tps}, {"mem_gib", opt(p.published_mem_gib)}, {"mfu_pct", opt(p.published_mfu_pct)}}},
        {"predicted",
         {{"what", "prediction by ctitan's planner"},
          {"hardware", p.hardware},
          {"calibration", hardware_of(r, p.hardware) ? hardware_of(r, p.hardware)->calibration : ""},
          {"tps", opt(p.predicted_tps)},
          {"mem_gib", opt(p.predicted_mem_gib)},
          {"mfu_pct", opt(p.predicted_mfu_pct)},
          {"fits", p.predicted_fits},
          {"not_predicted", p.not_predicted},
          {"tps_error_pct", opt(error_pct(p.predicted_tps, p.published_tps))},
          {"mem_error_pct", p.published_mem_gib ? opt(error_pct(p.predicted_mem_gib, *p.published_mem_gib))
                                                : nlohmann::json(nullptr)}}}};
    if (!r.db_path.empty())
      row["measured"] = {{"tps", opt(p.measured_tps)},
                         {"mem_gib", opt(p.measured_mem_gib)},
                         {"runs", p.measured_runs},
                         {"on", p.measured_on},
                         {"note", p.measured_note}};
    rows.push_back(std::move(row));
  }
  const ErrorSummary tps = tps_errors(r), mem = mem_errors(r);
  nlohmann::json out = {{"hardware", hw},
                        {"rows", rows},
                        {"median_abs_error_pct",
                         {{"tps", tps.n ? nlohmann::json(tps.median_abs_pct) : nlohmann::json(nullptr)},
                          {"tps_rows", tps.n},
                          {"mem", mem.n ? nlohmann::json(mem.median_abs_pct) : nlohmann::json(nullptr)},
                          {"mem_rows", mem.n}}}};
  if (!r.db_path.empty()) out["db"] = r.db_path;
  return out;
}

}  // namespace ctitan
