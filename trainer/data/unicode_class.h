// Just enough Unicode for byte-level BPE pre-tokenization: UTF-8 decoding and
// the three character classes the GPT-2 / Llama-3 split patterns use
// (\p{L}, \p{N}, \s). std::regex cannot express \p{..}, hence these.
#pragma once

#include <cstddef>
#include <string_view>

namespace ctitan {

bool is_letter(char32_t c);      // \p{L}
bool is_number(char32_t c);      // \p{N}
bool is_whitespace(char32_t c);  // \s (Unicode White_Space)
bool is_word_char(char32_t c);   // \w as HF's single_word sees it

// Code point marking a byte that is not part of valid UTF-8. It is outside
// Unicode, so it is classed as "other" (neither letter, number nor space);
// the byte itself is still carried through byte-level BPE unchanged.
constexpr char32_t kInvalidCodePoint = 0x110000;

// Decodes the code point starting at text[pos]; sets `len` to its byte length
// (1 for an invalid byte).
char32_t decode_utf8(std::string_view text, size_t pos, size_t& len);

// At an ill-formed position of `text`, the number of bytes that one U+FFFD
// replaces (Unicode's "maximal subpart", as Rust's from_utf8_lossy does).
size_t utf8_invalid_prefix(std::string_view text, size_t pos);

}  // namespace ctitan
