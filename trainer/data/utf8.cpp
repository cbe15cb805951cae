// UTF-8 decoding for the pre-tokenizer and HF-compatible lossy decoding.
#include "trainer/data/unicode_class.h"

namespace ctitan {

char32_t decode_utf8(std::string_view s, size_t pos, size_t& len) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  len = 1;
  if (b0 < 0x80) return b0;
  size_t need;
  char32_t cp;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return kInvalidCodePoint;
  }
  if (pos + need >= s.size()) return kInvalidCodePoint;  // truncated
  for (size_t k = 1; k <= need; ++k) {
    const unsigned char b = byte(pos + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return kInvalidCodePoint;
    cp = (cp << 6) | (b & 0x3F);
  }
  len = need + 1;
  return cp;
}

size_t utf8_invalid_prefix(std::string_view s, size_t pos) {
  // Length of the "maximal subpart" of an ill-formed sequence (Unicode
  // ch. 3, as Rust's from_utf8_lossy uses): each one becomes one U+FFFD.
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
  } else {
    return 1;
  }
  size_t k = 1;
  for (; k <= need && pos + k < s.size(); ++k) {
    const unsigned char b = byte(pos + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
  }
  return k;
}

}  // namespace ctitan
