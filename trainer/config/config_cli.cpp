// Command line: `--job.config_file F --section.key value ...`, parsed with
// CLI11 over options generated from the field registry.
//
// Arguments are first rewritten to the canonical `--section.key=value` form,
// because TorchTitan's conventions are not CLI11's: `--section.no_flag`
// negates a boolean, `--section.flag true` takes a separate value, and values
// may look like options (`--parallelism.data_parallel_shard_degree -1`).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>

#include "trainer/config/config_loader.h"
#include "trainer/config/config_registry.h"

namespace ctitan {
namespace config {
namespace {

constexpr const char* kWhere = "command line";

bool is_bool(const FieldSpec& f) { return std::holds_alternative<bool>(f.get(JobConfig{})); }

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_bool_word(const std::string& s) {
  const std::string l = lower(s);
  return l == "true" || l == "false";
}

// `--checkpoint.no_enable` -> the `checkpoint.enable` field, else nullptr.
const FieldSpec* negated_field(const std::string& key) {
  const size_t dot = key.rfind('.');
  if (dot == std::string::npos || key.compare(dot + 1, 3, "no_") != 0) return nullptr;
  const FieldSpec* f = find_field(key.substr(0, dot + 1) + key.substr(dot + 4));
  return (f && is_bool(*f)) ? f : nullptr;
}

// Rewrites every known option to `--key=value`; unknown arguments pass
// through untouched so CLI11 reports them as extras.
std::vector<std::string> canonicalize(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2) {
      out.push_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string key = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const FieldSpec* f = find_field(key);
    const FieldSpec* neg = f ? nullptr : negated_field(key);
    if (!f && !neg) {
      out.push_back(a);
      continue;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (f && !is_bool(*f)) {
      if (i + 1 >= args.size() || (args[i + 1].rfind("--", 0) == 0 &&
                                   find_field(args[i + 1].substr(2, args[i + 1].find('=') - 2)))) {
        fail(kWhere, "--" + key + " needs a value");
      }
      value = args[++i];
    } else if (i + 1 < args.size() && is_bool_word(args[i + 1])) {
      value = args[++i];  // `--section.flag false`
    } else {
      value = "true";
    }
    if (neg) {
      if (!is_bool_word(value))
        fail(kWhere, "--" + key + " expects true or false, got '" + value + "'");
      value = lower(value) == "true" ? "false" : "true";
      out.push_back("--" + neg->key + "=" + value);
    } else {
      out.push_back("--" + key + "=" + value);
    }
  }
  return out;
}

[[noreturn]] void unknown_argument(const std::string& arg) {
  if (arg.rfind("-", 0) != 0) {
    fail(kWhere, "unexpected argument '" + arg + "'; options look like --section.key value");
  }
  if (arg.rfind("--", 0) != 0) {  // there are no short options besides -h
    fail(kWhere, "unknown option '" + arg + "'; options look like --section.key value");
  }
  const std::string name = arg.substr(0, arg.find('='));
  const size_t first = name.find_first_not_of('-');
  if (first == std::string::npos)  // "--" alone: nothing follows as positional arguments here
    fail(kWhere, "unexpected argument '" + arg + "'; the trainer takes no positional arguments, options look like "
                 "--section.key value");
  const std::string bare = name.substr(first);
  fail(kWhere, "unknown option '" + name + "'; " + unknown_key_advice(bare, "--"));
}

}  // namespace
}  // namespace config

JobConfig parse_job_config(const std::vector<std::string>& args) {
  using namespace config;
  for (const std::string& a : args) {
    if (a == "-h" || a == "--help") throw HelpRequested(config_help());
  }
  const std::vector<std::string> canon = canonicalize(args);

  JobConfig cfg;
  Origins origins;
  const std::string file_flag = "--job.config_file=";
  std::string file;
  for (const std::string& a : canon) {
    if (a.rfind(file_flag, 0) == 0) file = a.substr(file_flag.size());
  }
  if (!file.empty()) load_toml_into(cfg, file, &origins);

  CLI::App app{"ctitan train"};
  app.set_help_flag();  // -h/--help were handled above with the registry's help text
  app.allow_extras();
  std::vector<std::pair<const FieldSpec*, CLI::Option*>> options;
  for (const FieldSpec& f : registry()) {
    // expected(0, 1) lets `--model.converters=` mean an empty list.
    CLI::Option* o = app.add_option("--" + f.key, f.help)->expected(0, 1);
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    options.emplace_back(&f, o);
  }
  std::vector<std::string> reversed(canon.rbegin(), canon.rend());  // CLI11's convention
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    fail(kWhere, e.what());
  }
  if (!app.remaining().empty()) unknown_argument(app.remaining().front());

  for (const auto& [f, o] : options) {
    if (o->count() == 0 || f->key == "job.config_file") continue;
    const std::string where = std::string(kWhere) + " (--" + f->key + ")";
    set_from_string(cfg, *f, o->results().empty() ? "" : o->results().back(), where);
    origins[f->key] = where;
  }
  validate_with_origins(cfg, origins);
  return cfg;
}

std::string config_help() {
  using namespace config;
  std::string out =
      "Usage: ctitan train [--job.config_file FILE] [--section.key VALUE]...\n"
      "Precedence: defaults < TOML file < command line. Booleans: --section.flag,\n"
      "--section.no_flag, --section.flag true|false. Lists are comma-separated.\n";
  static const JobConfig defaults;
  std::string section;
  for (const FieldSpec& f : registry()) {
    if (f.section() != section) {
      section = f.section();
      out += "\n[" + section + "]\n";
    }
    const Value def = f.get(defaults);
    std::string shown = render_value(def);
    if (shown.empty()) shown = "unset";  // an unset optional
    std::string line = "  --" + f.key + " " +
                       (std::holds_alternative<bool>(def) ? "[true|false]" : type_name(def)) +
                       " = " + shown;
    line.resize(std::max<size_t>(line.size() + 2, 64), ' ');
    line += f.help;
    if (f.support == Support::kDefaultOnly) line += " [not supported by ctitan: default only]";
    if (f.support == Support::kInert) line += " [accepted, no effect in ctitan]";
    out += line + "\n";
  }
  return out;
}

}  // namespace ctitan
