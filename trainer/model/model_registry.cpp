#include "trainer/model/model_registry.h"

#include <algorithm>

#include "common/errors.h"
#include "trainer/config/job_config.h"
#include "trainer/models/deepseek_v3.h"
#include "trainer/models/llama3.h"
#include "trainer/models/qwen3.h"

namespace ctitan {

namespace {

const std::vector<const ModelFamily*>& families() {
  static const std::vector<const ModelFamily*> all = {&llama3_family(), &qwen3_family(), &deepseek_v3_family()};
  return all;
}

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
  std::string known;
  for (const auto& n : model_family_names()) known += (known.empty() ? "\"" : ", \"") + n + "\"";
  throw InputError("model.name \"" + name + "\" is not a model family; ctitan's families: " + known);
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

std::vector<std::string> flavor_names(const FlavorTable& table) {
  std::vector<std::string> names;
  for (const auto& [name, _] : table) names.push_back(name);
  return names;
}

ModelArgs find_flavor(const FlavorTable& table, const std::string& family, const std::string& flavor) {
  auto it = table.find(flavor);
  if (it != table.end()) return it->second;
  std::string known;
  for (const auto& n : flavor_names(table)) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown model.flavor '" + flavor + "' for " + family + "; known flavors: " + known);
}

std::string attention_refuses_context_parallel(const ModelArgs& a, const ModelLayout& l, bool flex_with_cp) {
  if (l.cp > 1 && l.cp_load_balancer == "ptrr" && a.attn_type != "flex")
    return "parallelism.context_parallel_load_balancer ptrr balances flex attention's masks (TorchTitan's "
           "PTRRLoadBalancer); model " + a.family + " runs " + a.attn_type +
           " attention: set model.attn_type = \"flex\" or use headtail";
  if (l.cp <= 1 || a.attn_type == "sdpa" || (a.attn_type == "flex" && flex_with_cp)) return "";
  return "model " + a.family + ": context parallelism does not run " + a.attn_type +
         " attention (TorchTitan refuses it too" + (flex_with_cp ? "" : "; its " + a.family + " CP takes sdpa only") +
         "); set parallelism.context_parallel_degree = 1" +
         (flex_with_cp ? ", or model.attn_type = \"flex\"" : "");
}

void check_model_layout(const ModelArgs& args, const ModelLayout& layout) {
  const std::string why = model_family(args.family).refuses(args, layout);
  if (!why.empty()) throw InputError(why);
}

}  // namespace ctitan
