#include "common/build_identity.h"

#include "common/errors.h"
#include "ctitan/build_identity.h"  // generated at build time
#include "ctitan/build_info.h"      // generated at configure time

namespace ctitan {

std::string BuildIdentity::short_sha() const { return git_sha.substr(0, 12); }

std::string BuildIdentity::describe() const {
  return short_sha() + (diff_hash.empty() ? "" : "+dirty." + diff_hash) + ", LibTorch " + libtorch_version + ", " +
         build_type + " (build " + id + ")";
}

const BuildIdentity& this_build() {
  static const BuildIdentity b{CTITAN_GIT_SHA_FULL, CTITAN_GIT_DIFF_HASH, CTITAN_TORCH_VERSION, CTITAN_BUILD_TYPE,
                               CTITAN_BUILD_ID};
  return b;
}

nlohmann::json to_json(const BuildIdentity& b) {
  return {{"git_sha", b.git_sha},
          {"git_diff_hash", b.diff_hash},
          {"libtorch_version", b.libtorch_version},
          {"build_type", b.build_type},
          {"build_id", b.id}};
}

BuildIdentity build_identity_from_json(const nlohmann::json& j) {
  BuildIdentity b;
  auto get = [&](const char* key, std::string& out) {
    if (!j.is_object() || !j.contains(key) || !j.at(key).is_string())
      throw InputError(std::string("build identity: no string '") + key + "' in " + j.dump());
    out = j.at(key).get<std::string>();
  };
  get("git_sha", b.git_sha);
  get("git_diff_hash", b.diff_hash);
  get("libtorch_version", b.libtorch_version);
  get("build_type", b.build_type);
  get("build_id", b.id);
  return b;
}

}  // namespace ctitan
