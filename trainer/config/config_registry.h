// The field registry: one table binding every dotted config key
// ("training.steps", "quantize.linear.float8.recipe_name") to its JobConfig
// member. TOML parsing, CLI options, apply_override, to_toml, --help and
// config_keys() all walk this table, so a new key is added in one place
// (config_registry.cpp) and cannot be forgotten by one of them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "trainer/config/job_config.h"

namespace ctitan::config {

// The value of one key. The alternative held is the key's type; it never
// changes for a given key.
using Value = std::variant<bool, int64_t, double, std::string, std::vector<std::string>,
                           std::optional<double>, std::optional<int64_t>>;

enum class Support {
  kFull,         // implemented by ctitan
  kDefaultOnly,  // TorchTitan key ctitan does not implement: only its default is accepted
  kInert,        // TorchTitan key with no effect in ctitan: any value, a warning when not the default
};

struct FieldSpec {
  std::string key;   // dotted: section[.subsection].name
  std::string help;  // one line for --help
  Support support = Support::kFull;
  std::function<Value(const JobConfig&)> get;
  std::function<void(JobConfig&, const Value&)> set;
  // Spellings rewritten on input, e.g. TorchTitan's "for-loop" -> "for_loop",
  // so consumers compare against one canonical string.
  std::vector<std::pair<std::string, std::string>> aliases;
  // kInert / kDefaultOnly: why ctitan does not act on the key (and what to
  // use instead) — the warning's or the error's reason, and docs/trainer.md's.
  std::string why;
  // kInert keys acted on in some configurations only (export_dtype with a
  // Hugging Face export): true where the key takes effect, so no warning.
  std::function<bool(const JobConfig&)> has_effect;

  std::string section() const { return key.substr(0, key.rfind('.')); }
  std::string name() const { return key.substr(key.rfind('.') + 1); }
};

// Why ctitan does not act on a key, by key: every kInert and kDefaultOnly
// key has an entry (config_warnings.cpp); the registry copies it into `why`.
const std::map<std::string, std::string>& unsupported_reasons();

// All keys, in TOML output order (sections in TorchTitan's order).
const std::vector<FieldSpec>& registry();

// nullptr when `key` is not a config key.
const FieldSpec* find_field(const std::string& key);

// True when some registered key starts with `prefix` + ".".
bool is_section(const std::string& prefix);

// "integer", "float", "boolean", "string", "list of strings" for a Value's type.
std::string type_name(const Value& v);

// TOML-literal rendering ("10000", "8e-4" -> "0.0008", "\"op\"", "[\"a\", \"b\"]");
// an unset optional renders as "" (the key is omitted from TOML).
std::string render_value(const Value& v);

// The valid key closest to `unknown`: TorchTitan renames first (e.g.
// checkpoint.enable_checkpoint -> checkpoint.enable), then edit distance,
// preferring a key with the same last component when the spelling is far.
std::string nearest_key(const std::string& unknown);

// What to tell a user of an unknown key, after "unknown key 'K'; ": a key of
// a later TorchTitan is named as such (with v0.2.2's way to say the same,
// where there is one), anything else gets "did you mean '<prefix>K2'?".
std::string unknown_key_advice(const std::string& unknown, const std::string& prefix = "");

// The section ("training", "quantize.linear.float8") closest to `unknown`.
std::string nearest_section(const std::string& unknown);

// Where each key got its value: "recipes/x.toml:12" or "command line".
// Validation errors are prefixed with it.
using Origins = std::map<std::string, std::string>;

// The pieces the public API in config_loader.h is built from.
// The file must be a regular, non-empty file (config error otherwise).
void load_toml_into(JobConfig& cfg, const std::string& path, Origins* origins);
void load_toml_text_into(JobConfig& cfg, const std::string& text, const std::string& where, Origins* origins);
void set_from_string(JobConfig& cfg, const FieldSpec& f, const std::string& text,
                     const std::string& where);
void validate_with_origins(const JobConfig& cfg, const Origins& origins);

// model.name names a model family. The families' registry sits above config/
// (trainer/models/registry.h) and installs its check here: "" accepts the
// name, anything else is the error (validation prefixes where it was set).
// Validation fails closed: with none installed (a program that does not
// link trainer/models/registry.cpp, or validates before static
// initialization installed it) it throws std::logic_error, a bug of the
// program, instead of accepting any name. Returns the check it replaces
// (tests swap it out and back).
using ModelNameCheck = std::string (*)(const std::string& name);
ModelNameCheck set_model_name_check(ModelNameCheck check);

// "config error: <where>: <what>" (where may be empty) as one line.
[[noreturn]] void fail(const std::string& where, const std::string& what);

}  // namespace ctitan::config
