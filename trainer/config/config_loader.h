// Config loader: TorchTitan-style TOML recipes plus `--section.key value` CLI
// overrides, resolved into a validated JobConfig.
//
// Precedence: JobConfig defaults < TOML file (--job.config_file F) < CLI.
// Every key is listed once in the field registry (config_registry.cpp).
//
// Errors are InputError with one line naming the key and where it was set,
// and for unknown keys the nearest valid key:
//   config error: recipes/x.toml:12: unknown key 'training.stepz'; did you mean 'training.steps'?
//
// TorchTitan keys ctitan does not implement (e.g. [validation],
// [fault_tolerance]) are accepted so TorchTitan recipes parse; their on/off
// switches and feature-changing keys must keep their default ("<key> is not
// supported by ctitan" and why), keys without effect are accepted with a
// start-up warning when set (config_warnings).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/config/job_config.h"

namespace ctitan {

// Thrown by parse_job_config for -h/--help. what() is the help text (every
// key with its type and default); the caller prints it to stdout and exits 0.
class HelpRequested : public std::runtime_error {
 public:
  explicit HelpRequested(const std::string& text) : std::runtime_error(text) {}
};

// args are the arguments AFTER the subcommand (e.g. after `ctitan train`):
//   --job.config_file F     load the TOML recipe F first
//   --section.key value     or --section.key=value
//   --section.flag          boolean true; --section.no_flag for false;
//                           --section.flag true|false also works
//   --model.converters a,b  comma-separated lists ("" = empty list)
//   --lr_scheduler.decay_ratio none   unsets an optional value
// Throws InputError (bad input) or HelpRequested (-h/--help).
JobConfig parse_job_config(const std::vector<std::string>& args);

// Defaults + the file at `path`, validated. cfg.job.config_file is `path`
// unless the file sets job.config_file itself (a resolved config written by
// to_toml keeps naming the recipe it came from).
JobConfig load_toml_file(const std::string& path);

// `text` (a TOML document; `where` names it in errors) applied over `cfg`,
// then the whole config validated — load_toml_file without the file.
void load_toml_text_into(JobConfig& cfg, const std::string& text, const std::string& where);

// The resolved config as TOML, every key, sections in TorchTitan's order.
// load_toml_file on this text yields a config equal to `cfg`. An unset
// optional (lr_scheduler.decay_ratio) is written as a comment.
std::string to_toml(const JobConfig& cfg);

// Sets one key from its CLI spelling: "training.steps", "100"; lists are
// comma-separated; booleans true/false. Does not validate the whole config.
void apply_override(JobConfig& cfg, const std::string& dotted_key, const std::string& value);

// Throws InputError for impossible or unsupported values.
void validate(const JobConfig& cfg);

// One line per TorchTitan key that is set to a non-default value but has no
// effect in ctitan, naming the key, its value and why:
//   ctitan: warning: training.gc_freq = 10 has no effect: a Python garbage-collection interval: ...
// The trainer prints them on rank 0 at start. Keys ctitan cannot honour are
// errors instead (validate).
std::vector<std::string> config_warnings(const JobConfig& cfg);

// All dotted keys in registry order, e.g. "quantize.linear.float8.recipe_name".
std::vector<std::string> config_keys();

// Help text listing every key with type and default (what HelpRequested holds).
std::string config_help();

// True when every key has the same value in both configs.
bool configs_equal(const JobConfig& a, const JobConfig& b);

}  // namespace ctitan
