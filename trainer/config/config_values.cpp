// How values are named and written: TOML literals for to_toml and messages,
// type names for errors, and the one-line error format.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/errors.h"
#include "trainer/config/config_registry.h"

namespace ctitan::config {
namespace {

std::string escape_toml_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Shortest decimal that reads back to the same double, so to_toml round-trips
// exactly and stays readable (8e-4 prints as 0.0008, not 0.00080000000000000004).
std::string render_double(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";  // TOML float literal
  return s;
}

}  // namespace

std::string type_name(const Value& v) {
  switch (v.index()) {
    case 0:
      return "boolean";
    case 1:
      return "integer";
    case 2:
      return "float";
    case 3:
      return "string";
    case 4:
      return "list of strings";
    case 6:
      return "integer";
    default:
      return "float";
  }
}

std::string render_value(const Value& v) {
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) return render_double(*d);
  if (auto* s = std::get_if<std::string>(&v)) return escape_toml_string(*s);
  if (auto* l = std::get_if<std::vector<std::string>>(&v)) {
    std::string out = "[";
    for (size_t i = 0; i < l->size(); ++i) out += (i ? ", " : "") + escape_toml_string((*l)[i]);
    return out + "]";
  }
  if (auto* oi = std::get_if<std::optional<int64_t>>(&v)) return *oi ? std::to_string(**oi) : "";
  const auto& o = std::get<std::optional<double>>(v);
  return o ? render_double(*o) : "";
}

void fail(const std::string& where, const std::string& what) {
  throw InputError("config error: " + (where.empty() ? "" : where + ": ") + what);
}

}  // namespace ctitan::config
