// Markdown for a pull-request comment (GitHub-flavoured tables): the points
// table first, the stacked and scaling tables after it, failures last.
#include <sstream>

#include "reports/format.h"
#include "reports/render_common.h"
#include "reports/report.h"

namespace ctitan {
namespace {

void write_table(std::ostringstream& out, const render::Table& t) { render::write_markdown_table(out, t); }

}  // namespace

std::string render_markdown(const Report& r) {
  std::ostringstream out;
  out << "## ctitan report\n\n"
      << "Database `" << fmt::md_escape(r.db_path) << "` \u00b7 generated " << r.generated_at << " \u00b7 ctitan "
      << r.ctitan_version << "\n\n";
  for (const SectionReport& sec : r.sections) {
    out << "### " << fmt::md_escape(sec.title) << "\n\n";
    if (!sec.common.empty()) out << "Every point: " << fmt::md_escape(render::common_line(sec)) << "\n\n";
    if (!sec.environment.empty()) {
      out << "<sub>";
      for (size_t i = 0; i < sec.environment.size(); ++i)
        out << (i ? " \u00b7 " : "") << fmt::md_escape(sec.environment[i]);
      out << "</sub>\n\n";
    }
    for (const WorldSummary& s : sec.summary) {
      out << "#### " << fmt::md_escape(render::summary_title(s)) << "\n\n";
      write_table(out, render::summary_table(sec, s));
    }
    if (!sec.summary.empty()) out << "<sub>" << render::summary_note() << "</sub>\n\n";
    if (sec.several_models()) out << "<sub>" << fmt::md_escape(render::models_note(sec)) << "</sub>\n\n";
    for (const std::string& f : render::straggler_flags(sec)) out << "> \u26a0\ufe0f " << fmt::md_escape(f) << "\n\n";
    if (!sec.effects.empty()) {
      out << "#### What each setting buys\n\n";
      write_table(out, render::effects_table(sec));
      out << "<sub>" << fmt::md_escape(render::effects_note()) << "</sub>\n\n";
    }
    if (!sec.chain.empty()) {
      out << "#### " << fmt::md_escape(render::chain_title(sec)) << "\n\n";
      write_table(out, render::chain_table(sec));
    }
    if (!sec.chain_note.empty()) out << "<sub>No stacked chain: " << fmt::md_escape(sec.chain_note) << "</sub>\n\n";
    if (!sec.quality.empty()) {
      out << "#### " << fmt::md_escape(render::quality_title(sec)) << "\n\n";
      for (const std::string& f : render::quality_flags(sec)) out << "> \u26a0\ufe0f " << fmt::md_escape(f) << "\n>\n";
      if (!render::quality_flags(sec).empty()) out << "\n";
      write_table(out, render::quality_table(sec));
      out << "<sub>" << fmt::md_escape(render::quality_note(sec)) << "</sub>\n\n";
    }
    out << "#### All points\n\n";
    write_table(out, render::points_table(sec));
    out << "<sub>tps/device: tokens/s per device, median over the steady-state steps (after warmup) of every ok "
           "repeat; n = steps pooled. Peak memory, final loss and the communication split are medians over repeats. "
           "Speedup vs the baseline row"
        << (sec.several_models() ? " of the same model" : "")
        << (sec.baseline_label.empty() ? "" : " (" + fmt::md_escape(sec.baseline_label) + ")")
        << " at the same world size.";
    if (render::has_predictions(sec)) out << " " << fmt::md_escape(render::prediction_note(sec));
    out << "</sub>\n\n";
    if (render::has_goodput(sec)) {
      out << "#### Where the wall clock went\n\n";
      write_table(out, render::goodput_table(sec));
      out << "<sub>" << fmt::md_escape(render::goodput_note()) << "</sub>\n\n";
    }
    if (render::has_rank_timing(sec)) {
      out << "#### Ranks: who the others waited for\n\n";
      write_table(out, render::ranks_table(sec));
      out << "<sub>" << fmt::md_escape(render::ranks_note()) << "</sub>\n\n";
    }
    if (!sec.learning.empty()) {
      out << "#### How the planner learned over the sweep\n\n";
      write_table(out, render::learning_table(sec));
      out << "<sub>" << fmt::md_escape(render::learning_note()) << "</sub>\n\n";
    }
    if (!sec.paired.empty()) {
      out << "#### " << fmt::md_escape(render::paired_title(sec)) << "\n\n";
      write_table(out, render::paired_table(sec));
      out << "<sub>" << render::paired_note() << "</sub>\n\n";
    }
    for (const StackTable& st : sec.stacks) {
      out << "#### Stacked optimizations \u2014 " << fmt::md_escape(render::stack_title(st)) << "\n\n";
      write_table(out, render::stack_table(sec, st));
    }
    if (!sec.scaling.empty()) {
      out << "#### Scaling \u2014 tps per device vs world size\n\n";
      write_table(out, render::scaling_table(sec));
    }
    const std::vector<std::string> failures = render::failure_lines(sec);
    if (!failures.empty()) {
      out << "<details><summary>" << failures.size() << (failures.size() == 1 ? " point" : " points")
          << " not ok</summary>\n\n";
      for (const std::string& f : failures) out << "- " << fmt::md_escape(f) << "\n";
      out << "\n</details>\n\n";
    }
    const std::vector<std::string> infeasible = render::infeasible_lines(sec);
    if (!infeasible.empty()) {
      out << "<details><summary>infeasible here (pruned, not run)</summary>\n\n";
      for (const std::string& f : infeasible) out << "- " << fmt::md_escape(f) << "\n";
      out << "\n</details>\n\n";
    }
  }
  return out.str();
}

}  // namespace ctitan
