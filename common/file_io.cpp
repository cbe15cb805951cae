#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>

#include "common/errors.h"

namespace ctitan {
namespace fs = std::filesystem;

std::string write_error_line(const std::string& path, int err) {
  std::string line = "cannot write '";
  line += path;
  line += "': ";
  line += std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      line += "; free space on the filesystem holding '";
      line += fs::path(path).parent_path().string();
      line += "' and rerun";
      break;
    case EROFS:
      line += "; the filesystem is read-only: write somewhere else";
      break;
    case EACCES:
    case EPERM:
      line += "; check the folder's permissions";
      break;
    case ENAMETOOLONG:
      line += "; use a shorter name or folder";
      break;
    default:
      line += "; check the disk and rerun";
  }
  return line;
}

namespace {

[[noreturn]] void write_fail(const std::string& path, int err) { throw InputError(write_error_line(path, err)); }

void write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      write_fail(path, errno);
    }
    if (n == 0) write_fail(path, ENOSPC);
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void sync_dir_of(const std::string& path) {
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = fs::path(".");
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // the rename happened; a folder we cannot open to sync is not an error
  ::fsync(fd);
  ::close(fd);
}

std::string temp_name_for(const std::string& path) {
  thread_local std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(::getpid()));
  const fs::path p(path);
  // Kept short so a long final name still leaves room (NAME_MAX is per component).
  std::string leaf = p.filename().string();
  if (leaf.size() > 200) leaf.resize(200);
  char suffix[24];
  std::snprintf(suffix, sizeof(suffix), ".%08llx.tmp", static_cast<unsigned long long>(rng() & 0xffffffffu));
  std::string name = ".";
  name += leaf;
  name += suffix;
  return (p.parent_path() / name).string();
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(temp_name_for(path_)) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) write_fail(path_, errno);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::write(std::string_view data) {
  try {
    write_all(fd_, data, path_);
  } catch (...) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
    fd_ = -1;
    throw;
  }
}

void AtomicFile::commit() {
  int err = 0;
  if (::fsync(fd_) != 0) err = errno;
  if (::close(fd_) != 0 && err == 0) err = errno;
  fd_ = -1;
  if (err == 0 && ::rename(tmp_.c_str(), path_.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp_.c_str());
    write_fail(path_, err);
  }
  sync_dir_of(path_);
}

void check_folder_writable(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) write_fail(dir, ec.value());
  std::string probe = (fs::path(dir) / ".ctitan-write-probe.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) write_fail(dir, errno);
  ::close(fd);
  ::unlink(probe.c_str());
}

namespace {

const char* node_kind(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISSOCK(mode) ? "a socket"
         : S_ISLNK(mode)  ? "a symbolic link"
                          : "not a regular file";
}

// A device or FIFO the user named (/dev/null, /dev/stdout, a named pipe):
// written to as it is, never renamed over. `what` names it in errors.
void write_stream(const std::string& path, std::string_view data, const std::string& what) {
  // O_NONBLOCK only for the open: a FIFO nobody reads is an error, not a
  // hang, once its reader has had two seconds to open it.
  int fd = -1;
  for (int tries = 0; tries < 200; ++tries) {
    fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd >= 0 || errno != ENXIO) break;
    ::usleep(10000);
  }
  if (fd < 0) {
    if (errno == ENXIO)
      throw InputError("cannot write '" + path + "': it is a FIFO that nobody reads; start its reader first, or give a file name");
    write_fail(path, errno);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  int err = 0;
  while (!data.empty() && err == 0) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) data.remove_prefix(static_cast<size_t>(n));
    else if (n == 0) err = ENOSPC;
    else if (errno != EINTR) err = errno;
  }
  if (::close(fd) != 0 && err == 0 && errno != EINTR) err = errno;
  if (err != 0) throw InputError("cannot write to " + what + ": " + std::strerror(err));
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view data) {
  if (fs::path(path).filename().string().size() > 255) write_fail(path, ENAMETOOLONG);
  std::string target = path;
  struct stat st {}, lst {};
  const bool is_link = ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode);
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))
      return write_stream(path, data, std::string(node_kind(st.st_mode)) + " '" + path + "'");
    if (!S_ISREG(st.st_mode))
      throw InputError("cannot write '" + path + "': it is " + node_kind(st.st_mode) +
                       ", which ctitan never replaces; give a file name");
    // A symlink to a file: the file is written and the link stays a link.
    if (is_link) target = fs::canonical(path).string();
  } else if (is_link) {
    std::error_code ec;
    throw InputError("cannot write '" + path + "': it is a symbolic link to '" + fs::read_symlink(path, ec).string() +
                     "', which does not exist; give the file itself, or remove the link");
  }
  AtomicFile f(target);
  f.write(data);
  f.commit();
}

void write_output(const std::string& path, std::string_view data) {
  if (path != "-") return write_file_atomic(path, data);
  std::fflush(stdout);
  write_stream("/dev/stdout", data, "stdout");
}

void check_output_is_not_an_input(const std::string& out, std::string_view out_flag,
                                  const std::vector<CommandInput>& inputs) {
  if (out.empty() || out == "-") return;
  const auto same_file = [](const fs::path& a, const fs::path& b) {
    std::error_code ea, eb;
    const bool a_exists = fs::exists(a, ea), b_exists = fs::exists(b, eb);
    if (a_exists && b_exists) return fs::equivalent(a, b, ea);
    if (a_exists || b_exists) return false;
    return fs::weakly_canonical(fs::absolute(a), ea) == fs::weakly_canonical(fs::absolute(b), eb);
  };
  for (const CommandInput& in : inputs) {
    if (in.path.empty() || in.path == "-") continue;
    for (const char* sidecar : {"", "-wal", "-shm", "-journal"}) {
      if (!same_file(out, in.path + sidecar)) continue;
      throw InputError(std::string(out_flag) + " '" + out + "' is " +
                       (*sidecar ? std::string("a SQLite file beside ") : std::string("the same file as ")) +
                       in.flag + " '" + in.path + "', which this command reads; writing it would destroy it: "
                       "give another output file");
    }
  }
}

CheckedAppender::CheckedAppender(std::string path, bool truncate) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0644);
  if (fd_ < 0) write_fail(path_, errno);
}

CheckedAppender::~CheckedAppender() {
  if (fd_ >= 0) ::close(fd_);
}

CheckedAppender::CheckedAppender(CheckedAppender&& o) noexcept
    : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)) {}

CheckedAppender& CheckedAppender::operator=(CheckedAppender&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void CheckedAppender::write(std::string_view data) {
  if (fd_ < 0) return;
  write_all(fd_, data, path_);
}

void CheckedAppender::sync() {
  if (fd_ >= 0 && ::fsync(fd_) != 0) write_fail(path_, errno);
}

void CheckedAppender::close() {
  if (fd_ < 0) return;
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) write_fail(path_, errno);
}

std::uintmax_t check_regular_file(const std::string& path, std::string_view what, std::uintmax_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    std::string line = "cannot open ";
    line += what;
    line += " '";
    line += path;
    line += "': ";
    line += std::strerror(err);
    if (err == ENOENT) line += "; check the path";
    throw InputError(line);
  }
  if (!S_ISREG(st.st_mode)) {
    const char* kind = node_kind(st.st_mode);
    std::string line(what);
    line += " '";
    line += path;
    line += "' is ";
    line += kind;
    line += "; give a regular file";
    throw InputError(line);
  }
  const auto size = static_cast<std::uintmax_t>(st.st_size);
  if (size > max_bytes) {
    std::string line(what);
    line += " '";
    line += path;
    line += "' is ";
    line += std::to_string(size);
    line += " bytes, more than the ";
    line += std::to_string(max_bytes);
    line += " a ";
    line += what;
    line += " may have; is it the right file?";
    throw InputError(line);
  }
  return size;
}

std::string read_file_bounded(const std::string& path, std::string_view what, std::size_t max_bytes,
                              bool allow_empty) {
  check_regular_file(path, what, max_bytes);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    std::string line = "cannot open ";
    line += what;
    line += " '";
    line += path;
    line += "': ";
    line += std::strerror(errno);
    throw InputError(line);
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      std::string line = "cannot read ";
      line += what;
      line += " '";
    line += path;
    line += "': ";
      line += std::strerror(err);
      throw InputError(line);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes) {  // it grew after the stat
      ::close(fd);
      std::string line(what);
      line += " '";
      line += path;
      line += "' is larger than ";
      line += std::to_string(max_bytes);
      line += " bytes; is it the right file?";
      throw InputError(line);
    }
  }
  ::close(fd);
  if (!allow_empty && text.find_first_not_of(" \t\r\n") == std::string::npos) {
    std::string line(what);
    line += " '";
    line += path;
    line += "' is empty; an empty ";
    line += what;
    line += " is an error, not a request for defaults (was it written on a full disk?)";
    throw InputError(line);
  }
  return text;
}

void check_toml_nesting(std::string_view text, const std::string& where, int max_depth) {
  // A small scanner, not a parser: it follows strings and comments so that
  // dots and brackets inside them do not count.
  std::string stack;  // open '[' / '{' of values
  bool key_ctx = true, header = false;
  int segs = 0, line = 1;
  auto too_deep = [&]() {
    throw InputError(where + ":" + std::to_string(line) + ": TOML nested more than " + std::to_string(max_depth) +
                     " levels deep (table names, dotted keys, arrays, inline tables); flatten it");
  };
  auto check = [&]() {
    if (static_cast<int>(stack.size()) + segs > max_depth) too_deep();
  };
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      if (stack.empty()) key_ctx = true, header = false, segs = 0;
      continue;
    }
    if (c == '#') {
      while (i + 1 < n && text[i + 1] != '\n') ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      const bool multi = i + 2 < n && text[i + 1] == c && text[i + 2] == c;
      if (key_ctx && segs == 0) segs = 1, check();
      i += multi ? 3 : 1;
      for (; i < n; ++i) {
        if (text[i] == '\n') ++line;
        if (c == '"' && text[i] == '\\') {
          ++i;
          if (i < n && text[i] == '\n') ++line;
          continue;
        }
        if (text[i] != c) continue;
        if (!multi) break;
        if (i + 2 < n && text[i + 1] == c && text[i + 2] == c) {
          i += 2;
          while (i + 1 < n && text[i + 1] == c) ++i;  // """a"""" ends with quotes in the string
          break;
        }
      }
      continue;
    }
    if (key_ctx) {
      if (c == '[' && stack.empty() && segs == 0 && !header) {
        header = true;  // [table] or [[array of tables]]
        if (i + 1 < n && text[i + 1] == '[') ++i;
        continue;
      }
      if (c == ']' && header) {
        header = false, key_ctx = false;
        continue;
      }
      if (c == '.') {
        ++segs, check();
        continue;
      }
      if (c == '=') {
        key_ctx = false;
        continue;
      }
      if (c != ' ' && c != '\t' && c != '\r' && c != ',' && c != '}' && segs == 0) segs = 1, check();
      if (c == '}' && !stack.empty()) stack.pop_back(), key_ctx = false, segs = 0;
      continue;
    }
    switch (c) {
      case '[':
      case '{':
        stack.push_back(c);
        segs = 0;
        check();
        if (c == '{') key_ctx = true;
        break;
      case ']':
      case '}':
        if (!stack.empty()) stack.pop_back();
        break;
      case ',':
        if (!stack.empty() && stack.back() == '{') key_ctx = true, segs = 0;
        break;
      default:
        break;
    }
  }
}

}  // namespace ctitan
