// Knob effects and stacked chains: what each setting of a sweep buys, from
// the points that differ in that setting alone (reports/report.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <toml++/toml.h>

#include "common/errors.h"
#include "reports/aliases.h"
#include "reports/models.h"
#include "reports/report.h"

namespace ctitan {
namespace {

bool measured(const PointStats& p) { return p.status == "ok" && p.tps.n > 0 && p.tps.median > 0; }

// Index of a varying key; npos when the section does not vary it.
size_t key_index(const SectionReport& sec, const std::string& key) {
  const auto it = std::find(sec.varying_keys.begin(), sec.varying_keys.end(), key);
  return it == sec.varying_keys.end() ? std::string::npos : static_cast<size_t>(it - sec.varying_keys.begin());
}

// What must be equal for two points to pair on setting k: the world size,
// the stack row and every other setting.
std::string context(const PointStats& p, size_t k) {
  std::string c = std::to_string(p.world_size) + "|" + std::to_string(p.stack_index);
  for (size_t i = 0; i < p.settings.size(); ++i) c += "|" + (i == k ? std::string("*") : p.settings[i]);
  return c;
}

// The first value of setting k among the measured points (spec order), then
// the others in order; of one model's points when `model` is not "".
std::vector<std::string> values_of(const SectionReport& sec, size_t k, const std::string& model = "") {
  std::vector<std::string> out;
  for (const PointStats& p : sec.points)
    if (measured(p) && (model.empty() || p.model == model) && !p.settings[k].empty() &&
        std::find(out.begin(), out.end(), p.settings[k]) == out.end())
      out.push_back(p.settings[k]);
  return out;
}

// The models whose effects are computed on their own: each of a section of
// several, or "" (every point) for a section of one.
std::vector<std::string> model_groups(const SectionReport& sec) {
  return sec.several_models() ? sec.models : std::vector<std::string>{""};
}

// Pairs (from, to) on setting k among the points `admit` lets in.
template <class Admit>
KnobEffect effect(const SectionReport& sec, size_t k, const std::string& from, const std::string& to, Admit admit) {
  KnobEffect e;
  e.key = sec.varying_keys[k];
  e.from = from;
  e.to = to;
  e.label = alias::value_name(e.key, to);
  e.versus = alias::value_name(e.key, from);
  std::map<std::string, size_t> base;
  for (size_t i = 0; i < sec.points.size(); ++i) {
    const PointStats& p = sec.points[i];
    if (measured(p) && admit(p) && p.settings[k] == from) base.emplace(context(p, k), i);
  }
  std::vector<double> tps, mem;
  for (size_t i = 0; i < sec.points.size(); ++i) {
    const PointStats& q = sec.points[i];
    if (!measured(q) || !admit(q) || q.settings[k] != to) continue;
    ++e.candidates;
    const auto b = base.find(context(q, k));
    if (b == base.end()) continue;
    const PointStats& p = sec.points[b->second];
    e.pairs.emplace_back(b->second, i);
    tps.push_back(q.tps.median / p.tps.median);
    if (p.mem_peak_bytes && q.mem_peak_bytes && *p.mem_peak_bytes > 0)
      mem.push_back(*q.mem_peak_bytes / *p.mem_peak_bytes);
  }
  e.tps = paired_ratio(tps);
  e.mem = paired_ratio(mem);
  // A parallel degree reads as the layouts it turns one into the other
  // ("ddp2" vs "fsdp2"), where the pairs agree on them.
  if (alias::is_layout_key(e.key) && !e.pairs.empty()) {
    std::set<std::string> from_layouts, to_layouts;
    for (const auto& [a, b] : e.pairs) {
      from_layouts.insert(sec.points[a].layout);
      to_layouts.insert(sec.points[b].layout);
    }
    if (from_layouts.size() == 1 && to_layouts.size() == 1 && !from_layouts.begin()->empty() &&
        !to_layouts.begin()->empty() && *from_layouts.begin() != *to_layouts.begin()) {
      e.versus = *from_layouts.begin();
      e.label = *to_layouts.begin();
    }
  }
  return e;
}

}  // namespace

PairedRatio paired_ratio(const std::vector<double>& ratios) {
  PairedRatio r;
  std::vector<double> logs;
  for (double x : ratios)
    if (x > 0 && std::isfinite(x)) logs.push_back(std::log(x));
  if (logs.empty()) return r;
  const stats::MedianInterval m = stats::median_interval(logs);
  r.n = m.n;
  r.median = std::exp(m.median);
  r.lo = std::exp(m.lo);
  r.hi = std::exp(m.hi);
  r.level = m.level;
  return r;
}

std::vector<KnobEffect> knob_effects(const SectionReport& sec) {
  std::vector<KnobEffect> out;
  for (const std::string& model : model_groups(sec)) {
    const auto of_model = [&](const PointStats& p) { return model.empty() || p.model == model; };
    for (size_t k = 0; k < sec.varying_keys.size(); ++k) {
      const std::vector<std::string> values = values_of(sec, k, model);
      for (size_t v = 1; v < values.size(); ++v) {
        KnobEffect e = effect(sec, k, values[0], values[v], of_model);
        e.model = model;
        if (!e.pairs.empty()) out.push_back(std::move(e));
      }
    }
  }
  return out;
}

std::vector<ChainStep> stack_chain(const SectionReport& sec,
                                   const std::vector<std::pair<std::string, std::string>>& steps) {
  struct Step {
    size_t k;
    std::string from, to;
  };
  std::vector<Step> chain;
  for (const auto& [key, to] : steps) {
    if (is_model_key(key))
      throw InputError("[report] stack entry '" + key + "' changes the model (reports/models.h): tokens/s of two "
                       "models is not a comparison; stack the settings compared within one model");
    const size_t k = key_index(sec, key);
    if (k == std::string::npos)
      throw InputError("[report] stack names '" + key + "', which no two measured points of sweep " + sec.title +
                       " differ in; name a [grid] axis");
    const std::vector<std::string> values = values_of(sec, k);
    std::string target = to;
    if (target.empty()) {
      if (values.size() != 2)
        throw InputError("[report] stack entry '" + key + "' has " + std::to_string(values.size()) +
                         " measured values in sweep " + sec.title + "; name the one to stack: '" + key + "=" +
                         (values.empty() ? std::string("VALUE") : values.back()) + "'");
      target = values[1];
    }
    if (values.empty() || std::find(values.begin() + 1, values.end(), target) == values.end())
      throw InputError("[report] stack entry '" + key + "=" + target + "': no measured point of sweep " + sec.title +
                       " has that value other than as its first; the values are those of the [grid] axis");
    chain.push_back({k, values[0], target});
  }
  std::vector<ChainStep> out;
  for (const std::string& model : model_groups(sec)) {  // one chain per model: its ratios pair its own points
    std::vector<ChainStep> steps_of_model;
    double tps = 1, mem = 1;
    bool paired = false;
    for (size_t i = 0; i < chain.size(); ++i) {
      const auto admit = [&](const PointStats& p) {
        if (!model.empty() && p.model != model) return false;
        for (size_t j = 0; j < chain.size(); ++j)
          if (j != i && p.settings[chain[j].k] != (j < i ? chain[j].to : chain[j].from)) return false;
        return true;
      };
      ChainStep s;
      s.effect = effect(sec, chain[i].k, chain[i].from, chain[i].to, admit);
      s.effect.model = model;
      paired = paired || !s.effect.pairs.empty();
      if (s.effect.tps.n) tps *= s.effect.tps.median;
      if (s.effect.mem.n) mem *= s.effect.mem.median;
      s.cumulative_tps = tps;
      s.cumulative_mem = mem;
      steps_of_model.push_back(std::move(s));
    }
    if (paired || model.empty())  // a model whose points never form the chain has none
      out.insert(out.end(), steps_of_model.begin(), steps_of_model.end());
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> report_stack_of(const std::string& spec_toml) {
  std::vector<std::pair<std::string, std::string>> out;
  toml::table t;
  try {
    t = toml::parse(spec_toml);
  } catch (const toml::parse_error&) {
    return out;  // a stored spec was checked when the sweep ran
  }
  if (const toml::array* a = t["report"]["stack"].as_array())
    for (const toml::node& n : *a)
      if (const auto s = n.value<std::string>()) {
        const auto eq = s->find('=');
        out.emplace_back(s->substr(0, eq), eq == std::string::npos ? "" : s->substr(eq + 1));
      }
  return out;
}

}  // namespace ctitan
