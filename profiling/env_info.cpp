#include "profiling/env_info.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/Context.h>
#include <sys/utsname.h>
#include <torch/version.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "common/build_identity.h"
#include "profiling/gpu_info.h"
#include "ctitan/build_info.h"

namespace ctitan {
namespace {

// Slurm's special steps (batch script, extern, interactive, pending) have
// ids above this one; only a normal step's tasks are ranks.
constexpr unsigned long long kMaxNormalStepId = 0xfffffff0ULL;

bool is_normal_step_id(const std::string& id) {
  if (id.empty() || id.size() > 10 || id.find_first_not_of("0123456789") != std::string::npos) return false;
  return std::stoull(id) <= kMaxNormalStepId;
}

// The Slurm job this run belongs to, as env.json keys (strings, as Slurm
// set them; ingest stores them as they are in the env table).
void add_slurm_env(nlohmann::json& env) {
  const char* job = std::getenv("SLURM_JOB_ID");
  if (job == nullptr) return;
  env["slurm_job_id"] = job;
  const std::pair<const char*, const char*> keys[] = {{"slurm_job_nodelist", "SLURM_JOB_NODELIST"},
                                                     {"slurm_ntasks", "SLURM_NTASKS"},
                                                     {"slurm_cluster_name", "SLURM_CLUSTER_NAME"},
                                                     {"slurm_partition", "SLURM_JOB_PARTITION"}};
  for (const auto& [key, var] : keys)
    if (const char* v = std::getenv(var)) env[key] = v;
}

}  // namespace

std::string launch_contract() {
  if (std::getenv("RANK") != nullptr) return "torchrun";
  if (std::getenv("SLURM_PROCID") == nullptr) return "";
  const char* step = std::getenv("SLURM_STEP_ID");
  if (step == nullptr) step = std::getenv("SLURM_STEPID");
  return step != nullptr && is_normal_step_id(step) ? "srun" : "";
}

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
  // ATen's vector ISA here: without AVX512 ctitan widens bf16 GEMM operands to
  // fp32 (trainer/model/gemm.cpp), which the planner's memory model counts.
  env["aten_cpu_capability"] = at::get_cpu_capability();
  env["cpu_cores"] = std::thread::hardware_concurrency();
  env["num_threads"] = at::get_num_threads();
  env["cuda_available"] = at::hasCUDA();
  add_gpu_env(env, gpu_inventory());
  const std::string launcher = launch_contract();
  env["launcher"] = launcher.empty() ? "none" : launcher;
  add_slurm_env(env);
  return env;
}

}  // namespace ctitan
