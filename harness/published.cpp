// Published tables (recipes/published/*.toml) → their points → the
// planner's predictions, for `ctitan plan --validate` and `ctitan report
// --published`.
#include "harness/published.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>

#include "common/errors.h"
#include "planner/model_desc.h"
#include "planner/plan.h"
#include "trainer/config/config_registry.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::vector<std::string> spec_files(const std::string& dir_or_file) {
  std::error_code ec;
  if (fs::is_regular_file(dir_or_file, ec)) return {dir_or_file};
  if (!fs::is_directory(dir_or_file, ec))
    throw InputError("published tables: '" + dir_or_file +
                     "' is neither a folder nor a file; pass recipes/published or one of its .toml specs");
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir_or_file, ec))
    if (e.path().extension() == ".toml" && e.is_regular_file(ec)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  if (out.empty()) throw InputError("published tables: no .toml spec in " + dir_or_file);
  return out;
}

// The config has every setting of `sets` (compared as the trainer parses them).
bool has_settings(const JobConfig& cfg, const std::vector<Assignment>& sets) {
  for (const Assignment& a : sets) {
    const config::FieldSpec& f = *config::find_field(a.key);  // the spec parser checked the key
    JobConfig probe;
    config::set_from_string(probe, f, a.text, a.where);
    if (!(f.get(probe) == f.get(cfg))) return false;
  }
  return true;
}

std::string describe_row(const PublishedRowSpec& row) {
  std::string out;
  if (!row.stack.empty()) {
    out = "stack '";
    out += row.stack + "', ";
  }
  out += "gpus " + std::to_string(row.gpus);
  for (const Assignment& a : row.point) {
    out += ", ";
    out += a.key + " = " + (a.text.empty() ? "[]" : a.text);
  }
  return out;
}

}  // namespace

std::string published_dir() {
  std::error_code ec;
  if (fs::is_directory("recipes/published", ec)) return "recipes/published";
  std::string dir = CTITAN_RECIPES_DIR;
  dir += "/published";
  return dir;
}

DeviceBudget published_budget(const HardwareSpec& hw, int gpus) {
  DeviceBudget b;
  b.gpus = gpus;
  b.gpu_memory_bytes = static_cast<int64_t>(hw.memory_bytes);
  b.memory_bytes = static_cast<int64_t>(hw.memory_bytes * gpus);
  b.gpu_name = hw.title;
  b.hardware = hw.path.empty() ? hw.name : hw.path;  // the sweep's own checks predict on this spec too
  b.source = "hardware spec ";
  b.source += hw.name;
  return b;
}

std::string gpu_match_token(const std::string& name) {
  std::string token = name.substr(0, name.find('_'));
  std::transform(token.begin(), token.end(), token.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return token;
}

std::vector<PublishedRow> load_published(const std::string& dir_or_file) {
  std::vector<PublishedRow> out;
  for (const std::string& path : spec_files(dir_or_file)) {
    const SweepSpec spec = load_sweep_spec(path);
    if (!spec.published)
      throw InputError("published tables: " + path +
                       " has no [published] table; recipes/published/ holds sweep specs with the figures they "
                       "reproduce (docs/planner.md)");
    const PublishedSpec& pub = *spec.published;
    HardwareSpec hw;
    try {
      hw = load_hardware(pub.hardware);
    } catch (const InputError& e) {
      throw InputError(pub.where + ": [published] hardware: " + e.what());
    }
    const int gpus = *std::max_element(spec.world_sizes.begin(), spec.world_sizes.end());
    const std::vector<SweepPoint> points = plan_sweep(spec, published_budget(hw, gpus));
    for (const PublishedRowSpec& row : pub.rows) {
      std::vector<const SweepPoint*> match;
      for (const SweepPoint& pt : points) {
        const std::string stack = pt.stack_index > 0 ? spec.stack[pt.stack_index - 1].name : "";
        if (pt.world_size == row.gpus && stack == row.stack && has_settings(pt.config, row.point)) match.push_back(&pt);
      }
      if (match.size() != 1) {
        std::string what = row.where + ": the published row (" + describe_row(row) + ") matches ";
        if (match.empty()) {
          what += "no point of the sweep";
        } else {
          what += std::to_string(match.size()) + " points (";
          for (size_t i = 0; i < match.size(); ++i) {
            if (i) what += "; ";
            what += match[i]->label;
          }
          what += "); add settings to its point = {...}";
        }
        throw InputError(what);
      }
      PublishedRow r;
      r.spec_path = path;
      r.table = fs::path(path).stem().string();
      r.source = pub.source;
      r.hardware = pub.hardware;
      r.framework = pub.framework;
      r.label = row.label.empty() ? match[0]->label : row.label;
      r.where = row.where;
      r.point_label = match[0]->label;
      r.world_size = row.gpus;
      r.cfg = match[0]->config;
      r.config_hash = match[0]->config_hash;
      r.infeasible = match[0]->infeasible;
      r.model = model_from_config(r.cfg.model);
      for (const std::vector<Assignment>* keys : {&pub.model, &row.model})
        for (const Assignment& a : *keys) override_model(r.model, a.key, a.text);  // each checked by the parser
      try {
        check_model_shape(r.model);
      } catch (const InputError& e) {
        throw InputError(row.where + ": the row's model: " + e.what());
      }
      r.own_model = pub.names_own_model(row);
      if (r.own_model)  // the sweep judged the base recipe's model: ctitan's trainer has no other
        r.infeasible = "another framework's model (" + r.model.name + "): predicted, not run by ctitan's trainer";
      r.tps = row.tps;
      if (row.tflops) r.tps = *row.tflops * 1e12 / megatron_flops_per_token(r.model, r.cfg.training.seq_len);
      r.mem_gib = row.mem_gib;
      r.mfu_pct = row.mfu_pct;
      out.push_back(std::move(r));
    }
  }
  return out;
}

PublishedReport predict_published(const std::vector<PublishedRow>& rows) {
  PublishedReport rep;
  std::map<std::string, HardwareSpec> specs;
  for (const PublishedRow& row : rows) {
    auto it = specs.find(row.hardware);
    if (it == specs.end()) it = specs.emplace(row.hardware, load_hardware(row.hardware)).first;
    const HardwareSpec& hw = it->second;
    PublishedPoint p;
    p.table = row.table;
    p.source = row.source;
    p.label = row.label;
    p.where = row.where;
    p.hardware = row.hardware;
    p.gpu_match = gpu_match_token(row.hardware);
    p.world_size = row.world_size;
    p.config_hash = row.config_hash;
    p.published_tps = row.tps;
    p.published_mem_gib = row.mem_gib;
    p.published_mfu_pct = row.mfu_pct;
    if (row.own_model) {
      p.not_run = "not run (ctitan's trainer builds no " + row.model.family + ")";
      p.measured_note = p.not_run;
    }
    try {
      PlanRequest req;
      req.cfg = row.cfg;
      req.model = row.model;
      req.world_size = row.world_size;
      req.framework = row.framework;
      const Prediction pred = predict(req, hw);
      p.predicted_tps = pred.tps_per_device;
      p.predicted_mem_gib = pred.memory.total / kGiB;
      p.predicted_mfu_pct = pred.mfu;
      p.predicted_fits = pred.fits;
    } catch (const std::exception& e) {  // shown in the row: one row the planner cannot do hides no other
      p.not_predicted = e.what();
    }
    rep.rows.push_back(std::move(p));
  }
  for (const auto& [name, hw] : specs) rep.hardware.push_back({name, hw.title, hw.calibration});
  return rep;
}

int validate_published(const std::string& dir_or_file, bool json, std::ostream& out) {
  const PublishedReport rep = predict_published(load_published(dir_or_file));
  if (json) {
    out << render_published_json(rep).dump(2) << "\n";
  } else {
    out << render_published_text(rep);
  }
  return 0;
}

}  // namespace ctitan
