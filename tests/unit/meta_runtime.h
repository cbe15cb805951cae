// A Runtime for unit tests that build a rank's model without processes:
// rank `rank` of a fake mesh of `shape` (comm.mode = "fake_backend"), on the
// meta device (shapes only, nothing allocated).
#pragma once

#include "trainer/runtime.h"

namespace ctitan {

inline Runtime meta_runtime(const MeshShape& shape, int rank) {
  Runtime rt;
  rt.env.world_size = static_cast<int>(shape.world());
  rt.env.rank = rank;
  rt.shape = shape;
  rt.fake = true;
  rt.device = c10::Device(c10::kMeta);
  rt.monitor = DeviceMonitor(rt.device);
  rt.mesh = DeviceMesh::fake(shape, rank);
  return rt;
}

}  // namespace ctitan
