#include "trainer/parallel/tensor_parallel.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <string>

#include "common/errors.h"

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
  tp.all_reduce(t)->wait();
  return t;
}

// [.., S/tp, ..] on every rank -> [.., S, ..], rank r's part at chunk r of `dim`.
at::Tensor gathered(const at::Tensor& x, Communicator& tp, int64_t dim) {
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty({tp.size() * in.numel()}, in.options());
  tp.all_gather(out, in)->wait();
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
  tp.reduce_scatter(out, in)->wait();
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

class GatherFromSp : public torch::autograd::Function<GatherFromSp> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* tp, int64_t dim) {
    keep(ctx, *tp);
    ctx->saved_data["dim"] = dim;
    return gathered(x, *tp, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {scattered(g[0], comm(ctx), ctx->saved_data["dim"].toInt()), at::Tensor(), at::Tensor()};
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

int64_t wrap(int64_t dim, const at::Tensor& x) { return dim < 0 ? dim + x.dim() : dim; }

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

void check_tensor_parallel_degree(const LlamaArgs& a, int64_t tp) {
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
        ends_with(n, ".feed_forward.w1.weight") || ends_with(n, ".feed_forward.w3.weight"))
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
  return tp.size() == 1 ? x : GatherFromSp::apply(x, &tp, wrap(dim, x));
}
at::Tensor scatter_to_sp(const at::Tensor& x, Communicator& tp, int64_t dim) {
  return tp.size() == 1 ? x : ScatterToSp::apply(x, &tp, wrap(dim, x));
}

at::Tensor column_parallel_linear(const at::Tensor& x, const at::Tensor& w_shard, Communicator& tp,
                                  bool sequence_parallel, int64_t seq_dim) {
  const at::Tensor in = sequence_parallel ? gather_from_sp(x, tp, seq_dim) : copy_to_tp(x, tp);
  return at::linear(in, w_shard);
}

at::Tensor row_parallel_linear(const at::Tensor& x_shard, const at::Tensor& w_shard, Communicator& tp,
                               bool sequence_parallel, int64_t seq_dim) {
  const at::Tensor partial = at::linear(x_shard, w_shard);
  return sequence_parallel ? scatter_to_sp(partial, tp, seq_dim) : reduce_from_tp(partial, tp);
}

}  // namespace ctitan
