// The frameworks the planner models, one row each. Megatron-LM's rules are
// as Narayanan et al. 2021 ran it (the code at a8d172b31e, Apr 2021),
// TorchTitan's as of 9dec370; docs/planner.md says where each was read.
#include "planner/framework_rules.h"

#include <vector>

#include "common/errors.h"

namespace ctitan {
namespace {

const std::vector<FrameworkRules>& framework_table() {
  static const std::vector<FrameworkRules> table = {
      {.name = "ctitan"},
      {.name = "torchtitan",
       .pipeline_syncs_on_last_backward = true,
       .unfused_projections = true,
       .cp_repeats_kv_heads = true},
      {.name = "megatron",
       .unfused_attention = true,
       .fused_elementwise = true,
       .allreduce_after_last_microbatch = true,
       .tied_embedding_across_stages = true,
       .pipeline_scatter_gather = true},
  };
  return table;
}

}  // namespace

const FrameworkRules& framework_rules(const std::string& framework) {
  for (const FrameworkRules& rules : framework_table())
    if (rules.name == framework) return rules;
  throw InputError("planner: framework '" + framework +
                   "' is not one it models; say \"ctitan\", \"torchtitan\" or \"megatron\"");
}

}  // namespace ctitan
