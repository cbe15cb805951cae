// The bin dataset: pre-tokenized shards, memory-mapped.
//
// Formats: llm.c's header (256 int32: magic 20240520 version 1 uint16
// tokens, or magic 20240801 version 7 uint32 tokens; header[2] = token
// count) and headerless raw files, uint16, or uint32 when the name ends in
// ".u32.bin". A raw uint16 file whose first two tokens spell the magic is
// read as llm.c's; its size then almost surely fails the header check.
//
// Windows of seq_len + 1 tokens are cut from each shard separately (the
// tail shorter than a window is skipped); windows are numbered across the
// shards and rank r takes every dp_world-th. Position = (shard, window in
// shard, epoch).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/errors.h"
#include "trainer/data/loaders.h"

namespace ctitan {
namespace data_detail {
namespace {

constexpr int32_t kLlmcMagicU16 = 20240520, kLlmcMagicU32 = 20240801;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

struct Shard {
  std::string path;
  size_t header_bytes = 0, token_bytes = 2;
  int64_t tokens = 0, windows = 0;
  bool checked = false;  // token ids validated against vocab_size
};

std::string errno_text() { return std::strerror(errno); }

// A read-only mapping of one whole file.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() { reset(); }

  void open(const std::string& path) {
    reset();
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0)
      throw InputError(path + ": cannot open (" + errno_text() +
                       "): check the path and permissions");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      throw InputError(path + ": cannot stat (" + errno_text() + ")");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw InputError(path + ": cannot mmap (" + errno_text() + ")");
      }
      data_ = static_cast<const unsigned char*>(p);
    }
    ::close(fd);  // the mapping stays valid
  }
  void reset() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
    data_ = nullptr, size_ = 0;
  }
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// Reads the format of `path` from its name, size and first 1 KiB.
Shard inspect_shard(const std::string& path, int64_t window) {
  Shard s;
  s.path = path;
  MappedFile f;
  f.open(path);
  const size_t size = f.size();
  int32_t header[3] = {0, 0, 0};
  if (size >= kLlmcHeaderBytes) std::memcpy(header, f.data(), sizeof(header));
  if (header[0] == kLlmcMagicU16 || header[0] == kLlmcMagicU32) {
    const bool u16 = header[0] == kLlmcMagicU16;
    if (header[1] != (u16 ? 1 : 7)) {
      throw InputError(path + ": llm.c header with magic " + std::to_string(header[0]) +
                       " has unsupported version " + std::to_string(header[1]) + " (expected " +
                       (u16 ? "1" : "7") + ")");
    }
    s.header_bytes = kLlmcHeaderBytes;
    s.token_bytes = u16 ? 2 : 4;
    s.tokens = header[2];
    const size_t expect = kLlmcHeaderBytes + static_cast<size_t>(s.tokens) * s.token_bytes;
    if (header[2] < 0 || size != expect) {
      throw InputError(path + ": llm.c header says " + std::to_string(header[2]) + " tokens (" +
                       std::to_string(expect) + " bytes) but the file has " + std::to_string(size) +
                       " bytes: the shard is truncated or garbled, re-create it");
    }
  } else {
    const std::string suffix = ".u32.bin";
    const bool u32 = path.size() >= suffix.size() &&
                     path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
    s.token_bytes = u32 ? 4 : 2;
    if (size % s.token_bytes != 0) {
      throw InputError(path + ": " + std::to_string(size) + " bytes is not a whole number of " +
                       (u32 ? "uint32" : "uint16") +
                       " tokens: the file is truncated or not a token file");
    }
    s.tokens = static_cast<int64_t>(size / s.token_bytes);
  }
  s.windows = s.tokens / window;
  return s;
}

class BinLoader : public DataLoader {
 public:
  explicit BinLoader(const DataOptions& opts) : opts_(opts) {
    const auto files = list_data_files(
        opts.path, {".bin"}, "set " + path_key(opts) + " to a .bin shard or a folder of them");
    int64_t total = 0;
    for (const std::string& f : files) {
      shards_.push_back(inspect_shard(f, opts.seq_len + 1));
      total += shards_.back().windows;
    }
    if (total == 0) {
      throw InputError(opts.path +
                       ": no shard holds seq_len + 1 = " + std::to_string(opts.seq_len + 1) +
                       " tokens: use more data or a shorter training.seq_len");
    }
    names_ = file_names(files);
    window_ = opts.dp_rank;
    normalize();
    buf_.resize(static_cast<size_t>(opts.seq_len + 1));
  }

  void next(TokenBatch& out) override {
    shape_batch(opts_, out);
    for (int64_t r = 0; r < opts_.batch; ++r) {
      map_current();
      const Shard& s = shards_[shard_];
      const size_t n = buf_.size();
      const unsigned char* p =
          mapped_.data() + s.header_bytes + static_cast<size_t>(window_) * n * s.token_bytes;
      for (size_t i = 0; i < n; ++i) buf_[i] = read_token(p, i, s.token_bytes);
      put_window(buf_.data(), r, out);
      window_ += opts_.dp_world;
      normalize();
    }
  }

  nlohmann::json state() const override {
    return {{"dataset", "bin"}, {"files", names_},   {"seq_len", opts_.seq_len},
            {"shard", shard_},  {"window", window_}, {"epoch", epoch_}};
  }

  void load_state(const nlohmann::json& s) override {
    check_state(s, "bin", state(), {"files", "seq_len"});
    try {
      const auto shard = s.at("shard").get<size_t>();
      const auto window = s.at("window").get<int64_t>();
      if (shard >= shards_.size() || window < 0) throw InputError("position out of range");
      shard_ = shard, window_ = window, epoch_ = s.at("epoch").get<int64_t>();
      normalize();
    } catch (const std::exception& e) {
      throw InputError("checkpoint bin data state " + s.dump() + " does not fit the shards (" +
                       e.what() + ")");
    }
  }

  std::string describe() const override {
    int64_t tokens = 0;
    for (const Shard& s : shards_) tokens += s.tokens;
    return "bin: " + opts_.path + " (" + std::to_string(shards_.size()) + " shard(s), " +
           std::to_string(tokens) + " tokens), " + dp_summary(opts_);
  }

 private:
  static int64_t read_token(const unsigned char* p, size_t i, size_t bytes) {
    if (bytes == 2) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return v;
    }
    uint32_t v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }

  // Moves (shard_, window_) forward past the ends of shards.
  void normalize() {
    while (window_ >= shards_[shard_].windows) {
      window_ -= shards_[shard_].windows;
      if (++shard_ == shards_.size()) shard_ = 0, ++epoch_;
    }
  }

  void map_current() {
    if (mapped_shard_ == shard_) return;
    Shard& s = shards_[shard_];
    mapped_.open(s.path);
    mapped_shard_ = shard_;
    if (s.checked || opts_.vocab_size <= 0) return;
    // Checked once per shard so a bad id fails at once with its place,
    // not later as an out-of-range embedding lookup.
    const unsigned char* p = mapped_.data() + s.header_bytes;
    for (int64_t i = 0; i < s.tokens; ++i) {
      const int64_t id = read_token(p, static_cast<size_t>(i), s.token_bytes);
      if (id >= opts_.vocab_size) {
        throw InputError(
            s.path + ": token " + std::to_string(id) + " at index " + std::to_string(i) +
            " (byte offset " +
            std::to_string(s.header_bytes + static_cast<size_t>(i) * s.token_bytes) +
            ") is >= vocab_size " + std::to_string(opts_.vocab_size) +
            ": the shard was made with another tokenizer; use a matching model.flavor");
      }
    }
    s.checked = true;
  }

  DataOptions opts_;
  std::vector<Shard> shards_;
  nlohmann::json names_;
  size_t shard_ = 0;
  int64_t window_ = 0, epoch_ = 0;
  MappedFile mapped_;
  size_t mapped_shard_ = static_cast<size_t>(-1);
  std::vector<int64_t> buf_;
};

}  // namespace

std::unique_ptr<DataLoader> make_bin_loader(const DataOptions& opts) {
  return std::make_unique<BinLoader>(opts);
}

}  // namespace data_detail
}  // namespace ctitan
