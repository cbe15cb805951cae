// What every test binary does around its tests (added to each by
// `ctitan_test` in cmake/ctitan.cmake):
//
// - It settles ATen's CPU vector math before the first test
//   (trainer/cpu_vector_math.h), as `ctitan train` does at start: otherwise
//   the first exp/log/... of the process may run at low accuracy on one
//   thread, and a test comparing two computations in one process sees the
//   first differ from the second.
// - It runs its tests in a scratch folder of its own: a fresh
//   `ctitan-test-XXXXXX` under $TEST_TMPDIR, else $TMPDIR, else /tmp,
//   which becomes both TEST_TMPDIR (GoogleTest's TempDir()) and TMPDIR
//   (std::filesystem::temp_directory_path(), and every process a test
//   starts). When every test passed the folder is removed; when one failed it
//   is kept and its path printed. Test folders used to stay behind: one
//   checkpointing test alone left 0.9 GB per run, and a few days of runs
//   filled the machine's disk (70 GB under /tmp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>

#include "trainer/cpu_vector_math.h"

namespace {

class SettleCpuVectorMath : public ::testing::Environment {
 public:
  void SetUp() override { ctitan::settle_cpu_vector_math(); }
};

class ScratchFolder : public ::testing::Environment {
 public:
  void SetUp() override {
    std::string parent = "/tmp";
    for (const char* var : {"TEST_TMPDIR", "TMPDIR"}) {
      const char* v = std::getenv(var);
      if (v != nullptr && *v != '\0') {
        parent = v;
        break;
      }
    }
    std::string tmpl = (std::filesystem::path(parent) / "ctitan-test-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::cerr << "test scratch: cannot create a folder under " << parent
                << "; set TMPDIR to a writable folder with free space\n";
      std::exit(2);
    }
    dir_ = tmpl;
    setenv("TEST_TMPDIR", dir_.c_str(), 1);
    setenv("TMPDIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (dir_.empty()) return;
    if (::testing::UnitTest::GetInstance()->Passed()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    } else {
      std::cerr << "test scratch: kept " << dir_ << " for the failed test(s); remove it when done\n";
    }
  }

 private:
  std::string dir_;
};

const ::testing::Environment* const settle_environment =
    ::testing::AddGlobalTestEnvironment(new SettleCpuVectorMath);
const ::testing::Environment* const scratch_environment = ::testing::AddGlobalTestEnvironment(new ScratchFolder);

}  // namespace
