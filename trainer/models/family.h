// What a model family is (TorchTitan's TrainSpec): its flavors, the layouts
// it refuses and its Hugging Face adapter. Each family fills one ModelFamily
// in its own file (trainer/models/<name>.cpp); the list of families is
// registry.h, and nothing outside trainer/models/ names a family.
//
// The decoder itself (model/transformer.h) is built from the ModelArgs a
// family's flavor gives; the Hugging Face files (checkpoint/hf_checkpoint.h)
// are written and read through the family's HfAdapter.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "trainer/model/model_args.h"

namespace ctitan {

class HfConfigCheck;  // hf_config.h

// The parallel layout and techniques a run asks of a model, for refusals.
struct ModelLayout {
  int64_t dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1, pp = 1;
  bool float8 = false;
  std::string cp_load_balancer = "headtail";  // parallelism.context_parallel_load_balancer
};

// TorchTitan FQN suffix ↔ Hugging Face suffix.
using HfNames = std::vector<std::pair<std::string, std::string>>;

// A layer parameter held as a strided part of one Hugging Face tensor
// (GPT-OSS's experts: mlp.experts.gate_up_proj [E, D, 2Hm] interleaves
// w1ᵀ and w3ᵀ along its last dimension; down_proj [E, Hm, D] is w2ᵀ):
// ctitan's tensor = every second element of the Hugging Face tensor's last
// dimension from `interleaved` (−1: all of it), then its last two
// dimensions swapped when `transposed`. A part is one tensor for all
// experts, not one per expert.
struct HfPart {
  std::string fqn_suffix;  // "moe.experts.w1"
  std::string hf_suffix;   // "mlp.experts.gate_up_proj"
  bool transposed = false;
  int64_t interleaved = -1;  // 0 or 1: every second element of the last dimension from this one
};

// A family's Hugging Face checkpoints (TorchTitan's StateDictAdapter). The
// names every family shares (the embedding, the norms, wq/wo, the SwiGLU,
// the router, the routed experts) and the safetensors files are
// hf_checkpoint.cpp's; a family states what is its own.
struct HfAdapter {
  // Each layer's parameters beyond the shared ones ("attention.wk.weight" ↔
  // "self_attn.k_proj.weight", ...).
  HfNames layer_names;
  // Parameters held as parts of a Hugging Face tensor (see HfPart); the
  // routed experts named here are not split per expert.
  std::vector<HfPart> layer_parts;
  // true: the Hugging Face weights keep ctitan's interleaved RoPE pairs
  // (x[2i], x[2i+1]); false: transformers rotates halves (rotate_half), so
  // the rows of wq and wk are permuted inside every head unless the flavor's
  // RoPE already splits halves (ModelArgs::rope_half_split).
  bool rope_interleaved = false;
  // The checkpoint holds each MoE layer's expert bias (fp32), as the router's
  // e_score_correction_bias.
  bool expert_bias = false;
  // Empty when transformers computes the same logits from the weights of
  // `args`, else one line saying why not and what to do.
  std::string (*refuses)(const ModelArgs& args) = nullptr;
  // config.json's model_type and architectures[0].
  std::string (*model_type)(const ModelArgs& args) = nullptr;
  std::string (*architecture)(const ModelArgs& args) = nullptr;
  // Adds the family's keys to `config` (which holds every decoder's keys)
  // for a run of `seq_len` tokens (0: any length).
  void (*write_config)(const ModelArgs& args, int64_t seq_len, nlohmann::json& config) = nullptr;
  // Checks the family's keys of a checkpoint's config.json (InputError, one
  // line). Returns how many layers past the model's last the checkpoint
  // holds that readers skip (DeepSeek-V3's multi-token prediction), or 0.
  int64_t (*check_config)(const HfConfigCheck& config, const ModelArgs& args) = nullptr;
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
  HfAdapter hf;
};

// A family's flavor table: its names in order, and the lookup that throws
// InputError ("unknown model.flavor 'x' for qwen3; known flavors: ...").
using FlavorTable = std::map<std::string, ModelArgs>;
std::vector<std::string> flavor_names(const FlavorTable& table);
ModelArgs find_flavor(const FlavorTable& table, const std::string& family, const std::string& flavor);

// TorchTitan's context-parallel rule for the attention arguments: varlen
// never runs under CP; flex does only in families whose TorchTitan CP plan
// takes it (`flex_with_cp`: Llama 3). Empty, or the refusal line.
std::string attention_refuses_context_parallel(const ModelArgs& args, const ModelLayout& layout, bool flex_with_cp);

}  // namespace ctitan
