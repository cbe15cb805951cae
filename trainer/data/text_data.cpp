// The text dataset: .txt / .jsonl files (each also gzip-compressed, as C4's
// published .json.gz shards are) tokenized on the fly. TorchTitan's C4
// datasets (c4, c4_test, c4_validation) are this loader over local files.
//
// The token stream is a sequence of chunks. A .jsonl line is one document
// and one chunk: BOS + tokens + EOS. A .txt file is one document, read in
// chunks of about 1 MiB that end just before a '\n' that follows a letter
// or digit: no GPT-2 / Llama-3 pre-token crosses such a point, so the ids
// equal those of encoding the whole file at once (for tokenizers without
// add_prefix_space). Its first chunk starts with BOS, its last ends with EOS.
//
// Position = (file, byte offset of the current chunk, tokens of it already
// used, epoch, windows passed): resuming re-reads and re-tokenizes one
// chunk, so the state stays small.
#include <cstdio>
#include <fstream>
#include <istream>

#include "common/errors.h"
#include "trainer/data/gzip_stream.h"
#include "trainer/data/loaders.h"
#include "trainer/data/tokenizer.h"
#include "trainer/data/unicode_class.h"

namespace ctitan {
namespace data_detail {
namespace {

constexpr size_t kTxtChunkBytes = size_t{1} << 20;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Largest cut <= text.size() where text[cut] == '\n' follows a letter or
// digit; 0 if none.
size_t safe_cut(const std::string& text) {
  for (size_t i = text.size(); i-- > 1;) {
    if (text[i] != '\n') continue;
    size_t start = i - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80 && i - start < 4)
      --start;
    size_t len = 0;
    const char32_t c = decode_utf8(text, start, len);
    if (start + len == i && (is_letter(c) || is_number(c))) return i;
  }
  return 0;
}

class TextLoader : public DataLoader {
 public:
  explicit TextLoader(const DataOptions& opts)
      : opts_(opts),
        files_(list_data_files(
            opts.path, {".txt", ".jsonl", ".json", ".txt.gz", ".jsonl.gz", ".json.gz"},
            "set " + path_key(opts) + " to a .txt, .jsonl or .json(.gz) file or a folder of them")),
        tok_(load_tokenizer(opts)) {
    if (opts.vocab_size > 0 && tok_.vocab_size() > opts.vocab_size) {
      throw InputError("tokenizer " + tok_.path() + " has vocab " +
                       std::to_string(tok_.vocab_size()) + " ids but model.flavor has vocab_size " +
                       std::to_string(opts.vocab_size) + ": use a matching tokenizer or flavor");
    }
    window_.reserve(static_cast<size_t>(opts.seq_len + 1));
    load_chunk();
  }

  void next(TokenBatch& out) override {
    shape_batch(opts_, out);
    for (int64_t r = 0; r < opts_.batch; ++r) {
      // Every rank reads the same stream and keeps its own windows.
      for (;;) {
        fill_window();
        if (windows_++ % opts_.dp_world == opts_.dp_rank) break;
      }
      put_window(window_.data(), r, out);
    }
  }

  nlohmann::json state() const override {
    return {{"dataset", "text"},
            {"files", file_names(files_)},
            {"seq_len", opts_.seq_len},
            {"file", file_},
            {"offset", offset_},
            {"line", line_},
            {"pos", pos_},
            {"epoch", epoch_},
            {"windows", windows_}};
  }

  void load_state(const nlohmann::json& s) override {
    check_state(s, "text", state(), {"files", "seq_len"});
    try {
      file_ = s.at("file").get<size_t>();
      offset_ = s.at("offset").get<uint64_t>();
      line_ = s.at("line").get<int64_t>();
      const auto pos = s.at("pos").get<size_t>();
      epoch_ = s.at("epoch").get<int64_t>();
      windows_ = s.at("windows").get<int64_t>();
      if (file_ >= files_.size()) throw InputError("file index out of range");
      load_chunk();
      if (pos > chunk_.size()) throw InputError("token position past the end of its chunk");
      pos_ = pos;
    } catch (const nlohmann::json::exception& e) {
      throw InputError("checkpoint text data state " + s.dump() + " is malformed (" + e.what() +
                       ")");
    } catch (const InputError& e) {
      throw InputError(std::string("checkpoint text data state does not fit the files (") +
                       e.what() + "): were the data files changed since the checkpoint?");
    }
  }

  int64_t eos_id() const override { return tok_.eos_id(); }

  std::string describe() const override {
    return "text: " + opts_.path + " (" + std::to_string(files_.size()) + " file(s)), tokenizer " +
           tok_.path() + " (vocab " + std::to_string(tok_.vocab_size()) + ", bos " +
           std::to_string(tok_.bos_id()) + ", eos " + std::to_string(tok_.eos_id()) + "), " +
           dp_summary(opts_);
  }

 private:
  static Tokenizer load_tokenizer(const DataOptions& opts) {
    if (opts.tokenizer_path.empty()) {
      throw InputError(
          "the text dataset needs a tokenizer: set model.hf_assets_path to a folder with "
          "tokenizer.json");
    }
    return Tokenizer::from_file(opts.tokenizer_path);
  }

  void fill_window() {
    window_.clear();
    const size_t need = static_cast<size_t>(opts_.seq_len + 1);
    int64_t empty_since_epoch = -1;  // epoch at which a run of empty chunks began
    while (window_.size() < need) {
      if (pos_ == chunk_.size()) {
        // A whole pass over the files without a token would loop forever.
        if (empty_since_epoch < 0) {
          empty_since_epoch = epoch_;
        } else if (epoch_ > empty_since_epoch + 1) {
          throw InputError(opts_.path +
                           ": the files hold no text to tokenize: check " + path_key(opts_));
        }
        advance();
        continue;
      }
      empty_since_epoch = -1;
      const size_t take = std::min(need - window_.size(), chunk_.size() - pos_);
      window_.insert(window_.end(), chunk_.begin() + pos_, chunk_.begin() + pos_ + take);
      pos_ += take;
    }
  }

  void advance() {
    offset_ = next_offset_;
    line_ = next_line_;
    if (at_eof_) {
      offset_ = 0, line_ = 0;
      if (++file_ == files_.size()) file_ = 0, ++epoch_;
    }
    load_chunk();
  }

  // Reads and tokenizes the chunk at (file_, offset_); sets next_offset_,
  // next_line_ and at_eof_.
  void load_chunk() {
    chunk_.clear();
    pos_ = 0;
    const std::string& path = files_[file_];
    if (open_ != file_ || !buf_) {
      std::unique_ptr<std::streambuf> next;
      if (is_gzip_path(path)) {
        next = std::make_unique<GzipStreamBuf>(path);
      } else {
        auto fb = std::make_unique<std::filebuf>();
        if (!fb->open(path, std::ios::in | std::ios::binary))
          throw InputError(path + ": cannot open for reading: check the file's permissions");
        next = std::move(fb);
      }
      in_.rdbuf(next.get());  // before the old buffer goes
      buf_ = std::move(next);
      in_.exceptions(std::ios::badbit);  // a corrupt .gz surfaces as its InputError
      open_ = file_;
      stream_pos_ = 0;
    }
    in_.clear();
    if (stream_pos_ != offset_) {
      in_.seekg(static_cast<std::streamoff>(offset_));
      stream_pos_ = offset_;
    }
    if (ends_with(path, ".txt") || ends_with(path, ".txt.gz")) {
      load_txt_chunk();
    } else {
      load_jsonl_chunk();
    }
  }

  void load_txt_chunk() {
    std::string text;
    size_t want = kTxtChunkBytes;
    size_t cut = 0;
    for (;;) {
      const size_t had = text.size();
      text.resize(want);
      in_.read(&text[had], static_cast<std::streamsize>(want - had));
      text.resize(had + static_cast<size_t>(in_.gcount()));
      stream_pos_ += static_cast<uint64_t>(in_.gcount());
      at_eof_ = in_.eof();
      if (at_eof_) {
        cut = text.size();
        break;
      }
      if ((cut = safe_cut(text)) > 0) break;
      want *= 2;  // no safe cut yet: read more
    }
    if (offset_ == 0 && cut == 0 && at_eof_) return;  // empty file: no document
    check_text(std::string_view(text).substr(0, cut));
    if (offset_ == 0 && tok_.bos_id() >= 0) chunk_.push_back(tok_.bos_id());
    tok_.encode_append(std::string_view(text).substr(0, cut), chunk_);
    if (at_eof_ && tok_.eos_id() >= 0) chunk_.push_back(tok_.eos_id());
    next_offset_ = offset_ + cut;
    next_line_ = 0;
  }

  // .txt data is UTF-8 text: a NUL or an ill-formed byte means a binary file
  // (a token file, an archive) named as text, which would train on noise.
  void check_text(std::string_view text) const {
    for (size_t i = 0; i < text.size();) {
      size_t len = 1;
      const unsigned char b = static_cast<unsigned char>(text[i]);
      if (b != 0 && (b < 0x80 || decode_utf8(text, i, len) != kInvalidCodePoint)) {
        i += len;
        continue;
      }
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", b);
      throw InputError(files_[file_] + ": byte " + std::to_string(offset_ + i) + " (" + hex +
                       ") is not UTF-8 text; a .txt dataset must be UTF-8 text (token files go in .bin)");
    }
  }

  void load_jsonl_chunk() {
    std::string line;
    at_eof_ = !std::getline(in_, line);
    next_offset_ = offset_ + line.size() + 1;
    stream_pos_ = at_eof_ || in_.eof() ? static_cast<uint64_t>(-1) : next_offset_;
    next_line_ = line_ + 1;
    if (at_eof_ || line.find_first_not_of(" \t\r") == std::string::npos)
      return;  // blank line: no document
    const std::string where = files_[file_] + ":" + std::to_string(line_ + 1);
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(where + ": not a JSON line (" + std::string(e.what()) +
                       "): expected one {\"text\": ...} object per line");
    }
    if (!doc.is_object() || !doc.contains("text") || !doc.at("text").is_string()) {
      throw InputError(where +
                       ": no string \"text\" field: expected one {\"text\": ...} object per line");
    }
    if (tok_.bos_id() >= 0) chunk_.push_back(tok_.bos_id());
    tok_.encode_append(doc.at("text").get_ref<const std::string&>(), chunk_);
    if (tok_.eos_id() >= 0) chunk_.push_back(tok_.eos_id());
  }

  DataOptions opts_;
  std::vector<std::string> files_;
  Tokenizer tok_;
  std::unique_ptr<std::streambuf> buf_;  // the open file: std::filebuf or GzipStreamBuf
  std::istream in_{nullptr};
  size_t open_ = static_cast<size_t>(-1);  // index of the file in_ holds
  // Position (see the file comment).
  size_t file_ = 0;
  uint64_t offset_ = 0;
  int64_t line_ = 0;  // 0-based line of offset_ in a .jsonl file
  size_t pos_ = 0;
  int64_t epoch_ = 0, windows_ = 0;
  // The current chunk.
  std::vector<int64_t> chunk_;
  uint64_t next_offset_ = 0;
  int64_t next_line_ = 0;
  bool at_eof_ = false;
  uint64_t stream_pos_ = 0;  // where in_ reads next; seeking drops its buffer, so only when needed
  std::vector<int64_t> window_;
};

}  // namespace

std::unique_ptr<DataLoader> make_text_loader(const DataOptions& opts) {
  return std::make_unique<TextLoader>(opts);
}

}  // namespace data_detail
}  // namespace ctitan
