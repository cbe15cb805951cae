#include "trainer/models/hf_config.h"

#include <cmath>

#include "common/errors.h"
#include "common/printable.h"

namespace ctitan {

void HfConfigCheck::integer(const char* key, int64_t want) const {
  if (!c_.contains(key)) return;
  if (!c_[key].is_number_integer() || c_[key].get<int64_t>() != want)
    fail(std::string(key) + " = " + message_text(c_[key].dump()) + " but the model has " + std::to_string(want) +
         kOtherModel);
}

void HfConfigCheck::real(const nlohmann::json& v, const std::string& key, double want) const {
  if (!v.is_number() || std::abs(v.get<double>() - want) > 1e-6 * std::abs(want))
    fail(key + " = " + message_text(v.dump()) + " but the model has " + std::to_string(want) + kOtherModel);
}

void HfConfigCheck::boolean(const char* key, bool want, const char* what) const {
  if (c_.contains(key) && c_[key] != want)
    fail(std::string(key) + " = " + message_text(c_[key].dump()) + " but the model's " + what + " is " +
         (want ? "true" : "false") + kOtherModel);
}

void HfConfigCheck::fail(const std::string& what) const { throw InputError(path_ + ": " + what); }

int64_t check_gqa_config(const HfConfigCheck& config, const ModelArgs& args) {
  config.integer("num_key_value_heads", args.n_kv_heads);
  config.integer("head_dim", args.head_dim());
  return 0;
}

const nlohmann::json* hf_yarn_of(const nlohmann::json& c) {
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!c.contains(key) || !c[key].is_object()) continue;
    const nlohmann::json& r = c[key];
    const auto type = r.contains("rope_type") ? r["rope_type"] : r.contains("type") ? r["type"] : nlohmann::json();
    if (type == "yarn") return &r;
  }
  return nullptr;
}

void check_hf_yarn(const HfConfigCheck& config, const nlohmann::json& y, const YarnArgs& want) {
  const auto real = [&](const char* key, double w) {
    if (y.contains(key)) config.real(y[key], std::string("rope_parameters.") + key, w);
  };
  real("factor", want.factor);
  real("original_max_position_embeddings", static_cast<double>(want.original_seq_len));
  real("beta_fast", want.beta_fast);
  real("beta_slow", want.beta_slow);
}

}  // namespace ctitan
