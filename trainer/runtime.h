// The runtime: everything about where this process trains, built once from
// the config and the environment before any model exists — rank and world
// (torchrun's variables, or NGPU under comm.mode = "fake_backend"), the
// device, the device mesh with TorchTitan's dimensions and flattened groups,
// the flight recorder, and the device monitor (memory, peak FLOPs, sync).
//
// training.device (a ctitan key):
//   auto  CUDA when LibTorch sees a GPU (rank -> cuda:LOCAL_RANK, or cuda:0
//         when each rank is given one GPU, as srun --gpus-per-task=1 does), else CPU
//   cpu | cuda | meta
// meta is the dry run: nothing is allocated and nothing is computed, only
// shapes. comm.mode = "fake_backend" with NGPU=N makes this process rank 0
// of N on the meta device, against a mesh whose collectives move no data.
//
// Every bad value is an InputError of one line (exit 2): an unknown device,
// cuda without a GPU, more ranks on a node than it has GPUs, fake_backend
// without NGPU, meta under a real multi-process launch.
#pragma once

#include <c10/core/Device.h>

#include <memory>

#include "profiling/device_monitor.h"
#include "trainer/config/job_config.h"
#include "trainer/distributed/flight_recorder.h"
#include "trainer/distributed/mesh.h"

namespace ctitan {

struct Runtime {
  DistEnv env;                              // rank/world of this process
  MeshShape shape;                          // resolved [parallelism] degrees
  std::shared_ptr<DeviceMesh> mesh;         // DeviceMesh::single() for one process
  std::shared_ptr<FlightRecorder> recorder; // real multi-rank runs only
  c10::Device device = c10::Device(c10::kCPU);
  bool fake = false;                        // comm.mode = "fake_backend"
  DeviceMonitor monitor;

  bool rank0() const { return env.rank == 0; }
  bool dry_run() const { return device.is_meta(); }
};

// Reads the config and the environment, checks them, and (for a real
// multi-rank run) joins the other ranks through the TCPStore rendezvous.
Runtime init_runtime(const JobConfig& cfg);

// training.device for a process with this local rank / local world size.
// `share_gpus` (comm.cuda_backend = "gloo"): ranks may share a GPU.
// Throws InputError (see above).
c10::Device resolve_device(const std::string& name, int local_rank, int local_world_size, bool share_gpus = false);

// The CUDA device index of a rank that sees `visible_gpus` GPUs: LOCAL_RANK
// when the node's ranks have a GPU each; 0 when this process sees exactly
// one GPU and CUDA_VISIBLE_DEVICES chose it (srun --gpus-per-task=1, a
// per-rank mask); with `share_gpus`, LOCAL_RANK mod the GPUs (ranks share
// them round-robin); otherwise more ranks than GPUs, an InputError that
// names comm.cuda_backend = "gloo" as the way to share.
int cuda_device_index(int local_rank, int local_world_size, int visible_gpus, bool cuda_visible_devices_set,
                      bool share_gpus = false);

}  // namespace ctitan
