// Which model a point trains. Tokens/s of two models is not a comparison
// (a DeepSeek-V3 step and a Qwen3 step do different work), so a report
// never ranks points of different models: each model has its own summary
// (fastest, Pareto front, memory budgets), its own speedup baseline and its
// own effects (reports/report.h).
//
// A model is its family (model.name), its flavor and every key that
// changes its shape: model.n_layers, model.moe_num_experts, model.moe_top_k
// (ctitan's overrides of the flavor; unset = the flavor's). Keys that
// change how the same model is trained or run — the attention kernel, the
// mask, the load balancing, converters, the layout — are settings compared
// within one model.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ctitan {

struct ModelIdentity {
  std::string name = "llama3", flavor = "debugmodel";
  // (key, value) of each shape key the config sets (> 0), in model_shape_keys() order.
  std::vector<std::pair<std::string, std::string>> shape;
  std::string key() const;  // "qwen3|debugmodel_moe|model.n_layers=1|..." : equal keys, one model
};

// model.n_layers, model.moe_num_experts, model.moe_top_k.
const std::vector<std::string>& model_shape_keys();
// Whether a config key changes which model a point trains (model.name,
// model.flavor or a shape key).
bool is_model_key(const std::string& key);

// The model of a stored config (TOML as the sweep records it); nullopt when
// the text is empty or not TOML.
std::optional<ModelIdentity> model_of_config(const std::string& config_toml);
// The model as a point's label spells it ("model.flavor=x model.n_layers=2
// ..."; the defaults for what it does not set): for points whose runs
// recorded no config.
ModelIdentity model_of_label(const std::string& label);

// Readable names of distinct models, in their order: family and flavor,
// then the shape tokens (reports/aliases.h: "L2", "e16", "top2") that tell
// apart the models sharing that family and flavor — "qwen3 debugmodel_moe
// e16 top2", "deepseek_v3 debugmodel".
std::vector<std::string> model_labels(const std::vector<ModelIdentity>& models);

struct SectionReport;
struct PointData;
// Sets each point's model_key and model (points[i] is sec.points[i]'s data)
// and the section's models.
void set_models(SectionReport& sec, const std::vector<PointData>& points);

}  // namespace ctitan
