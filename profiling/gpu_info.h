// The GPUs LibTorch sees on this node and the CUDA stack under them: what
// env.json records beside every run (and the `env` table after it), and what
// the sweep planner counts (a world size on GPUs is a GPU count).
//
// Compiled whenever LibTorch has CUDA; on a machine without a GPU (or a
// LibTorch without CUDA) the inventory is empty and nothing initialises CUDA.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ctitan {

struct GpuDevice {
  std::string name;          // "NVIDIA H200"
  int64_t memory_bytes = 0;  // total device memory
  int major = 0, minor = 0;  // compute capability (sm_90: 9, 0)
  int multiprocessors = 0;
};

struct GpuInventory {
  std::vector<GpuDevice> devices;
  std::string driver_version;   // the CUDA version the driver supports, "12.8"
  std::string runtime_version;  // the CUDA runtime LibTorch runs on, "13.0"
  std::string cudnn_version;    // "9.10.2" ("" without cuDNN)
};

GpuInventory gpu_inventory();

// "12.8" from CUDA's encoding 12080 (1000·major + 10·minor).
std::string cuda_version_string(int encoded);

// env.json's GPU keys: gpu_count, and where there are GPUs gpu_name,
// gpu_memory_bytes, gpu_compute_capability (of GPU 0; a node mixing models
// lists them all in gpu_names), cuda_driver_version, cuda_runtime_version,
// cudnn_version.
void add_gpu_env(nlohmann::json& env, const GpuInventory& gpus);

}  // namespace ctitan
