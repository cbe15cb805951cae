#include "planner/model_desc.h"

#include <cstdio>
#include <stdexcept>

#include "common/errors.h"
#include "planner/megatron_gpt.h"
#include "trainer/models/registry.h"

namespace ctitan {

int64_t ModelDesc::embedding_params() const { return vocab_size * dim; }

int64_t ModelDesc::params() const {
  if (trainer_builds()) return count_params(trainer_args()).total;
  int64_t total = 0;
  for (const ParamSpec& s : megatron_gpt_param_specs(*this, true, 0, n_layers, true)) total += s.numel;
  return total;
}

double ModelDesc::flops_per_token(int64_t seq_len) const {
  if (trainer_builds()) return ctitan::flops_per_token(trainer_args(), seq_len);
  // Position embeddings are lookups, like the token embedding: neither is a matmul.
  const double matmul_params = static_cast<double>(params() - embedding_params() - max_positions * dim);
  return 6.0 * matmul_params + 12.0 * static_cast<double>(n_layers * n_heads * head_dim()) * static_cast<double>(seq_len);
}

ModelArgs ModelDesc::trainer_args() const {
  if (flavor_args) return *flavor_args;
  ModelArgs a;
  a.dim = dim;
  a.n_layers = n_layers;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.vocab_size = vocab_size;
  a.ffn_hidden = ffn_hidden;
  return a;
}

namespace {

ModelDesc desc_of(const ModelArgs& a, const std::string& name) {
  ModelDesc m;
  m.name = name;
  m.family = a.family;
  m.flavor_args = a;
  m.dim = a.dim;
  m.n_layers = a.n_layers;
  m.n_heads = a.n_heads;
  m.n_kv_heads = a.n_kv_heads;
  m.ffn_hidden = a.ffn_hidden_dim();
  m.vocab_size = a.vocab_size;
  return m;
}

}  // namespace

ModelDesc model_from_flavor(const std::string& flavor, int64_t n_layers) {
  return desc_of(model_flavor("llama3", flavor, n_layers),
                 "llama3 " + flavor + (n_layers > 0 ? " (" + std::to_string(n_layers) + " layers)" : ""));
}

ModelDesc model_from_config(const ModelSection& model) {
  return desc_of(model_flavor(model), model.name + " " + model.flavor +
                                          (model.n_layers > 0 ? " (" + std::to_string(model.n_layers) + " layers)" : ""));
}

double megatron_flops_per_token(const ModelDesc& m, int64_t seq_len) {
  const double l = static_cast<double>(m.n_layers), h = static_cast<double>(m.dim);
  const double s = static_cast<double>(seq_len), V = static_cast<double>(m.vocab_size);
  return 96.0 * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

void override_model(ModelDesc& m, const std::string& key, const std::string& value) {
  if (m.family != "llama3" && m.trainer_builds())
    throw InputError("--model." + key + ": the planner's shape options describe dense Llama-style (or gpt) models; " +
                     m.family + " is described by its flavors and model keys (model.flavor, model.n_layers, "
                     "model.moe_num_experts, model.moe_top_k)");
  m.flavor_args.reset();  // a shape of its own from here on
  if (key == "family") {
    if (value != "llama3" && value != "gpt")
      throw InputError("--model.family '" + value + "' is unknown; use llama3 (SwiGLU, RoPE) or gpt (4·D MLP, learned positions)");
    const bool gpt = value == "gpt";
    if (gpt && m.trainer_builds()) {
      m.ffn_hidden = 4 * m.dim;
      m.n_kv_heads = m.n_heads;
      if (m.max_positions == 0) m.max_positions = 2048;
    }
    m.gated_mlp = !gpt;
    m.layer_norm = gpt;
    m.family = value;
    m.name = "custom " + value;
    return;
  }
  int64_t* field = key == "dim"             ? &m.dim
                   : key == "n_layers"      ? &m.n_layers
                   : key == "n_heads"       ? &m.n_heads
                   : key == "n_kv_heads"    ? &m.n_kv_heads
                   : key == "ffn_hidden"    ? &m.ffn_hidden
                   : key == "vocab_size"    ? &m.vocab_size
                   : key == "max_positions" ? &m.max_positions
                                            : nullptr;
  if (field == nullptr)
    throw InputError("--model." + key +
                     " is not a model option of ctitan plan; use --model.flavor, --model.dim, --model.n_layers, "
                     "--model.n_heads, --model.n_kv_heads, --model.ffn_hidden, --model.vocab_size, "
                     "--model.family or --model.max_positions");
  int64_t v = 0;
  size_t used = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || v <= 0 || v > (int64_t{1} << 40))
    throw InputError("--model." + key + " '" + value + "' is not a positive integer");
  const bool dim_changed = key == "dim" && v != m.dim;
  *field = v;
  // A new width keeps the flavor's MLP ratio unless ffn_hidden is given too
  // (later on the command line, which wins).
  if (dim_changed) m.ffn_hidden = m.gated_mlp ? ((8 * v / 3 + 255) / 256) * 256 : 4 * v;
  if (key == "n_heads" && !m.trainer_builds()) m.n_kv_heads = v;  // Megatron's GPT: multi-head attention
  if (m.name.rfind("custom", 0) != 0) m.name = "custom " + m.family;
}

void check_model_shape(const ModelDesc& m) {
  if (m.n_heads > 0 && m.dim % m.n_heads != 0)
    throw InputError("--model.dim " + std::to_string(m.dim) + " is not divisible by n_heads " + std::to_string(m.n_heads));
  if (m.n_kv_heads > 0 && m.n_heads % m.n_kv_heads != 0)
    throw InputError("--model.n_heads " + std::to_string(m.n_heads) + " is not divisible by n_kv_heads " +
                     std::to_string(m.n_kv_heads));
}

std::string describe(const ModelDesc& m) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f B", static_cast<double>(m.params()) / 1e9);
  std::string out = m.name + ": dim " + std::to_string(m.dim) + ", " + std::to_string(m.n_layers) + " layers, " +
                    std::to_string(m.n_heads) + " heads (" + std::to_string(m.n_kv_heads) + " kv), ffn " +
                    std::to_string(m.ffn_hidden) + (m.gated_mlp ? " (SwiGLU)" : " (GELU, learned positions)") +
                    ", vocab " + std::to_string(m.vocab_size) + ", ";
  out += buf;
  out += " parameters";
  return out;
}

}  // namespace ctitan
