#include "trainer/model/moe.h"

#include "trainer/kernels/expert_swiglu.h"
#include "trainer/model/gemm.h"

#include <cmath>
#include <limits>
#include <vector>

#include <torch/torch.h>

namespace ctitan {

namespace {

// Identity whose backward makes the gradient contiguous: _grouped_mm's
// backward rejects a broadcast gradient (stride 0, e.g. from a sum).
struct ContiguousGrad : torch::autograd::Function<ContiguousGrad> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x) { return x.view_as(x); }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext*, torch::autograd::tensor_list g) {
    return {g[0].contiguous()};
  }
};

// Indices of the k largest entries per row of s [T,E], ties to the lower
// index: a stable sort of −s (ascending, so equal values keep their order).
at::Tensor top_k_stable(const at::Tensor& s, int64_t k) {
  return std::get<1>(at::sort(s.neg(), /*stable=*/true, /*dim=*/1, /*descending=*/false)).narrow(1, 0, k);
}

}  // namespace

MoeRouting moe_route(const at::Tensor& logits, const at::Tensor& bias, const MoeArgs& a) {
  const int64_t T = logits.size(0), E = logits.size(1), k = a.top_k;
  const at::Tensor scores = a.score_func == "sigmoid" ? at::sigmoid(logits.to(at::kFloat))
                                                      : at::softmax(logits.to(at::kFloat), 1);
  at::Tensor chosen;  // [T,k] expert ids
  if (a.force_load_balance) {
    chosen = (at::arange(T * k, logits.options().dtype(at::kLong)) % E).view({T, k});
  } else {
    at::NoGradGuard no_grad;
    at::Tensor choice = bias.defined() ? scores.detach() + bias : scores.detach();
    if (a.n_expert_groups > 1 && a.n_limited_groups > 0 && a.n_limited_groups < a.n_expert_groups) {
      const int64_t G = a.n_expert_groups;
      const at::Tensor grouped = choice.view({T, G, E / G});
      const at::Tensor group_score = std::get<0>(at::topk(grouped, 2, -1)).sum(-1);
      const at::Tensor keep_groups = top_k_stable(group_score, a.n_limited_groups);  // [T, n_limited]
      // The groups not kept (a mask built directly: logical_not has no C++ meta kernel for the dry run).
      const at::Tensor drop = at::ones({T, G}, choice.options().dtype(at::kBool)).scatter_(1, keep_groups, false);
      choice = choice.masked_fill(drop.unsqueeze(-1).expand({T, G, E / G}).reshape({T, E}),
                                  -std::numeric_limits<float>::infinity());
    }
    chosen = top_k_stable(choice, k);
  }
  at::Tensor weight = scores.gather(1, chosen);  // [T,k], differentiable in the logits
  if (a.route_norm) weight = weight / (weight.sum(-1, true) + 1e-20);
  if (a.route_scale != 1.0) weight = weight * a.route_scale;
  const at::Tensor flat = chosen.reshape({-1});
  MoeRouting r;
  const at::Tensor order = std::get<1>(at::sort(flat, /*stable=*/true, 0, false));  // rows grouped by expert
  r.token = at::div(order, k, "floor");  // (div has a C++ meta kernel, floor_divide not)
  r.weight = weight.reshape({-1}).index({order});  // (aten::index runs on meta, index_select not)
  r.counts = at::zeros({E}, flat.options()).index_add_(0, flat, at::ones_like(flat));
  return r;
}

at::Tensor grouped_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& counts) {
  const int64_t E = w.size(0), out = w.size(1), in = w.size(2);
  if (x.is_meta()) return at::matmul(x, w.select(0, 0).t());  // shapes only (the dry run)
  // bf16 on a CPU without AVX-512: ATen's bf16 GEMMs (and _grouped_mm's
  // loop over them) are reference loops there; widen as gemm.h does.
  if (widen_gemm(x) && w.scalar_type() == at::kBFloat16)
    return grouped_linear(x.to(at::kFloat), w.to(at::kFloat), counts).to(at::kBFloat16);
  const auto dt = x.scalar_type();
  const int64_t esize = static_cast<int64_t>(x.element_size());
  const bool aligned = (in * esize) % 16 == 0 && (out * esize) % 16 == 0;
  if ((dt == at::kFloat || dt == at::kBFloat16) && aligned && (x.is_cpu() || x.is_cuda())) {
    const at::Tensor offs = counts.cumsum(0).to(at::kInt).to(x.device());
    return ContiguousGrad::apply(at::_grouped_mm(x, w.transpose(-2, -1), offs));
  }
  // One GEMM per expert that received rows (doubles, odd widths).
  const at::Tensor cpu_counts = counts.to(at::kCPU);
  const int64_t* c = cpu_counts.data_ptr<int64_t>();
  std::vector<at::Tensor> pieces;
  int64_t start = 0;
  for (int64_t e = 0; e < E; ++e) {
    if (c[e] > 0) pieces.push_back(at::linear(x.narrow(0, start, c[e]), w.select(0, e)));
    start += c[e];
  }
  if (pieces.empty()) return at::matmul(x, w.select(0, 0).t());  // no rows: [0, out]
  return at::cat(pieces, 0);
}

at::Tensor expert_activation(const at::Tensor& h1, const at::Tensor& h3, const MoeArgs& a, bool fused) {
  return fused ? fused_expert_swiglu(h1, h3, a.swiglu_limit, a.swiglu_alpha)
               : expert_swiglu(h1, h3, a.swiglu_limit, a.swiglu_alpha);
}

namespace {

// y [N, out] plus each row's expert's bias b [E, out]; `expert` [N]: each
// row's expert (experts_of_rows). y itself where b is undefined or on meta.
at::Tensor add_expert_bias(const at::Tensor& y, const at::Tensor& b, const at::Tensor& expert) {
  if (!b.defined() || y.is_meta()) return y;
  return y + b.index({expert}).to(y.scalar_type());
}

// Each of the N rows' expert, rows grouped by expert (counts [E]); N given,
// so CUDA need not read the counts back. (The explicit optional picks the
// Tensor-repeats overload: an int64 N would be the self-repeated one.)
at::Tensor experts_of_rows(const at::Tensor& counts, int64_t N, c10::Device device) {
  return at::repeat_interleave(counts.to(device), std::optional<int64_t>(N));
}

}  // namespace

at::Tensor moe_forward(const at::Tensor& x, const MoeWeights& w, const at::Tensor& bias, const MoeArgs& a,
                       at::Tensor* counts_out, const ExpertDispatch* ep, int64_t* received_out, bool fused) {
  at::Tensor logits = gemm_linear(x, w.router);
  if (w.router_bias.defined()) logits = logits + w.router_bias.to(logits.scalar_type());
  const MoeRouting r = moe_route(logits, bias, a);
  if (counts_out) *counts_out = r.counts;
  at::Tensor routed = x.index({r.token});  // [T·k, D]
  const at::Tensor gate = r.weight.unsqueeze(1);
  if (a.score_before_experts) routed = (routed.to(at::kFloat) * gate).to(x.scalar_type());
  const auto experts = [&](const at::Tensor& rows, const at::Tensor& counts) {
    const bool biased = w.b1.defined() || w.b2.defined() || w.b3.defined();
    const at::Tensor expert =
        biased && !rows.is_meta() ? experts_of_rows(counts, rows.size(0), rows.device()) : at::Tensor();
    const at::Tensor h = expert_activation(add_expert_bias(grouped_linear(rows, w.w1, counts), w.b1, expert),
                                           add_expert_bias(grouped_linear(rows, w.w3, counts), w.b3, expert), a,
                                           fused);
    return add_expert_bias(grouped_linear(h, w.w2, counts), w.b2, expert);
  };
  at::Tensor y;  // [T·k, D]
  const bool dispatch = ep != nullptr && ep->group.size() > 1;
  if (dispatch)
    TORCH_CHECK(w.w1.size(0) * ep->group.size() == r.counts.numel(), "expert parallelism: ", w.w1.size(0),
                " local experts on each of ", ep->group.size(), " ranks, but the router scores ", r.counts.numel());
  if (dispatch && !x.is_meta()) {
    y = ep->seams.exchange_tokens(routed, r.counts, experts, ep->group, received_out);
  } else {
    // (On meta — the dry run — a balanced dispatch: every rank receives as
    // many rows as it sends, so the shapes are those of the local rows.)
    y = experts(routed, r.counts);
  }
  if (!a.score_before_experts) y = (y.to(at::kFloat) * gate).to(x.scalar_type());
  at::Tensor out = w.shared_w1.defined() ? moe_shared_experts(x, w) : at::zeros_like(x);
  // index_put with accumulate, whose backward is aten::index (a C++ meta
  // kernel, so the dry run gets through), where index_add's is index_select.
  return at::index_put(out, c10::List<std::optional<at::Tensor>>{r.token}, y, /*accumulate=*/true);
}

at::Tensor moe_shared_experts(const at::Tensor& x, const MoeWeights& w) {
  return gemm_linear(at::silu(gemm_linear(x, w.shared_w1)) * gemm_linear(x, w.shared_w3), w.shared_w2);
}

void update_expert_bias(at::Tensor& bias, const at::Tensor& counts, double coeff) {
  at::NoGradGuard no_grad;
  const at::Tensor c = counts.to(at::kFloat);
  at::Tensor delta = coeff * at::sign(c.mean() - c);
  delta = delta - delta.mean();
  bias.add_(delta.to(bias.device()));
}

ExpertLoad expert_load(const at::Tensor& counts) {
  const at::Tensor c = counts.to(at::kCPU).to(at::kDouble);
  ExpertLoad l;
  if (c.numel() == 0) return l;
  l.min = c.min().item<double>();
  l.max = c.max().item<double>();
  const double mean = c.mean().item<double>();
  l.cv = mean > 0 ? std::sqrt(((c - mean).pow(2)).mean().item<double>()) / mean : 0.0;
  return l;
}

}  // namespace ctitan
