#include "trainer/model/model_registry.h"

#include <algorithm>

#include "common/errors.h"
#include "trainer/models/deepseek_v3.h"
#include "trainer/models/llama3.h"
#include "trainer/models/qwen3.h"

namespace ctitan {

namespace {

const std::vector<const ModelFamily*>& families() {
  static const std::vector<const ModelFamily*> all = {&llama3_family(), &qwen3_family(), &deepseek_v3_family()};
  return all;
}

}  // namespace

std::vector<std::string> model_family_names() {
  std::vector<std::string> names;
  for (const ModelFamily* f : families()) names.push_back(f->name);
  return names;
}

bool is_model_family(const std::string& name) {
  const auto& all = families();
  return std::any_of(all.begin(), all.end(), [&](const ModelFamily* f) { return f->name == name; });
}

const ModelFamily& model_family(const std::string& name) {
  for (const ModelFamily* f : families())
    if (f->name == name) return *f;
  std::string known;
  for (const auto& n : model_family_names()) known += (known.empty() ? "\"" : ", \"") + n + "\"";
  throw InputError("model.name \"" + name + "\" is not a model family; ctitan's families: " + known);
}

ModelArgs model_flavor(const std::string& name, const std::string& flavor, int64_t n_layers) {
  const ModelFamily& f = model_family(name);
  ModelArgs a = f.flavor(flavor);
  a.family = f.name;
  if (n_layers > 0) {
    a.n_layers = n_layers;
    a.n_dense_layers = std::min(a.n_dense_layers, n_layers);
  }
  return a;
}

std::vector<std::string> flavor_names(const FlavorTable& table) {
  std::vector<std::string> names;
  for (const auto& [name, _] : table) names.push_back(name);
  return names;
}

ModelArgs find_flavor(const FlavorTable& table, const std::string& family, const std::string& flavor) {
  auto it = table.find(flavor);
  if (it != table.end()) return it->second;
  std::string known;
  for (const auto& n : flavor_names(table)) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown model.flavor '" + flavor + "' for " + family + "; known flavors: " + known);
}

void check_model_layout(const ModelArgs& args, const ModelLayout& layout) {
  const std::string why = model_family(args.family).refuses(args, layout);
  if (!why.empty()) throw InputError(why);
}

}  // namespace ctitan
