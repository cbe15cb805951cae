// Reading a FIFO in a test without ever blocking: a binary that renames a
// file over the FIFO (instead of writing to it) must fail the test, not
// hang it. Opened at once, so a writer finds a reader.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace ctitan::testing {

// What a FIFO's writer sends within `limit_ms`.
inline std::string read_fifo(const std::filesystem::path& p, int limit_ms = 10000) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK);
  std::string got;
  if (fd < 0) return got;
  char buf[4096];
  for (int waited_ms = 0; waited_ms < limit_ms;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      got.append(buf, static_cast<size_t>(n));
    } else if (n == 0 && !got.empty()) {
      break;  // the writer has closed
    } else {
      ::usleep(10000);
      waited_ms += 10;
    }
  }
  ::close(fd);
  return got;
}

}  // namespace ctitan::testing
