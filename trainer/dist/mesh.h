// Process launch contract and the device mesh.
//
// DistEnv reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); without RANK the process is a
// single-process run (world size 1, no store, no process groups).
//
// The mesh follows TorchTitan's dimension order, outermost first:
//   pp, dp_replicate, dp_shard, cp, tp
// so rank = ((((pp * R + dr) * S + ds) * C + cp) * T + tp). Each dimension
// has a sub-group of the ranks that share every other coordinate, and
// TorchTitan's flattened groups: "dp" = "batch" = dp_replicate x dp_shard
// (the ranks that see different data; context-parallel ranks share a batch
// and split its sequence), "fsdp" = dp_shard x cp (parameters shard over
// it), "loss" = dp_replicate x dp_shard x cp (the loss and the gradient
// reduction span it).
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "trainer/config/job_config.h"
#include "trainer/dist/comm.h"

namespace ctitan {

struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  bool launched = false;  // RANK/WORLD_SIZE present
  // Throws InputError for malformed or inconsistent variables (one line,
  // naming the variable).
  static DistEnv from_environment();
};

struct MeshShape {
  int64_t pp = 1, dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1;
  int64_t world() const { return pp * dp_replicate * dp_shard * cp * tp; }
  std::string describe() const;  // "dp_replicate 2 x dp_shard 2"
};

// Resolves the [parallelism] degrees for `world_size` ranks: one -1 takes
// the rest (data_parallel_shard_degree's default). InputError, naming the
// degrees, when they do not multiply to world_size.
MeshShape resolve_mesh_shape(const ParallelismSection& p, int64_t world_size);

class DeviceMesh {
 public:
  // World size 1: every group has size 1 and no backend is created.
  static std::shared_ptr<DeviceMesh> single();
  // Creates the world group and one sub-group per dimension of size > 1
  // through `store`; waits at most options.init_timeout for the other ranks.
  // Every rank of the world must call it with the same shape.
  static std::shared_ptr<DeviceMesh> create(const MeshShape& shape, int rank,
                                            c10::intrusive_ptr<c10d::Store> store, CommOptions options);

  const MeshShape& shape() const { return shape_; }
  int rank() const { return rank_; }
  // comm.mode = "fake_backend": rank `rank` of `shape` with no other process
  // behind it; collectives complete at once and move no data (dry runs on
  // the meta device).
  static std::shared_ptr<DeviceMesh> fake(const MeshShape& shape, int rank);

  // Group of a dimension: "world", "pp", "dp_replicate", "dp_shard", "cp",
  // "tp", or a flattened one: "dp", "fsdp", "loss", "batch". A dimension of
  // size 1 yields a group of size 1.
  Communicator& group(const std::string& dim);
  int coord(const std::string& dim) const;  // this rank's index in that group
  int size(const std::string& dim) const;

 private:
  // Makes group `dim` number `index` (of its kind), in which this process
  // has rank `group_rank` of `size`.
  using JoinGroup = std::function<std::shared_ptr<Communicator>(const std::string& dim, int64_t index,
                                                                 int64_t group_rank, int64_t size)>;
  static std::shared_ptr<DeviceMesh> build(const MeshShape& shape, int rank, const JoinGroup& join);
  MeshShape shape_;
  int rank_ = 0;
  std::map<std::string, std::shared_ptr<Communicator>> groups_;
};

// TCPStore rendezvous for a launched process (rank 0 hosts the store).
c10::intrusive_ptr<c10d::Store> rendezvous(const DistEnv& env, std::chrono::milliseconds init_timeout);

}  // namespace ctitan
