// What a checkpoint records of the model it holds, and the check that a run
// resumes the same model (TorchTitan's DCP load fails on a missing or extra
// key; a run here must not resume another model silently either).
//
// metadata.json's "model" is the model's description: model.name,
// model.flavor and every resolved argument that sets a tensor's shape or
// what the forward computes (layers, widths, heads, vocabulary, MoE experts
// and routing, MLA ranks, norms, RoPE/YaRN). Not in it: what a layout, a
// technique or a training knob changes (parallelism, dtype, activation
// checkpointing, attn_type, attn_mask_type, moe_load_balance_coeff,
// debug.moe_force_load_balance), so a re-sharded resume stays allowed.
//
// Checkpoints saved before the description existed are checked by their
// tensors alone: every name this run's model has must be saved with the same
// global shape, and no other name may be (a removed layer is an extra key).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "trainer/model/model_args.h"

namespace ctitan {

// (key, value) in the order a difference is reported: model.name,
// model.flavor, the [model] keys a run sets (n_layers, moe_num_experts,
// moe_top_k), then what the flavor sets.
using ModelDescription = std::vector<std::pair<std::string, nlohmann::json>>;
ModelDescription describe_model(const ModelArgs& args, const std::string& flavor);
nlohmann::json to_json(const ModelDescription& d);

// The first key of `run` whose value `saved` (a checkpoint's "model") holds
// otherwise, as "model.n_layers = 2, this run's config has 1" (a key the
// flavor sets: "dim = 256, this run's model.flavor \"tiny\" has 64");
// empty when they agree. A key `saved` lacks is skipped (another version's
// description; the tensors are checked anyway).
std::string first_model_difference(const nlohmann::json& saved, const ModelDescription& run);

// Every tensor a full checkpoint of `args` holds, whatever the layout that
// saved it (DataParallel::checkpoint_pieces' names): "model.<fqn>" and the
// expert biases, then "optimizer.exp_avg.<fqn>", "optimizer.exp_avg_sq.<fqn>"
// and "optimizer.step"; each with its global shape, in model order.
std::vector<std::pair<std::string, std::vector<int64_t>>> checkpoint_tensor_shapes(const ModelArgs& args);

// What a Checkpointer writes into each save and checks a resume against.
struct CheckpointModel {
  ModelDescription description;  // empty: none written, none checked
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
};
CheckpointModel checkpoint_model(const ModelArgs& args, const std::string& flavor);

}  // namespace ctitan
