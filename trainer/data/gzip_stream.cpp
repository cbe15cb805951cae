#include "trainer/data/gzip_stream.h"

#include <algorithm>

#include "common/errors.h"

namespace ctitan {
namespace {
constexpr size_t kInBytes = size_t{1} << 16, kOutBytes = size_t{1} << 18;
}  // namespace

bool is_gzip_path(const std::string& path) {
  return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

GzipStreamBuf::GzipStreamBuf(std::string path) : path_(std::move(path)), in_(kInBytes), out_(kOutBytes) {
  file_.open(path_, std::ios::binary);
  if (!file_) throw InputError(path_ + ": cannot open for reading: check the file's permissions");
  restart();
}

GzipStreamBuf::~GzipStreamBuf() {
  if (zs_ready_) inflateEnd(&zs_);
}

void GzipStreamBuf::restart() {
  if (zs_ready_) inflateEnd(&zs_);
  zs_ = z_stream{};
  // 16 + MAX_WBITS: a gzip header and trailer (CRC-32 and length checked by zlib).
  if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error("zlib inflateInit2 failed");
  zs_ready_ = true;
  member_done_ = false;
  file_.clear();
  file_.seekg(0);
  in_consumed_ = 0;
  out_start_ = 0;
  setg(out_.data(), out_.data(), out_.data());
}

void GzipStreamBuf::corrupt(const std::string& what) const {
  throw InputError(path_ + ": corrupt gzip data at compressed byte " +
                   std::to_string(in_consumed_ + (zs_.next_in ? static_cast<uint64_t>(zs_.next_in - reinterpret_cast<const Bytef*>(in_.data())) : 0)) +
                   " (" + what + "): the file is damaged or cut short; download it again");
}

GzipStreamBuf::int_type GzipStreamBuf::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  out_start_ += static_cast<uint64_t>(egptr() - eback());
  zs_.next_out = reinterpret_cast<Bytef*>(out_.data());
  zs_.avail_out = static_cast<uInt>(out_.size());
  while (zs_.avail_out == out_.size()) {  // until some output
    if (zs_.avail_in == 0) {
      in_consumed_ += static_cast<uint64_t>(zs_.next_in ? zs_.next_in - reinterpret_cast<const Bytef*>(in_.data()) : 0);
      file_.read(in_.data(), static_cast<std::streamsize>(in_.size()));
      const auto got = file_.gcount();
      if (file_.bad()) throw InputError(path_ + ": read error at byte " + std::to_string(in_consumed_));
      zs_.next_in = reinterpret_cast<Bytef*>(in_.data());
      zs_.avail_in = static_cast<uInt>(got);
      if (got == 0) {
        if (member_done_ || in_consumed_ == 0) {  // a clean end (or an empty file)
          setg(out_.data(), out_.data(), out_.data());
          return traits_type::eof();
        }
        corrupt("unexpected end of file");
      }
    }
    if (member_done_) {  // another member follows
      inflateReset(&zs_);
      member_done_ = false;
    }
    const int rc = inflate(&zs_, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      member_done_ = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      corrupt(zs_.msg ? zs_.msg : "zlib error " + std::to_string(rc));
    }
  }
  const size_t n = out_.size() - zs_.avail_out;
  setg(out_.data(), out_.data(), out_.data() + n);
  return traits_type::to_int_type(*gptr());
}

GzipStreamBuf::pos_type GzipStreamBuf::seekoff(off_type off, std::ios_base::seekdir dir,
                                               std::ios_base::openmode which) {
  if (dir == std::ios_base::cur) return seekpos(static_cast<off_type>(position()) + off, which);
  if (dir == std::ios_base::beg) return seekpos(off, which);
  return pos_type(off_type(-1));  // the end is unknown without inflating everything
}

GzipStreamBuf::pos_type GzipStreamBuf::seekpos(pos_type pos, std::ios_base::openmode which) {
  if (!(which & std::ios_base::in) || off_type(pos) < 0) return pos_type(off_type(-1));
  const auto target = static_cast<uint64_t>(off_type(pos));
  if (target < out_start_) restart();
  for (;;) {
    const uint64_t end = out_start_ + static_cast<uint64_t>(egptr() - eback());
    if (target <= end && target >= out_start_) {
      setg(eback(), eback() + (target - out_start_), egptr());
      return pos;
    }
    setg(eback(), egptr(), egptr());  // drop what is buffered
    if (traits_type::eq_int_type(underflow(), traits_type::eof())) return pos_type(off_type(-1));
  }
}

}  // namespace ctitan
