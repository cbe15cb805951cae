// The file layer every writer and every whole-file reader goes through.
//
// Writes: a file is written to a temporary beside it, every write is checked
// (a short write or ENOSPC is an error, not a smaller file), flushed with
// fsync, then renamed into place and the folder synced. A failure leaves the
// old file as it was and no temporary behind, and is one InputError line
// naming the file, the system's reason and what to do (see common/errors.h).
//
// Reads: only a regular file is read (a directory, FIFO, device or socket is
// refused before it is opened: /dev/zero would never end, a FIFO would
// block), up to a stated size, and an empty file is refused where the caller
// says it must have content.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ctitan {

// Upper bounds for whole-file reads (the largest a real one needs, with room).
inline constexpr std::size_t kMaxConfigBytes = 4u << 20;      // TOML configs, specs
inline constexpr std::size_t kMaxJsonBytes = 256u << 20;      // tokenizer.json, metadata

// Writes `data` to `path` atomically (see above). What is already at `path`
// is never replaced unless it is a regular file: a symlink is followed (the
// file it names is written, the link stays), a character device or FIFO
// (/dev/null, /dev/stdout, a named pipe) is written to as a stream, and a
// directory, socket, block device or a symlink to nothing is one InputError
// line.
void write_file_atomic(const std::string& path, std::string_view data);

// A file the user named for a command's output (--out FILE): "-" is stdout,
// anything else as write_file_atomic.
void write_output(const std::string& path, std::string_view data);

// One input of a command, for check_output_is_not_an_input: the flag that
// named it ("--db") and its path.
struct CommandInput {
  std::string flag;
  std::string path;
};

// Throws InputError, before anything is written, when `out` (given as
// `out_flag`) names the same file as one of `inputs` (the same inode,
// through any link, or the same path when neither exists yet) or a SQLite
// file beside one (its -wal, -shm or -journal): writing it would replace
// what the command reads, a results database among them. "-" and empty
// paths are not files and pass.
void check_output_is_not_an_input(const std::string& out, std::string_view out_flag,
                                  const std::vector<CommandInput>& inputs);

// A file written in pieces (logs, shards), committed atomically at the end.
// Each write() is checked; commit() fsyncs and renames into place. Destroyed
// without commit(), it removes its temporary.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::string_view data);
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

// Appends to a file that grows while a run goes (metrics.jsonl): every write
// checked. An error names the file and stops the writer (a full disk ends
// the run with one line, it does not keep going with a truncated log).
class CheckedAppender {
 public:
  CheckedAppender() = default;
  // Creates the file, or appends to what it holds (`truncate`: empties it).
  explicit CheckedAppender(std::string path, bool truncate = false);
  ~CheckedAppender();
  CheckedAppender(CheckedAppender&& o) noexcept;
  CheckedAppender& operator=(CheckedAppender&& o) noexcept;

  bool is_open() const { return fd_ >= 0; }
  void write(std::string_view data);
  void sync();  // fsync; checked
  void close();

 private:
  std::string path_;
  int fd_ = -1;
};

// One line for a failed write of `path`: the reason, and what to do.
std::string write_error_line(const std::string& path, int err);

// Creates folder `dir` if needed and checks that a file can be created in it
// (a probe file, removed at once): a read-only or full folder is one
// InputError line before a run starts, not after its last step.
void check_folder_writable(const std::string& dir);

// Throws InputError unless `path` is a regular file (following symlinks) of
// at most `max_bytes`; `what` names it in the message ("config file").
// Returns its size.
std::uintmax_t check_regular_file(const std::string& path, std::string_view what,
                                  std::uintmax_t max_bytes);

// The whole file, after check_regular_file. `allow_empty` false refuses an
// empty (or whitespace-only) file: "an empty config is an error, never all
// defaults".
std::string read_file_bounded(const std::string& path, std::string_view what, std::size_t max_bytes,
                              bool allow_empty = true);

// Throws InputError when a TOML document nests deeper than `max_depth`
// (dotted-key segments of a table header or key, plus open arrays and inline
// tables) — checked on the text, before a recursive parser sees it.
void check_toml_nesting(std::string_view text, const std::string& where, int max_depth = 32);

}  // namespace ctitan
