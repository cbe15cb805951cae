#include "profiling/gpu_info.h"

#include <torch/cuda.h>

#ifdef CTITAN_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <cuda_runtime_api.h>
#endif

namespace ctitan {

std::string cuda_version_string(int encoded) {
  if (encoded <= 0) return "";
  return std::to_string(encoded / 1000) + "." + std::to_string((encoded % 1000) / 10);
}

GpuInventory gpu_inventory() {
  GpuInventory inv;
#ifdef CTITAN_WITH_CUDA
  const int n = static_cast<int>(torch::cuda::device_count());
  if (n == 0) return inv;
  for (int i = 0; i < n; ++i) {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(i));
    inv.devices.push_back({p->name, static_cast<int64_t>(p->totalGlobalMem), p->major, p->minor,
                           p->multiProcessorCount});
  }
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess) inv.driver_version = cuda_version_string(driver);
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) inv.runtime_version = cuda_version_string(runtime);
  const long cudnn = at::detail::getCUDAHooks().versionCuDNN();  // 91002: 9.10.2
  if (cudnn > 0)
    inv.cudnn_version = std::to_string(cudnn / 10000) + "." + std::to_string((cudnn / 100) % 100) + "." +
                        std::to_string(cudnn % 100);
#endif
  return inv;
}

void add_gpu_env(nlohmann::json& env, const GpuInventory& gpus) {
  env["gpu_count"] = gpus.devices.size();
  if (gpus.devices.empty()) return;
  const GpuDevice& g = gpus.devices.front();
  env["gpu_name"] = g.name;
  env["gpu_memory_bytes"] = g.memory_bytes;
  env["gpu_compute_capability"] = std::to_string(g.major) + "." + std::to_string(g.minor);
  nlohmann::json names = nlohmann::json::array();
  for (const GpuDevice& d : gpus.devices) names.push_back(d.name);
  env["gpu_names"] = names;
  env["cuda_driver_version"] = gpus.driver_version;
  env["cuda_runtime_version"] = gpus.runtime_version;
  env["cudnn_version"] = gpus.cudnn_version;
}

}  // namespace ctitan
