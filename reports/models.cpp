#include "reports/models.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "reports/aliases.h"
#include "reports/report.h"

namespace ctitan {
namespace {

// The shape keys' values as a config or a label gives them: "" for unset
// (0: the flavor's own).
void set_shape(ModelIdentity& m, const std::map<std::string, std::string>& values) {
  m.shape.clear();
  for (const std::string& key : model_shape_keys()) {
    const auto it = values.find(key);
    if (it == values.end() || it->second.empty() || it->second == "0") continue;
    m.shape.emplace_back(key, it->second);
  }
}

}  // namespace

std::string ModelIdentity::key() const {
  std::string k = name + "|" + flavor;
  for (const auto& [key, value] : shape) k += "|" + key + "=" + value;
  return k;
}

const std::vector<std::string>& model_shape_keys() {
  static const std::vector<std::string> keys = {"model.n_layers", "model.moe_num_experts", "model.moe_top_k"};
  return keys;
}

bool is_model_key(const std::string& key) {
  const auto& shape = model_shape_keys();
  return key == "model.name" || key == "model.flavor" || std::find(shape.begin(), shape.end(), key) != shape.end();
}

std::optional<ModelIdentity> model_of_config(const std::string& config_toml) {
  if (config_toml.empty()) return std::nullopt;
  toml::table t;
  try {
    t = toml::parse(config_toml);
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
  ModelIdentity m;
  const toml::node_view<toml::node> model = t["model"];
  m.name = model["name"].value_or(m.name);
  m.flavor = model["flavor"].value_or(m.flavor);
  std::map<std::string, std::string> values;
  for (const std::string& key : model_shape_keys())
    if (const auto v = model[key.substr(key.find('.') + 1)].value<int64_t>()) values[key] = std::to_string(*v);
  set_shape(m, values);
  return m;
}

ModelIdentity model_of_label(const std::string& label) {
  ModelIdentity m;
  std::map<std::string, std::string> values;
  std::istringstream in(label);
  for (std::string t; in >> t;) {
    const auto eq = t.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = t.substr(0, eq), value = t.substr(eq + 1);
    if (key == "model.name") m.name = value;
    else if (key == "model.flavor") m.flavor = value;
    else values[key] = value;
  }
  set_shape(m, values);
  return m;
}

std::vector<std::string> model_labels(const std::vector<ModelIdentity>& models) {
  // The shape keys whose values differ among the models of one family and flavor.
  std::map<std::string, std::map<std::string, std::set<std::string>>> seen;  // name|flavor → key → values
  for (const ModelIdentity& m : models) {
    std::map<std::string, std::set<std::string>>& keys = seen[m.name + "|" + m.flavor];
    for (const std::string& key : model_shape_keys()) {
      std::string value;
      for (const auto& [k, v] : m.shape)
        if (k == key) value = v;
      keys[key].insert(value);
    }
  }
  std::vector<std::string> out;
  for (const ModelIdentity& m : models) {
    const auto& keys = seen[m.name + "|" + m.flavor];
    std::string label = m.name + " " + m.flavor;
    for (const auto& [key, value] : m.shape)
      if (keys.at(key).size() > 1) {
        label += ' ';
        label += alias::token(key, value);
      }
    out.push_back(label);
  }
  return out;
}

// From the first run's stored config, else from the label.
void set_models(SectionReport& sec, const std::vector<PointData>& points) {
  std::vector<ModelIdentity> distinct;
  std::vector<std::string> keys;
  for (size_t i = 0; i < points.size(); ++i) {
    std::optional<ModelIdentity> m;
    for (const RunData& r : points[i].runs)
      if ((m = model_of_config(r.run.config_toml))) break;
    if (!m) m = model_of_label(points[i].label);
    sec.points[i].model_key = m->key();
    if (std::find(keys.begin(), keys.end(), m->key()) == keys.end()) {
      keys.push_back(m->key());
      distinct.push_back(*m);
    }
  }
  sec.models = model_labels(distinct);
  for (PointStats& p : sec.points)
    p.model = sec.models[static_cast<size_t>(std::find(keys.begin(), keys.end(), p.model_key) - keys.begin())];
}

}  // namespace ctitan
