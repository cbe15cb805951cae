// One string from outside (a file, a flag, a tensor name) fit for a one-line
// message. Header-only, so every library links it, the LibTorch-free fuzz
// parsers included.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace ctitan {

// `s` with control characters (and DEL) as \xNN, cut to `max_chars` bytes
// with "..." appended when it was longer (a fuzzed name can be anything,
// newlines included).
inline std::string message_text(std::string_view s, size_t max_chars = 120) {
  std::string out;
  for (const char c : s.substr(0, max_chars)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  if (s.size() > max_chars) out += "...";
  return out;
}

}  // namespace ctitan
