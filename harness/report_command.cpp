#include "harness/report_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "common/errors.h"
#include "common/file_io.h"
#include "harness/published.h"
#include "reports/published.h"
#include "reports/report.h"
#include "results/results_db.h"

namespace ctitan {

bool ArgReader::value(const std::string& flag, std::string& out, const std::string& example) {
  const std::string& a = args_[i_];
  if (a == flag) {
    if (i_ + 1 >= args_.size() || args_[i_ + 1].empty())
      throw InputError(command_ + ": " + flag + " needs a value, e.g. " + flag + " " + example);
    out = args_[i_ + 1];
    i_ += 2;
    return true;
  }
  if (a.rfind(flag + "=", 0) == 0) {
    out = a.substr(flag.size() + 1);
    if (out.empty()) throw InputError(command_ + ": " + flag + " needs a value, e.g. " + flag + " " + example);
    ++i_;
    return true;
  }
  return false;
}

bool ArgReader::flag(const std::string& flag) {
  if (args_[i_] != flag) return false;
  ++i_;
  return true;
}

void ArgReader::unknown() const {
  throw InputError("unknown " + command_ + " argument '" + args_[i_] + "'; run `ctitan " + command_ + " --help`");
}

void require_database(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw InputError("results database " + path + " does not exist; pass the --db file a sweep wrote");
}

std::string report_usage() {
  return "usage: ctitan report --db FILE [--sweep NAME] [--baseline LABEL] [--published [DIR]]\n"
         "                     [--memory-budget SIZE]... [--format md|html|csv|json] [--out FILE]\n"
         "One row per point (recipe x world size): tps per device (median, p10-p90 over the steady-state steps of\n"
         "every repeat), TFLOPs, MFU, peak memory per rank, final loss, status, speedup vs the baseline row;\n"
         "stacked-optimization tables ([[stack]] rows), scaling tables, communication columns when measured.\n"
         "  --db FILE         the results database a sweep wrote\n"
         "  --sweep NAME      one sweep (default: every sweep, one section each)\n"
         "  --baseline LABEL  the row speedups are relative to (a label, or some of its key=value settings);\n"
         "                    default: the first point at each world size\n"
         "  --memory-budget SIZE  per rank (80GiB, 512MiB; a bare number is GiB): the summary names the fastest\n"
         "                    point within it at each world size; repeat for more budgets\n"
         "  --format F        md (a PR comment), html (one self-contained file with SVG charts), csv, json;\n"
         "                    default: from --out's extension, else md\n"
         "  --out FILE        write there instead of stdout (- is stdout; a device or FIFO is written to,\n"
         "                    never replaced); never one of the command's inputs\n"
         "  --published [DIR] add the published tables (default: recipes/published): per row the published\n"
         "                    tokens/s and memory per GPU, the planner's prediction for the row's hardware spec\n"
         "                    (labelled with the spec and its calibration) and what --db measured for the same\n"
         "                    point on such a GPU (else \"not measured\"); without --db, published and\n"
         "                    predicted only\n";
}

int report_command(const std::vector<std::string>& args) {
  std::string db_path, format, out_path;
  std::optional<std::string> published;  // --published [DIR]; "" = published_dir()
  ReportOptions opts;
  ArgReader a(args, "report");
  while (!a.done()) {
    if (a.current() == "-h" || a.current() == "--help") {
      std::cout << report_usage();
      return 0;
    }
    if (a.value("--db", db_path, "results.db") || a.value("--sweep", opts.sweep, "debug") ||
        a.value("--baseline", opts.baseline, "compile.enable=false") || a.value("--format", format, "html") ||
        a.value("--out", out_path, "report.html"))
      continue;
    if (std::string budget; a.value("--memory-budget", budget, "80GiB")) {
      opts.memory_budgets.push_back(parse_memory_budget(budget));
      continue;
    }
    if (a.current().rfind("--published=", 0) == 0) {
      published.emplace();
      a.value("--published", *published, "recipes/published");
      continue;
    }
    if (a.flag("--published")) {  // the folder is optional
      published = a.done() || a.current().rfind("--", 0) == 0 ? "" : a.current();
      if (!published->empty()) a.flag(*published);
      continue;
    }
    a.unknown();
  }
  if (db_path.empty() && !published)
    throw InputError("ctitan report needs --db FILE (the results database a sweep wrote), or --published");
  if (format.empty()) {
    const std::string ext = std::filesystem::path(out_path).extension().string();
    format = ext == ".html" || ext == ".htm" ? "html" : ext == ".csv" ? "csv" : ext == ".json" ? "json" : "md";
  }
  if (format != "md" && format != "html" && format != "csv" && format != "json")
    throw InputError("report: --format '" + format + "' is not one of md, html, csv, json");
  check_output_is_not_an_input(out_path, "report --out", {{"--db", db_path}});
  PublishedReport pub;
  if (published) pub = predict_published(load_published(published->empty() ? published_dir() : *published));
  std::string text;
  Report report;
  if (db_path.empty()) {  // the published tables alone: published and predicted, nothing measured
    text = format == "md"     ? std::string("## ctitan report\n\nNo results database: nothing measured.\n\n") +
                                    render_published_markdown(pub)
           : format == "html" ? render_published_html(pub)
           : format == "csv"  ? render_published_csv(pub)
                              : render_published_json(pub).dump(2) + "\n";
  } else {
    require_database(db_path);
    const ResultsDb db(db_path, ResultsDb::Access::read_only);
    report = build_report(db, opts);
    if (published) measure_published(db, pub);
    if (format == "json") {
      nlohmann::json j = render_json(report);
      if (published) j["published"] = render_published_json(pub);
      text = j.dump(2) + "\n";
    } else {
      text = format == "md" ? render_markdown(report) : format == "html" ? render_html(report) : render_csv(report);
      if (published && format == "md") text += render_published_markdown(pub);
      if (published && format == "csv") {
        text += "\n";
        text += render_published_csv(pub);
      }
      if (published && format == "html") {
        const size_t body_end = text.rfind("</body>");
        text.insert(body_end == std::string::npos ? text.size() : body_end, render_published_html_section(pub));
      }
    }
  }
  if (out_path.empty() || out_path == "-") {
    write_output("-", text);
    return 0;
  }
  write_output(out_path, text);  // a full disk leaves the old report, not half a new one
  size_t points = 0;
  for (const SectionReport& s : report.sections) points += s.points.size();
  std::cout << "wrote " << out_path << " (" << format << ", " << points << " points in " << report.sections.size()
            << (report.sections.size() == 1 ? " section" : " sections");
  if (published) std::cout << ", " << pub.rows.size() << " published rows";
  std::cout << ")\n";
  return 0;
}

}  // namespace ctitan
