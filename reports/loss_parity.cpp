#include "reports/loss_parity.h"

#include <bit>
#include <cstdio>
#include <map>
#include <sstream>

#include "reports/format.h"

namespace ctitan {
namespace {

std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

const RunData* first_ok(const PointData& p) {
  const auto ok = p.ok_runs();
  return ok.empty() ? nullptr : ok.front();
}

LossParityPoint compare_point(const std::string& name, const RunData& b, const RunData& c) {
  LossParityPoint out;
  out.name = name;
  const auto& x = b.loss;
  const auto& y = c.loss;
  for (size_t i = 0; i < std::max(x.size(), y.size()); ++i) {
    const bool in_b = i < x.size(), in_c = i < y.size();
    if (in_b && in_c && x[i].first == y[i].first &&
        std::bit_cast<uint64_t>(x[i].second) == std::bit_cast<uint64_t>(y[i].second)) {
      ++out.steps;
      continue;
    }
    out.verdict = "differ";
    if (in_b && in_c && x[i].first == y[i].first) {
      out.first_step = x[i].first;
      out.base = x[i].second;
      out.cand = y[i].second;
      out.reason = "step " + std::to_string(out.first_step) + ": baseline " + exact(out.base) + ", candidate " +
                   exact(out.cand) + " (" + std::to_string(out.steps) + " steps identical before it)";
    } else {
      // Different logged steps: the first one only one side has.
      const bool base_first = in_b && (!in_c || x[i].first < y[i].first);
      out.first_step = base_first ? x[i].first : y[i].first;
      out.reason = "step " + std::to_string(out.first_step) + " is logged by the " +
                   (base_first ? "baseline" : "candidate") + " only (check metrics.log_freq and training.steps)";
    }
    return out;
  }
  out.verdict = out.steps == 0 ? "missing" : "identical";
  out.reason = out.steps == 0 ? "no logged loss on either side"
                              : "identical over " + std::to_string(out.steps) + " steps";
  return out;
}

}  // namespace

LossParityResult compare_losses(const std::vector<PointData>& base, const std::vector<PointData>& cand,
                                const std::string& base_desc, const std::string& cand_desc,
                                bool match_by_world_size) {
  LossParityResult r;
  r.baseline = base_desc;
  r.candidate = cand_desc;
  bool differ = false, missing = false;
  for (const MatchedPoint& m : match_points(base, cand, match_by_world_size)) {
    LossParityPoint pt;
    pt.name = m.name;
    const RunData* rb = m.base ? first_ok(*m.base) : nullptr;
    const RunData* rc = m.cand ? first_ok(*m.cand) : nullptr;
    if (!m.base || !m.cand) {
      pt.verdict = "missing";
      pt.reason = m.base ? "only in the baseline" : "only in the candidate";
    } else if (!rb || !rc) {
      pt.verdict = "missing";
      pt.reason = std::string("no ok run in the ") + (!rb ? "baseline" : "candidate");
    } else {
      pt = compare_point(pt.name, *rb, *rc);
    }
    differ |= pt.verdict == "differ";
    missing |= pt.verdict == "missing";
    r.points.push_back(std::move(pt));
  }
  r.verdict = differ ? "differ" : missing ? "needs action" : "identical";
  r.exit_code = differ ? 1 : missing ? 3 : 0;
  return r;
}

std::string loss_parity_markdown(const LossParityResult& r) {
  std::ostringstream out;
  const char* mark = r.exit_code == 0 ? "\u2705" : r.exit_code == 1 ? "\u274c" : "\u26a0\ufe0f";
  out << "### ctitan gate --losses: " << mark << " " << r.verdict << "\n\n"
      << "**Baseline** " << fmt::md_escape(r.baseline) << " \u00b7 **candidate** " << fmt::md_escape(r.candidate)
      << "<br>\nLosses compared bit for bit, step by step (first ok run of each point).\n\n"
      << "| point | losses | detail |\n|---|---|---|\n";
  for (const LossParityPoint& p : r.points)
    out << "| `" << fmt::md_escape(p.name) << "` | " << p.verdict << " | " << fmt::md_escape(p.reason) << " |\n";
  return out.str();
}

}  // namespace ctitan
