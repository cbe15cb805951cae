#include "trainer/dry_run.h"

#include <map>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "trainer/metrics.h"

namespace ctitan {
namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// Prints the embedding and the head in full and each run of blocks with
// the same shapes and placements once ("layers.1 .. layers.2: as layers.0"):
// a dense Llama is one run, DeepSeek-V3 a dense run then an MoE run.
void print_layout(const std::vector<std::string>& lines) {
  std::map<int64_t, std::vector<std::string>> blocks;  // by layer: its lines
  std::map<int64_t, std::string> signature;            // by layer: its lines with the index cut out
  std::vector<std::string> before, after;
  for (const std::string& line : lines) {
    int64_t layer = -1;
    if (line.rfind("layers.", 0) == 0) layer = std::stoll(line.substr(7));
    if (layer < 0) {
      (blocks.empty() ? before : after).push_back(line);
      continue;
    }
    blocks[layer].push_back(line);
    signature[layer] += line.substr(line.find('.', 7)) + "\n";
  }
  for (const std::string& line : before) std::cout << "  " << line << std::endl;
  for (auto it = blocks.begin(); it != blocks.end();) {
    auto end = std::next(it);
    int64_t last = it->first;
    while (end != blocks.end() && end->first == last + 1 && signature[end->first] == signature[it->first])
      last = (end++)->first;
    for (const std::string& line : it->second) std::cout << "  " << line << std::endl;
    if (last > it->first)
      std::cout << "  layers." << it->first + 1 << (last > it->first + 1 ? " .. layers." + std::to_string(last) : "")
                << ": as layers." << it->first << std::endl;
    it = end;
  }
  for (const std::string& line : after) std::cout << "  " << line << std::endl;
}

}  // namespace

int64_t activation_bytes_estimate(const ModelArgs& a, int64_t batch, int64_t seq_len, int64_t dtype_bytes,
                                  const ActivationCheckpointPolicy& ac) {
  const int64_t D = a.dim, F = a.ffn_hidden_dim(), Dh = a.head_dim(), H = a.n_heads, K = a.n_kv_heads;
  // Per token of one block: two norm inputs and outputs (4D), q/k/v out of
  // the QKV GEMM and after RoPE (2(H+2K)Dh), the attention output and its
  // projection input (2·H·Dh), then the FFN: gate/up and the SwiGLU product
  // (3F), or in an MoE layer per routed copy (top_k of them) its input and
  // output rows (2D) and gate/up/product (3·Hm), plus the shared experts'.
  const MoeArgs& m = a.moe;
  const int64_t attention = 4 * D + 2 * (H + 2 * K) * Dh + 2 * H * Dh;
  const int64_t moe_ffn = m.top_k * (2 * D + 3 * m.hidden_dim) + 3 * m.num_shared_experts * m.hidden_dim;
  const auto block_of = [&](int64_t l) {
    return batch * seq_len * (attention + (a.moe_layer(l) ? moe_ffn : 3 * F)) * dtype_bytes;
  };
  const int64_t block_input = batch * seq_len * D * dtype_bytes;
  int64_t stored = 0, recompute = 0;
  for (int64_t l = 0; l < a.n_layers; ++l) {
    if (ac.checkpoints_layer(l)) {
      stored += block_input;
      recompute = std::max(recompute, block_of(l));  // one block's activations live again in its backward
    } else {
      stored += block_of(l);
    }
  }
  const int64_t logits = batch * seq_len * a.vocab_size * dtype_bytes;
  return stored + recompute + logits;
}

int dry_run(const JobConfig& cfg, const Runtime& rt, TrainModel& tm, AdamW& optimizer) {
  const auto t0 = std::chrono::steady_clock::now();
  const Transformer& m = tm.model();
  const int64_t B = cfg.training.local_batch_size, S = cfg.training.seq_len;
  const auto ids = torch::TensorOptions().device(rt.device).dtype(torch::kLong);
  // Shapes only: every op runs its meta kernel, so a wrong shape or a
  // tensor on another device fails here as it would in a real step. Some
  // ATen ops have their meta kernels in Python only (torch._meta_registrations);
  // the model routes the embedding, attention and loss through ops LibTorch
  // runs on meta. Should an op without one be reached, the check says where
  // it stopped.
  std::string shape_check = "one forward and backward on the meta device checked every shape";
  try {
    tm.forward_backward(torch::zeros({B, S}, ids), torch::zeros({B, S}, ids), 1.0, true, true);
  } catch (const c10::NotImplementedError& e) {
    std::string why = e.what_without_backtrace();
    why = why.substr(0, why.find(": "));
    shape_check = "the forward on the meta device stopped at " + why +
                  ", which has no C++ meta kernel in LibTorch (its meta kernel is registered from Python); "
                  "the layout and memory above come from the placement plan";
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const ParamCounts counts = count_params(m.args());
  std::cout << "ctitan: dry run of rank 0 of " << rt.env.world_size << " ("
            << (rt.fake ? "comm.mode fake_backend" : "training.device meta") << ", nothing allocated): " << m.args().family
            << " " << cfg.model.flavor << ", " << with_commas(counts.total) << " parameters"
            << (m.args().moe.num_experts > 0 ? " (" + with_commas(counts.active) + " active)" : std::string()) << ", mesh " << rt.shape.describe()
            << ", " << tm.describe() << ", " << m.techniques() << std::endl;
  std::cout << "ctitan: layout (FQN, global shape, this rank's shape, placement):" << std::endl;
  print_layout(tm.layout());

  const int64_t local = tm.params().numel();
  const int64_t dtype_bytes = c10::elementSize(m.compute_dtype());
  const int64_t acts = activation_bytes_estimate(m.args(), B, S, dtype_bytes, m.activation_checkpointing());
  const int64_t state = local * 4 + tm.grads().numel() * 4 + (optimizer.exp_avg().numel() + optimizer.exp_avg_sq().numel()) * 4;
  std::cout << "ctitan: memory per rank: parameters " << gib(local * 4) << " (fp32 master, "
            << with_commas(local) << " elements), gradients " << gib(tm.grads().numel() * 4) << ", AdamW state "
            << gib((optimizer.exp_avg().numel() + optimizer.exp_avg_sq().numel()) * 4) << " = " << gib(state)
            << "; activations ~" << gib(acts) << " (estimate, batch " << B << " x seq " << S << ", "
            << m.activation_checkpointing().describe() << ")" << std::endl;
  std::cout << "ctitan: " << shape_check << " (" << secs << " s)" << std::endl;
  return 0;
}

}  // namespace ctitan
