#include "trainer/data/pretokenize.h"

#include <cstdint>

#include "trainer/data/unicode_class.h"

namespace ctitan {

const char* const kGpt2SplitRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

const char* const kLlama3SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum Class : uint8_t { kLetter, kNumber, kSpace, kOther };

// The text decoded once: code points, their classes and byte offsets.
struct Decoded {
  std::vector<char32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<size_t> off;  // off[i] = byte offset of cp[i]; off[n] = size

  explicit Decoded(std::string_view text) {
    for (size_t pos = 0, len = 0; pos < text.size(); pos += len) {
      const char32_t c = decode_utf8(text, pos, len);
      cp.push_back(c);
      off.push_back(pos);
      cls.push_back(is_letter(c)       ? kLetter
                    : is_number(c)     ? kNumber
                    : is_whitespace(c) ? kSpace
                                       : kOther);
    }
    off.push_back(text.size());
  }
  size_t size() const { return cp.size(); }
};

bool is_newline(char32_t c) { return c == '\r' || c == '\n'; }

char32_t lower_ascii(char32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Contractions 's 't 're 've 'm 'll 'd at i; returns the end or 0 (no match:
// a match is never empty, so 0 cannot be a real end when i is a valid index).
size_t match_contraction(const Decoded& d, size_t i, bool ignore_case) {
  const size_t n = d.size();
  if (d.cp[i] != '\'' || i + 1 >= n) return 0;
  const auto at = [&](size_t k) { return ignore_case ? lower_ascii(d.cp[k]) : d.cp[k]; };
  const char32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (i + 2 < n) {
    const char32_t b = at(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  return 0;
}

size_t run_of(const Decoded& d, size_t j, Class c) {
  while (j < d.size() && d.cls[j] == c) ++j;
  return j;
}

// `\s+(?!\S)|\s+` at a white-space char i: the run minus its last char when
// a non-space follows, so that the space can prefix the next word.
size_t match_space_run(const Decoded& d, size_t i) {
  const size_t j = run_of(d, i, kSpace);
  if (j == d.size() || j - i == 1) return j;
  return j - 1;
}

size_t match_gpt2(const Decoded& d, size_t i) {
  if (size_t e = match_contraction(d, i, false)) return e;
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional ASCII space,
  // then a run of one class. Without the space the first char decides.
  const size_t j = (d.cp[i] == ' ' && i + 1 < d.size() && d.cls[i + 1] != kSpace) ? i + 1 : i;
  if (d.cls[j] != kSpace) return run_of(d, j, static_cast<Class>(d.cls[j]));
  return match_space_run(d, i);
}

size_t match_llama3(const Decoded& d, size_t i) {
  const size_t n = d.size();
  if (size_t e = match_contraction(d, i, true)) return e;
  // `[^\r\n\p{L}\p{N}]?\p{L}+`
  if (d.cls[i] == kLetter) return run_of(d, i, kLetter);
  if (d.cls[i] != kNumber && !is_newline(d.cp[i]) && i + 1 < n && d.cls[i + 1] == kLetter) {
    return run_of(d, i + 1, kLetter);
  }
  // `\p{N}{1,3}`
  if (d.cls[i] == kNumber) {
    size_t j = i;
    while (j < n && j - i < 3 && d.cls[j] == kNumber) ++j;
    return j;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  const size_t j = (d.cp[i] == ' ' && i + 1 < n && d.cls[i + 1] == kOther) ? i + 1 : i;
  if (d.cls[j] == kOther) {
    size_t e = run_of(d, j, kOther);
    while (e < n && is_newline(d.cp[e])) ++e;
    return e;
  }
  // `\s*[\r\n]+`: the white-space run up to and including its last newline.
  const size_t run_end = run_of(d, i, kSpace);
  for (size_t k = run_end; k > i; --k) {
    if (is_newline(d.cp[k - 1])) return k;
  }
  return match_space_run(d, i);
}

}  // namespace

bool split_pattern_from_regex(const std::string& regex, SplitPattern& out) {
  if (regex == kGpt2SplitRegex) {
    out = SplitPattern::kGpt2;
  } else if (regex == kLlama3SplitRegex) {
    out = SplitPattern::kLlama3;
  } else {
    return false;
  }
  return true;
}

void split_pretokens(std::string_view text, SplitPattern pattern,
                     std::vector<std::string_view>& out) {
  const Decoded d(text);
  // Every char starts some alternative of these patterns (each class has
  // one), so the pieces are consecutive matches and there are no gaps.
  for (size_t i = 0; i < d.size();) {
    size_t e = 0;
    switch (pattern) {
      case SplitPattern::kGpt2:
        e = match_gpt2(d, i);
        break;
      case SplitPattern::kLlama3:
        e = match_llama3(d, i);
        break;
    }
    if (e <= i) e = i + 1;
    out.push_back(text.substr(d.off[i], d.off[e] - d.off[i]));
    i = e;
  }
}

}  // namespace ctitan
