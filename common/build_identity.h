// The identity of this binary: the commit it was built from, whether the
// work tree differed from that commit (and by what), the LibTorch version
// and the build type. Results belong to a build: a sweep reuses an ok run
// (resume, sharing across sweeps) only when the build ids agree, and every
// run's env.json records the identity of the trainer that made it.
//
// The commit and the diff hash are taken at every build by
// cmake/build_identity.cmake (not at configure time), so a rebuild after a
// commit or an edit carries the new identity.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ctitan {

struct BuildIdentity {
  std::string git_sha;           // full commit hash; "unknown" outside a git checkout
  std::string diff_hash;         // "" for a clean tree; else 12 hex naming the uncommitted change
  std::string libtorch_version;  // "2.15.0"
  std::string build_type;        // "Release"
  std::string id;                // 16 hex over all four: what reuse of results compares

  std::string short_sha() const;  // the first 12 hex digits (env.json's git_sha)
  // "395a3c1c3a58+dirty.39d4b98a3d28, LibTorch 2.15.0, Release (build 00acf3688d6c3933)"
  std::string describe() const;
};

const BuildIdentity& this_build();

// {"git_sha", "git_diff_hash", "libtorch_version", "build_type", "build_id"}:
// what `ctitan version --json` prints.
nlohmann::json to_json(const BuildIdentity& b);
// The inverse; InputError naming the missing key.
BuildIdentity build_identity_from_json(const nlohmann::json& j);

}  // namespace ctitan
