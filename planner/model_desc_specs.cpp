// ModelDesc's parameters as the trainer allocates them and TP's placement
// plan over them (model_desc.h). Apart from model_desc.cpp, which stays
// LibTorch-free for the sweep-spec parser (tests/fuzz).
#include "planner/model_desc.h"

#include <utility>

#include "planner/megatron_gpt.h"
#include "trainer/model/model_part.h"
#include "trainer/parallel/tensor_parallel.h"

namespace ctitan {

std::vector<ParamSpec> ModelDesc::block_param_specs(bool moe_layer) const {
  if (!trainer_builds()) return megatron_gpt_param_specs(*this, false, 0, 1, false);
  // Layer 0 of args whose first layer is of the asked kind (a model of MoE
  // layers only still has a dense block's costs: the unit the planner
  // prices whatever the layers are).
  ModelArgs args = trainer_args();
  if (moe_layer) args.n_dense_layers = 0;
  else args.moe.num_experts = 0;
  ModelPart block;
  block.embedding = block.head = false;
  block.n_layers = 1;
  return model_param_specs(args, block);
}

std::vector<ParamSpec> ModelDesc::tensor_parallel_plan(std::vector<ParamSpec> specs, int64_t tp, int64_t r) const {
  return trainer_builds() ? ctitan::tensor_parallel_plan(std::move(specs), tp, r)
                          : megatron_gpt_tensor_parallel_plan(std::move(specs), tp, r);
}

}  // namespace ctitan
