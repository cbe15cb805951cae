// The launch contract (torchrun's or srun's variables), the mesh shape from
// [parallelism], the device mesh's groups, and the TCPStore rendezvous.
#include "trainer/distributed/mesh.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <exception>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "common/subprocess.h"
#include "profiling/env_info.h"
#include "trainer/distributed/comm_internal.h"

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

// Expert parallelism's view of a rank: dp_shard split into
// (dp_shard_mod_ep, dp_shard_in_ep), so 6 coordinates
// (pp, dp_replicate, mod, in, cp, tp), and the members of its two groups.
struct ExpertView {
  std::array<int64_t, 6> sizes{}, coords{};
};

ExpertView expert_view(const MeshShape& s, const std::array<int64_t, 5>& c) {
  const int64_t in_ep = s.etp == s.tp ? s.ep / s.cp : s.ep / (s.cp * s.tp);
  return {{s.pp, s.dp_replicate, s.dp_shard / in_ep, in_ep, s.cp, s.tp},
          {c[0], c[1], c[2] / in_ep, c[2] % in_ep, c[3], c[4]}};
}

// The expert view's dimensions of "ep" and "dp_shard_mod_ep".
std::vector<int> expert_group_dims(const MeshShape& s, const std::string& name) {
  if (name == "dp_shard_mod_ep") return {2};
  if (s.etp == s.tp && s.tp > 1) return {3, 4};
  return {3, 4, 5};
}

// (group index, rank in group, size) of a group over `dims` of the view:
// the other coordinates row-major give the index, `dims` the rank.
std::array<int64_t, 3> view_coord(const ExpertView& v, const std::vector<int>& dims) {
  int64_t index = 0, rank = 0, size = 1;
  for (int i = 0; i < 6; ++i) {
    if (std::find(dims.begin(), dims.end(), i) != dims.end()) {
      rank = rank * v.sizes[i] + v.coords[i];
      size *= v.sizes[i];
    } else {
      index = index * v.sizes[i] + v.coords[i];
    }
  }
  return {index, rank, size};
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

// A launch variable as found: its name (for messages) and its text.
struct Found {
  std::string name, value;
};

// The first of `names` that is set: a torchrun variable listed before its
// Slurm counterparts wins over them.
std::optional<Found> first_set(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto v = env(n)) return Found{n, *v};
  return std::nullopt;
}

int64_t parse_integer(const std::string& name, const std::string& value, int64_t min, int64_t max) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size()) {
    throw InputError(name + "='" + value + "' is not an integer; the launcher (torchrun, srun) must set it");
  }
  if (v < min || v > max) {
    throw InputError(name + "=" + value + " is out of range [" + std::to_string(min) + ", " + std::to_string(max) +
                     "]");
  }
  return v;
}

int parse_int(const std::string& name, const std::string& value, int min, int max) {
  return static_cast<int>(parse_integer(name, value, min, max));
}

constexpr int kMaxInt = std::numeric_limits<int>::max();

// This node's entry of Slurm's compressed tasks-per-node list: "2(x3),1" is
// 2 tasks on each of nodes 0..2 and 1 on node 3.
int tasks_on_node(const Found& list, int node) {
  const auto bad = [&] {
    return InputError(list.name + "='" + list.value +
                      "' is not Slurm's tasks-per-node list (like 2(x3),1); start ctitan train with srun or set "
                      "LOCAL_WORLD_SIZE");
  };
  const auto count = [&](const std::string& digits) {
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
      throw bad();
    const int n = std::stoi(digits);
    if (n < 1) throw bad();
    return n;
  };
  std::vector<std::pair<int, int>> runs;  // (tasks per node, nodes)
  size_t pos = 0;
  while (true) {
    const size_t comma = std::min(list.value.find(',', pos), list.value.size());
    const std::string item = list.value.substr(pos, comma - pos);
    const size_t open = item.find('(');
    if (open == std::string::npos) {
      runs.emplace_back(count(item), 1);
    } else {
      if (item.compare(open, 2, "(x") != 0 || item.back() != ')') throw bad();
      runs.emplace_back(count(item.substr(0, open)), count(item.substr(open + 2, item.size() - open - 3)));
    }
    if (comma == list.value.size()) break;
    pos = comma + 1;
  }
  int64_t first = 0;
  for (const auto& [tasks, nodes] : runs) {
    if (node < first + nodes) return tasks;
    first += nodes;
  }
  throw InputError("SLURM_NODEID=" + std::to_string(node) + " is beyond " + list.name + "=" + list.value + " (" +
                   std::to_string(first) + " node" + (first == 1 ? "" : "s") + "); set LOCAL_WORLD_SIZE");
}

// The variables torchrun (and `ctitan launch`) sets.
DistEnv torchrun_env(const std::string& rank) {
  DistEnv e;
  const auto world = env("WORLD_SIZE");
  if (!world) throw InputError("RANK=" + rank + " is set but WORLD_SIZE is not; set both (torchrun does)");
  e.launched = true;
  e.launcher = "torchrun";
  e.world_size = parse_int("WORLD_SIZE", *world, 1, kMaxInt);
  e.rank = parse_int("RANK", rank, 0, kMaxInt);
  if (e.rank >= e.world_size) {
    throw InputError("RANK=" + rank + " is not below WORLD_SIZE=" + *world + "; ranks are 0.." +
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

// A task of an srun step: Slurm's variables, each overridden by its torchrun
// counterpart when that is set (RANK is not: it would have chosen torchrun_env).
DistEnv srun_env() {
  DistEnv e;
  e.launched = true;
  e.launcher = "srun";
  const Found rank{"SLURM_PROCID", *env("SLURM_PROCID")};
  const auto world = first_set({"WORLD_SIZE", "SLURM_NTASKS", "SLURM_NPROCS"});
  if (!world) {
    throw InputError("SLURM_PROCID=" + rank.value +
                     " is set but SLURM_NTASKS is not; start ctitan train with srun (or set WORLD_SIZE)");
  }
  e.world_size = parse_int(world->name, world->value, 1, kMaxInt);
  e.rank = parse_int(rank.name, rank.value, 0, kMaxInt);
  if (e.rank >= e.world_size) {
    throw InputError(rank.name + "=" + rank.value + " is not below " + world->name + "=" + world->value +
                     "; ranks are 0.." + std::to_string(e.world_size - 1));
  }
  // The step's own layout first: SLURM_NTASKS_PER_NODE is the job's request,
  // which a step that runs fewer tasks inherits unchanged.
  std::string local_world_source;  // for messages: where the node's task count came from
  if (const auto lws = env("LOCAL_WORLD_SIZE")) {
    e.local_world_size = parse_int("LOCAL_WORLD_SIZE", *lws, 1, e.world_size);
    local_world_source = "LOCAL_WORLD_SIZE=" + *lws;
  } else if (const auto list = first_set({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})) {
    const auto node_text = env("SLURM_NODEID");
    const int node = node_text ? parse_int("SLURM_NODEID", *node_text, 0, kMaxInt) : 0;
    e.local_world_size = tasks_on_node(*list, node);
    local_world_source = list->name + "=" + list->value + " at SLURM_NODEID=" + std::to_string(node);
    if (e.local_world_size > e.world_size) {
      throw InputError(local_world_source + " gives " + std::to_string(e.local_world_size) +
                       " tasks on this node, more than " + world->name + "=" + world->value +
                       "; set LOCAL_WORLD_SIZE");
    }
  } else if (const auto per_node = env("SLURM_NTASKS_PER_NODE")) {
    e.local_world_size = parse_int("SLURM_NTASKS_PER_NODE", *per_node, 1, e.world_size);
    local_world_source = "SLURM_NTASKS_PER_NODE=" + *per_node;
  } else {
    e.local_world_size = e.world_size;
    local_world_source = world->name + "=" + world->value;
  }
  if (const auto local = first_set({"LOCAL_RANK", "SLURM_LOCALID"})) {
    e.local_rank = parse_int(local->name, local->value, 0, kMaxInt);
    if (e.local_rank >= e.local_world_size) {
      throw InputError(local->name + "=" + local->value + " is not below this node's " +
                       std::to_string(e.local_world_size) + " task" + (e.local_world_size == 1 ? "" : "s") + " (" +
                       local_world_source + ")");
    }
  } else {
    e.local_rank = e.rank % e.local_world_size;
  }
  if (const auto addr = env("MASTER_ADDR")) {
    if (addr->empty()) throw InputError("MASTER_ADDR is empty; set it to rank 0's host name or address");
    e.master_addr = *addr;
  } else if (e.world_size > 1) {
    const auto nodes = first_set({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
    if (!nodes) {
      throw InputError("MASTER_ADDR is not set and neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST names "
                       "rank 0's node; set MASTER_ADDR to rank 0's host name");
    }
    e.master_addr = slurm_first_host(nodes->name, nodes->value);
  }
  if (const auto port = env("MASTER_PORT")) {
    e.master_port = parse_int("MASTER_PORT", *port, 1, 65535);
  } else if (e.world_size > 1) {
    const auto job = first_set({"SLURM_JOB_ID", "SLURM_JOBID"});
    if (!job) {
      throw InputError("MASTER_PORT is not set and neither is SLURM_JOB_ID to derive it from; set MASTER_PORT to "
                       "a free TCP port on " + e.master_addr);
    }
    e.master_port = slurm_master_port(
        static_cast<uint64_t>(parse_integer(job->name, job->value, 0, std::numeric_limits<int64_t>::max())));
  }
  return e;
}

}  // namespace

std::string slurm_first_host(const std::string& variable, const std::string& nodelist) {
  const std::string fix = "; set MASTER_ADDR to rank 0's host name";
  if (nodelist.find('[') == std::string::npos) {
    const std::string first = nodelist.substr(0, nodelist.find(','));
    if (first.empty()) throw InputError(variable + "='" + nodelist + "' names no host" + fix);
    return first;
  }
  const std::vector<std::string> argv = {"scontrol", "show", "hostnames", nodelist};
  const std::string cmd = describe_command(argv);
  const CommandResult r = run_command(argv, std::chrono::seconds(30));
  if (!r.started) throw InputError("cannot expand " + variable + "=" + nodelist + ": " + r.error + fix);
  if (r.timed_out) {
    const std::string said = r.first_line();
    throw InputError(cmd + " did not finish within 30 s" + (said.empty() ? "" : " (" + said + ")") + fix);
  }
  if (r.exit_code != 0) {
    throw InputError(cmd + " failed with exit code " + std::to_string(r.exit_code) + ": " + r.first_line() + fix);
  }
  std::istringstream lines(r.out);
  std::string host;
  while (std::getline(lines, host)) {
    host.erase(0, host.find_first_not_of(" \t\r"));
    host.erase(host.find_last_not_of(" \t\r") + 1);
    if (!host.empty()) return host;
  }
  throw InputError(cmd + " printed no host name" + fix);
}

int slurm_master_port(uint64_t job_id) { return static_cast<int>(10000 + job_id % 50000); }

DistEnv DistEnv::from_environment() {
  if (const auto rank = env("RANK")) return torchrun_env(*rank);
  if (launch_contract() == "srun") return srun_env();
  if (const auto world = env("WORLD_SIZE"); world && *world != "1") {
    throw InputError("WORLD_SIZE=" + *world + " is set but RANK is not; launch each rank with RANK (torchrun does)");
  }
  return DistEnv{};
}

std::string MeshShape::describe() const {
  const auto sizes = sizes_of(*this);
  std::string out;
  for (size_t i = 0; i < kDims.size(); ++i) {
    if (sizes[i] == 1) continue;
    out += (out.empty() ? "" : " x ") + std::string(kDims[i]) + " " + std::to_string(sizes[i]);
  }
  if (ep > 1) out += (out.empty() ? "" : " x ") + std::string("(ep ") + std::to_string(ep) + ", etp " +
                     std::to_string(etp) + ")";
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
  // Expert parallelism (TorchTitan v0.2.2's ParallelDims._validate).
  const int64_t ep = p.expert_parallel_degree, etp = p.expert_tensor_parallel_degree;
  if (ep < 1 || etp < 1)
    throw InputError("parallelism.expert_parallel_degree = " + std::to_string(ep) +
                     ", expert_tensor_parallel_degree = " + std::to_string(etp) + ": use positive degrees");
  if (ep > 1) {
    if (etp != 1 && etp != s.tp)
      throw InputError("parallelism.expert_tensor_parallel_degree = " + std::to_string(etp) +
                       " is neither 1 nor tensor_parallel_degree (" + std::to_string(s.tp) +
                       "); TorchTitan supports only ETP = TP or ETP = 1");
    const int64_t inner = etp == s.tp ? s.cp : s.cp * s.tp;  // what ep borrows whole
    const std::string what = etp == s.tp ? "cp" : "cp x tp";
    if (ep % inner != 0 || (s.dp_shard * inner) % ep != 0)
      throw InputError("parallelism.expert_parallel_degree = " + std::to_string(ep) + " must be a multiple of " +
                       what + " (" + std::to_string(inner) + ") dividing dp_shard x " + what + " (" +
                       std::to_string(s.dp_shard * inner) + "): expert parallelism borrows its ranks from them");
    s.ep = ep;
    s.etp = etp;
  }
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

void DeviceMesh::shutdown(bool abort) {
  // Flattened groups may be another dimension's group: each once.
  std::set<Communicator*> done;
  for (auto& [name, group] : groups_)
    if (name != "world" && group && done.insert(group.get()).second) group->shutdown(abort);
  if (auto it = groups_.find("world"); it != groups_.end() && it->second) it->second->shutdown(abort);
}

DeviceMesh::~DeviceMesh() { shutdown(std::uncaught_exceptions() > 0); }

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
  // Expert parallelism's groups; without it, ep is size 1 and the experts
  // shard over fsdp. ep is always a communicator of its own, so that its
  // all-to-alls are measured as "ep" (comm_by_dim, the flight recorder,
  // traces) even where its ranks are another group's (ep = dp_shard);
  // dp_shard_mod_ep whose members an earlier group has is that group.
  if (shape.ep == 1) {
    mesh->groups_["ep"] = join("ep", rank, 0, 1);
    mesh->groups_["dp_shard_mod_ep"] = mesh->groups_["fsdp"];
    return mesh;
  }
  const ExpertView view = expert_view(shape, coords);
  for (const char* name : {"ep", "dp_shard_mod_ep"}) {
    const auto [index, group_rank, size] = view_coord(view, expert_group_dims(shape, name));
    std::string same;
    for (const auto& [other, g] : mesh->groups_)
      if (same.empty() && std::string(name) != "ep" && other != "ep" && g->size() == size &&
          mesh->members(other) == mesh->members(name))
        same = other;
    mesh->groups_[name] = same.empty() ? join(name, index, group_rank, size) : mesh->groups_[same];
  }
  return mesh;
}

Communicator& DeviceMesh::group(const std::string& dim) {
  auto it = groups_.find(dim);
  if (it == groups_.end()) {
    throw std::invalid_argument("device mesh has no dimension '" + dim +
                                "'; use world, pp, dp_replicate, dp_shard, cp, tp, dp, fsdp, loss, batch, ep or dp_shard_mod_ep");
  }
  return *it->second;
}

std::vector<int64_t> DeviceMesh::members(const std::string& dim) const {
  // The ranks that share this rank's coordinates outside the group's
  // dimensions: in the expert view for EP's groups, else in the mesh's.
  const auto same_outside = [](const auto& a, const auto& b, const std::vector<int>& dims) {
    for (size_t i = 0; i < a.size(); ++i)
      if (std::find(dims.begin(), dims.end(), static_cast<int>(i)) == dims.end() && a[i] != b[i]) return false;
    return true;
  };
  const bool expert = dim == "ep" || dim == "dp_shard_mod_ep";
  std::vector<int> dims;  // mesh dimensions of a non-EP group (ep alone: none; dp_shard_mod_ep: fsdp's)
  if (dim == "world") {
    dims = {0, 1, 2, 3, 4};
  } else if (!expert || shape_.ep == 1) {
    const Flattened* f = flattened(dim == "dp_shard_mod_ep" ? "fsdp" : dim);
    if (f) dims.assign(f->dims.begin(), f->dims.end());
    else if (dim != "ep") dims = {dim_index(dim)};
  }
  std::vector<int64_t> out;
  const auto mine = coords_of(shape_, rank_);
  for (int64_t r = 0; r < shape_.world(); ++r) {
    const auto c = coords_of(shape_, r);
    const bool same = expert && shape_.ep > 1
                          ? same_outside(expert_view(shape_, mine).coords, expert_view(shape_, c).coords,
                                         expert_group_dims(shape_, dim))
                          : same_outside(mine, c, dims);
    if (same) out.push_back(r);
  }
  return out;
}

int DeviceMesh::coord(const std::string& dim) const {
  if (dim == "world") return rank_;
  if (dim == "ep" || dim == "dp_shard_mod_ep") return groups_.at(dim)->rank();
  const auto c = coords_of(shape_, rank_);
  if (const Flattened* f = flattened(dim)) return static_cast<int>(flat_coord(shape_, c, f->dims).first);
  const int i = dim_index(dim);
  if (i < 0) throw std::invalid_argument("device mesh has no dimension '" + dim + "'");
  return static_cast<int>(c[i]);
}

int DeviceMesh::size(const std::string& dim) const {
  if (dim == "world") return static_cast<int>(shape_.world());
  if (dim == "ep" || dim == "dp_shard_mod_ep") return groups_.at(dim)->size();
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
