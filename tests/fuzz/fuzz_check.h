// What every fuzz target checks (issue 20): a parser given any bytes either
// accepts them or throws ctitan::InputError whose what() is one non-empty
// line. Any other exception, a message with a line break, a crash, a leak
// or undefined behaviour (the sanitizers) is a finding: the input is saved
// by libFuzzer and the parser is fixed.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <typeinfo>

#include "common/errors.h"

namespace ctitan::fuzz {

// With CTITAN_FUZZ_COUNT set (docs/fuzzing.md: the one-line rate over a
// corpus), inputs are counted instead of trapping on a finding, and the
// counts are printed at exit.
struct Counts {
  long accepted = 0, one_line = 0, not_one_line = 0, other_exception = 0;
  const bool counting = std::getenv("CTITAN_FUZZ_COUNT") != nullptr;
  ~Counts() {
    if (counting)
      std::fprintf(stderr,
                   "fuzz-count: accepted %ld, rejected %ld: one line %ld, not one line %ld, other exception %ld\n",
                   accepted, one_line + not_one_line + other_exception, one_line, not_one_line, other_exception);
  }
};
inline Counts& counts() {
  static Counts c;
  return c;
}

// Runs `parse`; traps (a libFuzzer crash) unless it returns or throws a one-line InputError.
template <typename F>
void expect_accept_or_one_line(F&& parse) {
  Counts& n = counts();
  try {
    parse();
    ++n.accepted;
  } catch (const InputError& e) {
    const std::string what = e.what();
    if (what.empty() || what.find_first_of("\n\r") != std::string::npos) {
      ++n.not_one_line;
      if (n.counting) return;
      std::fprintf(stderr, "\nfuzz: InputError is not one line: [[%s]]\n", what.c_str());
      __builtin_trap();
    }
    ++n.one_line;
  } catch (const std::exception& e) {
    ++n.other_exception;
    if (n.counting) return;
    std::fprintf(stderr, "\nfuzz: %s escaped instead of an InputError: %s\n", typeid(e).name(), e.what());
    __builtin_trap();
  }
}

// A folder of the target's own under $TMPDIR, removed when the fuzzer exits.
class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace ctitan::fuzz
