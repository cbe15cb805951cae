#include "reports/aliases.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>
#include <toml++/toml.h>

namespace ctitan::alias {
namespace {

std::string last_part(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "bfloat16" → "bf16", "float32" → "fp32"; others as they are.
std::string dtype(const std::string& v) {
  static const std::map<std::string, std::string> kShort = {
      {"bfloat16", "bf16"}, {"float32", "fp32"}, {"float16", "fp16"}, {"float8_e4m3fn", "e4m3"}};
  const auto it = kShort.find(v);
  return it == kShort.end() ? v : it->second;
}

// The layout keys in the order their tokens appear in a name, with the
// token's prefix ("tp" + degree).
struct LayoutKey {
  const char* key;
  const char* prefix;
};
constexpr LayoutKey kLayoutKeys[] = {
    {"parallelism.data_parallel_replicate_degree", "rep"},
    {"parallelism.data_parallel_shard_degree", "shard"},
    {"parallelism.enable_async_tensor_parallel", ""},
    {"parallelism.tensor_parallel_degree", "tp"},
    {"parallelism.pipeline_parallel_degree", "pp"},
    {"parallelism.pipeline_parallel_schedule", ""},
    {"parallelism.context_parallel_degree", "cp"},
    {"parallelism.expert_parallel_degree", "ep"},
};

}  // namespace

bool is_layout_key(const std::string& key) {
  return std::any_of(std::begin(kLayoutKeys), std::end(kLayoutKeys),
                     [&](const LayoutKey& k) { return key == k.key; });
}

std::string key_name(const std::string& key) {
  static const std::map<std::string, std::string> kNames = {
      {"compile.enable", "compile"},
      {"model.converters", "Float8"},
      {"activation_checkpoint.mode", "AC"},
      {"activation_checkpoint.selective_ac_option", "selective AC"},
      {"training.local_batch_size", "batch"},
      {"training.global_batch_size", "global batch"},
      {"training.seq_len", "seq"},
      {"training.mixed_precision_param", "param dtype"},
      {"training.mixed_precision_reduce", "reduce dtype"},
      {"parallelism.data_parallel_replicate_degree", "dp replicate"},
      {"parallelism.data_parallel_shard_degree", "dp shard"},
      {"parallelism.tensor_parallel_degree", "tp"},
      {"parallelism.enable_async_tensor_parallel", "async TP"},
      {"parallelism.pipeline_parallel_degree", "pp"},
      {"parallelism.pipeline_parallel_schedule", "pp schedule"},
      {"parallelism.context_parallel_degree", "cp"},
      {"parallelism.expert_parallel_degree", "ep"},
      {"model.attn_mask_type", "mask"},
      {"model.attn_type", "attention"},
      {"model.moe_num_experts", "experts"},
      {"model.moe_top_k", "top-k"},
      {"model.moe_load_balance_coeff", "load balance"},
      {"model.n_layers", "layers"},
  };
  const auto it = kNames.find(key);
  if (it != kNames.end()) return it->second;
  if (ends_with(key, "float8.recipe_name")) return "Float8 recipe";
  std::string name = last_part(key);
  if ((name == "enable" || name == "enabled" || name == "mode") && key.find('.') != std::string::npos) {
    const std::string head = key.substr(0, key.rfind('.'));
    name = last_part(head);
  }
  return name;
}

std::string token(const std::string& key, const std::string& value) {
  if (key == "compile.enable") return value == "true" ? "compile" : "";
  if (key == "model.converters") {
    if (value.empty() || value == "[]") return "";
    std::string out;
    std::istringstream in(value);
    for (std::string c; std::getline(in, c, ',');) {
      const std::string t = c.find("float8") != std::string::npos ? "f8" : c.find("mx") != std::string::npos ? "mx" : c;
      out += (out.empty() ? "" : "+") + t;
    }
    return out;
  }
  if (key == "activation_checkpoint.mode") return value == "none" ? "" : "ac=" + value;
  if (key == "activation_checkpoint.selective_ac_option") return "sac=" + value;
  if (key == "training.local_batch_size") return "b" + value;
  if (key == "training.global_batch_size") return "gb" + value;
  if (key == "training.seq_len") return "s" + value;
  if (key == "training.mixed_precision_param") return "param=" + dtype(value);
  if (key == "training.mixed_precision_reduce") return "reduce=" + dtype(value);
  if (key == "parallelism.enable_async_tensor_parallel") return value == "true" ? "async" : "";
  if (key == "parallelism.pipeline_parallel_schedule") return value;
  if (ends_with(key, "float8.recipe_name")) return "f8=" + value;
  if (key == "model.moe_num_experts") return "e" + value;
  if (key == "model.moe_top_k") return "top" + value;
  if (key == "model.moe_load_balance_coeff") return std::strtod(value.c_str(), nullptr) == 0 ? "" : "lb=" + value;
  if (key == "model.n_layers") return "L" + value;
  if (key == "model.attn_mask_type" || key == "model.attn_type" || key == "model.flavor" || key == "model.name")
    return value;
  for (const LayoutKey& k : kLayoutKeys)
    if (key == k.key) return value == "-1" ? std::string(k.prefix) + "=auto" : k.prefix + value;
  return last_part(key) + "=" + value;
}

std::string value_name(const std::string& key, const std::string& value) {
  const std::string t = token(key, value);
  if (!t.empty()) return t;
  if (key == "compile.enable") return "eager";
  if (key == "model.converters") return "no converter";
  if (key == "activation_checkpoint.mode") return "ac=none";
  if (key == "parallelism.enable_async_tensor_parallel") return "sync TP";
  if (key == "model.moe_load_balance_coeff") return "lb=0";
  return key_name(key) + "=" + value;
}

std::string layout(const std::string& config_toml, int64_t world_size) {
  toml::table t;
  try {
    t = toml::parse(config_toml);
  } catch (const toml::parse_error&) {
    return "";
  }
  const toml::node_view<toml::node> p = t["parallelism"];
  const int64_t rep = p["data_parallel_replicate_degree"].value_or(int64_t{1});
  const int64_t tp = p["tensor_parallel_degree"].value_or(int64_t{1});
  const int64_t pp = p["pipeline_parallel_degree"].value_or(int64_t{1});
  const int64_t cp = p["context_parallel_degree"].value_or(int64_t{1});
  const int64_t ep = p["expert_parallel_degree"].value_or(int64_t{1});
  int64_t shard = p["data_parallel_shard_degree"].value_or(int64_t{-1});
  const int64_t others = std::max<int64_t>(1, rep * tp * pp * cp);
  if (shard < 0) shard = std::max<int64_t>(1, world_size / others);
  std::vector<std::string> out;
  if (rep > 1 && shard > 1)
    out.push_back("hsdp" + std::to_string(rep) + "x" + std::to_string(shard));
  else if (rep > 1)
    out.push_back("ddp" + std::to_string(rep));
  else if (shard > 1)
    out.push_back("fsdp" + std::to_string(shard));
  if (tp > 1) out.push_back((p["enable_async_tensor_parallel"].value_or(false) ? "async tp" : "tp") + std::to_string(tp));
  if (pp > 1) out.push_back("pp" + std::to_string(pp) + " " + p["pipeline_parallel_schedule"].value_or(std::string("1F1B")));
  if (cp > 1) out.push_back("cp" + std::to_string(cp));
  if (ep > 1) out.push_back("ep" + std::to_string(ep));
  if (out.empty()) return "single";
  std::string s;
  for (const std::string& o : out) s += (s.empty() ? "" : " ") + o;
  return s;
}

std::string layout_from_settings(const std::vector<std::pair<std::string, std::string>>& settings) {
  std::string s;
  for (const LayoutKey& k : kLayoutKeys)
    for (const auto& [key, value] : settings)
      if (key == k.key) {
        const std::string t = token(key, value);
        if (!t.empty()) s += (s.empty() ? "" : " ") + t;
      }
  return s;
}

}  // namespace ctitan::alias
