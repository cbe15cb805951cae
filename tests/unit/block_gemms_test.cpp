// The planner's GEMM list of a block (planner/block_gemms.h) against what
// the trainer allocates: model_param_specs of that layer, narrowed by
// tensor_parallel_plan as rank 0 of tp, for each trainer family's flavor.
#include "planner/block_gemms.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/model_desc.h"
#include "trainer/model/transformer.h"
#include "trainer/models/registry.h"
#include "trainer/parallel/expert_parallel.h"
#include "trainer/parallel/tensor_parallel.h"

namespace ctitan {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// One GEMM as a line, so that a mismatch prints both lists readably.
std::string line(const std::string& name, const std::string& split, double out, double in, double groups,
                 bool output_projection) {
  return name + " " + split + " " + std::to_string(static_cast<int64_t>(out)) + "x" +
         std::to_string(static_cast<int64_t>(in)) + " x" + std::to_string(static_cast<int64_t>(groups)) +
         (output_projection ? " output" : "");
}

// What the trainer's specs and TP plan say layer `layer` runs on rank 0 of
// tp: each weight's local box, its split read from its placement, in
// forward order (the experts' w2 after w3).
std::vector<std::string> from_trainer(const ModelArgs& args, int64_t layer, int64_t tp) {
  ModelPart part;
  part.embedding = part.head = false;
  part.first_layer = layer;
  part.n_layers = 1;
  const std::vector<ParamSpec> whole = model_param_specs(args, part);
  const std::vector<ParamSpec> specs = tensor_parallel_plan(whole, tp, 0);
  // At tp 1 the plan places nothing: the split is the one it makes at 2.
  const std::vector<ParamSpec> placed = tp > 1 ? specs : tensor_parallel_plan(whole, 2, 0);
  std::vector<std::string> lines, experts_w2;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& s = specs[i];
    if (s.box_shape.size() < 2) continue;
    std::string split = "replicated";
    for (const Placement& p : placed[i].placements)
      if (p.mesh_dim == "tp" && !p.replicated()) split = p.shard_dim == 0 ? "column" : "row";
    const bool grouped = is_routed_expert(s.name);
    if (grouped) split = "grouped";
    const auto& b = s.box_shape;
    const bool output =
        ends_with(s.name, ".wo.weight") || ends_with(s.name, ".w2.weight") || ends_with(s.name, ".experts.w2");
    const std::string text =
        grouped ? line(s.name, split, b[1], b[2], b[0], output) : line(s.name, split, b[0], b[1], 1, output);
    if (grouped && output) experts_w2.push_back(text);
    else lines.push_back(text);
    if (ends_with(s.name, ".experts.w3")) lines.insert(lines.end(), experts_w2.begin(), experts_w2.end());
  }
  return lines;
}

std::vector<std::string> from_planner(const ModelDesc& model, bool moe_layer, int64_t tp) {
  std::vector<std::string> lines;
  for (const BlockGemm& g : block_gemms(model, moe_layer, tp))
    lines.push_back(line(g.param, split_name(g.split), g.out_features, g.in_features, g.groups, g.output_projection));
  return lines;
}

TEST(PlannerBlockGemms, EqualTheTrainersSpecsUnderItsTensorParallelPlan) {
  const std::vector<std::pair<std::string, std::string>> flavors = {
      {"llama3", "8B"}, {"qwen3", "30B-A3B"}, {"deepseek_v3", "16B"}};
  for (const auto& [family, flavor] : flavors) {
    ModelSection section;
    section.name = family;
    section.flavor = flavor;
    const ModelDesc model = model_from_config(section);
    const ModelArgs args = model_flavor(section);
    for (int64_t tp : {1, 2, 8}) {
      for (int64_t layer : {int64_t{0}, args.n_layers - 1}) {
        SCOPED_TRACE(family + " " + flavor + " layer " + std::to_string(layer) + " tp " + std::to_string(tp));
        const std::vector<std::string> planner = from_planner(model, args.moe_layer(layer), tp);
        // The block's layer index appears in the names: compare against
        // the planner's layer 0 by renaming.
        std::vector<std::string> trainer = from_trainer(args, layer, tp);
        const std::string at = "layers." + std::to_string(layer) + ".";
        for (std::string& t : trainer) t.replace(t.find(at), at.size(), "layers.0.");
        EXPECT_EQ(planner, trainer);
      }
    }
  }
}

TEST(PlannerBlockGemms, MoeAndMlaRolesAsTheTrainerPlacesThem) {
  ModelSection section;
  section.name = "deepseek_v3";
  section.flavor = "16B";
  const ModelDesc model = model_from_config(section);
  const std::vector<BlockGemm> gemms = block_gemms(model, true, 2);
  std::vector<std::string> splits;
  for (const BlockGemm& g : gemms) splits.push_back(g.param.substr(9) + " " + split_name(g.split));
  // wq stays whole-width (no q latent in 16B); the KV latent is replicated.
  EXPECT_EQ(splits,
            (std::vector<std::string>{
                "attention.wq.weight column", "attention.wkv_a.weight replicated", "attention.wkv_b.weight column",
                "attention.wo.weight row", "moe.router.gate.weight replicated", "moe.experts.w1 grouped",
                "moe.experts.w3 grouped", "moe.experts.w2 grouped", "moe.shared_experts.w1.weight replicated",
                "moe.shared_experts.w3.weight replicated", "moe.shared_experts.w2.weight replicated"}));
  const MoeArgs& moe = model.trainer_args().moe;
  EXPECT_EQ(gemms[5].groups, static_cast<double>(moe.num_experts));
  EXPECT_EQ(gemms[5].m_mult, static_cast<double>(moe.top_k) / static_cast<double>(moe.num_experts));
  EXPECT_FALSE(gemms[5].fp8());
  EXPECT_TRUE(gemms[0].fp8());
}

// Megatron's GPT: one fused qkv projection and a GELU MLP, column- and
// row-wise as Megatron-Core's ColumnParallelLinear / RowParallelLinear.
TEST(PlannerBlockGemms, MegatronGptFromItsParamSpecsAndPlan) {
  ModelDesc gpt = model_from_flavor("8B");
  override_model(gpt, "family", "gpt");
  EXPECT_FALSE(gpt.trainer_builds());
  std::vector<std::string> lines;
  for (const BlockGemm& g : block_gemms(gpt, false, 8))
    lines.push_back(line(g.param, split_name(g.split), g.out_features, g.in_features, g.groups, g.output_projection));
  EXPECT_EQ(lines,
            (std::vector<std::string>{"decoder.layers.0.self_attention.linear_qkv.weight column 1536x4096 x1",
                                      "decoder.layers.0.self_attention.linear_proj.weight row 4096x512 x1 output",
                                      "decoder.layers.0.mlp.linear_fc1.weight column 2048x4096 x1",
                                      "decoder.layers.0.mlp.linear_fc2.weight row 4096x2048 x1 output"}));
  // The parameter count is the specs' (GPT-2/3's formula: biases, two LayerNorms per block).
  const int64_t D = 4096, F = 4 * D, V = gpt.vocab_size, L = gpt.n_layers;
  const int64_t block = (D * 3 * D + 3 * D + D * D + D) + (2 * D * F + F + D) + 4 * D;
  EXPECT_EQ(gpt.params(), 2 * V * D + gpt.max_positions * D + L * block + 2 * D);
}

}  // namespace
}  // namespace ctitan
