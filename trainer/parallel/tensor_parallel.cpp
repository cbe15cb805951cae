#include "trainer/parallel/tensor_parallel.h"
#include "trainer/model/gemm.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <string>

#include "common/errors.h"
#include "trainer/parallel/exposed_comm.h"

namespace ctitan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The communicator travels to backward as its address: the tp group
// outlives every graph built over it (the mesh owns it for the whole run).
void keep(AutogradContext* ctx, Communicator& tp) {
  ctx->saved_data["tp"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(&tp));
}
Communicator& comm(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["tp"].toInt()));
}

at::Tensor all_reduced(const at::Tensor& x, Communicator& tp) {
  at::Tensor t = x.contiguous().clone();
  wait_exposed(tp.all_reduce(t), tp);
  return t;
}

// [.., S/tp, ..] on every rank -> [.., S, ..], rank r's part at chunk r of `dim`.
at::Tensor gathered(const at::Tensor& x, Communicator& tp, int64_t dim) {
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty({tp.size() * in.numel()}, in.options());
  wait_exposed(tp.all_gather(out, in), tp);
  std::vector<int64_t> shape{tp.size()};
  shape.insert(shape.end(), in.sizes().begin(), in.sizes().end());
  std::vector<at::Tensor> parts = out.view(shape).unbind(0);
  return at::cat(parts, dim);
}

// [.., S, ..] on every rank -> this rank's chunk of `dim`, summed over the ranks.
at::Tensor scattered(const at::Tensor& x, Communicator& tp, int64_t dim) {
  TORCH_CHECK(x.size(dim) % tp.size() == 0, "sequence length ", x.size(dim), " is not divisible by tp ", tp.size());
  const at::Tensor in = at::stack(x.chunk(tp.size(), dim), 0).contiguous();  // rank-major chunks
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape[static_cast<size_t>(dim)] /= tp.size();
  at::Tensor out = at::empty(shape, x.options());
  wait_exposed(tp.reduce_scatter(out, in), tp);
  return out;
}

class CopyToTp : public torch::autograd::Function<CopyToTp> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* tp) {
    keep(ctx, *tp);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_reduced(g[0], comm(ctx)), at::Tensor()};
  }
};

class ReduceFromTp : public torch::autograd::Function<ReduceFromTp> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* tp) {
    return all_reduced(x, *tp);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) { return {g[0], at::Tensor()}; }
};

// All-gather along `dim`. Backward: reduce-scatter (the gathered activations
// feed per-rank computations whose gradients sum: SP), or this rank's chunk
// (every rank computes the same gradient of the gathered tensor: the logits).
class Gather : public torch::autograd::Function<Gather> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* tp, int64_t dim,
                            bool backward_sums) {
    keep(ctx, *tp);
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["sums"] = backward_sums;
    return gathered(x, *tp, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    Communicator& tp = comm(ctx);
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const at::Tensor gx = ctx->saved_data["sums"].toBool() ? scattered(g[0], tp, dim)
                                                           : g[0].chunk(tp.size(), dim)[tp.rank()].contiguous();
    return {gx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

class ScatterToSp : public torch::autograd::Function<ScatterToSp> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* tp, int64_t dim) {
    keep(ctx, *tp);
    ctx->saved_data["dim"] = dim;
    return scattered(x, *tp, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {gathered(g[0], comm(ctx), ctx->saved_data["dim"].toInt()), at::Tensor(), at::Tensor()};
  }
};

class VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& labels,
                            Communicator* tp) {
    keep(ctx, *tp);
    const int64_t N = logits.size(0), V = logits.size(1), start = tp->rank() * V;
    const auto acc = logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    const at::Tensor x = logits.to(acc);
    at::Tensor m = std::get<0>(x.max(1)).contiguous();
    wait_exposed(tp->all_reduce(m, ReduceOp::kMax), *tp);
    const at::Tensor z = x - m.unsqueeze(1);
    const at::Tensor local = labels - start;
    const at::Tensor inside = local.ge(0).logical_and(local.lt(V));
    // Row 0: Σ exp(z) over this rank's columns; row 1: the target's z if
    // this rank holds its column, else 0. One all-reduce sums both.
    at::Tensor sums = at::empty({2, N}, x.options());
    sums[0].copy_(z.exp().sum(1));
    sums[1].copy_(z.gather(1, local.clamp(0, V - 1).unsqueeze(1)).squeeze(1) * inside.to(acc));
    wait_exposed(tp->all_reduce(sums), *tp);
    const at::Tensor log_sum = sums[0].log();
    ctx->save_for_backward({logits, labels, m + log_sum});
    return (log_sum - sums[1]).mean();
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &labels = saved[1], &lse = saved[2];
    const int64_t N = logits.size(0), V = logits.size(1), start = comm(ctx).rank() * V;
    // (softmax − onehot) · g / N on this rank's columns.
    at::Tensor p = (logits.to(lse.scalar_type()) - lse.unsqueeze(1)).exp_();
    const at::Tensor local = labels - start;
    const at::Tensor inside = local.ge(0).logical_and(local.lt(V));
    p.scatter_add_(1, local.clamp(0, V - 1).unsqueeze(1), -inside.to(p.scalar_type()).unsqueeze(1));
    p.mul_(g[0].to(p.scalar_type()) / static_cast<double>(N));
    return {p.to(logits.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

// The pieces of a rank's sequence shard that async TP pipelines over:
// (first position, length) along the local sequence of `local_len`.
std::vector<std::pair<int64_t, int64_t>> pieces(int64_t local_len, int64_t chunks) {
  const int64_t n = std::clamp<int64_t>(chunks, 1, std::max<int64_t>(local_len, 1));
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t k = 0, at = 0; k < n; ++k) {
    const int64_t len = local_len / n + (k < local_len % n ? 1 : 0);
    out.emplace_back(at, len);
    at += len;
  }
  return out;
}

// View of positions [p.first, p.first + p.second) of every rank's shard of
// a whole-sequence tensor [B, S, X]: [tp, B, len, X] (strided).
at::Tensor piece_of_whole(const at::Tensor& whole, int64_t tp, std::pair<int64_t, int64_t> p) {
  const int64_t B = whole.size(0), S = whole.size(1);
  return whole.view({B, tp, S / tp, whole.size(2)}).narrow(2, p.first, p.second).permute({1, 0, 2, 3});
}

// all-gather + GEMM, micro-pipelined: the gather of piece k+1 is in flight
// while piece k's GEMM runs; backward pipelines GEMM + reduce-scatter.
class AsyncGatherLinear : public torch::autograd::Function<AsyncGatherLinear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_shard, const at::Tensor& w, Communicator* tp,
                            int64_t chunks) {
    keep(ctx, *tp);
    ctx->saved_data["chunks"] = chunks;
    const int64_t T = tp->size(), B = x_shard.size(0), Sl = x_shard.size(1), I = x_shard.size(2);
    TORCH_CHECK(w.size(1) == I, "async_gather_linear: weight ", w.sizes(), " for input features ", I);
    const auto ps = pieces(Sl, chunks);
    at::Tensor x_whole = at::empty({B, T * Sl, I}, x_shard.options());
    at::Tensor y = at::empty({B, T * Sl, w.size(0)}, x_shard.options());
    std::vector<at::Tensor> got(ps.size());
    std::vector<WorkPtr> work(ps.size());
    const auto issue = [&](size_t k) {
      const at::Tensor in = x_shard.narrow(1, ps[k].first, ps[k].second).contiguous();
      got[k] = at::empty({T, B, ps[k].second, I}, in.options());
      work[k] = tp->all_gather(got[k], in);
    };
    issue(0);
    for (size_t k = 0; k < ps.size(); ++k) {
      if (k + 1 < ps.size()) issue(k + 1);  // in flight during this piece's GEMM
      wait_exposed(work[k], *tp);
      piece_of_whole(x_whole, T, ps[k]).copy_(got[k]);
      piece_of_whole(y, T, ps[k]).copy_(gemm_linear(got[k], w));
      got[k] = at::Tensor();
    }
    ctx->save_for_backward({x_whole, w});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x_whole = saved[0], &w = saved[1];
    Communicator& tp = comm(ctx);
    const int64_t T = tp.size(), B = x_whole.size(0), Sl = x_whole.size(1) / T, I = x_whole.size(2);
    const at::Tensor gy = g[0].contiguous();
    const auto ps = pieces(Sl, ctx->saved_data["chunks"].toInt());
    std::vector<at::Tensor> out(ps.size());
    std::vector<WorkPtr> work(ps.size());
    for (size_t k = 0; k < ps.size(); ++k) {  // the GEMM of piece k+1 runs while k's reduce-scatter is in flight
      const at::Tensor dx = gemm_matmul(piece_of_whole(gy, T, ps[k]), w).contiguous();  // [T, B, len, I]
      out[k] = at::empty({B, ps[k].second, I}, dx.options());
      work[k] = tp.reduce_scatter(out[k], dx);
    }
    const at::Tensor dw = gemm_mm(gy.flatten(0, 1).t(), x_whole.flatten(0, 1));
    for (auto& wk : work) wait_exposed(wk, tp);
    return {at::cat(out, 1), dw, at::Tensor(), at::Tensor()};
  }
};

// GEMM + reduce-scatter, micro-pipelined: piece k's reduce-scatter is in
// flight while piece k+1's GEMM runs; backward pipelines all-gather + GEMM.
class AsyncLinearScatter : public torch::autograd::Function<AsyncLinearScatter> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, Communicator* tp,
                            int64_t chunks) {
    keep(ctx, *tp);
    ctx->saved_data["chunks"] = chunks;
    const int64_t T = tp->size(), B = x.size(0), S = x.size(1);
    TORCH_CHECK(S % T == 0, "sequence length ", S, " is not divisible by tp ", T);
    const auto ps = pieces(S / T, chunks);
    const at::Tensor xc = x.contiguous();
    std::vector<at::Tensor> out(ps.size());
    std::vector<WorkPtr> work(ps.size());
    for (size_t k = 0; k < ps.size(); ++k) {
      const at::Tensor partial = gemm_linear(piece_of_whole(xc, T, ps[k]), w).contiguous();  // [T, B, len, O]
      out[k] = at::empty({B, ps[k].second, w.size(0)}, partial.options());
      work[k] = tp->reduce_scatter(out[k], partial);
    }
    for (auto& wk : work) wait_exposed(wk, *tp);
    ctx->save_for_backward({xc, w});
    return at::cat(out, 1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    Communicator& tp = comm(ctx);
    const int64_t T = tp.size(), B = x.size(0), S = x.size(1), O = w.size(0);
    const at::Tensor gy = g[0];
    const auto ps = pieces(S / T, ctx->saved_data["chunks"].toInt());
    at::Tensor g_whole = at::empty({B, S, O}, gy.options());
    at::Tensor dx = at::empty_like(x);
    std::vector<at::Tensor> got(ps.size());
    std::vector<WorkPtr> work(ps.size());
    const auto issue = [&](size_t k) {
      const at::Tensor in = gy.narrow(1, ps[k].first, ps[k].second).contiguous();
      got[k] = at::empty({T, B, ps[k].second, O}, in.options());
      work[k] = tp.all_gather(got[k], in);
    };
    issue(0);
    for (size_t k = 0; k < ps.size(); ++k) {
      if (k + 1 < ps.size()) issue(k + 1);
      wait_exposed(work[k], tp);
      piece_of_whole(g_whole, T, ps[k]).copy_(got[k]);
      piece_of_whole(dx, T, ps[k]).copy_(gemm_matmul(got[k], w));
      got[k] = at::Tensor();
    }
    const at::Tensor dw = gemm_mm(g_whole.flatten(0, 1).t(), x.flatten(0, 1));
    return {dx, dw, at::Tensor(), at::Tensor()};
  }
};

int64_t wrap(int64_t dim, const at::Tensor& x) { return dim < 0 ? dim + x.dim() : dim; }

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

void check_tensor_parallel_degree(const ModelArgs& a, int64_t tp) {
  if (tp <= 1) return;
  std::string bad;
  const auto need = [&](int64_t n, const char* what) {
    if (n % tp != 0) bad += std::string(bad.empty() ? "" : ", ") + what + " " + std::to_string(n);
  };
  need(a.n_heads, "n_heads");
  need(a.n_kv_heads, "n_kv_heads");
  need(a.ffn_hidden_dim(), "ffn hidden dim");
  need(a.vocab_size, "vocab_size");
  if (!bad.empty())
    throw InputError("parallelism.tensor_parallel_degree " + std::to_string(tp) + " does not divide " + bad +
                     "; choose a degree that divides the heads, KV heads, FFN width and vocabulary");
}

std::vector<ParamSpec> tensor_parallel_plan(std::vector<ParamSpec> specs, int64_t tp, int64_t r) {
  for (ParamSpec& s : specs) {
    const std::string& n = s.name;
    if (n == "tok_embeddings.weight" || n == "output.weight" || ends_with(n, ".attention.wq.weight") ||
        ends_with(n, ".attention.wk.weight") || ends_with(n, ".attention.wv.weight") ||
        ends_with(n, ".attention.wq_b.weight") || ends_with(n, ".attention.wkv_b.weight") ||
        ends_with(n, ".feed_forward.w1.weight") || ends_with(n, ".feed_forward.w3.weight") ||
        // GPT-OSS: the biases of the column-wise q, k, v and the sinks go with their heads
        ends_with(n, ".attention.wq.bias") || ends_with(n, ".attention.wk.bias") ||
        ends_with(n, ".attention.wv.bias") || ends_with(n, ".attention.sinks"))
      s = shard_even(std::move(s), "tp", tp, r, 0);
    else if (ends_with(n, ".attention.wo.weight") || ends_with(n, ".feed_forward.w2.weight"))
      s = shard_even(std::move(s), "tp", tp, r, 1);
    else
      s = replicate(std::move(s), "tp", tp);
  }
  return specs;
}

at::Tensor copy_to_tp(const at::Tensor& x, Communicator& tp) {
  return tp.size() == 1 ? x : CopyToTp::apply(x, &tp);
}
at::Tensor reduce_from_tp(const at::Tensor& x, Communicator& tp) {
  return tp.size() == 1 ? x : ReduceFromTp::apply(x, &tp);
}
at::Tensor gather_from_sp(const at::Tensor& x, Communicator& tp, int64_t dim) {
  return tp.size() == 1 ? x : Gather::apply(x, &tp, wrap(dim, x), true);
}
at::Tensor scatter_to_sp(const at::Tensor& x, Communicator& tp, int64_t dim) {
  return tp.size() == 1 ? x : ScatterToSp::apply(x, &tp, wrap(dim, x));
}

at::Tensor gather_from_tp(const at::Tensor& x, Communicator& tp, int64_t dim) {
  return tp.size() == 1 ? x : Gather::apply(x, &tp, wrap(dim, x), false);
}

at::Tensor vocab_parallel_embedding(const at::Tensor& weight_shard, const at::Tensor& tokens, Communicator& tp,
                                    bool sequence_parallel) {
  if (tp.size() == 1) return at::embedding(weight_shard, tokens);
  at::Tensor e;
  if (tokens.is_meta()) {
    e = weight_shard.index({tokens});  // shapes only (see Transformer::embed)
  } else {
    const int64_t V = weight_shard.size(0);
    const at::Tensor local = tokens - tp.rank() * V;
    const at::Tensor outside = local.lt(0).logical_or(local.ge(V));
    e = at::embedding(weight_shard, local.masked_fill(outside, 0)).masked_fill(outside.unsqueeze(-1), 0);
  }
  return sequence_parallel ? scatter_to_sp(e, tp, 1) : reduce_from_tp(e, tp);
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits_shard, const at::Tensor& labels, Communicator& tp) {
  TORCH_CHECK(tp.size() > 1, "vocab_parallel_cross_entropy: needs a tp group of size > 1");
  return VocabParallelCrossEntropy::apply(logits_shard, labels, &tp);
}

at::Tensor async_gather_linear(const at::Tensor& x_shard, const at::Tensor& w_shard, Communicator& tp,
                               int64_t chunks) {
  if (tp.size() == 1) return gemm_linear(x_shard, w_shard);
  return AsyncGatherLinear::apply(x_shard, w_shard, &tp, chunks);
}

at::Tensor async_linear_scatter(const at::Tensor& x, const at::Tensor& w_shard, Communicator& tp, int64_t chunks) {
  if (tp.size() == 1) return gemm_linear(x, w_shard);
  return AsyncLinearScatter::apply(x, w_shard, &tp, chunks);
}

at::Tensor column_parallel_linear(const at::Tensor& x, const at::Tensor& w_shard, Communicator& tp,
                                  bool sequence_parallel, int64_t seq_dim) {
  const at::Tensor in = sequence_parallel ? gather_from_sp(x, tp, seq_dim) : copy_to_tp(x, tp);
  return gemm_linear(in, w_shard);
}

at::Tensor row_parallel_linear(const at::Tensor& x_shard, const at::Tensor& w_shard, Communicator& tp,
                               bool sequence_parallel, int64_t seq_dim) {
  const at::Tensor partial = gemm_linear(x_shard, w_shard);
  return sequence_parallel ? scatter_to_sp(partial, tp, seq_dim) : reduce_from_tp(partial, tp);
}

}  // namespace ctitan
