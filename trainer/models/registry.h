// The model families: `model.name` selects one, and everything that needs to
// know a family — its flavors, which layouts it runs, its Hugging Face
// adapter — asks here (family.h says what a family gives). The list of
// families is registry.cpp's, the one place that names them all; config/,
// which sits below, checks model.name through the check this registry
// installs there (config_registry.h set_model_name_check).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/model/model_args.h"
#include "trainer/models/family.h"

namespace ctitan {

struct ModelSection;

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

// Throws InputError with the family's refusal, if any.
void check_model_layout(const ModelArgs& args, const ModelLayout& layout);

}  // namespace ctitan
