// The launch contract (torchrun's variables), the mesh shape from
// [parallelism], the device mesh's groups, and the TCPStore rendezvous.
#include "trainer/dist/mesh.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include "common/errors.h"
#include "trainer/dist/comm_internal.h"

namespace ctitan {
namespace {

// The mesh's dimensions, outermost first (TorchTitan's order).
constexpr std::array<const char*, 5> kDims = {"pp", "dp_replicate", "dp_shard", "cp", "tp"};

std::array<int64_t, 5> sizes_of(const MeshShape& s) { return {s.pp, s.dp_replicate, s.dp_shard, s.cp, s.tp}; }

int dim_index(const std::string& dim) {
  for (size_t i = 0; i < kDims.size(); ++i) {
    if (dim == kDims[i]) return static_cast<int>(i);
  }
  return -1;
}

std::array<int64_t, 5> coords_of(const MeshShape& s, int64_t rank) {
  const auto sizes = sizes_of(s);
  std::array<int64_t, 5> c{};
  for (int i = 4; i >= 0; --i) {
    c[i] = rank % sizes[i];
    rank /= sizes[i];
  }
  return c;
}

// Index of the group along `dims` that this rank belongs to: the other
// coordinates in mesh order, row-major. Groups of one dimension are disjoint
// and their indices cover 0..(world / group size) - 1.
int64_t group_index(const MeshShape& s, const std::array<int64_t, 5>& coords, std::initializer_list<int> dims) {
  const auto sizes = sizes_of(s);
  int64_t index = 0;
  for (int i = 0; i < 5; ++i) {
    if (std::find(dims.begin(), dims.end(), i) != dims.end()) continue;
    index = index * sizes[i] + coords[i];
  }
  return index;
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

int parse_int(const char* name, const std::string& value, int min, int max) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size()) {
    throw InputError(std::string(name) + "='" + value +
                     "' is not an integer; the launcher (torchrun, srun) must set it");
  }
  if (v < min || v > max) {
    throw InputError(std::string(name) + "=" + value + " is out of range [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  return static_cast<int>(v);
}

}  // namespace

DistEnv DistEnv::from_environment() {
  DistEnv e;
  const auto rank = env("RANK"), world = env("WORLD_SIZE");
  if (!rank) {
    if (world && *world != "1") {
      throw InputError("WORLD_SIZE=" + *world + " is set but RANK is not; launch each rank with RANK (torchrun does)");
    }
    return e;
  }
  if (!world) throw InputError("RANK=" + *rank + " is set but WORLD_SIZE is not; set both (torchrun does)");
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  e.launched = true;
  e.world_size = parse_int("WORLD_SIZE", *world, 1, kMaxInt);
  e.rank = parse_int("RANK", *rank, 0, kMaxInt);
  if (e.rank >= e.world_size) {
    throw InputError("RANK=" + *rank + " is not below WORLD_SIZE=" + *world + "; ranks are 0.." +
                     std::to_string(e.world_size - 1));
  }
  // Single-node defaults when a launcher sets only the global variables.
  const auto local_world = env("LOCAL_WORLD_SIZE"), local_rank = env("LOCAL_RANK");
  e.local_world_size = local_world ? parse_int("LOCAL_WORLD_SIZE", *local_world, 1, e.world_size) : e.world_size;
  e.local_rank = local_rank ? parse_int("LOCAL_RANK", *local_rank, 0, kMaxInt) : e.rank % e.local_world_size;
  if (e.local_rank >= e.local_world_size) {
    throw InputError("LOCAL_RANK=" + std::to_string(e.local_rank) + " is not below LOCAL_WORLD_SIZE=" +
                     std::to_string(e.local_world_size));
  }
  if (const auto addr = env("MASTER_ADDR")) {
    if (addr->empty()) throw InputError("MASTER_ADDR is empty; set it to rank 0's host name or address");
    e.master_addr = *addr;
  }
  if (const auto port = env("MASTER_PORT")) {
    e.master_port = parse_int("MASTER_PORT", *port, 1, 65535);
  } else if (e.world_size > 1) {
    throw InputError("MASTER_PORT is not set for a run of WORLD_SIZE=" + *world +
                     "; set it to a free TCP port on MASTER_ADDR (torchrun does)");
  }
  return e;
}

std::string MeshShape::describe() const {
  const auto sizes = sizes_of(*this);
  std::string out;
  for (size_t i = 0; i < kDims.size(); ++i) {
    if (sizes[i] == 1) continue;
    out += (out.empty() ? "" : " x ") + std::string(kDims[i]) + " " + std::to_string(sizes[i]);
  }
  return out.empty() ? "1 rank" : out;
}

MeshShape resolve_mesh_shape(const ParallelismSection& p, int64_t world_size) {
  struct Degree {
    const char* key;   // [parallelism] key
    const char* name;  // mesh dimension
    int64_t value;
  };
  // The order of the error message: TorchTitan's ParallelDims order.
  std::array<Degree, 5> d = {{{"data_parallel_replicate_degree", "dp_replicate", p.data_parallel_replicate_degree},
                              {"data_parallel_shard_degree", "dp_shard", p.data_parallel_shard_degree},
                              {"tensor_parallel_degree", "tp", p.tensor_parallel_degree},
                              {"pipeline_parallel_degree", "pp", p.pipeline_parallel_degree},
                              {"context_parallel_degree", "cp", p.context_parallel_degree}}};
  int unset = 0;
  for (const Degree& x : d) {
    if (x.value == -1) {
      ++unset;
    } else if (x.value < 1) {
      throw InputError("parallelism." + std::string(x.key) + " = " + std::to_string(x.value) +
                       " is not a degree; use a positive integer (or -1 for data_parallel_shard_degree)");
    }
  }
  if (unset > 1) {
    for (const Degree& x : d) {
      if (x.value == -1 && std::string(x.name) != "dp_shard") {
        throw InputError("parallelism." + std::string(x.key) +
                         " = -1: only data_parallel_shard_degree may be -1 (it takes the rest of the world); set " +
                         x.key + " to a positive degree");
      }
    }
  }
  int64_t known = 1;
  for (const Degree& x : d) known *= x.value == -1 ? 1 : x.value;
  const auto product = [&] {
    std::string s;
    for (const Degree& x : d) {
      if (x.value != -1) s += (s.empty() ? "" : " x ") + std::string(x.name) + " " + std::to_string(x.value);
    }
    return s + " = " + std::to_string(known);
  };
  if (unset == 1) {
    Degree& rest = *std::find_if(d.begin(), d.end(), [](const Degree& x) { return x.value == -1; });
    if (world_size % known != 0) {
      throw InputError("parallelism degrees " + product() + " do not divide the world size " +
                       std::to_string(world_size) + ", so " + rest.key + " = -1 cannot take the rest");
    }
    rest.value = world_size / known;
  } else if (known != world_size) {
    throw InputError("parallelism degrees " + product() + " do not match the world size " +
                     std::to_string(world_size) + "; set data_parallel_shard_degree = -1 to take the rest");
  }
  MeshShape s;
  s.dp_replicate = d[0].value;
  s.dp_shard = d[1].value;
  s.tp = d[2].value;
  s.pp = d[3].value;
  s.cp = d[4].value;
  return s;
}

namespace {

// TorchTitan's flattened groups over mesh dimensions (indices into kDims):
// "dp" = "batch" = dp_replicate x dp_shard (the ranks that see different
// data: context-parallel ranks share a batch and split its sequence),
// "fsdp" = dp_shard x cp (parameters shard over it), "loss" = dp_replicate
// x dp_shard x cp (the loss and gradients average over it).
struct Flattened {
  const char* name;
  std::initializer_list<int> dims;
};
constexpr std::array<Flattened, 4> kFlattened = {{{"dp", {1, 2}}, {"fsdp", {2, 3}}, {"loss", {1, 2, 3}},
                                                  {"batch", {1, 2}}}};

const Flattened* flattened(const std::string& dim) {
  for (const auto& f : kFlattened)
    if (dim == f.name) return &f;
  return nullptr;
}

// This rank's index in a flattened group and the group's size: the
// coordinates of `dims`, row-major in mesh order.
std::pair<int64_t, int64_t> flat_coord(const MeshShape& s, const std::array<int64_t, 5>& coords,
                                       std::initializer_list<int> dims) {
  const auto sizes = sizes_of(s);
  int64_t index = 0, size = 1;
  for (int i : dims) {
    index = index * sizes[i] + coords[i];
    size *= sizes[i];
  }
  return {index, size};
}

}  // namespace

std::shared_ptr<DeviceMesh> DeviceMesh::single() {
  return build(MeshShape{}, 0, [](const std::string& dim, int64_t, int64_t, int64_t) {
    return Communicator::create(nullptr, 0, 1, dim, 0, {});
  });
}

std::shared_ptr<DeviceMesh> DeviceMesh::create(const MeshShape& shape, int rank,
                                               c10::intrusive_ptr<c10d::Store> store, CommOptions options) {
  // The store prefix "<dim>/<index>" keeps groups apart.
  return build(shape, rank, [&](const std::string& dim, int64_t index, int64_t group_rank, int64_t size) {
    c10::intrusive_ptr<c10d::Store> prefixed;
    if (size > 1) prefixed = c10::make_intrusive<c10d::PrefixStore>(dim + "/" + std::to_string(index), store);
    return Communicator::create(prefixed, static_cast<int>(group_rank), static_cast<int>(size), dim, rank,
                                options);
  });
}

std::shared_ptr<DeviceMesh> DeviceMesh::fake(const MeshShape& shape, int rank) {
  return build(shape, rank, [rank](const std::string& dim, int64_t, int64_t group_rank, int64_t size) {
    return dist_internal::make_fake_communicator(dim, static_cast<int>(group_rank), static_cast<int>(size), rank);
  });
}

std::shared_ptr<DeviceMesh> DeviceMesh::build(const MeshShape& shape, int rank, const JoinGroup& join) {
  if (rank < 0 || rank >= shape.world()) {
    throw CommError("rank " + std::to_string(rank) + " is outside the mesh " + shape.describe() + " of " +
                    std::to_string(shape.world()) + " ranks");
  }
  auto mesh = std::make_shared<DeviceMesh>();
  mesh->shape_ = shape;
  mesh->rank_ = rank;
  const auto coords = coords_of(shape, rank);
  const auto sizes = sizes_of(shape);
  // Every rank creates the groups in this same order, so each group's
  // members are all joining it at the same time and no two groups wait on
  // each other.
  mesh->groups_["world"] = join("world", 0, rank, shape.world());
  for (int i = 0; i < 5; ++i) mesh->groups_[kDims[i]] = join(kDims[i], group_index(shape, coords, {i}), coords[i], sizes[i]);
  // A flattened group has the members of its dimensions of size > 1: with
  // one such dimension it is that dimension's group, and with the same ones
  // as an earlier flattened group it is that group — no process group twice.
  auto wide_dims = [&](const Flattened& f) {
    std::vector<int> w;
    for (int i : f.dims)
      if (sizes[i] > 1) w.push_back(i);
    return w;
  };
  for (const auto& f : kFlattened) {
    const std::vector<int> wide = wide_dims(f);
    std::string same = wide.size() == 1 ? kDims[wide[0]] : wide.empty() ? kDims[*f.dims.begin()] : "";
    for (const Flattened* g = kFlattened.data(); same.empty() && g != &f; ++g)
      if (wide_dims(*g) == wide) same = g->name;
    if (!same.empty()) {
      mesh->groups_[f.name] = mesh->groups_[same];
      continue;
    }
    const auto [index, size] = flat_coord(shape, coords, f.dims);
    mesh->groups_[f.name] = join(f.name, group_index(shape, coords, f.dims), index, size);
  }
  return mesh;
}

Communicator& DeviceMesh::group(const std::string& dim) {
  auto it = groups_.find(dim);
  if (it == groups_.end()) {
    throw std::invalid_argument("device mesh has no dimension '" + dim +
                                "'; use world, pp, dp_replicate, dp_shard, cp, tp, dp, fsdp, loss or batch");
  }
  return *it->second;
}

int DeviceMesh::coord(const std::string& dim) const {
  if (dim == "world") return rank_;
  const auto c = coords_of(shape_, rank_);
  if (const Flattened* f = flattened(dim)) return static_cast<int>(flat_coord(shape_, c, f->dims).first);
  const int i = dim_index(dim);
  if (i < 0) throw std::invalid_argument("device mesh has no dimension '" + dim + "'");
  return static_cast<int>(c[i]);
}

int DeviceMesh::size(const std::string& dim) const {
  if (dim == "world") return static_cast<int>(shape_.world());
  if (const Flattened* f = flattened(dim)) return static_cast<int>(flat_coord(shape_, {}, f->dims).second);
  const int i = dim_index(dim);
  if (i < 0) throw std::invalid_argument("device mesh has no dimension '" + dim + "'");
  return static_cast<int>(sizes_of(shape_)[i]);
}

c10::intrusive_ptr<c10d::Store> rendezvous(const DistEnv& env, std::chrono::milliseconds init_timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(env.master_port);
  opts.isServer = env.rank == 0;
  opts.numWorkers = static_cast<size_t>(env.world_size);
  opts.waitWorkers = true;
  opts.timeout = init_timeout;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    return c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  } catch (const std::exception& e) {
    const std::string why = dist_internal::backend_message(e);
    if (dist_internal::is_timeout_message(why)) {
      throw CommError("rank " + std::to_string(env.rank) + ": rendezvous at " + where + " timed out after " +
                      dist_internal::format_seconds(init_timeout) + " waiting for " +
                      std::to_string(env.world_size) + " ranks");
    }
    throw CommError("rank " + std::to_string(env.rank) + ": rendezvous at " + where + " failed: " + why);
  }
}

}  // namespace ctitan
