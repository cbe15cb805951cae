// The scratch folder every test binary runs its tests in
// (tests/test_process_environment.cpp): removed when the tests pass, kept
// (and named) when one fails. Checked on this binary's own processes,
// running the two child tests below.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/integration/process.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;

// The children: run only as processes of their own, by the test below.
// Each writes through both ways tests name scratch files and prints where.
void write_and_print() {
  const fs::path gtest_dir = ::testing::TempDir(), std_dir = fs::temp_directory_path();
  EXPECT_EQ(fs::canonical(gtest_dir), fs::canonical(std_dir)) << "TempDir() and $TMPDIR name one folder";
  EXPECT_EQ(std_dir.filename().string().rfind("ctitan-test-", 0), 0u) << std_dir;
  std::ofstream(gtest_dir / "from_gtest.txt") << "a\n";
  std::ofstream(std_dir / "from_std.txt") << "b\n";
  std::printf("scratch=%s\n", fs::canonical(std_dir).c_str());
}
TEST(TestScratchChild, DISABLED_Passes) { write_and_print(); }
TEST(TestScratchChild, DISABLED_Fails) {
  write_and_print();
  ADD_FAILURE() << "failing on purpose";
}

testing::ProcessResult run_child(const fs::path& parent, const std::string& test) {
  return testing::run_program({"/usr/bin/env", "TEST_TMPDIR=" + parent.string(), fs::read_symlink("/proc/self/exe").string(),
                               "--gtest_filter=TestScratchChild." + test, "--gtest_also_run_disabled_tests"});
}

std::string scratch_of(const std::string& out) {
  const auto at = out.find("scratch=");
  if (at == std::string::npos) return "";
  return out.substr(at + 8, out.find('\n', at) - at - 8);
}

std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> e;
  for (const auto& x : fs::directory_iterator(dir)) e.push_back(x.path());
  return e;
}

TEST(TestScratch, RemovedWhenTheTestsPassKeptAndNamedWhenOneFails) {
  const fs::path parent = fs::canonical(fs::temp_directory_path()) / "scratch_parent";
  fs::create_directories(parent);

  const testing::ProcessResult passed = run_child(parent, "DISABLED_Passes");
  ASSERT_EQ(passed.exit_code, 0) << passed.out << passed.err;
  const std::string pass_dir = scratch_of(passed.out);
  ASSERT_EQ(pass_dir.rfind((parent / "ctitan-test-").string(), 0), 0u) << passed.out;
  EXPECT_FALSE(fs::exists(pass_dir)) << "the scratch of passing tests is removed";
  EXPECT_TRUE(entries(parent).empty());

  const testing::ProcessResult failed = run_child(parent, "DISABLED_Fails");
  ASSERT_NE(failed.exit_code, 0) << failed.out;
  const std::string fail_dir = scratch_of(failed.out);
  ASSERT_EQ(fail_dir.rfind((parent / "ctitan-test-").string(), 0), 0u) << failed.out;
  EXPECT_TRUE(fs::exists(fs::path(fail_dir) / "from_gtest.txt"));
  EXPECT_TRUE(fs::exists(fs::path(fail_dir) / "from_std.txt"));
  EXPECT_NE(failed.err.find("test scratch: kept " + fail_dir), std::string::npos) << failed.err;
  EXPECT_EQ(entries(parent).size(), 1u);
}

}  // namespace
}  // namespace ctitan
