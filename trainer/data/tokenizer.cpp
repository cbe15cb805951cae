// Encoding and decoding; see tokenizer.h for the HF semantics reproduced.
#include "trainer/data/tokenizer.h"

#include <queue>
#include <tuple>

#include "trainer/data/unicode_class.h"

namespace ctitan {
namespace {

// The word cache only speeds up repeated words; past this size it is
// cleared so a long run over varied text cannot grow it without bound.
constexpr size_t kMaxCacheEntries = 1 << 20;

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// Rust's String::from_utf8_lossy, which HF applies to decoded bytes.
std::string utf8_lossy(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0, len = 0; pos < bytes.size(); pos += len) {
    if (decode_utf8(bytes, pos, len) == kInvalidCodePoint) {
      len = utf8_invalid_prefix(bytes, pos);
      out += "\xEF\xBF\xBD";
    } else {
      out.append(bytes, pos, len);
    }
  }
  return out;
}

// Code point just before byte offset `pos` (which is on a boundary).
char32_t code_point_before(std::string_view s, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && pos - start < 4)
    --start;
  size_t len;
  const char32_t c = decode_utf8(s, start, len);
  return start + len == pos ? c : kInvalidCodePoint;
}

}  // namespace

const std::array<std::string, 256>& byte_level_alphabet() {
  // GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
  // other 68 to U+0100 + k in byte order, so every byte is a visible char.
  static const std::array<std::string, 256> alphabet = [] {
    std::array<std::string, 256> a;
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append_utf8(printable ? static_cast<char32_t>(b) : static_cast<char32_t>(0x100 + next++),
                  a[b]);
    }
    return a;
  }();
  return alphabet;
}

std::vector<int64_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int64_t> out;
  encode_append(text, out);
  return out;
}

void Tokenizer::encode_append(std::string_view text, std::vector<int64_t>& out) const {
  // Added tokens first, as HF's AddedVocabulary does: leftmost-longest
  // matches, then single_word / lstrip / rstrip adjust or veto each match.
  size_t done = 0;  // text before this is emitted
  for (size_t pos = 0; pos < text.size();) {
    const auto cands = added_by_first_byte_.find(static_cast<unsigned char>(text[pos]));
    const AddedToken* hit = nullptr;
    if (cands != added_by_first_byte_.end()) {
      for (size_t i : cands->second) {
        if (text.compare(pos, added_[i].content.size(), added_[i].content) == 0) {
          hit = &added_[i];
          break;
        }
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->content.size();
    pos = stop;  // the next search starts after this match even if vetoed
    if (hit->single_word) {
      size_t len = 0;
      const bool word_before = start > 0 && is_word_char(code_point_before(text, start));
      const bool word_after = stop < text.size() && is_word_char(decode_utf8(text, stop, len));
      if (word_before || word_after) continue;
    }
    if (hit->lstrip) {
      while (start > done && is_whitespace(code_point_before(text, start))) {
        --start;
        while (start > done && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      }
    }
    if (hit->rstrip) {
      size_t len = 0;
      while (stop < text.size() && is_whitespace(decode_utf8(text, stop, len))) stop += len;
      pos = stop;
    }
    if (start > done) encode_piece(text.substr(done, start - done), 0, out);
    out.push_back(hit->id);
    done = stop;
  }
  if (done < text.size()) encode_piece(text.substr(done), 0, out);
}

void Tokenizer::encode_piece(std::string_view piece, size_t stage,
                             std::vector<int64_t>& out) const {
  if (piece.empty()) return;
  if (stage == stages_.size()) {
    bpe_word(piece, out);
    return;
  }
  const Stage& s = stages_[stage];
  std::string prefixed;
  if (s.add_prefix_space && piece.front() != ' ') {
    prefixed.reserve(piece.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(piece);
    piece = prefixed;
  }
  if (!s.split) {
    encode_piece(piece, stage + 1, out);
    return;
  }
  std::vector<std::string_view> parts;
  split_pretokens(piece, s.pattern, parts);
  for (std::string_view p : parts) encode_piece(p, stage + 1, out);
}

void Tokenizer::bpe_word(std::string_view word_view, std::vector<int64_t>& out) const {
  std::string word(word_view);
  if (const auto it = cache_.find(word); it != cache_.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<int64_t> ids;
  if (const auto whole = byte_vocab_.find(word); ignore_merges_ && whole != byte_vocab_.end()) {
    ids.push_back(whole->second);
  } else {
    // Initial symbols: one per byte. A byte missing from the vocab becomes
    // <0xXX> (byte_fallback), else unk (fused if asked), else is dropped,
    // and merges may then join its neighbours, exactly as in HF's Word.
    std::vector<int64_t> sym;
    bool last_unk = false;
    for (unsigned char b : word) {
      int64_t id = byte_id_[b];
      if (id < 0 && byte_fallback_) id = fallback_id_[b];
      if (id >= 0) {
        sym.push_back(id);
        last_unk = false;
      } else if (unk_id_ >= 0) {
        if (!(fuse_unk_ && last_unk)) sym.push_back(unk_id_);
        last_unk = true;
      }
    }
    // Merge by rank with a heap, lowest rank then leftmost first (HF's
    // order); stale entries are skipped when popped.
    const size_t n = sym.size();
    std::vector<int64_t> prev(n), next(n);
    std::vector<uint8_t> alive(n, 1);
    for (size_t i = 0; i < n; ++i)
      prev[i] = static_cast<int64_t>(i) - 1, next[i] = i + 1 < n ? i + 1 : -1;
    using Entry = std::tuple<int32_t, int64_t, int32_t>;  // rank, position, new id
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    const auto find_merge = [&](int64_t a, int64_t b) -> const Merge* {
      const auto it =
          merges_.find((static_cast<uint64_t>(sym[a]) << 32) | static_cast<uint32_t>(sym[b]));
      return it == merges_.end() ? nullptr : &it->second;
    };
    const auto push = [&](int64_t a) {
      if (a < 0 || next[a] < 0) return;
      if (const Merge* m = find_merge(a, next[a])) heap.emplace(m->rank, a, m->new_id);
    };
    if (!merges_.empty()) {
      for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int64_t>(i));
    }
    while (!heap.empty()) {
      const auto [rank, pos, new_id] = heap.top();
      heap.pop();
      if (!alive[pos] || next[pos] < 0) continue;
      const Merge* m = find_merge(pos, next[pos]);
      if (!m || m->new_id != new_id || m->rank != rank) continue;
      const int64_t right = next[pos];
      sym[pos] = new_id;
      alive[right] = 0;
      next[pos] = next[right];
      if (next[pos] >= 0) prev[next[pos]] = pos;
      push(prev[pos]);
      push(pos);
    }
    for (size_t i = 0; i < n; ++i) {
      if (alive[i]) ids.push_back(sym[i]);
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::move(word), std::move(ids));
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  static const std::unordered_map<std::string, char> inverse = [] {
    std::unordered_map<std::string, char> m;
    for (int b = 0; b < 256; ++b) m[byte_level_alphabet()[b]] = static_cast<char>(b);
    return m;
  }();
  std::string bytes, mapped;
  bool first = true;
  for (const int64_t id : ids) {
    if (id < 0 || id >= vocab_size() || !id_known_[id]) continue;  // HF skips unknown ids
    const std::string& token = id_to_token_[id];
    if (!decoder_byte_level_) {
      // No decoder: HF joins the token strings with spaces.
      if (!first) bytes.push_back(' ');
      bytes += token;
      first = false;
      continue;
    }
    // ByteLevel decoder: a token wholly in the alphabet maps back to bytes;
    // any other (e.g. " the" with a raw space) is taken as its own UTF-8.
    mapped.clear();
    bool ok = true;
    for (size_t i = 0; i < token.size() && ok;) {
      const size_t len = static_cast<unsigned char>(token[i]) < 0x80 ? 1 : 2;
      const auto it = inverse.find(token.substr(i, len));
      ok = it != inverse.end();
      if (ok) mapped.push_back(it->second);
      i += len;
    }
    bytes += ok ? mapped : token;
  }
  return utf8_lossy(bytes);
}

}  // namespace ctitan
