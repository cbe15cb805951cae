// A read-only std::streambuf over a gzip file (zlib's inflate), so the text
// loader reads C4's published `c4-train.00000-of-01024.json.gz` shards with
// the same istream code as plain files: getline, read, seekg.
//
// Positions are offsets in the uncompressed stream. Seeking forward inflates
// and discards up to the target; seeking backward starts again from the
// file's first byte (gzip has no index) — fine for the loader, which seeks
// only to resume from a checkpoint. Concatenated gzip members (what `cat
// a.gz b.gz` and bgzip write) read as one stream.
//
// Corrupt or truncated data throws InputError naming the file and the
// compressed byte offset where inflate stopped. Exceptions leave istream
// functions through badbit: set `in.exceptions(std::ios::badbit)` to get
// the InputError itself (the text loader does).
//
// Not thread-safe; one per reader.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <streambuf>
#include <string>
#include <vector>

namespace ctitan {

class GzipStreamBuf : public std::streambuf {
 public:
  // Throws InputError when the file cannot be opened.
  explicit GzipStreamBuf(std::string path);
  ~GzipStreamBuf() override;
  GzipStreamBuf(const GzipStreamBuf&) = delete;
  GzipStreamBuf& operator=(const GzipStreamBuf&) = delete;

 protected:
  int_type underflow() override;
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode which) override;
  pos_type seekpos(pos_type pos, std::ios_base::openmode which) override;

 private:
  void restart();                  // back to the file's first byte
  [[noreturn]] void corrupt(const std::string& what) const;
  uint64_t position() const { return out_start_ + static_cast<uint64_t>(gptr() - eback()); }

  std::string path_;
  std::ifstream file_;
  z_stream zs_{};
  bool zs_ready_ = false;
  bool member_done_ = false;       // inflate ended a gzip member: the next byte starts another (or EOF)
  std::vector<char> in_, out_;
  uint64_t in_consumed_ = 0;       // compressed bytes fed to inflate before in_'s unread part
  uint64_t out_start_ = 0;         // uncompressed offset of out_[0]
};

// True when `path` names a gzip-compressed data file (ends with ".gz").
bool is_gzip_path(const std::string& path);

}  // namespace ctitan
