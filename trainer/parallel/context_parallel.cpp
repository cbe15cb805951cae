#include "trainer/parallel/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/errors.h"
#include "trainer/kernels/attention_mask.h"
#include "trainer/kernels/documents.h"
#include "trainer/kernels/flash_sinks.h"
#include "trainer/parallel/exposed_comm.h"
#include "trainer/parallel/tensor_parallel.h"

namespace ctitan {
namespace {

// GQA: each KV head serves H/K query heads.
at::Tensor expand_heads(const at::Tensor& kv, int64_t heads) {
  const int64_t K = kv.size(1);
  return K == heads ? kv : kv.repeat_interleave(heads / K, 1);
}

}  // namespace

void check_context_parallel(const std::string& rotate_method, const std::string& load_balancer, int64_t cp,
                            int64_t seq_len, const std::string& seq_key) {
  if (rotate_method != "allgather" && rotate_method != "alltoall")
    throw InputError("parallelism.context_parallel_rotate_method '" + rotate_method +
                     "' is not one of TorchTitan's (allgather, alltoall)");
  if (load_balancer != "headtail" && load_balancer != "none" && load_balancer != "ptrr")
    throw InputError("parallelism.context_parallel_load_balancer '" + load_balancer +
                     "' is not one of TorchTitan's (headtail, ptrr for flex attention, or none for no load balancing)");
  if (cp <= 1) return;
  if (load_balancer == "ptrr") {
    if (ptrr_block_size(seq_len, cp) == 0)
      throw InputError(seq_key + " " + std::to_string(seq_len) + " cannot be cut into blocks for ptrr over " +
                       "context_parallel_degree " + std::to_string(cp) +
                       " (a multiple of cp blocks, at least 2 per rank, of a power-of-two length); choose a multiple "
                       "of " + std::to_string(2 * cp));
    return;
  }
  const bool headtail = load_balancer == "headtail";
  const int64_t chunks = headtail ? 2 * cp : cp;
  if (seq_len % chunks != 0)
    throw InputError(seq_key + " " + std::to_string(seq_len) + " is not divisible by " +
                     (headtail ? "2 x " : "") + "context_parallel_degree " + std::to_string(cp) + " = " +
                     std::to_string(chunks) + " (each rank holds " + (headtail ? "two chunks" : "one chunk") +
                     " of every sequence); choose a multiple");
}

at::Tensor cp_positions(const std::string& load_balancer, int64_t cp, int64_t rank, int64_t seq_len,
                        const std::vector<std::vector<int64_t>>& ptrr_blocks) {
  if (load_balancer == "ptrr") {
    TORCH_CHECK(static_cast<int64_t>(ptrr_blocks.size()) == cp, "ptrr: no block assignment for this batch");
    const auto& mine = ptrr_blocks[static_cast<size_t>(rank)];
    const int64_t block = seq_len / cp / static_cast<int64_t>(mine.size());
    std::vector<at::Tensor> parts;
    for (int64_t b : mine) parts.push_back(torch::arange(b * block, (b + 1) * block, torch::kLong));
    return torch::cat(parts);
  }
  if (load_balancer != "headtail") {
    const int64_t c = seq_len / cp;
    return torch::arange(rank * c, (rank + 1) * c, torch::kLong);
  }
  const int64_t c = seq_len / (2 * cp);
  return torch::cat({torch::arange(rank * c, (rank + 1) * c, torch::kLong),
                     torch::arange((2 * cp - 1 - rank) * c, (2 * cp - rank) * c, torch::kLong)});
}

int64_t ptrr_block_size(int64_t seq_len, int64_t cp) {
  for (int64_t block = 128; block >= 1; block /= 2)
    if (seq_len % (block * cp) == 0 && seq_len / block >= 2 * cp) return block;
  return 0;
}

std::vector<std::vector<int64_t>> ptrr_assignment(const at::Tensor& starts, int64_t cp, int64_t block) {
  const int64_t S = starts.size(1), n = S / block;
  TORCH_CHECK(S % block == 0 && n % cp == 0, "ptrr: ", n, " blocks of ", block, " for cp ", cp);
  // Visible pairs of each query row, summed over the batch, then per block.
  const at::Tensor rows = (at::arange(S, starts.options()) - starts + 1).sum(0).to(at::kDouble);
  const at::Tensor work = rows.view({n, block}).sum(1);
  const at::Tensor order = std::get<1>(work.cpu().sort(/*stable=*/true, /*dim=*/0, /*descending=*/true));
  const auto* o = order.const_data_ptr<int64_t>();
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(cp));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t round = i / cp, lane = i % cp;
    out[static_cast<size_t>(round % 2 == 0 ? lane : cp - 1 - lane)].push_back(o[i]);
  }
  for (auto& blocks : out) std::sort(blocks.begin(), blocks.end());
  return out;
}

std::vector<double> cp_rank_work(const std::string& load_balancer, int64_t cp,
                                 const std::vector<std::vector<int64_t>>& ptrr_blocks, const at::Tensor& starts) {
  const int64_t S = starts.size(1);
  const at::Tensor rows = (at::arange(S, starts.options()) - starts + 1).sum(0).to(at::kDouble);
  std::vector<double> out;
  for (int64_t r = 0; r < cp; ++r)
    out.push_back(rows.index_select(0, cp_positions(load_balancer, cp, r, S, ptrr_blocks)).sum().item<double>());
  return out;
}

at::Tensor cp_shard(const at::Tensor& x, const ContextParallelOptions& cp) {
  if (!cp.on()) return x;
  const at::Tensor pos = cp_positions(cp.load_balancer, cp.size(), cp.rank(), x.size(1), cp.ptrr_blocks).to(x.device());
  return x.index_select(1, pos).contiguous();
}

namespace {

// Devices without ATen's CPU flash kernel: all-gathered keys and values
// with a position mask (either rotate method).
// With `extras`: sink_window_attention over them, on any device.
at::Tensor masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& positions,
                            const ContextParallelOptions& cp, double scale, const at::Tensor& starts,
                            const AttentionExtras& extras = {}) {
  Communicator& g = *cp.group;
  const int64_t n = cp.size(), H = q.size(1), Sl = q.size(2), S = Sl * n;
  const at::Tensor k_all = gather_from_sp(k, g, 2), v_all = gather_from_sp(v, g, 2);
  std::vector<at::Tensor> pos;
  for (int64_t s = 0; s < n; ++s) pos.push_back(cp_positions(cp.load_balancer, cp.size(), s, S, cp.ptrr_blocks));
  const at::Tensor kpos = torch::cat(pos).to(q.device());
  if (extras.any()) return sink_window_attention(q, k_all, v_all, positions, kpos, starts, extras, scale);
  if (starts.defined())
    return at::scaled_dot_product_attention(q, expand_heads(k_all, H), expand_heads(v_all, H),
                                            document_mask(starts, positions, kpos, q.scalar_type()), 0.0, false, scale);
  const at::Tensor visible = kpos.view({1, S}).le(positions.to(q.device()).view({Sl, 1}));
  return at::scaled_dot_product_attention(q, expand_heads(k_all, H), expand_heads(v_all, H), visible, 0.0, false, scale);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Partial attentions of one query chunk over several key blocks, merged by
// their log-sum-exp: out = Σ_p exp(lse_p - lse) · out_p (in the lse's
// precision), lse = logsumexp_p lse_p. Returns {out in `dtype`, lse}.
std::pair<at::Tensor, at::Tensor> merge_by_lse(const std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& lses,
                                               at::ScalarType dtype) {
  if (outs.size() == 1) return {outs[0], lses[0]};
  const at::Tensor lse = at::logsumexp(at::stack(lses), 0);  // [B, H, L]
  at::Tensor out = at::zeros(outs[0].sizes(), outs[0].options().dtype(lse.scalar_type()));
  for (size_t p = 0; p < outs.size(); ++p) out += at::exp(lses[p] - lse).unsqueeze(-1) * outs[p];
  return {out.to(dtype), lse};
}

// Sinks: apply_sinks and sink_grad (kernels/flash_sinks.h) on each merged query chunk.

// Documents: the additive mask of each (query chunk, key block) pair
// (document_mask), undefined where the pair is plain causal or wholly
// visible. ATen's CPU flash kernel gives a row that sees none of a block's
// keys output 0 and log-sum-exp 0; the merge needs −inf there.
struct PairMasks {
  std::vector<at::Tensor> masks;
  const at::Tensor& operator[](size_t p) const { return masks[p]; }
};
// ATen's optional mask: none for an undefined tensor.
std::optional<at::Tensor> optional(const at::Tensor& t) { return t.defined() ? std::optional(t) : std::nullopt; }
at::Tensor masked_rows_lse(const at::Tensor& lse, const at::Tensor& mask) {
  if (!mask.defined()) return lse;
  return at::where(mask.amax(-1).eq(0), lse, at::full({}, -std::numeric_limits<double>::infinity(), lse.options()));
}

// softmax(q·Kᵀ)·V of one query chunk over several key blocks at once:
// blocks = [K0, V0, K1, V1, ...], block p causal (the query chunk's own
// positions, square) when causal[p], else wholly visible — or, with
// documents, as masks[p] says. Each block runs
// ATen's CPU flash kernel, which returns its log-sum-exp; the blocks merge
// by it, and backward gives each block the flash backward against the
// merged output and log-sum-exp — exact, with no [L, S] mask or score
// matrix kept (ring attention's block arithmetic).
class MergedAttention : public torch::autograd::Function<MergedAttention> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& sinks, at::TensorList blocks,
                            const std::vector<bool>& causal, const PairMasks* masks, double scale) {
    std::vector<at::Tensor> outs, lses;
    for (size_t p = 0; p < causal.size(); ++p) {
      auto [o, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, blocks[2 * p], blocks[2 * p + 1], 0.0,
                                                                      causal[p], optional((*masks)[p]), scale);
      outs.push_back(o);
      lses.push_back(masked_rows_lse(lse, (*masks)[p]));
    }
    auto [merged, merged_lse] = merge_by_lse(outs, lses, q.scalar_type());
    auto [out, lse] = apply_sinks(merged, merged_lse, sinks);
    std::vector<at::Tensor> saved{q, out, lse, sinks};
    saved.insert(saved.end(), blocks.begin(), blocks.end());
    ctx->save_for_backward(saved);
    std::vector<int64_t> flags(causal.begin(), causal.end());
    ctx->saved_data["causal"] = flags;
    ctx->saved_data["masks"] = c10::List<at::Tensor>(masks->masks);
    ctx->saved_data["scale"] = scale;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &q = s[0], &out = s[1], &lse = s[2], &sinks = s[3];
    const std::vector<int64_t> causal = ctx->saved_data["causal"].toIntVector();
    const double scale = ctx->saved_data["scale"].toDouble();
    const c10::List<at::Tensor> masks = ctx->saved_data["masks"].toTensorList();
    at::Tensor dq = at::zeros_like(q);
    variable_list grads{at::Tensor(), sinks.numel() > 0 ? sink_grad(g[0], out, lse, sinks) : at::Tensor()};  // q's below
    for (size_t p = 0; p < causal.size(); ++p) {
      auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
          g[0], q, s[4 + 2 * p], s[5 + 2 * p], out, lse, 0.0, causal[p] != 0, optional(masks.get(p)), scale);
      dq += gq;
      grads.push_back(gk);
      grads.push_back(gv);
    }
    grads[0] = dq;
    grads.push_back(at::Tensor());  // causal
    grads.push_back(at::Tensor());  // masks
    grads.push_back(at::Tensor());  // scale
    return grads;
  }
};

// The chunks a rank holds: (global chunk index, offset, length) in its tokens.
struct Chunk {
  int64_t global = 0, offset = 0, length = 0;
};
std::vector<Chunk> chunks_of(const ContextParallelOptions& cp, int64_t rank, int64_t Sl) {
  if (cp.load_balancer == "ptrr") {  // the rank's blocks, ascending
    const auto& mine = cp.ptrr_blocks[static_cast<size_t>(rank)];
    const int64_t block = Sl / static_cast<int64_t>(mine.size());
    std::vector<Chunk> out;
    for (size_t i = 0; i < mine.size(); ++i) out.push_back({mine[i], static_cast<int64_t>(i) * block, block});
    return out;
  }
  if (cp.load_balancer != "headtail") return {{rank, 0, Sl}};
  return {{rank, 0, Sl / 2}, {2 * cp.size() - 1 - rank, Sl / 2, Sl / 2}};
}

// The device the masks are built on (the starts', else the positions').
c10::Device q_device(const at::Tensor& positions, const at::Tensor& starts) {
  return starts.defined() ? starts.device() : positions.device();
}

// Which keys of chunk kc the queries of chunk qc (this
// rank's) see. Without documents or a window: all (an earlier chunk),
// causally (its own) or none (a later one). With documents (`starts` of
// this rank's queries, global positions) or a sliding window: the additive
// mask, or none when no query's document or window reaches into kc — a
// pair that is skipped, not computed.
struct PairView {
  bool any = false, causal = false;
  at::Tensor mask;
};
PairView pair_view(const Chunk& qc, const Chunk& kc, const at::Tensor& positions, const at::Tensor& starts,
                   int64_t window, const ContextParallelOptions& cp, int64_t Sl, at::ScalarType dtype) {
  if (kc.global > qc.global) return {};  // all in the future
  if (!starts.defined() && window <= 0) return {true, kc.global == qc.global, {}};
  const int64_t c = Sl / static_cast<int64_t>(chunks_of(cp, 0, Sl).size());  // a chunk's length
  const int64_t k0 = kc.global * c, k1 = k0 + kc.length - 1;                 // its global positions
  const at::Tensor qpos = positions.narrow(0, qc.offset, qc.length).to(q_device(positions, starts));
  // The first key each query sees; a pair no query's first key reaches is skipped.
  const at::Tensor first = first_visible_key(
      qpos, starts.defined() ? starts.narrow(1, qc.offset, qc.length).to(qpos.device()) : starts, window);
  if (!(first.le(k1) & qpos.ge(k0).unsqueeze(0)).any().item<bool>()) return {};
  return {true, false, additive_attention_mask(first, qpos, at::arange(k0, k1 + 1, qpos.options()), dtype)};
}


// Causal attention of this rank's query chunks over key/value blocks that
// arrive as whole ranks' tokens: blocks[s] = (k, v) of rank s.
// `window`, `sinks` (fp32 [H] or empty): GPT-OSS's (sink_attention.h).
at::Tensor attend_blocks(const at::Tensor& q, const std::vector<std::pair<at::Tensor, at::Tensor>>& blocks,
                         const std::vector<int64_t>& block_rank, const at::Tensor& positions, const at::Tensor& starts,
                         int64_t window, const at::Tensor& sinks, const ContextParallelOptions& cp, double scale) {
  const int64_t H = q.size(1), Sl = q.size(2);
  std::vector<at::Tensor> out;
  for (const Chunk& qc : chunks_of(cp, cp.rank(), Sl)) {
    std::vector<at::Tensor> kv;
    std::vector<bool> causal;
    PairMasks masks;
    for (size_t b = 0; b < blocks.size(); ++b)
      for (const Chunk& kc : chunks_of(cp, block_rank[b], Sl)) {
        PairView view = pair_view(qc, kc, positions, starts, window, cp, Sl, q.scalar_type());
        if (!view.any) continue;
        kv.push_back(expand_heads(blocks[b].first.narrow(2, kc.offset, kc.length), H));
        kv.push_back(expand_heads(blocks[b].second.narrow(2, kc.offset, kc.length), H));
        causal.push_back(view.causal);
        masks.masks.push_back(std::move(view.mask));
      }
    out.push_back(
        MergedAttention::apply(q.narrow(2, qc.offset, qc.length), sinks, at::TensorList(kv), causal, &masks, scale));
  }
  return out.size() == 1 ? out[0] : at::cat(out, 2);
}

// GQA: the gradient of K/V heads expanded to H query heads, summed back.
at::Tensor reduce_heads(const at::Tensor& g, int64_t kv_heads) {
  const int64_t H = g.size(1);
  if (H == kv_heads) return g;
  return g.view({g.size(0), kv_heads, H / kv_heads, g.size(2), g.size(3)}).sum(2);
}

// The ring (alltoall) as one autograd node. Forward: at step t this rank
// holds rank r-t's K/V block; the next block's send/recv is in flight while
// this one's chunk pairs run (flash, log-sum-exp kept), and the pairs merge
// per query chunk at the end. Backward: the blocks go round again with
// their dK/dV partial sums — each rank adds its queries' flash backward
// against the merged output — and after n passes each block's dK/dV is
// back with its owner. One node per layer on every rank, so every rank
// runs the same sends and receives in the same order.
class RingAttention : public torch::autograd::Function<RingAttention> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& sinks, const at::Tensor& positions, const at::Tensor* starts_in,
                            int64_t window, const ContextParallelOptions* cp, double scale) {
    const at::Tensor& starts = *starts_in;  // not an autograd input (it may be undefined)
    Communicator& g = *cp->group;
    const int64_t n = cp->size(), r = cp->rank(), H = q.size(1), Sl = q.size(2);
    const std::vector<Chunk> qchunks = chunks_of(*cp, r, Sl);
    std::vector<std::vector<at::Tensor>> outs(qchunks.size()), lses(qchunks.size());
    at::Tensor kb = k.contiguous(), vb = v.contiguous();
    for (int64_t t = 0; t < n; ++t) {
      std::vector<WorkPtr> works;
      at::Tensor kn, vn;
      if (t + 1 < n) works = pass(g, {kb, vb}, {&kn, &vn}, static_cast<int>(4 * t));
      for (size_t i = 0; i < qchunks.size(); ++i)
        for (const Chunk& kc : chunks_of(*cp, (r - t + n) % n, Sl)) {
          const PairView view = pair_view(qchunks[i], kc, positions, starts, window, *cp, Sl, q.scalar_type());
          if (!view.any) continue;
          auto [o, lse] = at::_scaled_dot_product_flash_attention_for_cpu(
              q.narrow(2, qchunks[i].offset, qchunks[i].length), expand_heads(kb.narrow(2, kc.offset, kc.length), H),
              expand_heads(vb.narrow(2, kc.offset, kc.length), H), 0.0, view.causal, optional(view.mask), scale);
          outs[i].push_back(o);
          lses[i].push_back(masked_rows_lse(lse, view.mask));
        }
      for (const WorkPtr& w : works) wait_exposed(w, g);
      if (t + 1 < n) kb = kn, vb = vn;
    }
    std::vector<at::Tensor> out, lse;
    for (size_t i = 0; i < qchunks.size(); ++i) {
      auto [merged, merged_lse] = merge_by_lse(outs[i], lses[i], q.scalar_type());
      auto [o, l] = apply_sinks(merged, merged_lse, sinks);
      out.push_back(o);
      lse.push_back(l);
    }
    const at::Tensor o = at::cat(out, 2), l = at::cat(lse, 2);
    ctx->save_for_backward({q, k, v, o, l, positions, sinks});
    if (starts.defined()) ctx->saved_data["starts"] = starts;
    ctx->saved_data["window"] = window;
    ctx->saved_data["cp"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(cp));
    ctx->saved_data["scale"] = scale;
    return o;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto* cp = reinterpret_cast<const ContextParallelOptions*>(static_cast<intptr_t>(ctx->saved_data["cp"].toInt()));
    Communicator& g = *cp->group;
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &q = s[0], &out = s[3], &lse = s[4];
    const at::Tensor dout = grad[0].contiguous();
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto saved_starts = ctx->saved_data.find("starts");
    const at::Tensor starts = saved_starts == ctx->saved_data.end() ? at::Tensor() : saved_starts->second.toTensor();
    const int64_t n = cp->size(), r = cp->rank(), H = q.size(1), K = s[1].size(1), Sl = q.size(2);
    const int64_t window = ctx->saved_data["window"].toInt();
    const at::Tensor& sinks = s[6];
    const auto acc = torch::TensorOptions().dtype(at::promote_types(q.scalar_type(), at::kFloat)).device(q.device());
    at::Tensor dq = at::zeros(q.sizes(), acc);
    at::Tensor kb = s[1].contiguous(), vb = s[2].contiguous();
    at::Tensor dkb = at::zeros(kb.sizes(), acc), dvb = at::zeros(vb.sizes(), acc);
    const std::vector<Chunk> qchunks = chunks_of(*cp, r, Sl);
    for (int64_t t = 0; t < n; ++t) {
      for (const Chunk& qc : qchunks)
        for (const Chunk& kc : chunks_of(*cp, (r - t + n) % n, Sl)) {
          const PairView view = pair_view(qc, kc, s[5], starts, window, *cp, Sl, q.scalar_type());
          if (!view.any) continue;
          auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
              dout.narrow(2, qc.offset, qc.length), q.narrow(2, qc.offset, qc.length),
              expand_heads(kb.narrow(2, kc.offset, kc.length), H), expand_heads(vb.narrow(2, kc.offset, kc.length), H),
              out.narrow(2, qc.offset, qc.length), lse.narrow(2, qc.offset, qc.length), 0.0, view.causal,
              optional(view.mask), scale);
          dq.narrow(2, qc.offset, qc.length) += gq;
          dkb.narrow(2, kc.offset, kc.length) += reduce_heads(gk, K);
          dvb.narrow(2, kc.offset, kc.length) += reduce_heads(gv, K);
        }
      // The block moves on with its gradient sums (K/V only while another rank needs them).
      at::Tensor kn, vn, dkn, dvn;
      std::vector<WorkPtr> works =
          t + 1 < n ? pass(g, {kb, vb, dkb, dvb}, {&kn, &vn, &dkn, &dvn}, static_cast<int>(4 * t))
                    : pass(g, {dkb, dvb}, {&dkn, &dvn}, static_cast<int>(4 * t + 2));
      for (const WorkPtr& w : works) wait_exposed(w, g);
      if (t + 1 < n) kb = kn, vb = vn;
      dkb = dkn, dvb = dvn;
    }
    return {dq.to(q.scalar_type()), dkb.to(q.scalar_type()), dvb.to(q.scalar_type()),
            sinks.numel() > 0 ? sink_grad(dout, out, lse, sinks) : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }

 private:
  // Sends each of `send` to rank r+1 and receives as many from rank r-1
  // into fresh tensors of the same shapes; tags from `tag` on. Returns the
  // works to wait for.
  static std::vector<WorkPtr> pass(Communicator& g, const std::vector<at::Tensor>& send,
                                   const std::vector<at::Tensor*>& recv, int tag) {
    const int n = static_cast<int>(g.size()), r = static_cast<int>(g.rank());
    std::vector<WorkPtr> works;
    for (size_t i = 0; i < send.size(); ++i) {
      *recv[i] = at::empty_like(send[i]);
      works.push_back(g.send(send[i], (r + 1) % n, tag + static_cast<int>(i)));
      works.push_back(g.recv(*recv[i], (r - 1 + n) % n, tag + static_cast<int>(i)));
    }
    return works;
  }
};

}  // namespace

at::Tensor context_parallel_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& positions, const ContextParallelOptions& cp,
                                      std::optional<double> scale_in, const at::Tensor& starts,
                                      const AttentionExtras& extras) {
  const int64_t D = q.size(3), Dv = v.size(3);
  if (extras.any() && !q.device().is_cpu())
    return masked_attention(q, k, v, positions, cp, scale_in.value_or(1.0 / std::sqrt(static_cast<double>(D))), starts,
                            extras);
  // ATen's CPU flash kernel takes one head size for q, k and v. A narrower v
  // (multi-head latent attention: 128 beside q/k's 192) is padded with zero
  // columns, which only add zero columns to the output (and take a zero
  // gradient), then cut off.
  if (Dv != D) {
    TORCH_CHECK(Dv < D, "context parallel attention: v's head size ", Dv, " exceeds q's ", D);
    return context_parallel_attention(q, k, at::constant_pad_nd(v, {0, D - Dv}), positions, cp, scale_in, starts,
                                      extras)
        .narrow(3, 0, Dv);
  }
  // ATen's default, 1/sqrt(D), made explicit (the same double ATen computes).
  const double scale = scale_in.value_or(1.0 / std::sqrt(static_cast<double>(D)));
  if (!q.device().is_cpu()) return masked_attention(q, k, v, positions, cp, scale, starts);
  // Sinks as an autograd input (an undefined tensor may not be one: empty for none).
  const at::Tensor sinks = extras.sinks.defined()
                               ? extras.sinks.to(at::promote_types(extras.sinks.scalar_type(), at::kFloat))
                               : at::empty({0}, q.options().dtype(at::kFloat));
  if (cp.rotate_method == "alltoall")
    return RingAttention::apply(q, k, v, sinks, positions, &starts, extras.window, &cp, scale);
  // allgather: every rank's keys and values, rank-major (backward reduce-scatters).
  Communicator& g = *cp.group;
  const int64_t Sl = q.size(2);
  const at::Tensor k_all = gather_from_sp(k, g, 2), v_all = gather_from_sp(v, g, 2);
  std::vector<std::pair<at::Tensor, at::Tensor>> blocks;
  std::vector<int64_t> block_rank;
  for (int64_t s = 0; s < cp.size(); ++s) {
    blocks.emplace_back(k_all.narrow(2, s * Sl, Sl), v_all.narrow(2, s * Sl, Sl));
    block_rank.push_back(s);
  }
  return attend_blocks(q, blocks, block_rank, positions, starts, extras.window, sinks, cp, scale);
}

}  // namespace ctitan
