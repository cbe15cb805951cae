#include "planner/block_gemms.h"

#include <algorithm>

#include "trainer/parallel/expert_parallel.h"

namespace ctitan {
namespace {

// The split dimension over tp of a planned spec; -1: Replicate().
int tp_shard_dim(const ParamSpec& spec) {
  for (const Placement& p : spec.placements)
    if (p.mesh_dim == "tp") return p.shard_dim;
  return -1;
}

// A plan decides each placement by the parameter's name; at tp = 1 it
// places nothing. The roles are read at degree 2, over shapes doubled so
// that the plan's divisibility checks hold for any model.
std::vector<int> probe_shard_dims(const ModelDesc& model, std::vector<ParamSpec> specs) {
  for (ParamSpec& s : specs) {
    for (int64_t& d : s.global_shape) d *= 2;
    s.shape = s.box_shape = s.global_shape;
  }
  std::vector<int> dims;
  for (const ParamSpec& s : model.tensor_parallel_plan(std::move(specs), 2, 0)) dims.push_back(tp_shard_dim(s));
  return dims;
}

// An expert as the SwiGLU FFN it is: "layers.N.moe.experts.w2" [E, D, Hm]
// and "layers.N.moe.shared_experts.w2.weight" read as
// "layers.N.feed_forward.w2.weight" [D, Hm].
ParamSpec as_dense_ffn(ParamSpec s) {
  for (const char* expert : {"moe.experts.", "moe.shared_experts."}) {
    const auto at = s.name.find(expert);
    if (at == std::string::npos) continue;
    std::string tail = s.name.substr(at + std::string(expert).size());
    if (tail.find('.') == std::string::npos) tail += ".weight";
    s.name = s.name.substr(0, at) + "feed_forward." + tail;
    if (s.global_shape.size() == 3) s = whole_param(s.name, {s.global_shape[1], s.global_shape[2]});
  }
  return s;
}

// "layers.0.attention.wq.weight" → "layers.0.attention"; "layers.0.moe.experts.w1" → "layers.0.moe.experts".
std::string module_of(const std::string& name) {
  std::string n = name;
  const std::string weight = ".weight";
  if (n.size() > weight.size() && n.compare(n.size() - weight.size(), weight.size(), weight) == 0)
    n.resize(n.size() - weight.size());
  return n.substr(0, n.rfind('.'));
}

}  // namespace

const char* split_name(GemmSplit split) {
  switch (split) {
    case GemmSplit::kColumn:
      return "column";
    case GemmSplit::kRow:
      return "row";
    case GemmSplit::kGrouped:
      return "grouped";
    case GemmSplit::kReplicated:
      break;
  }
  return "replicated";
}

std::vector<BlockGemm> block_gemms(const ModelDesc& model, bool moe_layer, int64_t tp_degree) {
  const std::vector<ParamSpec> specs = model.block_param_specs(moe_layer);
  const std::vector<int> split_dims = probe_shard_dims(model, specs);
  std::vector<ParamSpec> as_ffn;
  for (const ParamSpec& s : specs) as_ffn.push_back(as_dense_ffn(s));
  const std::vector<int> projection_dims = probe_shard_dims(model, as_ffn);
  const double tp = static_cast<double>(tp_degree);
  const double top_k = model.trainer_builds() ? static_cast<double>(model.trainer_args().moe.top_k) : 0;
  std::vector<BlockGemm> gemms;
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::vector<int64_t>& shape = specs[i].global_shape;
    if (shape.size() < 2) continue;  // norms and biases
    if (specs[i].name.find(".moe.experts.b") != std::string::npos) continue;  // the experts' biases [E, n]
    BlockGemm gemm;
    gemm.param = specs[i].name;
    gemm.output_projection = projection_dims[i] == 1;
    if (is_routed_expert(gemm.param)) {
      gemm.split = GemmSplit::kGrouped;
      gemm.groups = static_cast<double>(shape[0]);
      gemm.out_features = static_cast<double>(shape[1]);
      gemm.in_features = static_cast<double>(shape[2]);
      gemm.m_mult = top_k / gemm.groups;
    } else {
      const int dim = split_dims[i];
      gemm.split = dim == 0 ? GemmSplit::kColumn : dim == 1 ? GemmSplit::kRow : GemmSplit::kReplicated;
      gemm.out_features = static_cast<double>(shape[0]);
      gemm.in_features = static_cast<double>(shape[1]);
      if (dim == 0) gemm.out_features /= tp;
      if (dim == 1) gemm.in_features /= tp;
    }
    gemms.push_back(std::move(gemm));
  }
  // Forward order: within each module, the output projection last.
  for (auto first = gemms.begin(); first != gemms.end();) {
    const std::string module = module_of(first->param);
    const auto last =
        std::find_if(first, gemms.end(), [&](const BlockGemm& g) { return module_of(g.param) != module; });
    std::stable_partition(first, last, [](const BlockGemm& g) { return !g.output_projection; });
    first = last;
  }
  return gemms;
}

}  // namespace ctitan
