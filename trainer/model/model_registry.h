// The model families (TorchTitan's TrainSpec idea): `model.name` selects
// one, and everything that needs to know a family — its flavors, which
// layouts it runs, its Hugging Face names — asks here. The decoder itself
// (transformer.h) is built from the ModelArgs a family's flavor gives.
//
// Families live in trainer/models/<name>.cpp, one file each.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainer/model/model_args.h"

namespace ctitan {

struct ModelSection;

// The parallel layout and techniques a run asks of a model, for refusals.
struct ModelLayout {
  int64_t dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1, pp = 1;
  bool float8 = false;
  std::string cp_load_balancer = "headtail";  // parallelism.context_parallel_load_balancer
};

struct ModelFamily {
  std::string name;           // model.name
  std::string description;    // one line for --help and docs
  std::vector<std::string> (*flavor_names)();
  // InputError naming the family's flavors when `flavor` is unknown.
  ModelArgs (*flavor)(const std::string& flavor);
  // Empty when this family runs `args` in `layout`, else one line saying
  // why not and what to do. (The layout's degrees against the model's
  // sizes are checked by the parallelisms themselves.)
  std::string (*refuses)(const ModelArgs& args, const ModelLayout& layout);
  // Hugging Face config.json model_type of a checkpoint of `args`.
  std::string (*hf_model_type)(const ModelArgs& args);
};

// InputError ("model.name 'x' is not a model family; ctitan's families:
// ...") when `name` is none of them.
const ModelFamily& model_family(const std::string& name);
std::vector<std::string> model_family_names();
bool is_model_family(const std::string& name);

// ctitan's keys over a flavor: model.n_layers (> 0 replaces the flavor's
// layer count; with MoE, dense layers stay first) and the MoE ones —
// model.moe_num_experts, model.moe_top_k (> 0 replace the flavor's),
// model.moe_load_balance_coeff (>= 0 replaces it; 0 turns the expert-bias
// update off) — so that sweeps can cross them.
// model.attn_type / model.attn_mask_type (non-empty) replace the flavor's
// attention arguments, TorchTitan's names and rules: attn_type sdpa | flex |
// varlen, attn_mask_type causal | block_causal; block_causal needs flex or
// varlen (TorchTitan's sdpa takes no mask), varlen needs block_causal.
struct FlavorOverrides {
  int64_t n_layers = 0;
  int64_t moe_num_experts = 0, moe_top_k = 0;
  double moe_load_balance_coeff = -1;
  std::string attn_type, attn_mask_type;
};

// model_family(name).flavor(flavor) with the overrides applied. InputError,
// one line, for an MoE key on a dense flavor, top_k above the experts (or
// above the experts its group limit leaves), or experts the flavor's
// expert groups do not divide.
ModelArgs model_flavor(const std::string& name, const std::string& flavor, const FlavorOverrides& overrides = {});
inline ModelArgs model_flavor(const std::string& name, const std::string& flavor, int64_t n_layers) {
  FlavorOverrides o;
  o.n_layers = n_layers;
  return model_flavor(name, flavor, o);
}
// The [model] section's family, flavor and overrides.
ModelArgs model_flavor(const ModelSection& model);

// A family's flavor table: its names in order, and the lookup that throws
// InputError ("unknown model.flavor 'x' for qwen3; known flavors: ...").
using FlavorTable = std::map<std::string, ModelArgs>;
std::vector<std::string> flavor_names(const FlavorTable& table);
ModelArgs find_flavor(const FlavorTable& table, const std::string& family, const std::string& flavor);

// TorchTitan's context-parallel rule for the attention arguments: varlen
// never runs under CP; flex does only in families whose TorchTitan CP plan
// takes it (`flex_with_cp`: Llama 3). Empty, or the refusal line.
std::string attention_refuses_context_parallel(const ModelArgs& args, const ModelLayout& layout, bool flex_with_cp);

// Throws InputError with the family's refusal, if any.
void check_model_layout(const ModelArgs& args, const ModelLayout& layout);

}  // namespace ctitan
