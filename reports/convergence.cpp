#include "reports/convergence.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "reports/format.h"

namespace ctitan {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kMinBaselineSeeds = 3;

// The seed's loss at `tokens`, linear between its evaluations; nullopt
// outside its range (a relative slack of 1e-9 for tokens summed in floats).
std::optional<double> loss_at(const std::vector<EvalPoint>& curve, double tokens) {
  if (curve.empty()) return std::nullopt;
  const double slack = 1e-9 * std::max(1.0, std::abs(tokens));
  if (tokens < curve.front().train_tokens - slack || tokens > curve.back().train_tokens + slack) return std::nullopt;
  for (size_t i = 0; i < curve.size(); ++i) {
    if (std::abs(curve[i].train_tokens - tokens) <= slack) return curve[i].loss;
    if (i + 1 < curve.size() && curve[i + 1].train_tokens > tokens) {
      const double f = (tokens - curve[i].train_tokens) / (curve[i + 1].train_tokens - curve[i].train_tokens);
      return curve[i].loss + f * (curve[i + 1].loss - curve[i].loss);
    }
  }
  return std::nullopt;
}

std::vector<double> reached(const SeedSet& s, double TargetCrossing::*field) {
  std::vector<double> out;
  for (const SeedCurve& c : s.seeds)
    if (c.crossing.reached) out.push_back(c.crossing.*field);
  return out;
}

std::optional<double> olympic(const SeedSet& s, double TargetCrossing::*field) {
  std::vector<double> v;
  for (const SeedCurve& c : s.seeds)
    v.push_back(c.crossing.reached ? c.crossing.*field : std::numeric_limits<double>::infinity());
  return olympic_mean(v);
}

}  // namespace

SeedSet seed_set(std::vector<SeedCurve> seeds, std::optional<double> target, double alpha) {
  SeedSet s;
  std::sort(seeds.begin(), seeds.end(), [](const SeedCurve& a, const SeedCurve& b) { return a.seed < b.seed; });
  s.seeds = std::move(seeds);
  s.target = target;
  size_t evaluations = 0;
  for (SeedCurve& c : s.seeds) {
    if (target) c.crossing = first_crossing(c.curve, *target);
    evaluations = std::max(evaluations, c.curve.size());
  }
  for (size_t e = 0; e < evaluations; ++e) {
    std::vector<double> tokens, losses;
    for (const SeedCurve& c : s.seeds) {
      if (e >= c.curve.size()) continue;
      tokens.push_back(c.curve[e].train_tokens);
      losses.push_back(c.curve[e].loss);
    }
    BandRow b;
    b.train_tokens = stats::median(tokens);
    b.n = losses.size();
    if (std::any_of(losses.begin(), losses.end(), [](double x) { return !std::isfinite(x); })) {
      b.median = b.min = b.max = b.lo = b.hi = kNaN;  // a diverged seed: no band
    } else {
      const stats::Distribution d = stats::describe(losses);
      b.median = d.median;
      b.min = d.min;
      b.max = d.max;
      const stats::Interval pi = stats::prediction_interval(losses, alpha);
      b.lo = pi.lo;
      b.hi = pi.hi;
    }
    s.band.push_back(b);
  }
  if (target) {
    const auto t = reached(s, &TargetCrossing::tokens), sec = reached(s, &TargetCrossing::seconds);
    s.reached = t.size();
    s.tokens = stats::mean_interval(t, alpha);
    s.seconds = stats::mean_interval(sec, alpha);
    s.tokens_olympic = olympic(s, &TargetCrossing::tokens);
    s.seconds_olympic = olympic(s, &TargetCrossing::seconds);
  }
  std::vector<double> finals;
  for (const SeedCurve& c : s.seeds)
    if (!c.curve.empty()) finals.push_back(c.curve.back().loss);
  if (!finals.empty()) s.final_loss = stats::median(finals);
  return s;
}

SeedSet seed_set(const PointData& point, double alpha) {
  std::vector<SeedCurve> seeds;
  std::optional<double> target;
  for (const RunData* r : point.ok_runs()) {
    if (r->validation.empty()) continue;
    SeedCurve c;
    c.seed = r->summary && r->summary->seed ? *r->summary->seed : r->run.repeat;
    c.curve = r->validation;
    if (!target && r->summary && r->summary->target_loss) target = r->summary->target_loss;
    seeds.push_back(std::move(c));
  }
  return seed_set(std::move(seeds), target, alpha);
}

namespace {
// Every baseline seed's loss at `train_tokens`; nullopt outside a seed's
// range (not every seed speaks for it) or without seeds.
std::optional<std::vector<double>> losses_at(const SeedSet& base, double train_tokens) {
  std::vector<double> losses;
  for (const SeedCurve& c : base.seeds) {
    const auto l = loss_at(c.curve, train_tokens);
    if (!l) return std::nullopt;
    losses.push_back(*l);
  }
  if (losses.empty()) return std::nullopt;
  return losses;
}
}  // namespace

std::optional<stats::Interval> band_at(const SeedSet& base, double train_tokens, double alpha) {
  const auto losses = losses_at(base, train_tokens);
  if (!losses) return std::nullopt;
  return stats::prediction_interval(*losses, alpha);
}

std::string to_string(QualityVerdict v) {
  switch (v) {
    case QualityVerdict::inside: return "inside";
    case QualityVerdict::outside: return "outside the band";
    case QualityVerdict::slower: return "slower to target";
    case QualityVerdict::suspicious: return "suspiciously fast";
    case QualityVerdict::too_few: return "too few seeds";
    case QualityVerdict::missing: return "missing";
  }
  return "?";
}

QualityComparison compare_quality(const SeedSet& base, const SeedSet& cand, double alpha) {
  QualityComparison q;
  q.alpha = alpha;
  if (base.seeds.size() < kMinBaselineSeeds || cand.seeds.empty()) {
    q.verdict = QualityVerdict::too_few;
    q.reason = base.seeds.size() < kMinBaselineSeeds
                   ? std::to_string(base.seeds.size()) + " baseline seed(s) with a validation curve; a band needs " +
                         std::to_string(kMinBaselineSeeds) + " or more (`[quality] seeds`)"
                   : "no candidate seed with a validation curve";
    return q;
  }
  // Every (seed, evaluation) of the candidate inside the baseline's range.
  struct Check {
    int64_t seed;
    EvalPoint e;
    std::vector<double> base_losses;  // the baseline seeds' at the same tokens
  };
  std::vector<Check> checks;
  for (const SeedCurve& c : cand.seeds)
    for (const EvalPoint& e : c.curve)
      if (auto losses = losses_at(base, e.train_tokens)) checks.push_back({c.seed, e, std::move(*losses)});
  q.checked = checks.size();
  if (checks.empty()) {
    q.verdict = QualityVerdict::too_few;
    q.reason = "no candidate evaluation within the baseline's training tokens";
    return q;
  }
  const double level_alpha = alpha / static_cast<double>(checks.size());
  q.band_level = 1 - level_alpha;
  for (const Check& c : checks) {
    const stats::Interval b = stats::prediction_interval(c.base_losses, level_alpha);
    if (!(c.e.loss >= b.lo && c.e.loss <= b.hi)) q.outside.push_back({c.seed, c.e.train_tokens, c.e.loss, b.lo, b.hi});
  }

  // Tokens to target.
  if (base.target && cand.target) {
    const bool base_all = base.reached == base.seeds.size();
    if (base_all) q.cand_missed = cand.seeds.size() - cand.reached;
    const auto bt = reached(base, &TargetCrossing::tokens), ct = reached(cand, &TargetCrossing::tokens);
    if (bt.size() >= 2 && ct.size() >= 2) {
      q.slower_p = stats::welch_less_p(ct, bt);  // baseline's mean below the candidate's
      q.faster_p = stats::welch_less_p(bt, ct);
      q.tokens_diff = stats::welch_difference_interval(bt, ct, alpha);
    }
    if (base_all && cand.reached == cand.seeds.size() && base.reached > 0 && cand.reached > 0 &&
        cand.seconds.mean > 0)
      q.speedup_at_quality = base.seconds.mean / cand.seconds.mean;
  }

  // Final loss: the candidate's last evaluation the baseline's range holds.
  double last = -1;
  for (const Check& c : checks) last = std::max(last, c.e.train_tokens);
  if (const auto band = band_at(base, last, alpha)) {
    q.final_band_hi = band->hi;
    std::vector<double> finals, diffs;
    for (const SeedCurve& c : cand.seeds) {
      const auto l = loss_at(c.curve, last);
      if (!l) continue;
      finals.push_back(*l);
      const auto b = std::find_if(base.seeds.begin(), base.seeds.end(), [&](const SeedCurve& s) { return s.seed == c.seed; });
      if (b == base.seeds.end()) continue;
      if (const auto bl = loss_at(b->curve, last)) diffs.push_back(*l - *bl);
    }
    const bool diverged = std::any_of(finals.begin(), finals.end(), [](double x) { return !std::isfinite(x); });
    q.final_worse = !finals.empty() && (diverged || stats::median(finals) > band->hi);
    q.final_diff = stats::mean_interval(diffs, alpha);
  }

  // Above the band (or NaN) is worse training; below it only is better than
  // the baseline's seeds allow, which an approximate change should not be.
  const auto above = std::find_if(q.outside.begin(), q.outside.end(),
                                  [](const BandExcursion& x) { return !(x.loss <= x.hi); });
  const auto excursion = [&](const BandExcursion& x) {
    std::ostringstream o;
    o << q.outside.size() << " of " << q.checked << " evaluations outside the band; first: seed " << x.seed << " at "
      << fmt::grouped(x.train_tokens) << " tokens, loss " << fmt::fixed(x.loss, 4) << " not in [" << fmt::fixed(x.lo, 4)
      << ", " << fmt::fixed(x.hi, 4) << "]";
    return o.str();
  };
  std::ostringstream why;
  if (above != q.outside.end()) {
    q.verdict = QualityVerdict::outside;
    why << excursion(*above);
  } else if (q.cand_missed > 0) {
    q.verdict = QualityVerdict::slower;
    why << q.cand_missed << " of " << cand.seeds.size()
        << " candidate seeds did not reach the target within the budget; every baseline seed did";
  } else if (q.slower_p < alpha / 2) {
    q.verdict = QualityVerdict::slower;
    why << "more tokens to target (Welch, one-sided p " << fmt::p_value(q.slower_p) << ")";
  } else if (!q.outside.empty()) {
    q.verdict = QualityVerdict::suspicious;
    why << excursion(q.outside.front()) << ", all below it: trains better than the baseline's seeds allow; check that "
        << "the change keeps the optimisation the same";
  } else if (q.faster_p < alpha / 2) {
    q.verdict = QualityVerdict::suspicious;
    why << "reaches the target in fewer tokens than the baseline's seeds allow (Welch, one-sided p "
        << fmt::p_value(q.faster_p) << "): check that the change keeps the optimisation the same";
  } else {
    why << "all " << q.checked << " evaluations inside the band";
    if (base.target && cand.target) why << "; tokens to target not significantly different";
  }
  if (q.final_worse && q.verdict != QualityVerdict::outside) why << "; final loss above the baseline's band";
  q.reason = why.str();
  return q;
}

BandGateResult band_gate(const std::vector<PointData>& base, const std::vector<PointData>& cand,
                         const std::string& base_desc, const std::string& cand_desc, bool match_by_world_size,
                         double alpha) {
  BandGateResult r;
  r.baseline = base_desc;
  r.candidate = cand_desc;
  bool regression = false, action = false;
  for (const MatchedPoint& m : match_points(base, cand, match_by_world_size)) {
    BandGatePoint p;
    p.name = m.name;
    if (!m.base || !m.cand) {
      p.q.verdict = QualityVerdict::missing;
      p.q.reason = m.base ? "only in the baseline" : "only in the candidate";
    } else {
      p.base = seed_set(*m.base, alpha);
      p.cand = seed_set(*m.cand, alpha);
      p.q = compare_quality(p.base, p.cand, alpha);
    }
    const QualityVerdict v = p.q.verdict;
    regression |= v == QualityVerdict::outside || v == QualityVerdict::slower;
    action |= v == QualityVerdict::missing || v == QualityVerdict::too_few || v == QualityVerdict::suspicious;
    r.points.push_back(std::move(p));
  }
  r.verdict = regression ? "regression" : action ? "needs action" : "pass";
  r.exit_code = regression ? 1 : action ? 3 : 0;
  return r;
}

namespace {

std::string tokens_cell(const SeedSet& s) {
  if (!s.target) return "—";
  if (s.reached == 0) return "not reached";
  std::string out = fmt::grouped(s.tokens.mean);
  if (s.tokens.n >= 2) out += " [" + fmt::grouped(s.tokens.lo) + ", " + fmt::grouped(s.tokens.hi) + "]";
  if (s.reached < s.seeds.size()) out += " (" + std::to_string(s.reached) + "/" + std::to_string(s.seeds.size()) + ")";
  return out;
}

}  // namespace

std::string band_gate_markdown(const BandGateResult& r) {
  std::ostringstream out;
  const char* mark = r.exit_code == 0 ? "\u2705" : r.exit_code == 1 ? "\u274c" : "\u26a0\ufe0f";
  out << "### ctitan gate --losses --bands: " << mark << " " << r.verdict << "\n\n"
      << "**Baseline** " << fmt::md_escape(r.baseline) << " \u00b7 **candidate** " << fmt::md_escape(r.candidate)
      << "<br>\nEach candidate seed's validation loss against the band the baseline's seeds allow (t prediction "
         "interval, Bonferroni over every evaluation judged); tokens to target by Welch's t test, 2.5% each way; "
         "means with 95% intervals.\n\n"
      << "| point | verdict | seeds | evaluations outside | tokens to target (baseline) | tokens to target "
         "(candidate) | final loss, candidate − baseline by seed | detail |\n"
      << "|---|---|---:|---:|---:|---:|---:|---|\n";
  for (const BandGatePoint& p : r.points) {
    out << "| `" << fmt::md_escape(p.name) << "` | " << to_string(p.q.verdict) << " | " << p.base.seeds.size() << " / "
        << p.cand.seeds.size() << " | " << p.q.outside.size() << " / " << p.q.checked << " | " << tokens_cell(p.base)
        << " | " << tokens_cell(p.cand) << " | ";
    if (p.q.final_diff.n >= 2)
      out << fmt::fixed(p.q.final_diff.mean, 4) << " [" << fmt::fixed(p.q.final_diff.lo, 4) << ", "
          << fmt::fixed(p.q.final_diff.hi, 4) << "]";
    else
      out << "—";
    out << " | " << fmt::md_escape(p.q.reason) << " |\n";
  }
  return out.str();
}

namespace {
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
nlohmann::json opt(const std::optional<double>& v) { return v ? num(*v) : nlohmann::json(nullptr); }
nlohmann::json interval(const stats::MeanInterval& m) {
  if (m.n == 0) return nullptr;
  return {{"n", m.n}, {"mean", num(m.mean)}, {"lo", num(m.lo)}, {"hi", num(m.hi)}};
}
}  // namespace

nlohmann::json seed_set_json(const SeedSet& s) {
  nlohmann::json seeds = nlohmann::json::array();
  for (const SeedCurve& c : s.seeds)
    seeds.push_back({{"seed", c.seed},
                     {"evaluations", c.curve.size()},
                     {"reached", c.crossing.reached},
                     {"tokens_to_target", c.crossing.reached ? num(c.crossing.tokens) : nlohmann::json(nullptr)},
                     {"time_to_target_s", c.crossing.reached ? num(c.crossing.seconds) : nlohmann::json(nullptr)}});
  return {{"target_loss", opt(s.target)},       {"seeds", seeds},
          {"reached", s.reached},               {"tokens_to_target", interval(s.tokens)},
          {"time_to_target_s", interval(s.seconds)}, {"tokens_to_target_olympic", opt(s.tokens_olympic)},
          {"time_to_target_olympic_s", opt(s.seconds_olympic)}, {"final_loss", opt(s.final_loss)}};
}

nlohmann::json quality_comparison_json(const QualityComparison& q) {
  nlohmann::json outside = nlohmann::json::array();
  for (const BandExcursion& x : q.outside)
    outside.push_back({{"seed", x.seed}, {"train_tokens", x.train_tokens}, {"loss", num(x.loss)}, {"lo", num(x.lo)},
                       {"hi", num(x.hi)}});
  return {{"verdict", to_string(q.verdict)},
          {"reason", q.reason},
          {"band_level", q.band_level},
          {"evaluations_checked", q.checked},
          {"outside", outside},
          {"tokens_slower_p", num(q.slower_p)},
          {"tokens_faster_p", num(q.faster_p)},
          {"tokens_to_target_difference",
           q.tokens_diff ? nlohmann::json{{"lo", num(q.tokens_diff->lo)}, {"hi", num(q.tokens_diff->hi)}}
                         : nlohmann::json(nullptr)},
          {"final_loss_worse", q.final_worse},
          {"final_loss_paired_difference", interval(q.final_diff)},
          {"speedup_at_equal_quality", opt(q.speedup_at_quality)}};
}

nlohmann::json band_gate_json(const BandGateResult& r) {
  nlohmann::json points = nlohmann::json::array();
  for (const BandGatePoint& p : r.points) {
    nlohmann::json j = quality_comparison_json(p.q);
    j["point"] = p.name;
    j["baseline"] = seed_set_json(p.base);
    j["candidate"] = seed_set_json(p.cand);
    points.push_back(std::move(j));
  }
  return {{"mode", "bands"},      {"baseline", r.baseline}, {"candidate", r.candidate},
          {"verdict", r.verdict}, {"exit_code", r.exit_code}, {"points", points}};
}

}  // namespace ctitan
