// Hugging Face checkpoints in and out (TorchTitan's
// checkpoint.last_save_in_hf / checkpoint.initial_load_in_hf), for every
// family through its adapter (trainer/models/family.h HfAdapter: its names,
// its config.json, its refusals; today LlamaForCausalLM, Qwen3ForCausalLM,
// Qwen3MoeForCausalLM and DeepseekV3ForCausalLM). This file holds what is
// the same for all: the safetensors files, sharding, the names every family
// shares and the checks of config.json's common keys.
//
//   <folder>/config.json                     the family's config (hf_config_json)
//           /model.safetensors               one file, or above the shard size:
//           /model-0000K-of-0000N.safetensors + model.safetensors.index.json
//
// Names follow TorchTitan's state-dict adapters (tok_embeddings.weight ↔
// model.embed_tokens.weight, layers.N.attention.wq.weight ↔
// model.layers.N.self_attn.q_proj.weight, ..., and the family's own); a
// routed-expert tensor layers.N.moe.experts.w1 [E, F, D] is E tensors
// model.layers.N.mlp.experts.<e>.gate_proj.weight (w3: up_proj, w2:
// down_proj). ctitan's RoPE rotates the pairs (x[2i], x[2i+1]) of a head;
// Hugging Face's rotate_half pairs x[i] with x[i + Dh/2]. So unless the
// flavor's RoPE already splits halves or the family's Hugging Face weights
// keep the pairs (HfAdapter::rope_interleaved), the rows of wq and wk are
// permuted inside every head on the way out (row 2i+j → row j·Dh/2 + i) and
// back on the way in, exactly the adapter's _permute / _reverse_permute.
//
// Export gathers whole tensors from any parallel layout through the
// checkpoint's box re-sharding: every rank writes its boxes to a hidden
// ctitan checkpoint, rank 0 assembles each tensor from them, converts it and
// writes the Hugging Face files into a temporary folder that is fsync'ed and
// renamed into place. Import: every rank maps the safetensors files and
// copies out only its own boxes. Errors in the files or a checkpoint of
// another model are InputErrors of one line.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "trainer/checkpoint/checkpoint.h"
#include "trainer/config/job_config.h"
#include "trainer/model/model_args.h"

namespace ctitan {

// Above this many bytes of tensors an export is split into shards (each at
// most this size unless one tensor alone is larger): transformers'
// save_pretrained default, "5GB".
constexpr int64_t kHfShardBytes = 5'000'000'000;

struct HfExportOptions {
  at::ScalarType dtype = at::kFloat;  // checkpoint.export_dtype
  int64_t max_shard_bytes = kHfShardBytes;
  int64_t bos_id = -1, eos_id = -1;  // written to config.json when >= 0
  // The run's training.seq_len, for the family's config.json (DeepSeek-V3's
  // names YaRN only when the run applied it: longer than its original
  // length; 0: always).
  int64_t seq_len = 0;
};

// TorchTitan FQN (no "model." prefix) ↔ Hugging Face name in the checkpoints
// of `args`'s family; empty when the name has no counterpart (e.g.
// rotary_emb.inv_freq). A per-expert Hugging Face name maps to its experts'
// tensor (hf_name_of of that tensor is "").
std::string hf_name_of(const std::string& fqn, const ModelArgs& args);
std::string fqn_of_hf(const std::string& hf_name, const ModelArgs& args);

// The whole tensor `fqn` in Hugging Face's layout (wq/wk rows permuted), and back.
at::Tensor to_hf_layout(const std::string& fqn, const at::Tensor& whole, const ModelArgs& args);
at::Tensor from_hf_layout(const std::string& fqn, const at::Tensor& hf, const ModelArgs& args);

// InputError (one line) for a model whose weights transformers would read
// into other logits (the family's HfAdapter::refuses: a softmax-routed
// DeepSeek-V3), or of a family without a Hugging Face adapter.
void check_hf_checkpoint_family(const ModelArgs& args);

// config.json: the keys every decoder has, then the family's
// (HfAdapter::write_config).
nlohmann::json hf_config_json(const ModelArgs& args, const HfExportOptions& opts);
// "float32" | "bfloat16" | "float16" ↔ dtype (std::invalid_argument otherwise).
at::ScalarType export_dtype(const std::string& name);
std::string export_dtype_name(at::ScalarType dtype);
// The run's export options: checkpoint.export_dtype, and BOS/EOS from the
// model.hf_assets_path tokenizer when there is one.
HfExportOptions hf_export_options(const JobConfig& cfg);

// Writes a Hugging Face checkpoint of the whole model into `dir` (replaced
// atomically). `whole(fqn)` returns each TorchTitan parameter whole; it is
// asked once per tensor, in order, so at most one tensor is held at a time.
void write_hf_checkpoint(const std::string& dir, const ModelArgs& args,
                         const std::function<at::Tensor(const std::string& fqn)>& whole, const HfExportOptions& opts);

// checkpoint.last_save_in_hf: all ranks of `group` call this with their
// "model." pieces (any layout); rank 0 writes <checkpoint_folder>/step-<step>.
void export_hf_checkpoint(const std::string& checkpoint_folder, int64_t step, const TensorPieces& pieces,
                          const ModelArgs& args, const HfExportOptions& opts, const SaveGroup& group);

// Fills the "model." pieces (this rank's boxes of any layout) from the Hugging
// Face checkpoint in `dir`; other pieces are left alone. Every tensor of the
// model is checked first (missing, wrong shape, one the model lacks), so
// every rank fails alike with the first mismatch in model order.
void load_hf_checkpoint(const std::string& dir, const ModelArgs& args, const TensorPieces& pieces);

// TorchTitan's rule for checkpoint.initial_load_in_hf: when checkpointing is
// on and the checkpoint folder has no step to resume from, load the model
// from initial_load_path (or, without one, model.hf_assets_path). Returns
// whether it loaded; rank0 prints what it did.
bool initial_load_hf(const JobConfig& cfg, const Checkpointer& ckpt, const ModelArgs& args, const TensorPieces& pieces,
                     bool rank0);

}  // namespace ctitan
