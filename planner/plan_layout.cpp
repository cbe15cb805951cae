// The dry-run layout behind the planner's memory: the trainer's own
// parallelize_model on the meta device (nothing allocated), once per
// pipeline coordinate, so every shard size is the trainer's, padding
// included.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common/errors.h"
#include "planner/plan_internal.h"
#include "trainer/config/config_loader.h"
#include "trainer/parallel/pipeline.h"
#include "trainer/parallel/train_model.h"
#include "trainer/runtime.h"

namespace ctitan::planner_detail {
namespace {

// "layers.12.attention.wq.weight" -> "layers.12"; "tok_embeddings.weight" -> "tok_embeddings"; else "head".
std::string unit_of(const std::string& fqn) {
  if (fqn.rfind("layers.", 0) == 0) return fqn.substr(0, fqn.find('.', 7));
  if (fqn.rfind("tok_embeddings", 0) == 0) return "tok_embeddings";
  return "head";
}

// The elements of one parameter once FSDP has gathered it: this rank's
// storage times every data-parallel shard degree (TP and EP shards stay:
// under EP a unit gathers this rank's experts only).
int64_t gathered_elems(const ParamSpec& s) {
  int64_t n = s.numel;
  for (const Placement& p : s.placements)
    if (!p.replicated() && (p.mesh_dim == "dp_shard" || p.mesh_dim == "fsdp" || p.mesh_dim == "dp_shard_mod_ep"))
      n *= p.degree;
  return n;
}

RankLayout from_model(TrainModel& tm) {
  RankLayout r;
  r.param_elems = tm.params().numel();
  r.state_bytes = tm.state_bytes();
  std::map<std::string, int64_t> units;
  for (const ParamSpec& s : tm.specs()) units[unit_of(s.name)] += gathered_elems(s);
  r.moe_layers = static_cast<int64_t>(tm.model().moe_layers().size());
  for (const auto& [name, elems] : units) {
    r.gathered_elems += elems;
    r.largest_unit_elems = std::max(r.largest_unit_elems, elems);
    if (name.rfind("layers.", 0) == 0) {
      ++r.layers;
      r.block_unit_elems = std::max(r.block_unit_elems, elems);
    } else if (name == "tok_embeddings") {
      r.embedding = true;
    } else {
      r.head = true;
      r.head_elems = elems;
    }
  }
  return r;
}

Layout derived_layout(const ModelDesc& m, const MeshShape& shape) {
  // GPT blocks: the trainer has no such model, so the shards are counted
  // here the way FSDP2 and Megatron's TP cut them (even splits, no padding).
  Layout out;
  out.source = "derived from the model's shapes (the trainer builds llama3 only)";
  const int64_t fsdp = shape.dp_shard * shape.cp, tp = shape.tp, pp = shape.pp;
  const int64_t layers_per_rank = (m.n_layers + pp - 1) / pp;
  const int64_t D = m.dim;
  const int64_t block = (m.params() - 2 * m.embedding_params() - m.max_positions * D - 2 * D) / m.n_layers;
  for (int64_t i = 0; i < pp; ++i) {
    RankLayout r;
    r.embedding = i == 0;
    r.head = i == pp - 1;
    r.layers = std::min(layers_per_rank, m.n_layers - i * layers_per_rank);
    r.block_unit_elems = block / tp;
    r.head_elems = m.embedding_params() / tp + 2 * D;
    const int64_t elems = r.layers * block / tp + (r.embedding ? m.embedding_params() / tp + m.max_positions * D : 0) +
                          (r.head ? r.head_elems : 0);
    r.largest_unit_elems = std::max(r.block_unit_elems, r.head_elems);
    r.param_elems = (elems + fsdp - 1) / fsdp;
    r.state_bytes = r.param_elems * 16;
    out.ranks.push_back(r);
  }
  for (int64_t i = 0; i < pp; ++i) {
    ModelPart part;
    part.embedding = i == 0;
    part.head = i == pp - 1;
    part.first_layer = i * layers_per_rank;
    part.n_layers = out.ranks[i].layers;
    out.stages.push_back(part);
  }
  return out;
}

}  // namespace

Layout build_layout(const ModelDesc& m, const JobConfig& cfg, const MeshShape& shape);

Layout plan_layout(const ModelDesc& m, const JobConfig& cfg, const MeshShape& shape) {
  if (!m.trainer_builds()) return derived_layout(m, shape);
  // The layout depends on the model, the config and the mesh only: built
  // once per process for each (calibration predicts the same runs often).
  static std::map<std::string, Layout> cache;
  const std::string key = describe(m) + "|" + std::to_string(m.ffn_hidden) + "|" + shape.describe() + "|" +
                          std::to_string(shape.world()) + "|" + to_toml(cfg);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Layout built = build_layout(m, cfg, shape);
  if (cache.size() > 4096) cache.clear();
  return cache.emplace(key, std::move(built)).first->second;
}

Layout build_layout(const ModelDesc& m, const JobConfig& cfg, const MeshShape& shape) {
  const ModelArgs args = m.trainer_args();
  Layout out;
  out.source = "the trainer's dry-run layout (meta device)";
  if (shape.pp > 1) {
    const PipelineSplit split = plan_pipeline_split(args, cfg.parallelism, shape.pp);
    out.stages_per_rank = split.stages_per_rank;
    for (const ModelPart& p : split.parts) out.stages.push_back(p.resolved(args));
  } else {
    ModelPart whole;
    out.stages.push_back(whole.resolved(args));
  }
  // Ranks are numbered in TorchTitan's mesh order (pp outermost): the first
  // rank of pipeline coordinate i is i x (everything inside pp).
  const int64_t inner = shape.world() / shape.pp;
  for (int64_t i = 0; i < shape.pp; ++i) {
    Runtime rt;
    rt.fake = true;
    rt.env.world_size = static_cast<int>(shape.world());
    rt.env.rank = static_cast<int>(i * inner);
    rt.shape = shape;
    rt.device = c10::Device(c10::kMeta);
    rt.monitor = DeviceMonitor(rt.device);
    rt.mesh = DeviceMesh::fake(shape, rt.env.rank);
    JobConfig c = cfg;
    c.training.device = "meta";
    std::unique_ptr<TrainModel> tm = parallelize_model(args, rt, c);
    out.ranks.push_back(from_model(*tm));
  }
  return out;
}

}  // namespace ctitan::planner_detail
