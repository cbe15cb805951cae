// A small, real filesystem for fault-injection tests: a tmpfs of a given size
// mounted on a fresh folder, so writes hit ENOSPC exactly as on a full disk.
// Mounting needs root (or CAP_SYS_ADMIN); where it is refused, `skip_reason()`
// says why and the test skips with that line.
#pragma once

#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace ctitan::testing {

class SmallFs {
 public:
  // `bytes`: the filesystem's size (tmpfs rounds up to pages).
  explicit SmallFs(std::size_t bytes) {
    char tmpl[] = "/tmp/ctfull.XXXXXX";
    if (!mkdtemp(tmpl)) {
      reason_ = std::string("mkdtemp: ") + std::strerror(errno);
      return;
    }
    dir_ = tmpl;
    const std::string opts = "size=" + std::to_string(bytes) + ",mode=0777";
    if (mount("tmpfs", dir_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
      reason_ = "cannot mount a small tmpfs to fill (" + std::string(std::strerror(errno)) +
                "); run the fault-injection tests as root";
      return;
    }
    mounted_ = true;
  }
  ~SmallFs() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  SmallFs(const SmallFs&) = delete;
  SmallFs& operator=(const SmallFs&) = delete;

  bool ok() const { return mounted_; }
  const std::string& skip_reason() const { return reason_; }
  const std::string& dir() const { return dir_; }

  // Fills the filesystem until at most `leave` bytes are free (a file named
  // `filler` in its root); `release()` deletes it so a rerun has room.
  void fill(std::size_t leave = 0) {
    std::ofstream f(dir_ + "/filler", std::ios::binary);
    std::string block(4096, 'x');
    while (free_bytes() > leave + block.size() && f.write(block.data(), block.size())) f.flush();
    if (leave == 0) {
      while (f.write("x", 1)) f.flush();
    }
  }
  void release() {
    std::error_code ec;
    std::filesystem::remove(dir_ + "/filler", ec);
  }
  std::size_t free_bytes() const {
    struct statvfs s{};
    if (statvfs(dir_.c_str(), &s) != 0) return 0;
    return static_cast<std::size_t>(s.f_bavail) * s.f_frsize;
  }

 private:
  std::string dir_, reason_;
  bool mounted_ = false;
};

}  // namespace ctitan::testing
