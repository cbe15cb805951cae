// The environment fingerprint written to every run directory as env.json:
// ctitan version and git sha, LibTorch version, compiler, build type, OS,
// CPU model, core and thread counts, GPUs when present, hostname, the
// launch contract, and the Slurm job when there is one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ctitan {

nlohmann::json environment_fingerprint();

// /proc/cpuinfo's first "model name" ("unknown" where there is none).
std::string cpu_model();

// Which launch contract started this process, from its environment:
// "torchrun" when RANK is set (torchrun, `ctitan launch`), "srun" when it is
// a task of an srun step (SLURM_PROCID and a job step's SLURM_STEP_ID; an
// sbatch job's batch script has no step), "" otherwise. trainer/distributed/mesh.h's
// DistEnv reads the variables of that contract; env.json records it as
// `launcher` ("none" for "").
std::string launch_contract();

}  // namespace ctitan
