// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json`,
// reproducing what the `tokenizers` library encodes (ids checked against
// tokenizers 0.23 in tests/unit/tokenizer_test.cpp). No Python at run time.
//
// Supported: model.type "BPE" with vocab, merges ("a b" or ["a","b"]),
// unk_token / fuse_unk / byte_fallback / ignore_merges; pre_tokenizer
// ByteLevel (use_regex → the GPT-2 split, add_prefix_space) alone or after a
// Split with the Llama-3 pattern; decoder ByteLevel (or none);
// added_tokens with lstrip / rstrip / single_word, matched leftmost-longest
// before pre-tokenization. Anything else (WordPiece, Unigram, normalizers,
// other split patterns) is refused with InputError.
//
// A `tokenizer_config.json` beside the file adds its added_tokens_decoder
// entries and names bos_token / eos_token, as transformers' AutoTokenizer
// does. Without one, BOS / EOS are the added tokens with the usual names
// (<|begin_of_text|>, <s>, <bos> / <|end_of_text|>, </s>, <eos>,
// <|endoftext|>), else -1. Like HF, an added token takes its id from the
// vocab when it is there, else the next free id, whatever "id" the file
// says.
//
// HF semantics worth knowing: vocab entries that are not written in the
// ByteLevel alphabet (e.g. " the" with a real space instead of "Ġthe") can
// never be produced by encode, and a byte whose ByteLevel char is not in the
// vocab is silently dropped (when there is no unk_token). The shared
// tokenizer in shared/data has exactly this shape (raw-string vocab, no
// merges): under HF it encodes only printable ASCII '!'..'~', one id per
// byte, plus its special tokens, and drops spaces, newlines and all
// non-ASCII text. ctitan does the same, so its ids match HF's; decode
// cannot bring dropped bytes back.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trainer/data/pretokenize.h"

namespace ctitan {

class Tokenizer {
 public:
  // A tokenizer.json file, or a folder holding one. Throws InputError.
  static Tokenizer from_file(const std::string& path_to_tokenizer_json_or_folder);
  // The same from the text of a tokenizer.json; `path` names it in messages.
  // `config_json`, when given, is the text of the tokenizer_config.json
  // beside it, named `config_path`. Token ids are limited to kMaxTokenId.
  static Tokenizer from_json_text(const std::string& json_text, const std::string& path,
                                  const std::string* config_json = nullptr, const std::string& config_path = "");
  // The largest token id ctitan reads: ids index dense tables (2^22, 16x
  // the largest public vocabularies), so a stray huge id is an error, not a
  // huge allocation.
  static constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;

  // Token ids of `text`; added/special tokens written in the text are
  // recognised; no BOS/EOS is added. Not thread-safe (per-word cache).
  std::vector<int64_t> encode(std::string_view text) const;
  void encode_append(std::string_view text, std::vector<int64_t>& out) const;

  // Inverse of encode for what encode keeps; special tokens are written out
  // (like HF decode with skip_special_tokens=False), unknown ids skipped,
  // invalid UTF-8 replaced with U+FFFD as HF does.
  std::string decode(const std::vector<int64_t>& ids) const;

  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  int64_t bos_id() const { return bos_id_; }            // -1 if none
  int64_t eos_id() const { return eos_id_; }            // -1 if none
  int64_t token_to_id(const std::string& token) const;  // -1 if absent
  const std::string& path() const { return path_; }

 private:
  struct AddedToken {
    std::string content;
    int64_t id = -1;
    bool special = false, lstrip = false, rstrip = false, single_word = false;
  };
  static AddedToken added_token_from_json(const nlohmann::json& entry);
  // One pre-tokenizer stage, applied to every piece of the previous stage:
  // ByteLevel is {add_prefix_space, use_regex, kGpt2}, Split is {false, true, p}.
  struct Stage {
    bool add_prefix_space = false;
    bool split = false;
    SplitPattern pattern = SplitPattern::kGpt2;
  };
  struct Merge {
    int32_t rank, new_id;
  };

  [[noreturn]] void fail(const std::string& what) const;
  void load(const nlohmann::json& j);
  void load_model(const nlohmann::json& model);
  void load_pre_tokenizer(const nlohmann::json& pre);
  void load_config(const std::string& config_json, const std::string& config_path);
  void add_token(const AddedToken& t);
  void set_id(int64_t id, const std::string& token);
  void finish(bool guess_bos_eos);
  void encode_piece(std::string_view piece, size_t stage, std::vector<int64_t>& out) const;
  void bpe_word(std::string_view word, std::vector<int64_t>& out) const;

  std::string path_;
  std::unordered_map<std::string, int64_t> vocab_;       // token string → id
  std::unordered_map<std::string, int64_t> byte_vocab_;  // raw-bytes form of ByteLevel entries
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> id_known_;               // id_to_token_[id] is real
  std::array<int64_t, 256> byte_id_{};          // id of each single byte, -1 if absent
  std::array<int64_t, 256> fallback_id_{};      // id of "<0xXX>", -1 if absent
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) → merge
  std::vector<AddedToken> added_;
  std::unordered_map<unsigned char, std::vector<size_t>> added_by_first_byte_;  // longest first
  std::vector<Stage> stages_;
  bool decoder_byte_level_ = true;
  bool ignore_merges_ = false, fuse_unk_ = false, byte_fallback_ = false;
  int64_t unk_id_ = -1, bos_id_ = -1, eos_id_ = -1;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

// The GPT-2 byte → printable-char map that ByteLevel uses (as UTF-8).
const std::array<std::string, 256>& byte_level_alphabet();

}  // namespace ctitan
