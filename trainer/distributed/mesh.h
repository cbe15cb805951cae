// Process launch contract and the device mesh.
//
// DistEnv reads the launch contract: torchrun's environment (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; `ctitan
// launch` sets the same) or, when RANK is not set and the process is a task
// of an srun step, Slurm's (docs/slurm.md):
//   RANK             SLURM_PROCID
//   WORLD_SIZE       SLURM_NTASKS, else SLURM_NPROCS
//   LOCAL_RANK       SLURM_LOCALID
//   LOCAL_WORLD_SIZE this node's (SLURM_NODEID) entry of the step's
//                    SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE
//                    (compressed: "2(x3),1"), else SLURM_NTASKS_PER_NODE
//   MASTER_ADDR      the first host of SLURM_STEP_NODELIST, else
//                    SLURM_JOB_NODELIST (`scontrol show hostnames` expands a
//                    list with brackets)
//   MASTER_PORT      10000 + SLURM_JOB_ID % 50000: every task of the job
//                    agrees without talking, and jobs sharing a node rarely
//                    collide (two steps of one job running at once do:
//                    give them MASTER_PORT)
// A torchrun variable that is set wins over its Slurm counterpart, so an
// sbatch script that exports them keeps working. A task of an srun step has
// SLURM_PROCID and a job step's SLURM_STEP_ID; the batch script of an sbatch
// job has SLURM_PROCID=0 and SLURM_NTASKS of the whole job but no step, so a
// `ctitan train` started there without srun stays a single process. Under
// srun the addresses are read only when WORLD_SIZE > 1: `srun -n 1` is a
// single-process run that needs no rendezvous (and no scontrol).
// Without either contract the process is a single-process run (world size
// 1, no store, no process groups).
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
//
// Expert parallelism (TorchTitan v0.2.2's ParallelDims with ep > 1) borrows
// its ranks: dp_shard splits into (dp_shard_mod_ep, dp_shard_in_ep), outer
// first, and "ep" is dp_shard_in_ep x cp (etp = tp: experts keep the tp
// ranks' tensor parallelism) or dp_shard_in_ep x cp x tp (etp = 1: the tp
// ranks hold different experts); "dp_shard_mod_ep" is the rest of dp_shard,
// over which the routed experts are FSDP-sharded. Without EP, "ep" has
// size 1 and "dp_shard_mod_ep" is "fsdp".
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "trainer/config/job_config.h"
#include "trainer/distributed/comm.h"

namespace ctitan {

struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  bool launched = false;  // RANK/WORLD_SIZE present, or an srun task
  std::string launcher;   // whose variables: "torchrun", "srun", "" (a single process)
  // Throws InputError for malformed or inconsistent variables (one line,
  // naming the variable) and when scontrol cannot expand the node list (one
  // line naming the command and its error).
  static DistEnv from_environment();
};

// The first host of a Slurm node list ("node[01-04,07],gpu9" -> "node01"):
// without brackets the text before the first comma; otherwise the first line
// of `scontrol show hostnames NODELIST` (run by argument vector, 30 s limit).
// `variable` names where the list came from, for messages. Throws InputError.
std::string slurm_first_host(const std::string& variable, const std::string& nodelist);

// MASTER_PORT of an srun task that was not given one: 10000 + job_id % 50000.
int slurm_master_port(uint64_t job_id);

struct MeshShape {
  int64_t pp = 1, dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1;
  int64_t ep = 1, etp = 1;  // expert parallelism: borrowed ranks, not a factor of world()
  int64_t world() const { return pp * dp_replicate * dp_shard * cp * tp; }
  std::string describe() const;  // "dp_replicate 2 x dp_shard 2"
};

// Resolves the [parallelism] degrees for `world_size` ranks: one -1 takes
// the rest (data_parallel_shard_degree's default). InputError, naming the
// degrees, when they do not multiply to world_size, or when ep/etp break
// TorchTitan's rules (etp 1 or tp; ep a multiple of cp, or of cp x tp with
// etp 1, dividing dp_shard x cp, or dp_shard x cp x tp with etp 1).
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
  // "tp", or a flattened one: "dp", "fsdp", "loss", "batch", or expert
  // parallelism's "ep" and "dp_shard_mod_ep". A dimension of size 1 yields
  // a group of size 1.
  Communicator& group(const std::string& dim);
  int coord(const std::string& dim) const;  // this rank's index in that group
  // The world ranks of this rank's group along `dim`, ascending.
  std::vector<int64_t> members(const std::string& dim) const;
  int size(const std::string& dim) const;

  // The runtime's teardown (torch's destroy_process_group): every group is
  // shut down once (Communicator::shutdown), the sub-groups before the world
  // that they were made from. `abort` on an error path. Idempotent; the
  // destructor runs it, aborting while an exception unwinds.
  void shutdown(bool abort = false);
  ~DeviceMesh();

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
