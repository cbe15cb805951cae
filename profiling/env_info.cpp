#include "profiling/env_info.h"

#include <ATen/Parallel.h>
#include <ATen/Context.h>
#include <sys/utsname.h>
#include <torch/version.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "common/build_identity.h"
#include "profiling/gpu_info.h"
#include "ctitan/build_info.h"

namespace ctitan {
namespace {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      return pos == std::string::npos ? line : line.substr(pos + 2);
    }
  }
  return "unknown";
}

}  // namespace

nlohmann::json environment_fingerprint() {
  nlohmann::json env;
  env["ctitan_version"] = CTITAN_VERSION;
  // The trainer's build: a sweep ties the run to it (reuse needs the same build_id).
  const BuildIdentity& b = this_build();
  env["git_sha"] = b.short_sha();
  env["git_diff_hash"] = b.diff_hash;
  env["build_id"] = b.id;
  env["build_type"] = CTITAN_BUILD_TYPE;
  env["compiler"] = CTITAN_CXX_COMPILER;
  env["libtorch_version"] = TORCH_VERSION;
  struct utsname u {};
  if (uname(&u) == 0) {
    env["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  env["hostname"] = host;
  env["cpu_model"] = cpu_model();
  env["cpu_cores"] = std::thread::hardware_concurrency();
  env["num_threads"] = at::get_num_threads();
  env["cuda_available"] = at::hasCUDA();
  add_gpu_env(env, gpu_inventory());
  return env;
}

}  // namespace ctitan
