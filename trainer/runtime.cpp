#include "trainer/runtime.h"

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/cuda.h>
#ifdef CTITAN_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "common/errors.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

// comm.mode = "fake_backend": NGPU, as TorchTitan's dry run reads it.
int fake_world_size() {
  const char* ngpu = std::getenv("NGPU");
  if (ngpu == nullptr || *ngpu == '\0')
    throw InputError("comm.mode = \"fake_backend\" needs the number of ranks to plan for in NGPU, e.g. "
                     "NGPU=64 ctitan train ... --comm.mode fake_backend");
  char* end = nullptr;
  const long n = std::strtol(ngpu, &end, 10);
  if (*end != '\0' || n < 1 || n > (1 << 20))
    throw InputError("NGPU='" + std::string(ngpu) + "' is not a rank count between 1 and 1048576");
  return static_cast<int>(n);
}

std::shared_ptr<FlightRecorder> make_recorder(const JobConfig& cfg, int rank) {
  const auto file = fs::path(cfg.job.dump_folder) / cfg.comm.save_traces_folder /
                    (cfg.comm.save_traces_file_prefix + std::to_string(rank) + ".json");
  return std::make_shared<FlightRecorder>(rank, static_cast<size_t>(cfg.comm.trace_buf_size), file.string());
}

}  // namespace

c10::Device resolve_device(const std::string& name, int local_rank, int local_world_size, bool share_gpus) {
  if (name == "cpu") return c10::Device(c10::kCPU);
  if (name == "meta") return c10::Device(c10::kMeta);
  if (name != "auto" && name != "cuda")
    throw InputError("training.device '" + name + "' is unknown; use auto, cpu, cuda or meta");
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (gpus == 0) {
    if (name == "auto") return c10::Device(c10::kCPU);
    throw InputError("training.device = cuda but LibTorch sees no GPU on this machine; use cpu (or auto)");
  }
  const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
  const int index = cuda_device_index(local_rank, local_world_size, gpus, mask != nullptr && *mask != '\0', share_gpus);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

int cuda_device_index(int local_rank, int local_world_size, int visible_gpus, bool cuda_visible_devices_set,
                      bool share_gpus) {
  if (local_world_size <= visible_gpus) return local_rank;
  if (share_gpus) return local_rank % visible_gpus;
  // srun --gpus-per-task=1 (or a launcher's per-rank CUDA_VISIBLE_DEVICES):
  // each rank sees only its own GPU, as device 0. Without a mask, one GPU
  // and several ranks means they would all share it.
  if (visible_gpus == 1 && cuda_visible_devices_set) return 0;
  throw InputError("this node runs " + std::to_string(local_world_size) + " ranks but has " +
                   std::to_string(visible_gpus) + " GPU" + (visible_gpus == 1 ? "" : "s") +
                   "; launch at most one rank per GPU (--nproc " + std::to_string(visible_gpus) +
                   "), or let ranks share GPUs over Gloo with --comm.cuda_backend gloo");
}

Runtime init_runtime(const JobConfig& cfg) {
  Runtime rt;
  const std::string& mode = cfg.comm.mode;
  if (mode != "default" && mode != "fake_backend")
    throw InputError("comm.mode '" + mode + "' is not supported; use default, or fake_backend for a dry run");
  rt.env = DistEnv::from_environment();
  rt.fake = mode == "fake_backend";
  if (rt.fake) {
    if (rt.env.launched && rt.env.world_size > 1)
      throw InputError("comm.mode = \"fake_backend\" plans NGPU ranks from one process; run it without a launcher");
    rt.env.world_size = fake_world_size();
    rt.env.local_world_size = 1;
  }
  rt.shape = resolve_mesh_shape(cfg.parallelism, rt.env.world_size);
  const bool gloo_on_cuda = cfg.comm.cuda_backend == "gloo";
  rt.device = rt.fake ? c10::Device(c10::kMeta)
                      : resolve_device(cfg.training.device, rt.env.local_rank, rt.env.local_world_size, gloo_on_cuda);
  if (gloo_on_cuda && !rt.device.is_cuda() && rt.env.rank == 0)
    std::cerr << "ctitan: warning: comm.cuda_backend = \"gloo\" has no effect on " << rt.device.str()
              << ": collectives of host tensors are Gloo's already" << std::endl;
  if (rt.device.is_meta() && !rt.fake && rt.env.world_size > 1)
    throw InputError("training.device = meta is a dry run of one process; for " +
                     std::to_string(rt.env.world_size) +
                     " ranks run one process with comm.mode = \"fake_backend\" and NGPU=" +
                     std::to_string(rt.env.world_size));
#ifdef CTITAN_WITH_CUDA
  // This rank's GPU becomes the current device before anything touches CUDA:
  // the caching allocator, NCCL's communicators, CUDA events and CUPTI all
  // follow it (otherwise every rank would create a context on GPU 0).
  if (rt.device.is_cuda()) c10::cuda::set_device(rt.device.index());
#endif
  rt.monitor = DeviceMonitor(rt.device);
  if (rt.fake) {
    rt.mesh = DeviceMesh::fake(rt.shape, 0);
  } else if (rt.env.world_size > 1) {
    CommOptions copts;
    copts.timeout = std::chrono::seconds(cfg.comm.train_timeout_seconds);
    copts.init_timeout = std::chrono::seconds(cfg.comm.init_timeout_seconds);
    copts.recorder = rt.recorder = make_recorder(cfg, rt.env.rank);
    copts.stage_through_host = gloo_on_cuda && rt.device.is_cuda();
    auto store = rendezvous(rt.env, std::chrono::seconds(cfg.comm.init_timeout_seconds));
    rt.mesh = DeviceMesh::create(rt.shape, rt.env.rank, store, copts);
  } else {
    rt.mesh = DeviceMesh::single();
  }
  return rt;
}

}  // namespace ctitan
