#include "trainer/checkpoint/hf_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include "common/errors.h"
#include "common/file_io.h"
#include "common/printable.h"
#include "trainer/checkpoint/checkpoint_metadata.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/data/tokenizer.h"
#include "trainer/model/transformer.h"
#include "trainer/models/hf_config.h"
#include "trainer/models/registry.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

// A block's parameters every family names alike: TorchTitan suffix →
// Hugging Face suffix (Llama's names). A family adds its own
// (HfAdapter::layer_names: grouped-query or latent attention's, ...).
const HfNames& common_layer_names() {
  static const HfNames t = {
      {"attention.wq.weight", "self_attn.q_proj.weight"},    {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"feed_forward.w1.weight", "mlp.gate_proj.weight"},    {"feed_forward.w3.weight", "mlp.up_proj.weight"},
      {"feed_forward.w2.weight", "mlp.down_proj.weight"},    {"attention_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"}, {"moe.router.gate.weight", "mlp.gate.weight"}};
  return t;
}

// Routed experts: ctitan's [E, ...] tensor ↔ one Hugging Face tensor per expert.
const HfNames& expert_names() {
  static const HfNames t = {
      {"moe.experts.w1", "gate_proj.weight"}, {"moe.experts.w3", "up_proj.weight"}, {"moe.experts.w2", "down_proj.weight"}};
  return t;
}
const HfNames& top_names() {
  static const HfNames t = {
      {"tok_embeddings.weight", "model.embed_tokens.weight"},
      {"norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  return t;
}

// "<prefix><N>.<rest>" → (N, rest); nullopt when it is not of that form.
std::optional<std::pair<std::string, std::string>> split_layer(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return std::nullopt;
  const std::string n = name.substr(prefix.size(), dot - prefix.size());
  if (n.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::make_pair(n, name.substr(dot + 1));
}

// The family's Hugging Face adapter (family.h).
const HfAdapter& hf_adapter(const ModelArgs& args) { return model_family(args.family).hf; }

// Heads whose rows RoPE rotates in pairs (x[2i], x[2i+1]) while Hugging
// Face's rotate_half rotates halves: wq (query heads) and wk (KV heads); 0
// otherwise, for a flavor whose RoPE already splits halves, and for a family
// whose Hugging Face weights keep the interleaved pairs (its config.json
// says so, e.g. rope_interleave = true).
int64_t rotary_heads(const std::string& fqn, const ModelArgs& args) {
  if (args.rope_half_split || hf_adapter(args).rope_interleaved) return 0;
  const auto layer = split_layer(fqn, "layers.");
  if (!layer) return 0;
  if (layer->second == "attention.wq.weight") return args.n_heads;
  if (layer->second == "attention.wk.weight") return args.n_kv_heads;
  return 0;
}

std::string dims_text(const std::vector<int64_t>& s) { return nlohmann::json(s).dump(); }

void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Tensors in shards of at most `max_bytes` (a larger tensor alone), in order.
std::vector<std::vector<size_t>> plan_shards(const std::vector<SafetensorsWriter::Spec>& specs, int64_t max_bytes) {
  std::vector<std::vector<size_t>> shards(1);
  int64_t in_shard = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t n = SafetensorsWriter::nbytes(specs[i]);
    if (!shards.back().empty() && in_shard + n > max_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += n;
  }
  return shards;
}

std::string shard_file_name(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", k + 1, n);
  return buf;
}

// The safetensors files of a Hugging Face model folder and which holds each tensor.
class HfFolder {
 public:
  explicit HfFolder(const fs::path& dir) : dir_(dir) {
    const fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(index)) {
      where_ = parse_safetensors_index(read_file_bounded(index.string(), "safetensors index", kMaxJsonBytes),
                                       "Hugging Face checkpoint " + dir.string());
    } else if (fs::exists(dir / "model.safetensors")) {
      open("model.safetensors");
      for (const auto& [name, _] : files_.at("model.safetensors")->entries()) where_[name] = "model.safetensors";
    } else {
      throw InputError("Hugging Face checkpoint " + dir.string() +
                       " holds neither model.safetensors nor model.safetensors.index.json; point "
                       "checkpoint.initial_load_path at a folder saved by save_pretrained");
    }
    for (const auto& [name, file] : where_) {
      const SafetensorsFile& f = open(file);
      if (!f.find(name))
        throw InputError("Hugging Face checkpoint " + dir.string() + ": model.safetensors.index.json puts '" +
                         message_text(name) + "' in " + message_text(file) +
                         ", which does not hold it; re-download the checkpoint");
    }
  }

  // The file holding `name`; nullptr when none does.
  const SafetensorsFile* file_of(const std::string& name) const {
    auto it = where_.find(name);
    return it == where_.end() ? nullptr : files_.at(it->second).get();
  }
  const std::map<std::string, std::string>& names() const { return where_; }

 private:
  const SafetensorsFile& open(const std::string& file) {
    auto& f = files_[file];
    if (!f) {
      const std::string where = "Hugging Face checkpoint " + dir_.string();
      const fs::path path = confined_file(dir_, file, where, "model.safetensors.index.json");
      if (!fs::exists(path))
        throw InputError(where + ": shard " + message_text(file) +
                         " named by model.safetensors.index.json is missing; re-download the checkpoint");
      f = std::make_unique<SafetensorsFile>(path.string());
    }
    return *f;
  }

  fs::path dir_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::string> where_;  // tensor → file
};

// What config.json says beyond the shapes: tie_word_embeddings (false when
// absent, Llama 3's value) and the layers past the model's last that readers
// skip (DeepSeek-V3's multi-token prediction).
struct HfConfigFacts {
  bool tied = false;
  int64_t skipped_layers = 0;
};

// Reads config.json (when present: a bare safetensors folder has none) and
// checks it against the recipe before any tensor: the family, every size,
// RoPE's theta and whether the embeddings are tied (the tensors' shapes
// cannot show the head counts the q/k permutation depends on, nor theta);
// the family's adapter checks its own keys (DeepSeek-V3's routing and YaRN,
// which no shape shows).
HfConfigFacts check_config(const fs::path& dir, const ModelArgs& args) {
  const fs::path path = dir / "config.json";
  std::error_code ec;
  HfConfigFacts facts;
  if (!fs::exists(path, ec)) return facts;
  nlohmann::json c;
  try {
    c = nlohmann::json::parse(read_file_bounded(path.string(), "Hugging Face config", kMaxJsonBytes, false));
  } catch (const nlohmann::json::exception&) {
    throw InputError(path.string() + " is not JSON; restore it or delete it (the tensors' shapes are checked anyway)");
  }
  if (!c.is_object()) throw InputError(path.string() + " is not a JSON object; restore it or delete it");
  const HfAdapter& hf = hf_adapter(args);
  const HfConfigCheck config(path.string(), c);
  const std::string want_type = hf.model_type(args);
  if (c.contains("model_type") && c["model_type"] != want_type)
    throw InputError(path.string() + ": model_type = " + message_text(c["model_type"].dump()) + " but model.name \"" +
                     args.family + "\" (this flavor) reads Hugging Face \"" + want_type +
                     "\" checkpoints; use a checkpoint of that model or set model.name and model.flavor to its own");
  config.integer("num_hidden_layers", args.n_layers);
  config.integer("hidden_size", args.dim);
  const bool all_moe = args.moe.num_experts > 0 && args.n_dense_layers == 0;
  if (!all_moe) config.integer("intermediate_size", args.ffn_hidden_dim());  // an all-MoE model has no dense FFN
  if (args.moe.num_experts > 0) {
    config.integer(c.contains("num_experts")        ? "num_experts"
                   : c.contains("n_routed_experts") ? "n_routed_experts"
                                                    : "num_local_experts",
                   args.moe.num_experts);
    config.integer("num_experts_per_tok", args.moe.top_k);
    config.integer("moe_intermediate_size", args.moe.hidden_dim);
    if (c.contains("decoder_sparse_step")) config.integer("decoder_sparse_step", 1);
    if (c.contains("mlp_only_layers") && !(c["mlp_only_layers"].is_array() && c["mlp_only_layers"].empty()))
      config.fail("mlp_only_layers = " + message_text(c["mlp_only_layers"].dump()) +
                  " but every layer of the model is an MoE layer" + HfConfigCheck::kOtherModel);
    config.boolean("norm_topk_prob", args.moe.route_norm, "route_norm");
  }
  config.integer("num_attention_heads", args.n_heads);
  facts.skipped_layers = hf.check_config(config, args);
  config.integer("vocab_size", args.vocab_size);
  if (c.contains("rope_theta")) config.real(c["rope_theta"], "rope_theta", args.rope_theta);
  if (c.contains("rope_parameters") && c["rope_parameters"].is_object() && c["rope_parameters"].contains("rope_theta"))
    config.real(c["rope_parameters"]["rope_theta"], "rope_parameters.rope_theta", args.rope_theta);
  if (!c.contains("tie_word_embeddings")) return facts;
  if (!c["tie_word_embeddings"].is_boolean())
    config.fail("tie_word_embeddings = " + message_text(c["tie_word_embeddings"].dump()) +
                " is not true or false; restore the file");
  facts.tied = c["tie_word_embeddings"].get<bool>();
  return facts;
}

// `name` through the tables: TorchTitan → Hugging Face (to_hf) or back.
// (Routed experts map per expert: expert_hf_name / expert_of_hf.)
std::string map_name(const std::string& name, bool to_hf, const HfNames& family_names) {
  for (const auto& [tt, hf] : top_names())
    if (name == (to_hf ? tt : hf)) return to_hf ? hf : tt;
  const std::string from = to_hf ? "layers." : "model.layers.", to = to_hf ? "model.layers." : "layers.";
  if (const auto layer = split_layer(name, from)) {
    for (const HfNames* table : {&family_names, &common_layer_names()})  // the family's own names first
      for (const auto& [tt, hf] : *table)
        if (layer->second == (to_hf ? tt : hf)) return to + layer->first + "." + (to_hf ? hf : tt);
  }
  return "";
}

// The family's part (HfAdapter::layer_parts) a layer parameter or Hugging
// Face tensor name is, with the name on the other side; nullopt when none.
std::optional<std::pair<const HfPart*, std::string>> part_of(const std::string& name, bool to_hf, const ModelArgs& args) {
  const auto layer = split_layer(name, to_hf ? "layers." : "model.layers.");
  if (!layer) return std::nullopt;
  for (const HfPart& p : hf_adapter(args).layer_parts)
    if (layer->second == (to_hf ? p.fqn_suffix : p.hf_suffix))
      return std::make_pair(&p, (to_hf ? "model.layers." : "layers.") + layer->first + "." +
                                    (to_hf ? p.hf_suffix : p.fqn_suffix));
  return std::nullopt;
}

// ctitan's tensor as a view of the Hugging Face tensor `hf` it is a part of.
at::Tensor part_view(const at::Tensor& hf, const HfPart& p) {
  at::Tensor t = p.interleaved >= 0 ? hf.slice(-1, p.interleaved, std::nullopt, 2) : hf;
  return p.transposed ? t.transpose(-2, -1) : t;
}

// "layers.N.moe.experts.w1" and expert e → "model.layers.N.mlp.experts.e.gate_proj.weight";
// "" when fqn is no routed-expert tensor (or the family holds it as a part).
std::string expert_hf_name(const std::string& fqn, int64_t e, const ModelArgs& args) {
  const auto layer = split_layer(fqn, "layers.");
  if (!layer || part_of(fqn, true, args)) return "";
  for (const auto& [tt, hf] : expert_names())
    if (layer->second == tt) return "model.layers." + layer->first + ".mlp.experts." + std::to_string(e) + "." + hf;
  return "";
}

// The inverse: (fqn, expert) of a per-expert Hugging Face name, nullopt otherwise.
std::optional<std::pair<std::string, int64_t>> expert_of_hf(const std::string& hf) {
  const auto layer = split_layer(hf, "model.layers.");
  if (!layer) return std::nullopt;
  const auto expert = split_layer(layer->second, "mlp.experts.");
  if (!expert) return std::nullopt;
  for (const auto& [tt, name] : expert_names())
    if (expert->second == name) return std::make_pair("layers." + layer->first + "." + tt, std::stoll(expert->first));
  return std::nullopt;
}

// One Hugging Face tensor of a ctitan parameter: the whole parameter,
// expert `expert` of a routed-expert tensor (its dim-0 slice), or the
// parameter is a part of it (`part`).
struct HfTensor {
  std::string name;
  int64_t expert = -1;
  const HfPart* part = nullptr;
};

std::vector<HfTensor> hf_tensors_of(const ParamSpec& p, const ModelArgs& args) {
  if (const auto part = part_of(p.name, true, args)) return {{part->second, -1, part->first}};
  if (expert_hf_name(p.name, 0, args).empty()) return {{hf_name_of(p.name, args), -1}};
  std::vector<HfTensor> out;
  for (int64_t e = 0; e < p.global_shape.at(0); ++e) out.push_back({expert_hf_name(p.name, e, args), e});
  return out;
}

// The Hugging Face tensor's shape.
std::vector<int64_t> hf_shape(const ParamSpec& p, const HfTensor& t) {
  if (t.part) {
    std::vector<int64_t> s = p.global_shape;
    if (t.part->transposed) std::swap(s[s.size() - 1], s[s.size() - 2]);
    if (t.part->interleaved >= 0) s.back() *= 2;
    return s;
  }
  if (t.expert < 0) return p.global_shape;
  return std::vector<int64_t>(p.global_shape.begin() + 1, p.global_shape.end());
}

// A model whose weights would compute other logits in transformers (the
// family's adapter says why), or a family without an adapter: InputError
// naming what to do.
void check_hf_family(const ModelArgs& args) {
  const HfAdapter& hf = hf_adapter(args);
  if (!hf.model_type)
    throw InputError("Hugging Face checkpoints of model.name \"" + args.family +
                     "\": ctitan has no Hugging Face adapter for this family; set checkpoint.initial_load_in_hf "
                     "and last_save_in_hf to false (ctitan's own checkpoint format)");
  const std::string why = hf.refuses ? hf.refuses(args) : "";
  if (!why.empty()) throw InputError(why);
}

// The tensors a Hugging Face checkpoint holds, as TorchTitan FQNs: the
// model's parameters and, where the family's checkpoints hold them
// (HfAdapter::expert_bias), each MoE layer's expert bias.
std::vector<ParamSpec> hf_param_specs(const ModelArgs& args) {
  std::vector<ParamSpec> specs = model_param_specs(args, ModelPart{});
  if (hf_adapter(args).expert_bias && args.moe.num_experts > 0)
    for (int64_t l = args.n_dense_layers; l < args.n_layers; ++l)
      specs.push_back(whole_param("layers." + std::to_string(l) + ".moe.expert_bias", {args.moe.num_experts}));
  return specs;
}

bool is_expert_bias(const std::string& fqn) {
  static const std::string suffix = ".moe.expert_bias";
  return fqn.size() > suffix.size() && fqn.compare(fqn.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void check_hf_checkpoint_family(const ModelArgs& args) { check_hf_family(args); }

std::string hf_name_of(const std::string& fqn, const ModelArgs& args) {
  return map_name(fqn, true, hf_adapter(args).layer_names);
}
std::string fqn_of_hf(const std::string& hf_name, const ModelArgs& args) {
  if (const auto part = part_of(hf_name, false, args)) return part->second;  // the first parameter it holds
  if (const auto e = expert_of_hf(hf_name)) return e->first;
  return map_name(hf_name, false, hf_adapter(args).layer_names);
}

at::Tensor to_hf_layout(const std::string& fqn, const at::Tensor& whole, const ModelArgs& args) {
  const int64_t n = rotary_heads(fqn, args), Dh = args.head_dim();
  if (n == 0) return whole;
  // Row h·Dh + 2i + j (ctitan's pair i) → h·Dh + j·Dh/2 + i (rotate_half's halves).
  return whole.view({n, Dh / 2, 2, whole.size(1)}).transpose(1, 2).reshape(whole.sizes());
}

at::Tensor from_hf_layout(const std::string& fqn, const at::Tensor& hf, const ModelArgs& args) {
  const int64_t n = rotary_heads(fqn, args), Dh = args.head_dim();
  if (n == 0) return hf;
  return hf.reshape({n, 2, Dh / 2, hf.size(1)}).transpose(1, 2).reshape(hf.sizes());
}

const std::vector<std::pair<std::string, at::ScalarType>>& export_dtypes() {
  static const std::vector<std::pair<std::string, at::ScalarType>> t = {
      {"float32", at::kFloat}, {"bfloat16", at::kBFloat16}, {"float16", at::kHalf}};
  return t;
}

at::ScalarType export_dtype(const std::string& name) {
  for (const auto& [n, t] : export_dtypes())
    if (n == name) return t;
  throw std::invalid_argument("checkpoint.export_dtype '" + name + "' is not float32|bfloat16|float16");
}

std::string export_dtype_name(at::ScalarType dtype) {
  for (const auto& [n, t] : export_dtypes())
    if (t == dtype) return n;
  throw std::invalid_argument(std::string("hf export: no Hugging Face name for ") + c10::toString(dtype));
}

HfExportOptions hf_export_options(const JobConfig& cfg) {
  HfExportOptions o;
  o.dtype = export_dtype(cfg.checkpoint.export_dtype);
  o.seq_len = cfg.training.seq_len;
  // BOS/EOS ids come from the run's tokenizer, when it has one.
  const std::string& assets = cfg.model.hf_assets_path;
  if (!assets.empty() && (fs::exists(fs::path(assets) / "tokenizer.json") || fs::is_regular_file(assets))) {
    try {
      const Tokenizer tok = Tokenizer::from_file(assets);
      o.bos_id = tok.bos_id();
      o.eos_id = tok.eos_id();
    } catch (const InputError&) {
      // The data loader reports a bad tokenizer; config.json just omits the ids.
    }
  }
  return o;
}

nlohmann::json hf_config_json(const ModelArgs& args, const HfExportOptions& opts) {
  check_hf_family(args);
  const HfAdapter& hf = hf_adapter(args);
  const std::string dtype = export_dtype_name(opts.dtype);
  // The keys of every family's decoder (transformers 5 spells the dtype
  // "dtype" and the RoPE "rope_parameters"; 4.x reads torch_dtype, rope_theta
  // and rope_scaling); the family adds its own.
  nlohmann::json c = {
      {"architectures", {hf.architecture(args)}},
      {"model_type", hf.model_type(args)},
      {"hidden_size", args.dim},
      {"intermediate_size", args.ffn_hidden_dim()},
      {"num_hidden_layers", args.n_layers},
      {"num_attention_heads", args.n_heads},
      {"num_key_value_heads", args.n_kv_heads},
      {"head_dim", args.head_dim()},
      {"vocab_size", args.vocab_size},
      {"hidden_act", "silu"},
      {"rms_norm_eps", args.norm_eps},
      {"rope_theta", args.rope_theta},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"tie_word_embeddings", args.tie_embeddings},
      {"use_cache", true},
      {"torch_dtype", dtype},
      {"dtype", dtype}};
  if (opts.bos_id >= 0) c["bos_token_id"] = opts.bos_id;
  if (opts.eos_id >= 0) c["eos_token_id"] = opts.eos_id;
  hf.write_config(args, opts.seq_len, c);
  return c;
}

void write_hf_checkpoint(const std::string& dir_in, const ModelArgs& args,
                         const std::function<at::Tensor(const std::string& fqn)>& whole, const HfExportOptions& opts) {
  check_hf_family(args);
  const fs::path dir = fs::absolute(dir_in).lexically_normal();
  const std::vector<ParamSpec> params = hf_param_specs(args);
  // One entry per Hugging Face tensor (a routed-expert tensor gives one per
  // expert), in model order.
  // A tensor of parts (HfAdapter::layer_parts) is one entry with a source
  // per part.
  struct Source {
    size_t param;
    int64_t expert;  // or -1
    const HfPart* part;
  };
  std::vector<SafetensorsWriter::Spec> specs;
  std::vector<std::vector<Source>> source;
  std::map<std::string, size_t> entry_of;  // a parts tensor's name → its entry
  int64_t total = 0;
  for (size_t i = 0; i < params.size(); ++i)
    for (const HfTensor& h : hf_tensors_of(params[i], args)) {
      if (h.part && entry_of.count(h.name)) {
        source[entry_of[h.name]].push_back({i, -1, h.part});
        continue;
      }
      if (h.part) entry_of[h.name] = specs.size();
      // The expert bias stays fp32, as transformers keeps it (a bf16 bias
      // would round away the ±coeff steps it accumulates).
      specs.push_back({h.name, is_expert_bias(params[i].name) ? at::kFloat : opts.dtype, hf_shape(params[i], h)});
      source.push_back({{i, h.expert, h.part}});
    }
  for (const auto& s : specs) total += SafetensorsWriter::nbytes(s);
  const auto shards = plan_shards(specs, opts.max_shard_bytes);

  const fs::path tmp = dir.parent_path() / ("." + dir.filename().string() + ".hf.tmp");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  nlohmann::json weight_map = nlohmann::json::object();
  torch::NoGradGuard no_grad;
  size_t held = params.size();  // the parameter `t` holds (each is asked for once: its entries are adjacent)
  at::Tensor t;
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string file = shards.size() == 1 ? "model.safetensors" : shard_file_name(k, shards.size());
    std::vector<SafetensorsWriter::Spec> in_shard;
    for (size_t i : shards[k]) in_shard.push_back(specs[i]);
    SafetensorsWriter out((tmp / file).string(), in_shard);
    for (size_t i : shards[k]) {
      at::Tensor parts;  // the entry's tensor, when it is made of parts
      for (const auto& [pi, expert, part] : source[i]) {
        if (pi != held) {
          t = whole(params[pi].name);
          held = pi;
          if (t.sizes().vec() != params[pi].global_shape)
            throw std::logic_error("hf export: '" + params[pi].name + "' is " + dims_text(t.sizes().vec()) +
                                   ", expected " + dims_text(params[pi].global_shape));
          t = to_hf_layout(params[pi].name, t.cpu(), args);
        }
        if (!part) {
          out.add((expert < 0 ? t : t[expert]).to(specs[i].dtype));
          continue;
        }
        if (!parts.defined()) parts = at::zeros(specs[i].shape, at::TensorOptions().dtype(specs[i].dtype));
        part_view(parts, *part).copy_(t);
      }
      if (parts.defined()) out.add(parts);
      weight_map[specs[i].name] = file;
    }
    out.finish();
  }
  const auto write_json = [&](const std::string& name, const nlohmann::json& j) {
    std::ofstream out(tmp / name);
    out << j.dump(2) << "\n";
    if (!out) throw std::runtime_error("hf export: writing " + (tmp / name).string() + " failed");
    out.close();
    fsync_path(tmp / name);
  };
  if (shards.size() > 1)
    write_json("model.safetensors.index.json", {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
  write_json("config.json", hf_config_json(args, opts));
  fsync_path(tmp);
  fs::remove_all(dir);
  fs::rename(tmp, dir);
  fsync_path(dir.parent_path());
}

void export_hf_checkpoint(const std::string& checkpoint_folder, int64_t step, const TensorPieces& pieces,
                          const ModelArgs& args, const HfExportOptions& opts, const SaveGroup& group) {
  // Every rank's boxes go to a hidden ctitan checkpoint; its loader
  // assembles whole tensors from them, whatever the layout was.
  const fs::path staging = fs::absolute(fs::path(checkpoint_folder) / (".hf-export-step-" + std::to_string(step)));
  CheckpointSection c;
  c.enable = true;
  c.folder = staging.string();
  c.keep_latest_k = 0;
  c.load_step = step;
  Checkpointer boxes(c, "");
  TensorPieces model;
  for (const auto& p : pieces)
    if (p.name.rfind("model.", 0) == 0) model.push_back(p);
  boxes.save_sharded(step, model, {{"step", step}}, nlohmann::json::object(), true, group);
  if (group.rank == 0) {
    const at::ScalarType master = model.empty() ? at::kFloat : model.front().tensor.scalar_type();
    const std::vector<ParamSpec> params = hf_param_specs(args);
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& p : params) shapes[p.name] = p.global_shape;
    write_hf_checkpoint((fs::path(checkpoint_folder) / ("step-" + std::to_string(step))).string(), args,
                        [&](const std::string& fqn) {
                          const std::vector<int64_t>& shape = shapes.at(fqn);
                          at::Tensor t = torch::empty(shape, at::TensorOptions().dtype(master));
                          boxes.load_sharded({{"model." + fqn, t, shape, {}}});
                          return t;
                        },
                        opts);
    fs::remove_all(staging);
  }
  if (group.world > 1) group.barrier();
}

void load_hf_checkpoint(const std::string& dir_in, const ModelArgs& args, const TensorPieces& pieces) {
  const fs::path dir(dir_in);
  const std::string where = "Hugging Face checkpoint " + dir.string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InputError(where + " is not a folder; point checkpoint.initial_load_path at a Hugging Face model folder");
  check_hf_family(args);
  const HfConfigFacts config = check_config(dir, args);
  const bool tied = config.tied;
  HfFolder folder(dir);

  // Everything is checked before anything loads, in model order.
  const std::vector<ParamSpec> params = hf_param_specs(args);
  std::map<std::string, std::vector<HfTensor>> source;  // fqn → its Hugging Face tensors
  for (const auto& p : params) {
    std::vector<HfTensor> hfs = hf_tensors_of(p, args);
    for (HfTensor& h : hfs) {
      // Tied embeddings (Llama 3.2 1B/3B): no lm_head.weight, and config.json says so.
      if (!folder.file_of(h.name) && p.name == "output.weight" && tied) h.name = "model.embed_tokens.weight";
      const SafetensorsFile* f = folder.file_of(h.name);
      if (!f)
        throw InputError(where + " has no tensor '" + h.name + "' (the model's " + p.name + ")" +
                         (p.name == "output.weight" ? " and its config.json does not say tie_word_embeddings = true"
                                                    : "") +
                         "; check model.flavor or the checkpoint's architecture");
      const at::ScalarType dtype = f->find(h.name)->dtype;
      if (!at::isFloatingType(dtype))
        throw InputError(where + ": tensor '" + h.name + "' is " + safetensors_dtype_name(dtype) +
                         ", not a floating-point type (F32, BF16, F16, F64): these are not model weights; "
                         "re-export the checkpoint");
      const auto& shape = f->find(h.name)->shape;
      if (shape != hf_shape(p, h))
        throw InputError(where + ": tensor '" + h.name + "' has shape " + dims_text(shape) + " but the model expects " +
                         dims_text(hf_shape(p, h)) + " (" + p.name +
                         "); the checkpoint is for another model size: check model.flavor");
    }
    source[p.name] = std::move(hfs);
  }
  for (const auto& [hf, file] : folder.names()) {
    if (hf.find("rotary_emb.inv_freq") != std::string::npos) continue;
    // Layers the family's readers skip follow the model's last layer
    // (DeepSeek-V3's multi-token prediction, model.layers.61 of 671B):
    // transformers skips them, as does ctitan.
    if (const auto layer = split_layer(hf, "model.layers."))
      if (std::stoll(layer->first) >= args.n_layers && std::stoll(layer->first) < args.n_layers + config.skipped_layers)
        continue;
    const std::string fqn = fqn_of_hf(hf, args);
    const auto expert = expert_of_hf(hf);
    const auto it = source.find(fqn);
    if (fqn.empty() || it == source.end() || (expert && expert->second >= static_cast<int64_t>(it->second.size())))
      throw InputError(where + ": tensor '" + message_text(hf) + "' in " + message_text(file) +
                       " has no place in the model (" + std::to_string(args.n_layers) + " layers" +
                       (args.moe.num_experts > 0 ? ", " + std::to_string(args.moe.num_experts) + " experts" : "") +
                       "); the checkpoint is for another model: check model.flavor");
  }

  torch::NoGradGuard no_grad;
  for (const auto& piece : pieces) {
    if (piece.name.rfind("model.", 0) != 0) continue;
    const std::string fqn = piece.name.substr(6);
    auto it = source.find(fqn);
    // The MoE expert biases are buffers Hugging Face's Qwen3-MoE lacks: they
    // keep their initial zeros, as a model built by TorchTitan's adapter.
    if (it == source.end() && is_expert_bias(fqn)) continue;
    if (it == source.end()) throw std::logic_error("hf load: the model has no parameter '" + fqn + "'");
    const at::Tensor& dst = piece.tensor;
    std::vector<int64_t> lo = piece.offsets;
    if (lo.empty()) lo.assign(dst.dim(), 0);
    const auto box_of = [&](at::Tensor src, const at::Tensor& to, size_t first_dim) {
      for (int64_t d = 0; d < to.dim(); ++d) src = src.narrow(d, lo[d + first_dim], to.size(d));
      return src;
    };
    const std::vector<HfTensor>& hfs = it->second;
    const int64_t heads = rotary_heads(fqn, args);
    struct Copy {
      at::Tensor to, from;
      const std::string& name;  // the Hugging Face tensor `from` is a box of
    };
    std::vector<Copy> copies;
    if (hfs.front().part) {
      const std::string& name = hfs.front().name;
      copies.push_back({dst, box_of(part_view(folder.file_of(name)->tensor(name), *hfs.front().part), dst, 0), name});
    } else if (hfs.front().expert >= 0) {
      // This box's experts, one Hugging Face tensor each.
      for (int64_t e = 0; e < dst.size(0); ++e) {
        const std::string& name = hfs.at(lo[0] + e).name;
        copies.push_back({dst[e], box_of(folder.file_of(name)->tensor(name), dst[e], 1), name});
      }
    } else if (heads == 0) {
      copies.push_back({dst, box_of(folder.file_of(hfs.front().name)->tensor(hfs.front().name), dst, 0), hfs.front().name});
    } else {
      // Only the heads the box touches are un-permuted (rows of a head are
      // contiguous in both layouts).
      const at::Tensor src = folder.file_of(hfs.front().name)->tensor(hfs.front().name);
      const int64_t Dh = args.head_dim(), rows = dst.size(0);
      const int64_t h0 = lo[0] / Dh, h1 = (lo[0] + rows + Dh - 1) / Dh;
      copies.push_back({dst,
                        src.view({heads, 2, Dh / 2, src.size(1)})
                            .narrow(0, h0, h1 - h0)
                            .narrow(3, lo[1], dst.size(1))
                            .transpose(1, 2)
                            .reshape({(h1 - h0) * Dh, dst.size(1)})
                            .narrow(0, lo[0] - h0 * Dh, rows),
                        hfs.front().name});
    }
    for (const Copy& c : copies)
      if (!at::isfinite(c.from).all().item<bool>())  // this rank's box of it
        throw InputError(where + ": tensor '" + c.name + "' holds NaN or infinite values; re-export the checkpoint");
    for (const Copy& c : copies) at::Tensor(c.to).copy_(c.from);
  }
}

bool initial_load_hf(const JobConfig& cfg, const Checkpointer& ckpt, const ModelArgs& args, const TensorPieces& pieces,
                     bool rank0) {
  if (!cfg.checkpoint.initial_load_in_hf || !ckpt.enabled()) return false;
  if (!ckpt.saved_steps().empty()) {
    if (rank0)
      std::cerr << "ctitan: warning: checkpoint.initial_load_in_hf is set but " << ckpt.folder()
                << " holds checkpoints; resuming from those, not from the Hugging Face weights (as TorchTitan)"
                << std::endl;
    return false;
  }
  const std::string dir =
      cfg.checkpoint.initial_load_path.empty() ? cfg.model.hf_assets_path : cfg.checkpoint.initial_load_path;
  const char* key = cfg.checkpoint.initial_load_path.empty() ? "model.hf_assets_path" : "checkpoint.initial_load_path";
  if (dir.empty() || !fs::is_directory(dir))
    throw InputError(std::string(key) + " '" + dir +
                     "' is not a folder; point checkpoint.initial_load_path at a Hugging Face model folder");
  load_hf_checkpoint(dir, args, pieces);
  if (rank0 && args.yarn.enabled) {
    // transformers applies the YaRN config.json names at every length;
    // ctitan (as TorchTitan) only past original_seq_len. Loading is right
    // either way; the logits differ from transformers' where the two differ.
    nlohmann::json c;
    try {
      c = nlohmann::json::parse(
          read_file_bounded((fs::path(dir) / "config.json").string(), "Hugging Face config", kMaxJsonBytes, false));
    } catch (const std::exception&) {
    }
    const bool named = c.is_object() && hf_yarn_of(c) != nullptr;
    const bool applied = args.yarn.active(cfg.training.seq_len);
    if (named != applied)
      std::cerr << "ctitan: warning: " << dir << "/config.json " << (named ? "names" : "does not name")
                << " YaRN RoPE scaling, but this run (training.seq_len " << cfg.training.seq_len << ", original length "
                << args.yarn.original_seq_len << ") " << (applied ? "applies" : "does not apply")
                << " it, as TorchTitan; its logits differ from transformers' for the same weights" << std::endl;
  }
  if (rank0)
    std::cout << "ctitan: loaded the model from Hugging Face checkpoint " << dir << " (" << key
              << "; weights only, training starts at step 1)" << std::endl;
  return true;
}

}  // namespace ctitan
