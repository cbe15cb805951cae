// TOML in and out, single-key overrides, and the small public helpers. The
// CLI lives in config_cli.cpp, the value checks in config_validate.cpp.
#include "trainer/config/config_loader.h"

#include <toml++/toml.h>

#include <cctype>
#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/errors.h"
#include "common/file_io.h"
#include "trainer/config/config_registry.h"

namespace ctitan {
namespace config {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::string canonical(const FieldSpec& f, const std::string& s) {
  for (const auto& [from, to] : f.aliases) {
    if (s == from) return to;
  }
  return s;
}

// "a, b,,c" -> {"a", "b", "c"}: TorchTitan's comma-list convention.
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    item = trim(item);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// "string \"ten\"", "float 2.5", "table", ...: what the file actually holds.
std::string describe(const toml::node& n) {
  if (auto s = n.as_string()) return "string " + render_value(Value(s->get()));
  if (auto i = n.as_integer()) return "integer " + std::to_string(i->get());
  if (auto d = n.as_floating_point()) return "float " + render_value(Value(d->get()));
  if (auto b = n.as_boolean()) return std::string("boolean ") + (b->get() ? "true" : "false");
  if (n.is_array()) return "array";
  if (n.is_table()) return "table";
  std::ostringstream os;
  os << n.type();  // date, time, date-time
  return os.str();
}

[[noreturn]] void type_error(const std::string& where, const FieldSpec& f, const Value& want,
                             const std::string& got) {
  fail(where, "'" + f.key + "' expects " + (type_name(want) == "integer" ? "an " : "a ") + type_name(want) +
                  ", got " + got);
}

Value from_toml(const toml::node& n, const FieldSpec& f, const Value& want,
                const std::string& where) {
  switch (want.index()) {
    case 0:
      if (auto b = n.as_boolean()) return b->get();
      break;
    case 1:
      if (auto i = n.as_integer()) return i->get();
      break;
    case 2:
      if (auto d = n.as_floating_point()) return d->get();
      if (auto i = n.as_integer()) return static_cast<double>(i->get());
      break;
    case 3:
      if (auto s = n.as_string()) return canonical(f, s->get());
      break;
    case 4:
      if (auto s = n.as_string()) return split_list(s->get());
      if (auto a = n.as_array()) {
        std::vector<std::string> out;
        for (size_t i = 0; i < a->size(); ++i) {
          // TorchTitan's list[list[str]] (module_fqns_per_model_part): an
          // inner array becomes one space-separated element.
          if (auto inner = (*a)[i].as_array(); inner && f.key == "parallelism.module_fqns_per_model_part") {
            std::string joined;
            for (size_t j = 0; j < inner->size(); ++j) {
              auto m = (*inner)[j].as_string();
              if (!m)
                type_error(where, f, want,
                           "an array whose element " + std::to_string(i) + " holds " + describe((*inner)[j]));
              joined += (joined.empty() ? "" : " ") + m->get();
            }
            out.push_back(joined);
            continue;
          }
          auto s = (*a)[i].as_string();
          if (!s)
            type_error(where, f, want,
                       "an array whose element " + std::to_string(i) + " is " + describe((*a)[i]));
          out.push_back(s->get());
        }
        return out;
      }
      break;
    case 6:
      if (auto i = n.as_integer()) return std::optional<int64_t>(i->get());
      break;
    default:
      if (auto d = n.as_floating_point()) return std::optional<double>(d->get());
      if (auto i = n.as_integer()) return std::optional<double>(static_cast<double>(i->get()));
      break;
  }
  type_error(where, f, want, describe(n));
}

// Every number a config holds is range-checked where it is read, before any
// arithmetic sees it: no key means anything beyond ±1e12 (steps, sizes,
// seeds, seconds, rates), and inf/nan are never meant. Which values a key
// takes (steps > 0, ...) is validate()'s, with its own message.
constexpr double kNumberLimit = 1e12;

void check_number(const FieldSpec& f, double v, bool integer, const std::string& where) {
  if (std::isfinite(v) && std::abs(v) <= kNumberLimit) return;
  std::ostringstream line;
  line << f.key << " = " << v << " is out of range; use " << (integer ? "an integer" : "a finite number")
       << " between -1e12 and 1e12";
  fail(where, line.str());
}

Value checked(const FieldSpec& f, Value v, const std::string& where) {
  if (const auto* i = std::get_if<int64_t>(&v)) check_number(f, static_cast<double>(*i), true, where);
  if (const auto* d = std::get_if<double>(&v)) check_number(f, *d, false, where);
  if (const auto* oi = std::get_if<std::optional<int64_t>>(&v); oi && *oi)
    check_number(f, static_cast<double>(**oi), true, where);
  if (const auto* od = std::get_if<std::optional<double>>(&v); od && *od) check_number(f, **od, false, where);
  return v;
}

std::string where_of(const std::string& path, const toml::source_region& src) {
  return path + ":" + std::to_string(src.begin.line);
}

// Sets every leaf of `t` whose dotted name is a registered key; anything else
// is an unknown key reported with its line and the nearest valid key.
void walk(const toml::table& t, const std::string& prefix, const std::string& path, JobConfig& cfg,
          Origins& seen) {
  for (auto&& [k, node] : t) {
    const std::string key =
        prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    const std::string where = where_of(path, k.source());
    const FieldSpec* f = find_field(key);
    if (auto sub = node.as_table(); sub && !f) {
      if (sub->empty() && !is_section(key)) {
        fail(where,
             "unknown section '[" + key + "]'; did you mean '[" + nearest_section(key) + "]'?");
      }
      walk(*sub, key, path, cfg, seen);
      continue;
    }
    if (!f) fail(where, "unknown key '" + key + "'; " + unknown_key_advice(key));
    f->set(cfg, checked(*f, from_toml(node, *f, f->get(cfg), where), where));
    seen[key] = where;
  }
}

}  // namespace

void load_toml_text_into(JobConfig& cfg, const std::string& text, const std::string& path, Origins* origins) {
  try {
    check_toml_nesting(text, path);
  } catch (const InputError& e) {
    fail("", e.what());
  }
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::string what(e.description());
    for (char& c : what) c = (c == '\n' || c == '\r') ? ' ' : c;  // keep the error on one line
    const auto& b = e.source().begin;
    fail(path + ":" + std::to_string(b.line) + ":" + std::to_string(b.column),
         "invalid TOML: " + what);
  }
  // Comments alone are as empty as no bytes: never "all defaults".
  if (root.empty()) fail(path, "the config sets no keys; an empty config is an error, not a request for defaults");
  Origins seen;
  walk(root, "", path, cfg, seen);
  if (!seen.count("job.config_file")) cfg.job.config_file = path;
  if (origins) {
    for (auto& [k, v] : seen) (*origins)[k] = v;
  }
}

void load_toml_into(JobConfig& cfg, const std::string& path, Origins* origins) {
  std::string text;
  try {
    // A config with nothing in it is an error, never "all defaults": a file
    // truncated by a full disk must not train a different model.
    text = read_file_bounded(path, "config file", kMaxConfigBytes, /*allow_empty=*/false);
  } catch (const InputError& e) {
    fail("", e.what());
  }
  load_toml_text_into(cfg, text, path, origins);
}

void set_from_string(JobConfig& cfg, const FieldSpec& f, const std::string& text,
                     const std::string& where) {
  const Value want = f.get(cfg);
  const std::string got = "'" + text + "'";
  switch (want.index()) {
    case 0: {
      const std::string t = lower(trim(text));
      if (t != "true" && t != "false") type_error(where, f, want, got + " (use true or false)");
      f.set(cfg, t == "true");
      return;
    }
    case 1:
    case 6: {
      const std::string t = lower(trim(text));
      if (want.index() == 6 && (t.empty() || t == "none" || t == "null")) {
        f.set(cfg, std::optional<int64_t>());
        return;
      }
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno == ERANGE) type_error(where, f, want, got);
      if (want.index() == 1) {
        f.set(cfg, checked(f, static_cast<int64_t>(v), where));
      } else {
        f.set(cfg, checked(f, std::optional<int64_t>(v), where));
      }
      return;
    }
    case 2:
    case 5: {
      if (want.index() == 5) {
        const std::string t = lower(trim(text));
        if (t.empty() || t == "none" || t == "null") {
          f.set(cfg, std::optional<double>());
          return;
        }
      }
      char* end = nullptr;
      errno = 0;
      double v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || errno == ERANGE) type_error(where, f, want, got);
      if (want.index() == 2) {
        f.set(cfg, checked(f, v, where));
      } else {
        f.set(cfg, checked(f, std::optional<double>(v), where));
      }
      return;
    }
    case 3:
      f.set(cfg, canonical(f, text));
      return;
    default:
      f.set(cfg, split_list(text));
  }
}

}  // namespace config

JobConfig load_toml_file(const std::string& path) {
  JobConfig cfg;
  config::Origins origins;
  config::load_toml_into(cfg, path, &origins);
  config::validate_with_origins(cfg, origins);
  return cfg;
}

void load_toml_text_into(JobConfig& cfg, const std::string& text, const std::string& where) {
  config::Origins origins;
  config::load_toml_text_into(cfg, text, where, &origins);
  config::validate_with_origins(cfg, origins);
}

std::string to_toml(const JobConfig& cfg) {
  std::string out = "# ctitan resolved config (TorchTitan v0.2 schema)\n";
  std::string section;
  for (const config::FieldSpec& f : config::registry()) {
    if (f.section() != section) {
      section = f.section();
      out += "\n[" + section + "]\n";
    }
    const config::Value v = f.get(cfg);
    if (config::render_value(v).empty()) {  // an unset optional
      out += "# " + f.name() + " is unset\n";  // TOML has no null
      continue;
    }
    out += f.name() + " = " + config::render_value(v) + "\n";
  }
  return out;
}

void apply_override(JobConfig& cfg, const std::string& dotted_key, const std::string& value) {
  const config::FieldSpec* f = config::find_field(dotted_key);
  if (!f) {
    config::fail("", "unknown key '" + dotted_key + "'; " + config::unknown_key_advice(dotted_key));
  }
  config::set_from_string(cfg, *f, value, "");
}

void validate(const JobConfig& cfg) { config::validate_with_origins(cfg, {}); }

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  for (const config::FieldSpec& f : config::registry()) keys.push_back(f.key);
  return keys;
}

bool configs_equal(const JobConfig& a, const JobConfig& b) {
  for (const config::FieldSpec& f : config::registry()) {
    if (f.get(a) != f.get(b)) return false;
  }
  return true;
}

}  // namespace ctitan
