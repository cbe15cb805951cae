// The environment fingerprint written to every run directory as env.json:
// ctitan version and git sha, LibTorch version, compiler, build type, OS,
// CPU model, core and thread counts, GPUs when present, hostname.
#pragma once

#include <nlohmann/json.hpp>

namespace ctitan {

nlohmann::json environment_fingerprint();

}  // namespace ctitan
