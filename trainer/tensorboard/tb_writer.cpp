#include "trainer/tensorboard/tb_writer.h"

#include <fcntl.h>
#include <isa-l/crc.h>  // crc32_iscsi: CRC-32C with the CPU's CRC instructions
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "common/errors.h"
#include "common/file_io.h"
#include "trainer/tensorboard/event.pb.h"  // generated from event.proto

namespace ctitan {

namespace fs = std::filesystem;

uint32_t crc32c(const void* data, size_t n) {
  if (n > static_cast<size_t>(INT_MAX)) throw std::length_error("crc32c: record larger than 2 GiB");
  // ISA-L's crc32_iscsi keeps the register un-inverted: seed ~0, invert the result.
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(data));
  return ~crc32_iscsi(bytes, static_cast<int>(n), 0xFFFFFFFFu);
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

namespace {

void append_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

// The outermost folder of `folder` that does not exist yet (empty: none).
fs::path first_missing(const fs::path& folder) {
  fs::path missing;
  std::error_code ec;
  for (fs::path p = fs::absolute(folder, ec); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    missing = p;
    if (p == p.parent_path()) break;
  }
  return missing;
}

}  // namespace

std::string tfrecord(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  append_le(out, data.size(), 8);
  append_le(out, masked_crc32c(out.data(), 8), 4);
  out += data;
  append_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& folder) {
  const fs::path dir = fs::absolute(folder);
  const fs::path created = first_missing(dir);
  // Undo everything this constructor made, then one line for the user.
  auto fail = [&](const std::string& why) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    std::error_code ec;
    if (!path_.empty()) fs::remove(path_, ec);
    // Only empty folders go, from the leaf up to the first one created here:
    // another rank may be writing beside us.
    if (!created.empty())
      for (fs::path p = dir; fs::remove(p, ec) && p != created; p = p.parent_path()) {
      }
    std::string msg = "cannot write TensorBoard event files to ";
    msg += dir.string();
    msg += ": ";
    msg += why;
    msg +=
        "; point job.dump_folder / metrics.save_tb_folder at a writable folder or turn off metrics.enable_tensorboard";
    throw InputError(msg);
  };

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(ec.message());
  if (!fs::is_directory(dir, ec)) fail("not a folder");

  // TensorFlow's name; a second file in the same second gets a suffix.
  std::string base = "events.out.tfevents.";
  base += std::to_string(static_cast<int64_t>(unix_seconds()));
  base += ".";
  base += hostname();
  for (int k = 0; fd_ < 0; ++k) {
    path_ = (dir / base).string();
    if (k > 0) {
      path_ += ".";
      path_ += std::to_string(k);
    }
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) {
      const std::string why = std::strerror(errno);
      path_.clear();
      fail(why);
    }
  }

  tensorboard::Event version;
  version.set_wall_time(unix_seconds());
  version.set_file_version("brain.Event:2");
  append_event(version.SerializeAsString());
  if (const int err = write_pending(); err != 0) fail(std::strerror(err));
}

TensorBoardWriter::~TensorBoardWriter() {
  try {
    close();
  } catch (const std::exception&) {
    // A destructor cannot report; close() explicitly to see the error.
  }
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  tensorboard::Event e;
  e.set_wall_time(unix_seconds());
  e.set_step(step);
  tensorboard::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  append_event(e.SerializeAsString());
}

void TensorBoardWriter::append_event(const std::string& serialized_event) { pending_ += tfrecord(serialized_event); }

int TensorBoardWriter::write_pending() {
  size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    done += static_cast<size_t>(n);
  }
  pending_.clear();
  return 0;
}

void TensorBoardWriter::flush() {
  if (fd_ < 0) return;
  if (const int err = write_pending(); err != 0) {
    throw InputError(write_error_line(path_, err));
  }
}

void TensorBoardWriter::close() {
  if (fd_ < 0) return;
  flush();
  const int fsync_rc = ::fsync(fd_);
  const int fsync_errno = errno;
  ::close(fd_);
  fd_ = -1;
  if (fsync_rc != 0) {
    throw InputError(write_error_line(path_, fsync_errno));
  }
}

}  // namespace ctitan
