// Pre-tokenization for byte-level BPE: the regex splits that Hugging Face
// tokenizers apply before BPE, implemented by hand over UTF-8 code points
// (std::regex has no \p{L}). Each supported pattern is recognised by its
// exact text in tokenizer.json and matched with the same leftmost-first,
// backtracking semantics as the regex engine, including `\s+(?!\S)`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ctitan {

enum class SplitPattern {
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,  // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
            // ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
};

// Maps a Split pre-tokenizer's regex text to a pattern; false if unknown.
bool split_pattern_from_regex(const std::string& regex, SplitPattern& out);

// The GPT-2 regex text (what ByteLevel's use_regex means).
extern const char* const kGpt2SplitRegex;

// Appends to `out` the pieces of `text` under `pattern` with "Isolated"
// behaviour: matches and the (rare) unmatched gaps both become pieces, in
// order, covering the whole input.
void split_pretokens(std::string_view text, SplitPattern pattern,
                     std::vector<std::string_view>& out);

}  // namespace ctitan
