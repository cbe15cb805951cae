// Reading a Hugging Face config.json against the model: the checks a
// family's HfAdapter::check_config and hf_checkpoint.cpp's checks of the
// keys every decoder has are made of. Each check throws InputError, one
// line: the file, the key, both values and what to do.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "trainer/model/model_args.h"

namespace ctitan {

class HfConfigCheck {
 public:
  // `path` names config.json in messages; `config` is its object.
  HfConfigCheck(std::string path, const nlohmann::json& config) : path_(std::move(path)), c_(config) {}

  const nlohmann::json& json() const { return c_; }
  bool has(const char* key) const { return c_.contains(key); }

  // `key`, when present, is the integer `want`.
  void integer(const char* key, int64_t want) const;
  // `value` (config.json's `key`) is `want` to a relative 1e-6.
  void real(const nlohmann::json& value, const std::string& key, double want) const;
  // `key`, when present, is `want` (the model's `what`).
  void boolean(const char* key, bool want, const char* what) const;
  // InputError "<path>: <what>".
  [[noreturn]] void fail(const std::string& what) const;

  // The end of a mismatch's line: what it means and what to do.
  static constexpr const char* kOtherModel =
      "; the checkpoint is for another model: check model.flavor (and model.n_layers)";

 private:
  std::string path_;
  const nlohmann::json& c_;
};

// Grouped-query attention's keys (Llama, Qwen3): num_key_value_heads and
// head_dim. An HfAdapter::check_config (it skips no layers: 0).
int64_t check_gqa_config(const HfConfigCheck& config, const ModelArgs& args);

// YaRN as a config.json states it (rope_parameters in transformers 5,
// rope_scaling in DeepSeek's own files); nullptr without YaRN.
const nlohmann::json* hf_yarn_of(const nlohmann::json& config);
// The YaRN keys `yarn` (hf_yarn_of's) states — factor, beta_fast,
// beta_slow, original_max_position_embeddings — are `want`'s.
void check_hf_yarn(const HfConfigCheck& config, const nlohmann::json& yarn, const YarnArgs& want);

}  // namespace ctitan
