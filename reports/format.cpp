#include "reports/format.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ctitan::fmt {

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string grouped(double v) {
  if (!std::isfinite(v)) return "-";
  const long long n = std::llround(std::fabs(v));
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return (v < 0 && n != 0 ? "-" : "") + out;
}

std::string bytes(double b) {
  const double mib = b / (1024.0 * 1024.0);
  return mib >= 1024.0 ? fixed(mib / 1024.0, 2) + " GiB" : fixed(mib, 1) + " MiB";
}

std::string signed_percent(double fraction, int decimals) {
  if (!std::isfinite(fraction)) return "-";
  const double pct = 100.0 * fraction;
  const std::string mag = fixed(std::fabs(pct), decimals);
  if (mag == fixed(0.0, decimals)) return mag + "%";
  return std::string(pct < 0 ? "\u2212" : "+") + mag + "%";
}

std::string ratio(double r) { return std::isfinite(r) ? fixed(r, 2) + "\u00d7" : "-"; }

std::string seconds(double s) { return s < 1.0 ? fixed(s * 1e3, 1) + " ms" : fixed(s, 2) + " s"; }

std::string mfu_percent(double pct) { return fixed(pct, pct < 0.1 ? 4 : 2) + "%"; }

std::string or_dash(const std::optional<double>& v, std::string (*f)(double)) { return v ? f(*v) : "-"; }

std::string p_value(double p) {
  if (!std::isfinite(p)) return "-";
  return p < 0.001 ? "<0.001" : fixed(p, 3);
}

namespace {
bool plain_number(const std::string& s) {
  if (s.empty() || s.find_first_of(" \t\r\n") != std::string::npos) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(v);
}
}  // namespace

std::string csv_cell(const std::string& s) {
  const bool formula = !s.empty() && std::string("=+-@\t\r").find(s[0]) != std::string::npos && !plain_number(s);
  if (!formula && s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = formula ? "\"'" : "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '`') {
      out += "'";
    } else if (c == '\n') {
      out += ' ';
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace ctitan::fmt
