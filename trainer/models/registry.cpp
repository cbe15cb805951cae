#include "trainer/models/registry.h"

#include <algorithm>

#include "common/errors.h"
#include "trainer/config/config_registry.h"
#include "trainer/config/job_config.h"
#include "trainer/models/deepseek_v3.h"
#include "trainer/models/gpt_oss.h"
#include "trainer/models/llama3.h"
#include "trainer/models/qwen3.h"

namespace ctitan {

namespace {

// The families, in the order messages and --help name them.
const std::vector<const ModelFamily*>& families() {
  static const std::vector<const ModelFamily*> all = {&llama3_family(), &qwen3_family(), &deepseek_v3_family(),
                                                                &gpt_oss_family()};
  return all;
}

std::string quoted_family_names() {
  std::string known;
  for (const auto& n : model_family_names()) known += (known.empty() ? "\"" : ", \"") + n + "\"";
  return known;
}

// config/'s check of model.name (the config names where the value was set).
// TorchTitan's families ctitan does not have are named as such, so that a
// recipe of theirs never trains (and records) another family under their name.
std::string model_name_error(const std::string& name) {
  if (is_model_family(name)) return "";
  const std::string what = "model.name " + config::render_value(config::Value(name));
  if (name == "llama4")
    return what + " is TorchTitan v0.2.2's Llama 4, which TorchTitan's later main removed; ctitan does not build "
                  "it; ctitan's families: " + quoted_family_names();
  for (const char* tt : {"llama3_ft", "flux", "simple_fsdp"})
    if (name == tt)
      return what + " is a TorchTitan model family ctitan does not have yet; ctitan's families: " +
             quoted_family_names();
  return what + " is not a model family; ctitan's families: " + quoted_family_names();
}

// Installed before main: every program that links the families checks
// model.name when it reads a config.
[[maybe_unused]] const bool model_name_check_installed = (config::set_model_name_check(&model_name_error), true);

}  // namespace

std::vector<std::string> model_family_names() {
  std::vector<std::string> names;
  for (const ModelFamily* f : families()) names.push_back(f->name);
  return names;
}

bool is_model_family(const std::string& name) {
  const auto& all = families();
  return std::any_of(all.begin(), all.end(), [&](const ModelFamily* f) { return f->name == name; });
}

const ModelFamily& model_family(const std::string& name) {
  for (const ModelFamily* f : families())
    if (f->name == name) return *f;
  throw InputError("model.name \"" + name + "\" is not a model family; ctitan's families: " + quoted_family_names());
}

ModelArgs model_flavor(const std::string& name, const std::string& flavor, const FlavorOverrides& o) {
  const ModelFamily& f = model_family(name);
  ModelArgs a = f.flavor(flavor);
  a.family = f.name;
  if (o.n_layers > 0) {
    a.n_layers = o.n_layers;
    a.n_dense_layers = std::min(a.n_dense_layers, o.n_layers);
  }
  if (!o.attn_type.empty()) a.attn_type = o.attn_type;
  if (!o.attn_mask_type.empty()) a.attn_mask_type = o.attn_mask_type;
  if (a.attn_type != "sdpa" && a.attn_type != "flex" && a.attn_type != "varlen")
    throw InputError("model.attn_type '" + a.attn_type + "' is not one of TorchTitan's (sdpa, flex, varlen)");
  if (a.attn_mask_type != "causal" && a.attn_mask_type != "block_causal")
    throw InputError("model.attn_mask_type '" + a.attn_mask_type + "' is not one of TorchTitan's (causal, block_causal)");
  if (a.block_causal() && a.attn_type == "sdpa")
    throw InputError("model.attn_mask_type block_causal needs model.attn_type flex or varlen (" + name + " " + flavor +
                     " has sdpa, which TorchTitan runs causal only); set model.attn_type = \"flex\"");
  if (a.attn_type == "varlen" && !a.block_causal())
    throw InputError("model.attn_type varlen needs model.attn_mask_type block_causal (TorchTitan's rule: varlen "
                     "attention is document attention); use attn_type flex or sdpa for causal");
  const bool moe_keys = o.moe_num_experts > 0 || o.moe_top_k > 0 || o.moe_load_balance_coeff >= 0;
  if (!moe_keys) return a;
  MoeArgs& m = a.moe;
  const std::string what = name + " " + flavor;
  if (m.num_experts == 0)
    throw InputError("model.moe_num_experts / moe_top_k / moe_load_balance_coeff: " + what +
                     " has no MoE layers; pick an MoE flavor (e.g. qwen3 debugmodel_moe, deepseek_v3 debugmodel)");
  if (o.moe_num_experts > 0) m.num_experts = o.moe_num_experts;
  if (o.moe_top_k > 0) m.top_k = o.moe_top_k;
  if (o.moe_load_balance_coeff >= 0) m.load_balance_coeff = o.moe_load_balance_coeff;
  const std::string sizes = " (" + what + ": " + std::to_string(m.num_experts) + " experts, top_k " +
                            std::to_string(m.top_k) + ")";
  if (m.n_expert_groups > 0 && m.num_experts % m.n_expert_groups != 0)
    throw InputError("model.moe_num_experts " + std::to_string(m.num_experts) + " is not divisible by the flavor's " +
                     std::to_string(m.n_expert_groups) + " expert groups" + sizes +
                     "; choose a multiple of the groups");
  const int64_t reachable =
      m.n_expert_groups > 0 ? m.n_limited_groups * (m.num_experts / m.n_expert_groups) : m.num_experts;
  if (m.top_k > reachable)
    throw InputError("model.moe_top_k " + std::to_string(m.top_k) + " exceeds the " + std::to_string(reachable) +
                     " experts a token can reach" +
                     (m.n_expert_groups > 0 ? " in its best " + std::to_string(m.n_limited_groups) + " groups" : "") +
                     sizes + ": each token picks top_k distinct experts; choose top_k <= " +
                     std::to_string(reachable));
  return a;
}

ModelArgs model_flavor(const ModelSection& m) {
  return model_flavor(m.name, m.flavor,
                      FlavorOverrides{m.n_layers, m.moe_num_experts, m.moe_top_k, m.moe_load_balance_coeff,
                                      m.attn_type, m.attn_mask_type});
}

void check_model_layout(const ModelArgs& args, const ModelLayout& layout) {
  const std::string why = model_family(args.family).refuses(args, layout);
  if (!why.empty()) throw InputError(why);
}

}  // namespace ctitan
