#include "trainer/models/family.h"

#include "common/errors.h"

namespace ctitan {

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

}  // namespace ctitan
