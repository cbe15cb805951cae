#include "harness/report_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "common/errors.h"
#include "common/file_io.h"
#include "harness/cli.h"
#include "harness/published.h"
#include "reports/published.h"
#include "reports/report.h"
#include "results/results_db.h"

namespace ctitan {

void require_database(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw InputError("results database " + path + " does not exist; pass the --db file a sweep wrote");
}

int report_command(const std::vector<std::string>& args) {
  std::string db_path, format, out_path;
  std::optional<std::string> published;  // --published [DIR]; "" = published_dir()
  std::vector<std::string> budgets;
  ReportOptions opts;
  CLI::App app{"One row per point (recipe x world size): tps per device (median, p10-p90 over the steady-state\n"
               "steps of every repeat), TFLOPs, MFU, peak memory per rank, final loss, status, speedup vs the\n"
               "baseline row; stacked-optimization tables ([[stack]] rows), scaling tables, communication columns\n"
               "when measured.",
               "ctitan report"};
  app.add_option("--db", db_path, "the results database a sweep wrote")->type_name("FILE");
  app.add_option("--sweep", opts.sweep, "one sweep (default: every sweep, one section each)")->type_name("NAME");
  app.add_option("--baseline", opts.baseline,
                 "the row speedups are relative to (a label, or some of its key=value settings); default: the "
                 "first point at each world size")
      ->type_name("LABEL");
  app.add_flag("--exclude-marked", opts.exclude_marked,
               "leave out runs whose straggler figures were marked (one rank the slowest in most steps, the others "
               "waiting a tenth of a step): their tokens/s are that rank's");
  app.add_option("--memory-budget", budgets,
                 "per rank (80GiB, 512MiB; a bare number is GiB): the summary names the fastest point within it at "
                 "each world size; repeat for more budgets")
      ->type_name("SIZE")
      ->allow_extra_args(false);
  app.add_option("--format", format,
                 "md (a PR comment), html (one self-contained file with SVG charts), csv, json; default: from "
                 "--out's extension, else md")
      ->type_name("md|html|csv|json")
      ->check(one_of({"md", "html", "csv", "json"}));
  app.add_option("--out", out_path,
                 "write there instead of stdout (- is stdout; a device or FIFO is written to, never replaced); "
                 "never one of the command's inputs")
      ->type_name("FILE");
  app.add_option("--published", published,
                 "add the published tables (default DIR: recipes/published): per row the published tokens/s and "
                 "memory per GPU, the planner's prediction for the row's hardware spec (labelled with the spec and "
                 "its calibration) and what --db measured for the same point on such a GPU (else \"not "
                 "measured\"); without --db, published and predicted only")
      ->type_name("[DIR]")
      ->expected(0, 1);
  app.footer("Form:\n"
             "  ctitan report --db FILE [--sweep NAME] [--baseline LABEL] [--published [DIR]]\n"
             "                [--memory-budget SIZE]... [--format md|html|csv|json] [--out FILE]");
  parse_command_line(app, args, "report");
  for (const std::string& budget : budgets) opts.memory_budgets.push_back(parse_memory_budget(budget));
  if (db_path.empty() && !published)
    throw InputError("ctitan report needs --db FILE (the results database a sweep wrote), or --published");
  if (format.empty()) {
    const std::string ext = std::filesystem::path(out_path).extension().string();
    format = ext == ".html" || ext == ".htm" ? "html" : ext == ".csv" ? "csv" : ext == ".json" ? "json" : "md";
  }
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
