#include "trainer/model/llama_args.h"

#include <map>

#include "common/errors.h"

namespace ctitan {

int64_t LlamaArgs::ffn_hidden_dim() const {
  if (ffn_hidden) return *ffn_hidden;
  int64_t hidden = 4 * dim;
  hidden = static_cast<int64_t>(2 * hidden / 3);
  if (ffn_dim_multiplier) hidden = static_cast<int64_t>(*ffn_dim_multiplier * hidden);
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

namespace {

LlamaArgs make(int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads, int64_t vocab,
               int64_t multiple_of, std::optional<double> ffn_mult) {
  LlamaArgs a;
  a.dim = dim;
  a.n_layers = layers;
  a.n_heads = heads;
  a.n_kv_heads = kv_heads;
  a.vocab_size = vocab;
  a.multiple_of = multiple_of;
  a.ffn_dim_multiplier = ffn_mult;
  return a;
}

const std::map<std::string, LlamaArgs>& flavors() {
  static const std::map<std::string, LlamaArgs> table = {
      {"tiny", make(32, 2, 4, 2, 64, 16, std::nullopt)},
      {"debugmodel", make(256, 6, 16, 16, 2048, 256, std::nullopt)},
      {"125M", make(768, 12, 12, 4, 32000, 256, std::nullopt)},
      {"8B", make(4096, 32, 32, 8, 128256, 1024, 1.3)},
      {"70B", make(8192, 80, 64, 8, 128256, 4096, 1.3)},
      {"405B", make(16384, 126, 128, 8, 128256, 4096, 1.2)},
  };
  return table;
}

}  // namespace

std::vector<std::string> llama3_flavor_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : flavors()) names.push_back(name);
  return names;
}

LlamaArgs llama3_flavor(const std::string& flavor, int64_t n_layers) {
  auto it = flavors().find(flavor);
  if (it == flavors().end()) {
    std::string known;
    for (const auto& n : llama3_flavor_names()) known += (known.empty() ? "" : ", ") + n;
    throw InputError("unknown model.flavor '" + flavor + "' for llama3; known flavors: " + known);
  }
  LlamaArgs a = it->second;
  if (n_layers > 0) a.n_layers = n_layers;
  return a;
}

ParamCounts count_params(const LlamaArgs& a) {
  const int64_t d = a.dim, hd = a.head_dim(), h = a.ffn_hidden_dim();
  const int64_t attention = d * (a.n_heads * hd) + 2 * d * a.kv_dim() + (a.n_heads * hd) * d;
  const int64_t feed_forward = 3 * d * h;
  const int64_t norms = 2 * d;
  ParamCounts c;
  c.embedding = a.vocab_size * d;
  c.total = c.embedding + a.n_layers * (attention + feed_forward + norms) + d + a.vocab_size * d;
  return c;
}

double flops_per_token(const LlamaArgs& a, int64_t seq_len) {
  const ParamCounts c = count_params(a);
  return 6.0 * static_cast<double>(c.total - c.embedding) +
         12.0 * a.n_layers * a.n_heads * a.head_dim() * static_cast<double>(seq_len);
}

}  // namespace ctitan
