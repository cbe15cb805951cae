// Reading tokenizer.json (+ tokenizer_config.json) into a Tokenizer.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/errors.h"
#include "common/file_io.h"
#include "common/printable.h"
#include "trainer/data/tokenizer.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Parses JSON; a syntax error becomes "path:line:col: not valid JSON (...)".
// Nesting is bounded: nothing in a tokenizer is deeper than a few levels,
// and dump() (used in messages) recurses.
json parse_json(const std::string& text, const std::string& path) {
  constexpr int kMaxDepth = 64;
  struct TooDeep {};
  try {
    return json::parse(text, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) throw TooDeep{};
      return true;
    });
  } catch (const TooDeep&) {
    throw InputError(path + ": JSON nested deeper than " + std::to_string(kMaxDepth) +
                     " levels: not a Hugging Face tokenizer file");
  } catch (const json::parse_error& e) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line, col = 1;
      } else {
        ++col;
      }
    }
    std::string why = e.what();
    if (const size_t p = why.find(": "); p != std::string::npos) why = why.substr(p + 2);
    throw InputError(path + ":" + std::to_string(line) + ":" + std::to_string(col) + ": not valid JSON (" +
                     message_text(why, 200) + "): re-export it with tokenizers' save()");
  } catch (const json::exception& e) {  // a number out of range (1e400)
    throw InputError(path + ": not valid JSON (" + message_text(e.what(), 200) +
                     "): re-export it with tokenizers' save()");
  }
}

// Raw bytes for a token written in the ByteLevel alphabet; false otherwise.
bool byte_level_to_bytes(const std::string& token, std::string& bytes) {
  static const std::unordered_map<std::string, unsigned char> inverse = [] {
    std::unordered_map<std::string, unsigned char> m;
    for (int b = 0; b < 256; ++b) m[byte_level_alphabet()[b]] = static_cast<unsigned char>(b);
    return m;
  }();
  bytes.clear();
  for (size_t i = 0; i < token.size();) {
    // Alphabet chars are U+0021..U+0143: one or two UTF-8 bytes.
    const size_t len = (static_cast<unsigned char>(token[i]) < 0x80) ? 1 : 2;
    const auto it = inverse.find(token.substr(i, len));
    if (it == inverse.end()) return false;
    bytes.push_back(static_cast<char>(it->second));
    i += len;
  }
  return true;
}

std::string token_content(const json& v) {
  // transformers writes special tokens either as "..." or {"content": "..."}.
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return "";
}

}  // namespace

void Tokenizer::fail(const std::string& what) const { throw InputError(path_ + ": " + what); }

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) file = (fs::path(path) / "tokenizer.json").string();
  if (!fs::exists(file, ec)) {
    throw InputError(file +
                     ": no such file: pass a tokenizer.json or a folder holding one (e.g. "
                     "--model.hf_assets_path)");
  }
  const std::string text = read_file_bounded(file, "tokenizer", kMaxJsonBytes);
  const fs::path config = fs::path(file).parent_path() / "tokenizer_config.json";
  if (!fs::exists(config, ec)) return from_json_text(text, file);
  const std::string config_text = read_file_bounded(config.string(), "tokenizer config", kMaxJsonBytes);
  return from_json_text(text, file, &config_text, config.string());
}

Tokenizer Tokenizer::from_json_text(const std::string& json_text, const std::string& path,
                                    const std::string* config_json, const std::string& config_path) {
  Tokenizer t;
  t.path_ = path;
  const json j = parse_json(json_text, path);
  try {
    t.load(j);
    if (config_json) t.load_config(*config_json, config_path);
  } catch (const json::exception& e) {
    // A field of the wrong JSON type: nlohmann names the type, not the key,
    // so point at the file and the library's description.
    t.fail(std::string("unexpected JSON structure (") + message_text(e.what(), 200) +
           "): is this a Hugging Face tokenizer.json?");
  }
  t.finish(/*guess_bos_eos=*/config_json == nullptr);
  return t;
}

Tokenizer::AddedToken Tokenizer::added_token_from_json(const json& a) {
  AddedToken t;
  t.content = a.at("content").get<std::string>();
  t.special = a.value("special", false);
  t.lstrip = a.value("lstrip", false);
  t.rstrip = a.value("rstrip", false);
  t.single_word = a.value("single_word", false);
  return t;
}

void Tokenizer::load(const json& j) {
  if (!j.is_object() || !j.contains("model"))
    fail("no \"model\" object: not a Hugging Face tokenizer.json");
  load_model(j.at("model"));
  if (j.contains("normalizer") && !j.at("normalizer").is_null()) {
    fail("unsupported normalizer \"" + message_text(j.at("normalizer").value("type", std::string("?")), 80) +
         "\": ctitan reads tokenizers without a normalizer (GPT-2 / Llama-3 style)");
  }
  load_pre_tokenizer(j.contains("pre_tokenizer") ? j.at("pre_tokenizer") : json());
  const json decoder = j.contains("decoder") ? j.at("decoder") : json();
  if (decoder.is_null()) {
    decoder_byte_level_ = false;
  } else if (decoder.value("type", std::string()) != "ByteLevel") {
    fail("unsupported decoder \"" + message_text(decoder.value("type", std::string("?")), 80) +
         "\": expected ByteLevel");
  }
  if (j.contains("added_tokens") && !j.at("added_tokens").is_null()) {
    for (const json& a : j.at("added_tokens")) {
      add_token(added_token_from_json(a));
    }
  }
}

void Tokenizer::load_model(const json& m) {
  const std::string type = m.value("type", std::string("BPE"));
  if (type != "BPE")
    fail("unsupported model type \"" + message_text(type, 80) + "\": ctitan reads byte-level BPE tokenizers only");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && !m.at(key).is_null() && !m.at(key).get<std::string>().empty()) {
      fail(std::string("unsupported BPE option ") + key +
           ": ctitan reads byte-level BPE without it");
    }
  }
  if (m.contains("dropout") && !m.at("dropout").is_null() && m.at("dropout").get<double>() > 0) {
    fail("BPE dropout is set, which makes encoding random: set model.dropout to null");
  }
  if (!m.contains("vocab") || !m.at("vocab").is_object())
    fail("model.vocab must be an object {token: id}");
  for (const auto& [token, id] : m.at("vocab").items()) {
    const bool integer = id.is_number_integer() && (id.is_number_unsigned() || id.get<int64_t>() >= 0);
    if (!integer || id.get<uint64_t>() > static_cast<uint64_t>(kMaxTokenId))
      fail("model.vocab[\"" + message_text(token, 80) + "\"] has id " + message_text(id.dump(), 40) +
           ", not an integer in 0.." + std::to_string(kMaxTokenId) +
           ": re-export the tokenizer with tokenizers' save()");
    const auto v = static_cast<int64_t>(id.get<uint64_t>());
    vocab_[token] = v;
    set_id(v, token);
  }
  ignore_merges_ = m.value("ignore_merges", false);
  fuse_unk_ = m.value("fuse_unk", false);
  byte_fallback_ = m.value("byte_fallback", false);
  if (m.contains("unk_token") && m.at("unk_token").is_string()) {
    const auto it = vocab_.find(m.at("unk_token").get<std::string>());
    if (it == vocab_.end())
      fail("model.unk_token \"" + message_text(m.at("unk_token").get<std::string>(), 80) + "\" is not in the vocab");
    unk_id_ = it->second;
  }
  const json merges = m.contains("merges") ? m.at("merges") : json::array();
  int32_t rank = 0;
  for (const json& e : merges) {
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      if (s.rfind("#version", 0) == 0) continue;
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        fail("model.merges[" + std::to_string(rank) + "] = \"" + message_text(s, 80) +
             "\" is not two tokens separated by one space");
      }
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2) {
      a = e[0].get<std::string>(), b = e[1].get<std::string>();
    } else {
      fail("model.merges[" + std::to_string(rank) + "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end()) {
      fail("model.merges[" + std::to_string(rank) + "] (\"" + message_text(a, 80) + "\", \"" + message_text(b, 80) +
           "\") uses a token missing from the vocab");
    }
    // Like HF, a repeated pair keeps its last rank.
    const uint64_t key =
        (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    merges_[key] = Merge{rank, static_cast<int32_t>(iab->second)};
    ++rank;
  }
}

void Tokenizer::load_pre_tokenizer(const json& pre) {
  std::vector<json> list;
  if (pre.is_object() && pre.value("type", std::string()) == "Sequence") {
    for (const json& p : pre.at("pretokenizers")) list.push_back(p);
  } else if (!pre.is_null()) {
    list.push_back(pre);
  }
  bool byte_level = false;
  for (const json& p : list) {
    const std::string type = p.value("type", std::string("?"));
    Stage s;
    if (type == "ByteLevel") {
      byte_level = true;
      s.add_prefix_space = p.value("add_prefix_space", false);
      s.split = p.value("use_regex", true);
      s.pattern = SplitPattern::kGpt2;
    } else if (type == "Split") {
      const json& pat = p.at("pattern");
      const std::string regex =
          pat.contains("Regex") ? pat.at("Regex").get<std::string>() : std::string();
      if (regex.empty() || !split_pattern_from_regex(regex, s.pattern)) {
        fail("unsupported Split pattern " + message_text(pat.dump(), 200) +
             ": ctitan knows the GPT-2 and Llama-3 patterns");
      }
      if (p.value("behavior", std::string()) != "Isolated" || p.value("invert", false)) {
        fail("unsupported Split behavior (expected \"Isolated\", invert false)");
      }
      s.split = true;
    } else {
      fail("unsupported pre_tokenizer \"" + message_text(type, 80) +
           "\": ctitan reads byte-level BPE (ByteLevel, Split)");
    }
    if (s.split || s.add_prefix_space) stages_.push_back(s);
  }
  if (!byte_level)
    fail("pre_tokenizer has no ByteLevel step: ctitan reads byte-level BPE tokenizers only");
}

void Tokenizer::load_config(const std::string& config_json, const std::string& config_path) {
  const json c = parse_json(config_json, config_path);
  if (!c.is_object()) throw InputError(config_path + ": expected a JSON object");
  if (c.contains("added_tokens_decoder")) {
    // Keys are ids, but like transformers ctitan adds the tokens in id order
    // and lets add_token assign ids the HF way.
    std::vector<std::pair<int64_t, json>> by_id;
    for (const auto& [key, a] : c.at("added_tokens_decoder").items()) {
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0') {
        throw InputError(config_path + ": added_tokens_decoder key \"" + message_text(key, 80) +
                         "\" is not a token id");
      }
      by_id.emplace_back(id, a);
    }
    std::sort(by_id.begin(), by_id.end(),
              [](const auto& x, const auto& y) { return x.first < y.first; });
    for (const auto& [id, a] : by_id) {
      add_token(added_token_from_json(a));
    }
  }
  const auto named = [&](const char* key) -> int64_t {
    if (!c.contains(key) || c.at(key).is_null()) return -1;
    const std::string content = token_content(c.at(key));
    const int64_t id = token_to_id(content);
    if (id < 0)
      throw InputError(config_path + ": " + key + " \"" + message_text(content, 80) +
                       "\" is neither an added token nor in the vocab");
    return id;
  };
  bos_id_ = named("bos_token");
  eos_id_ = named("eos_token");
}

void Tokenizer::set_id(int64_t id, const std::string& token) {
  if (id >= static_cast<int64_t>(id_to_token_.size())) {
    id_to_token_.resize(id + 1);
    id_known_.resize(id + 1, 0);
  }
  id_to_token_[id] = token;
  id_known_[id] = 1;
}

void Tokenizer::add_token(const AddedToken& token) {
  if (token.content.empty()) fail("an added token has empty content");
  AddedToken t = token;
  for (AddedToken& a : added_) {
    if (a.content == t.content) {  // same token listed twice: newest flags win
      t.id = a.id;
      a = t;
      return;
    }
  }
  // HF ignores the "id" written in the file: a token already in the model
  // vocab keeps that id, any other gets the next id after the model vocab
  // (counted in entries) or after the highest added id, whichever is later.
  if (const auto it = vocab_.find(t.content); it != vocab_.end()) {
    t.id = it->second;
  } else {
    int64_t max_added = -1;
    for (const AddedToken& a : added_) max_added = std::max(max_added, a.id);
    const auto model_size = static_cast<int64_t>(vocab_.size());
    t.id = max_added >= model_size ? max_added + 1 : model_size;
  }
  added_.push_back(t);
  set_id(t.id, t.content);
}

void Tokenizer::finish(bool guess_bos_eos) {
  std::string bytes;
  for (const auto& [token, id] : vocab_) {
    if (byte_level_to_bytes(token, bytes)) byte_vocab_.emplace(bytes, id);
  }
  char name[8];
  for (int b = 0; b < 256; ++b) {
    const auto it = byte_vocab_.find(std::string(1, static_cast<char>(b)));
    byte_id_[b] = it == byte_vocab_.end() ? -1 : it->second;
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto fb = vocab_.find(name);
    fallback_id_[b] = fb == vocab_.end() ? -1 : fb->second;
  }
  for (size_t i = 0; i < added_.size(); ++i) {
    added_by_first_byte_[static_cast<unsigned char>(added_[i].content[0])].push_back(i);
  }
  for (auto& [first, list] : added_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](size_t x, size_t y) {
      return added_[x].content.size() > added_[y].content.size();
    });
  }
  // Without a tokenizer_config.json, recognise the usual names of BOS/EOS.
  const auto first_added = [&](std::initializer_list<const char*> names) -> int64_t {
    for (const char* n : names) {
      for (const AddedToken& a : added_) {
        if (a.content == n) return a.id;
      }
    }
    return -1;
  };
  if (!guess_bos_eos) return;
  bos_id_ = first_added({"<|begin_of_text|>", "<s>", "<bos>"});
  eos_id_ = first_added({"<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>"});
}

int64_t Tokenizer::token_to_id(const std::string& token) const {
  for (const AddedToken& a : added_) {
    if (a.content == token) return a.id;
  }
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

}  // namespace ctitan
