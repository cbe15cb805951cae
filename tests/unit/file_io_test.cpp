// The file layer (common/file_io.h): checked atomic writes on a really full
// filesystem (a small tmpfs; skipped where mounting is refused), reads that
// refuse what is not a regular file or is too large, and the TOML nesting
// bound checked on text.
#include "common/file_io.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "tests/fifo_read.h"
#include "tests/integration/small_fs.h"

namespace fs = std::filesystem;
using ctitan::testing::read_fifo;
using ctitan::InputError;
using ctitan::testing::SmallFs;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

fs::path scratch(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("ctitan_fileio_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// The one line an InputError carries, or "" when `f` does not throw one.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(FileIo, AtomicWriteOnAFullDiskIsOneLineAndKeepsTheOldFile) {
  SmallFs small(1u << 20);
  if (!small.ok()) GTEST_SKIP() << small.skip_reason();
  const std::string path = small.dir() + "/point.toml";
  ctitan::write_file_atomic(path, "old = 1\n");
  small.fill();
  const std::string err = error_of([&] { ctitan::write_file_atomic(path, std::string(64 << 10, 'x')); });
  EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
  EXPECT_NE(err.find("free space"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos);
  EXPECT_EQ(slurp(path), "old = 1\n");
  for (const auto& e : fs::directory_iterator(small.dir()))  // no temporary left behind
    EXPECT_TRUE(e.path().filename() == "point.toml" || e.path().filename() == "filler") << e.path();
  small.release();
  ctitan::write_file_atomic(path, "new = 2\n");
  EXPECT_EQ(slurp(path), "new = 2\n");
}

TEST(FileIo, AtomicFileInPiecesAndAppenderReportAFullDisk) {
  SmallFs small(1u << 20);
  if (!small.ok()) GTEST_SKIP() << small.skip_reason();
  small.fill(16 << 10);
  {
    ctitan::AtomicFile f(small.dir() + "/shard.bin");
    const std::string err = error_of([&] {
      for (int i = 0; i < 64; ++i) f.write(std::string(4096, 'y'));
      f.commit();
    });
    EXPECT_NE(err.find("shard.bin"), std::string::npos) << err;
  }
  EXPECT_FALSE(fs::exists(small.dir() + "/shard.bin"));
  ctitan::CheckedAppender log(small.dir() + "/metrics.jsonl");
  const std::string err = error_of([&] {
    for (int i = 0; i < 64; ++i) log.write(std::string(4096, 'z') + "\n");
  });
  EXPECT_NE(err.find("metrics.jsonl"), std::string::npos) << err;
}

TEST(FileIo, AppenderAppendsUnlessAskedToTruncate) {
  const fs::path d = scratch("append");
  {
    ctitan::CheckedAppender a((d / "log").string());
    a.write("one\n");
  }
  {
    ctitan::CheckedAppender a((d / "log").string());
    a.write("two\n");
  }
  EXPECT_EQ(slurp(d / "log"), "one\ntwo\n");
  {
    ctitan::CheckedAppender a((d / "log").string(), /*truncate=*/true);
    a.write("three\n");
  }
  EXPECT_EQ(slurp(d / "log"), "three\n");
}

TEST(FileIo, ReadsOnlyRegularFilesOfBoundedSize) {
  const fs::path d = scratch("read");
  std::ofstream(d / "ok.toml") << "a = 1\n";
  std::ofstream(d / "empty.toml");
  std::ofstream(d / "blank.toml") << "\n \t\n";
  std::ofstream(d / "big") << std::string(2000, 'b');
  fs::create_directory(d / "dir");
  ASSERT_EQ(mkfifo((d / "fifo").c_str(), 0644), 0);
  EXPECT_EQ(ctitan::read_file_bounded((d / "ok.toml").string(), "config file", 100), "a = 1\n");
  EXPECT_EQ(ctitan::read_file_bounded((d / "empty.toml").string(), "config file", 100), "");
  const auto err = [&](const std::string& p, bool allow_empty = true) {
    return error_of([&] { ctitan::read_file_bounded(p, "config file", 1000, allow_empty); });
  };
  EXPECT_NE(err((d / "empty.toml").string(), false).find("is empty"), std::string::npos);
  EXPECT_NE(err((d / "blank.toml").string(), false).find("is empty"), std::string::npos);
  EXPECT_NE(err((d / "dir").string()).find("is a directory"), std::string::npos);
  EXPECT_NE(err((d / "fifo").string()).find("is a FIFO"), std::string::npos);  // returns, does not block
  EXPECT_NE(err("/dev/zero").find("is a character device"), std::string::npos);
  EXPECT_NE(err((d / "big").string()).find("2000 bytes, more than the 1000"), std::string::npos);
  EXPECT_NE(err((d / "missing").string()).find("No such file or directory"), std::string::npos);
}

TEST(FileIo, TomlNestingIsBoundedOnTheText) {
  const auto depth_error = [](const std::string& text, int max = 4) {
    return error_of([&] { ctitan::check_toml_nesting(text, "t.toml", max); });
  };
  // Within the bound: a real recipe's shapes.
  EXPECT_EQ(depth_error("[a.b.c]\nx = [[1, 2], [3]]\ny = {p = 1, q.r = 2}\n"), "");
  EXPECT_EQ(depth_error("[[a.b]]\nx.y.z = 1\n"), "");
  // Dots, brackets and braces inside strings and comments do not count.
  EXPECT_EQ(depth_error("s = \"[[[[[[.....{{{{\"\nt = '[[[[.....'\n# [[[[[[.....\n"), "");
  EXPECT_EQ(depth_error("m = \"\"\"\n[[[[[[\n.....\n\"\"\"\nn = '''[[[[[''' \n\"a.b.c.d.e\" = 1\n"), "");
  EXPECT_EQ(depth_error("e = \"quote \\\" [[[[[[ \"\n"), "");
  // Beyond it, each way of nesting, with the line.
  EXPECT_NE(depth_error("[a.b.c.d.e]\n").find("t.toml:1: TOML nested more than 4"), std::string::npos);
  EXPECT_NE(depth_error("ok = 1\na.b.c.d.e = 1\n").find("t.toml:2:"), std::string::npos);
  EXPECT_NE(depth_error("x = [[[[[1]]]]]\n"), "");
  EXPECT_NE(depth_error("x = [\n [\n  [\n   [\n    [1]]]]]\n").find("t.toml:5:"), std::string::npos);
  EXPECT_NE(depth_error("x = {a = {b = {c = {d = {e = 1}}}}}\n"), "");
  EXPECT_NE(depth_error("x = {a.b.c.d = 1}\n"), "");
  // The default bound takes every recipe the project ships.
  for (const auto& e : fs::recursive_directory_iterator(fs::path(std::getenv("CTITAN_SOURCE_DIR") ? std::getenv("CTITAN_SOURCE_DIR") : ".") / "recipes")) {
    if (e.path().extension() != ".toml") continue;
    EXPECT_EQ(error_of([&] { ctitan::check_toml_nesting(slurp(e.path()), e.path().string()); }), "") << e.path();
  }
}

// Issue 55, item 2: a write never replaces a node that is not a regular
// file. A FIFO and a character device are written to as streams, a symlink
// is followed (the link stays), a directory or a dangling link is one line.
TEST(FileIo, AtomicWriteNeverReplacesANodeThatIsNotARegularFile) {
  const fs::path d = scratch("nodes");
  // A FIFO with a reader: the reader gets the bytes, the FIFO stays a FIFO.
  const fs::path fifo = d / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = read_fifo(fifo); });
  const std::string piped = error_of([&] { ctitan::write_file_atomic(fifo.string(), "through the pipe\n"); });
  reader.join();
  EXPECT_EQ(piped, "");
  EXPECT_EQ(got, "through the pipe\n");
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));
  // Nobody reading: one line, no hang, still a FIFO.
  const std::string no_reader = error_of([&] { ctitan::write_file_atomic(fifo.string(), "x"); });
  EXPECT_NE(no_reader.find("a FIFO that nobody reads"), std::string::npos) << no_reader;
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));
  // Devices, made here (a broken write would replace /dev/null itself): a
  // null device swallows it, a full one is a full disk; both stay devices.
  const fs::path null_dev = d / "null", full_dev = d / "full";
  if (::mknod(null_dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0 &&
      ::mknod(full_dev.c_str(), S_IFCHR | 0666, makedev(1, 7)) == 0) {
    EXPECT_EQ(error_of([&] { ctitan::write_file_atomic(null_dev.string(), "nothing\n"); }), "");
    EXPECT_TRUE(fs::is_character_file(null_dev));
    const std::string full = error_of([&] { ctitan::write_file_atomic(full_dev.string(), "x"); });
    EXPECT_NE(full.find("cannot write to a character device '" + full_dev.string() + "': No space left on device"),
              std::string::npos)
        << full;
    EXPECT_TRUE(fs::is_character_file(full_dev));
  }
  // A symlink to a file: the file is written, the link stays a link.
  const fs::path file = d / "real.txt", link = d / "link.txt";
  std::ofstream(file) << "old\n";
  fs::create_symlink(file, link);
  ctitan::write_file_atomic(link.string(), "new\n");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_EQ(slurp(file), "new\n");
  // A symlink to a FIFO: written through (ln -s /proc/self/fd/1 so; --out so).
  const fs::path to_fifo = d / "to_fifo";
  fs::create_symlink(fifo, to_fifo);
  std::thread again([&] { got = read_fifo(fifo); });
  EXPECT_EQ(error_of([&] { ctitan::write_file_atomic(to_fifo.string(), "via the link\n"); }), "");
  again.join();
  EXPECT_EQ(got, "via the link\n");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(to_fifo)));
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));
  // A dangling link and a directory: one line each, nothing created.
  const fs::path dangling = d / "dangling";
  fs::create_symlink(d / "absent", dangling);
  const std::string dl = error_of([&] { ctitan::write_file_atomic(dangling.string(), "x"); });
  EXPECT_NE(dl.find("is a symbolic link to"), std::string::npos) << dl;
  EXPECT_FALSE(fs::exists(d / "absent"));
  const std::string dir = error_of([&] { ctitan::write_file_atomic(d.string(), "x"); });
  EXPECT_NE(dir.find("it is a directory, which ctitan never replaces"), std::string::npos) << dir;
  EXPECT_TRUE(fs::is_directory(d));
}

// Issue 55, item 1: an output that is one of the command's inputs (the same
// file by any name, or a SQLite file beside it) is refused before writing.
TEST(FileIo, AnOutputThatIsAnInputIsRefused) {
  const fs::path d = scratch("out_in");
  const fs::path db = d / "x.db";
  std::ofstream(db) << "data";
  fs::create_hard_link(db, d / "hard.db");
  fs::create_symlink(db, d / "soft.db");
  const std::vector<ctitan::CommandInput> inputs = {{"--db", db.string()}, {"--baseline-file", ""}};
  for (const fs::path& out : {db, d / "hard.db", d / "soft.db", d / "." / "x.db", fs::path(db.string() + "-wal")}) {
    const std::string err = error_of([&] { ctitan::check_output_is_not_an_input(out.string(), "report --out", inputs); });
    EXPECT_NE(err.find("report --out '" + out.string() + "' is "), std::string::npos) << out << ": " << err;
    EXPECT_NE(err.find("--db '" + db.string() + "', which this command reads"), std::string::npos) << err;
  }
  // A new file beside it, stdout, and no output at all pass.
  for (const std::string& out : {(d / "report.html").string(), std::string("-"), std::string()})
    EXPECT_EQ(error_of([&] { ctitan::check_output_is_not_an_input(out, "report --out", inputs); }), "") << out;
  // Neither exists yet: the same path by two spellings is still one file.
  EXPECT_NE(error_of([&] {
              ctitan::check_output_is_not_an_input((d / "sub/../new.json").string(), "gate --md",
                                                   {{"--baseline-file", (d / "new.json").string()}});
            }),
            "");
  EXPECT_EQ(slurp(db), "data");
}
