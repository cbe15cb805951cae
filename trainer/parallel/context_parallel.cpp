#include "trainer/parallel/context_parallel.h"

#include <cmath>
#include <vector>

#include "common/errors.h"
#include "trainer/parallel/tensor_parallel.h"

namespace ctitan {
namespace {

// GQA: each KV head serves H/K query heads.
at::Tensor expand_heads(const at::Tensor& kv, int64_t heads) {
  const int64_t K = kv.size(1);
  return K == heads ? kv : kv.repeat_interleave(heads / K, 1);
}

// Scores where a key may not be seen get this instead of -inf: exp() of it
// is exactly 0 in fp32 and bf16, and a row that sees no key of a block stays
// finite (its block's weight in the merge is then 0).
constexpr double kMasked = -1e30;

}  // namespace

std::string ContextParallelOptions::describe() const {
  return "CP " + std::to_string(size()) + " (" + rotate_method + ", " + load_balancer + ")";
}

void check_context_parallel(const ContextParallelOptions& cp, int64_t seq_len) {
  if (cp.rotate_method != "allgather" && cp.rotate_method != "alltoall")
    throw InputError("parallelism.context_parallel_rotate_method '" + cp.rotate_method +
                     "' is not one of TorchTitan's (allgather, alltoall)");
  if (cp.load_balancer != "headtail" && cp.load_balancer != "none")
    throw InputError("parallelism.context_parallel_load_balancer '" + cp.load_balancer +
                     "' is not one ctitan runs (headtail, or none for no load balancing; TorchTitan's ptrr is for "
                     "FlexAttention, which ctitan does not have)");
  if (!cp.on()) return;
  const int64_t chunks = cp.load_balancer == "headtail" ? 2 * cp.size() : cp.size();
  if (seq_len % chunks != 0)
    throw InputError("training.seq_len " + std::to_string(seq_len) + " is not divisible by " +
                     (cp.load_balancer == "headtail" ? "2 x " : "") + "context_parallel_degree " +
                     std::to_string(cp.size()) + " = " + std::to_string(chunks) +
                     " (each rank holds " + (cp.load_balancer == "headtail" ? "two chunks" : "one chunk") +
                     " of every sequence); choose a multiple");
}

at::Tensor cp_positions(const std::string& load_balancer, int64_t cp, int64_t rank, int64_t seq_len) {
  if (load_balancer != "headtail") {
    const int64_t c = seq_len / cp;
    return torch::arange(rank * c, (rank + 1) * c, torch::kLong);
  }
  const int64_t c = seq_len / (2 * cp);
  return torch::cat({torch::arange(rank * c, (rank + 1) * c, torch::kLong),
                     torch::arange((2 * cp - 1 - rank) * c, (2 * cp - rank) * c, torch::kLong)});
}

at::Tensor cp_shard(const at::Tensor& x, const ContextParallelOptions& cp) {
  if (!cp.on()) return x;
  const at::Tensor pos = cp_positions(cp.load_balancer, cp.size(), cp.rank(), x.size(1)).to(x.device());
  return x.index_select(1, pos).contiguous();
}

at::Tensor context_parallel_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& positions, const ContextParallelOptions& cp) {
  Communicator& g = *cp.group;
  const int64_t n = cp.size(), r = cp.rank(), H = q.size(1), Sl = q.size(2);
  const int64_t S = Sl * n;
  const at::Tensor qpos = positions.to(q.device()).view({Sl, 1});
  if (cp.rotate_method == "allgather") {
    // Rank-major blocks of every rank's keys; the mask compares positions,
    // so their order does not matter.
    const at::Tensor k_all = gather_from_sp(k, g, 2), v_all = gather_from_sp(v, g, 2);
    std::vector<at::Tensor> pos;
    for (int64_t s = 0; s < n; ++s) pos.push_back(cp_positions(cp.load_balancer, n, s, S));
    const at::Tensor kpos = torch::cat(pos).to(q.device()).view({1, S});
    const at::Tensor visible = kpos.le(qpos);  // [Sl, S]
    return at::scaled_dot_product_attention(q, expand_heads(k_all, H), expand_heads(v_all, H), visible, 0.0,
                                            /*is_causal=*/false);
  }
  // The ring: at step t this rank holds the K/V block of rank r - t.
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  at::Tensor kb = k, vb = v;
  std::vector<at::Tensor> outs, lses;
  for (int64_t t = 0; t < n; ++t) {
    if (t > 0) {
      kb = ring_pass(kb, g);
      vb = ring_pass(vb, g);
    }
    const int64_t src = (r - t + n) % n;
    const at::Tensor kpos = cp_positions(cp.load_balancer, n, src, S).to(q.device()).view({1, Sl});
    at::Tensor scores = at::matmul(q, expand_heads(kb, H).transpose(-2, -1)) * scale;  // [B, H, Sl, Sl]
    scores = scores.masked_fill(kpos.gt(qpos), kMasked);
    const at::Tensor lse = at::logsumexp(scores, -1, /*keepdim=*/true);  // [B, H, Sl, 1]
    outs.push_back(at::matmul(at::exp(scores - lse), expand_heads(vb, H)));
    lses.push_back(lse);
  }
  // Merge by log-sum-exp: out = Σ_b exp(lse_b - lse) · out_b.
  const at::Tensor lse = at::logsumexp(at::stack(lses), 0);
  at::Tensor out = at::zeros_like(outs[0]);
  for (size_t b = 0; b < outs.size(); ++b) out = out + at::exp(lses[b] - lse) * outs[b];
  return out;
}

}  // namespace ctitan
