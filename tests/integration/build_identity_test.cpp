// The build identity (cmake/build_identity.cmake, common/build_identity.h):
// the script run against a scratch git repository — a commit, edits,
// untracked and ignored files — and the identity the real binary reports,
// which every run's env.json records.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include <torch/version.h>

#include "common/build_identity.h"
#include "common/errors.h"
#include "tests/integration/process.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;
using testing::run_ctitan;
using testing::source_dir;

int sh(const std::string& cmd) { return std::system(("cd /tmp && " + cmd + " >/dev/null 2>&1").c_str()); }

class ScratchRepo {
 public:
  ScratchRepo() : dir_(fs::temp_directory_path() / ("ctitan_buildid_" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write("a.txt", "one\n");
    write(".gitignore", "build/\n");
    EXPECT_EQ(git("init -q"), 0);
    EXPECT_EQ(git("add -A"), 0);
    EXPECT_EQ(commit("first"), 0);
  }
  ~ScratchRepo() { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name) << text;
  }
  int git(const std::string& args) { return sh("git -C '" + dir_.string() + "' " + args); }
  int commit(const std::string& msg) {
    return git("-c user.name=t -c user.email=t@example.com commit -q --allow-empty -m " + msg);
  }
  std::string head() {
    FILE* p = popen(("git -C '" + dir_.string() + "' rev-parse HEAD 2>/dev/null").c_str(), "r");
    char buf[64] = {0};
    const bool ok = p && std::fgets(buf, sizeof buf, p) != nullptr;
    if (p) pclose(p);
    std::string s = ok ? buf : "";
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
  // Runs the script; returns its defines (CTITAN_GIT_SHA_FULL, ...).
  std::map<std::string, std::string> identity() {
    const fs::path out = dir_ / "build" / "identity.h";
    const std::string cmd = "cmake -DSRC='" + dir_.string() + "' -DOUT='" + out.string() +
                            "' -DTORCH=2.15.0 -DBUILD_TYPE=Release -P '" + source_dir() + "/cmake/build_identity.cmake'";
    EXPECT_EQ(sh(cmd), 0) << cmd;
    std::ifstream in(out);
    std::map<std::string, std::string> defs;
    const std::regex re("#define (\\w+) \"([^\"]*)\"");
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_match(line, m, re)) defs[m[1]] = m[2];
    }
    return defs;
  }
  fs::path path(const std::string& name) const { return dir_ / name; }

 private:
  fs::path dir_;
};

TEST(BuildIdentity, ScriptNamesTheCommitAndEveryUncommittedChange) {
  if (sh("git --version") != 0 || sh("cmake --version") != 0) GTEST_SKIP() << "needs git and cmake on PATH";
  ScratchRepo repo;
  const auto clean = repo.identity();
  EXPECT_EQ(clean.at("CTITAN_GIT_SHA_FULL"), repo.head());
  EXPECT_EQ(clean.at("CTITAN_GIT_DIFF_HASH"), "");
  EXPECT_TRUE(std::regex_match(clean.at("CTITAN_BUILD_ID"), std::regex("[0-9a-f]{16}")));

  // Unchanged tree: same identity, and the header is not rewritten (nothing recompiles).
  const auto mtime = fs::last_write_time(repo.path("build/identity.h"));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(repo.identity(), clean);
  EXPECT_EQ(fs::last_write_time(repo.path("build/identity.h")), mtime);

  repo.write("build/ignored.o", "x");  // ignored files are not part of the build's sources
  EXPECT_EQ(repo.identity(), clean);

  repo.write("a.txt", "two\n");  // an edit of a tracked file
  const auto edited = repo.identity();
  EXPECT_EQ(edited.at("CTITAN_GIT_SHA_FULL"), clean.at("CTITAN_GIT_SHA_FULL"));
  EXPECT_TRUE(std::regex_match(edited.at("CTITAN_GIT_DIFF_HASH"), std::regex("[0-9a-f]{12}")));
  EXPECT_NE(edited.at("CTITAN_BUILD_ID"), clean.at("CTITAN_BUILD_ID"));
  repo.write("a.txt", "three\n");  // a different edit: a different build
  EXPECT_NE(repo.identity().at("CTITAN_GIT_DIFF_HASH"), edited.at("CTITAN_GIT_DIFF_HASH"));
  repo.write("a.txt", "one\n");  // reverted: the clean build again
  EXPECT_EQ(repo.identity(), clean);

  repo.write("new.cpp", "int x;\n");  // an untracked source
  const auto untracked = repo.identity();
  EXPECT_NE(untracked.at("CTITAN_GIT_DIFF_HASH"), "");
  repo.write("new.cpp", "int y;\n");  // its content counts, not only its name
  EXPECT_NE(repo.identity().at("CTITAN_GIT_DIFF_HASH"), untracked.at("CTITAN_GIT_DIFF_HASH"));
  fs::remove(repo.path("new.cpp"));

  ASSERT_EQ(repo.commit("second"), 0);  // an empty commit: another build, clean
  const auto next = repo.identity();
  EXPECT_EQ(next.at("CTITAN_GIT_SHA_FULL"), repo.head());
  EXPECT_NE(next.at("CTITAN_GIT_SHA_FULL"), clean.at("CTITAN_GIT_SHA_FULL"));
  EXPECT_EQ(next.at("CTITAN_GIT_DIFF_HASH"), "");
  EXPECT_NE(next.at("CTITAN_BUILD_ID"), clean.at("CTITAN_BUILD_ID"));
}

TEST(BuildIdentity, VersionJsonIsTheIdentityThisBinaryWasBuiltWith) {
  auto r = run_ctitan({"version", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const BuildIdentity b = build_identity_from_json(nlohmann::json::parse(r.out));
  EXPECT_TRUE(std::regex_match(b.id, std::regex("[0-9a-f]{16}"))) << b.id;
  EXPECT_TRUE(b.git_sha == "unknown" || std::regex_match(b.git_sha, std::regex("[0-9a-f]{40}"))) << b.git_sha;
  EXPECT_EQ(b.libtorch_version, TORCH_VERSION);
  auto human = run_ctitan({"version"});
  EXPECT_NE(human.out.find("(build " + b.id + ")"), std::string::npos) << human.out;
  EXPECT_EQ(run_ctitan({"version", "--yaml"}).exit_code, 2);
}

TEST(BuildIdentity, MalformedIdentityJsonIsAnInputError) {
  EXPECT_THROW(build_identity_from_json(nlohmann::json::parse(R"({"git_sha": "abc"})")), InputError);
  EXPECT_THROW(build_identity_from_json(nlohmann::json::parse("[1]")), InputError);
}

}  // namespace
}  // namespace ctitan
