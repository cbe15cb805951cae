// Document masks (block_causal): the starts TorchTitan's rule gives, and
// attention under them — ctitan's fused CPU kernel (which skips the masked
// key blocks), the masked-SDPA path and context parallelism over thread
// ranks — against a float64 masked softmax written here: scores, a mask
// from the document lengths, softmax, weights × values, differentiated by
// autograd. Documents of length 1, equal to the kernel's 16-key block,
// crossing blocks and the whole sequence.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>
#include <random>
#include <vector>

#include "tests/unit/thread_ranks.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/documents.h"
#include "trainer/model/transformer.h"
#include "trainer/models/llama3.h"
#include "trainer/parallel/context_parallel.h"

namespace ctitan {
namespace {

TEST(Documents, StartsFollowTorchTitansEosRule) {
  // eos 0: an EOS belongs to the document it ends; the next starts after it.
  const at::Tensor tokens = torch::tensor({{5, 0, 7, 8, 0, 0, 3}, {0, 1, 2, 3, 4, 5, 0}}, torch::kLong);
  EXPECT_TRUE(torch::equal(document_starts(tokens, 0),
                           torch::tensor({{0, 0, 2, 2, 2, 5, 6}, {0, 1, 1, 1, 1, 1, 1}}, torch::kLong)));
  EXPECT_TRUE(torch::equal(document_starts(tokens, -1), torch::zeros({2, 7}, torch::kLong)));
  EXPECT_TRUE(single_document(document_starts(tokens, 9)));
  EXPECT_FALSE(single_document(document_starts(tokens, 0)));
  // Visible pairs: row 0 sees 1+2+1+2+3+1+1 = 11 of 28, row 1 1+1+2+3+4+5+6 = 22.
  EXPECT_DOUBLE_EQ(document_attention_fraction(document_starts(tokens, 0)), 33.0 / 56.0);
}

// Starts [B, S] from each sample's document lengths.
at::Tensor starts_of(const std::vector<std::vector<int64_t>>& lengths) {
  std::vector<int64_t> flat;
  for (const auto& row : lengths) {
    int64_t start = 0;
    for (int64_t len : row) {
      for (int64_t i = 0; i < len; ++i) flat.push_back(start);
      start += len;
    }
  }
  return torch::tensor(flat, torch::kLong).view({static_cast<int64_t>(lengths.size()), -1});
}

// The float64 reference: mask[b, i, j] = j <= i and j in i's document.
at::Tensor reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const std::vector<std::vector<int64_t>>& lengths) {
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), G = k.size(1);
  at::Tensor doc = torch::empty({B, S}, torch::kLong);
  for (int64_t b = 0; b < B; ++b) {
    int64_t i = 0, d = 0;
    for (int64_t len : lengths[static_cast<size_t>(b)]) {
      for (int64_t n = 0; n < len; ++n) doc[b][i++] = d;
      ++d;
    }
  }
  const at::Tensor same = doc.unsqueeze(2).eq(doc.unsqueeze(1));   // [B, S, S]
  const at::Tensor causal = torch::ones({S, S}, torch::kBool).tril();
  const at::Tensor keep = (same & causal).unsqueeze(1);             // [B, 1, S, S]
  const at::Tensor kk = k.repeat_interleave(H / G, 1), vv = v.repeat_interleave(H / G, 1);
  const at::Tensor scores = at::matmul(q, kk.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  return at::matmul(at::softmax(scores.masked_fill(~keep, -std::numeric_limits<double>::infinity()), -1), vv);
}

const std::vector<std::vector<int64_t>> kLengths = {
    {1, 16, 23, 24},          // one token, one 16-key block, crossing blocks
    {64},                     // the whole sequence
    {5, 1, 1, 40, 17},        // short ones, then a long one crossing three blocks
};

struct Grads {
  at::Tensor out, dq, dk, dv;
};
template <typename F>
Grads run(const F& attend, const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0, const at::Tensor& dout) {
  at::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
             v = v0.clone().requires_grad_(true);
  at::Tensor out = attend(q, k, v);
  out.backward(dout);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// [B, S, n, Dh] memory viewed as [B, n, S, Dh], as the model passes q, k, v.
at::Tensor model_layout(const at::Tensor& t) { return t.transpose(1, 2).contiguous().transpose(1, 2); }

class DocumentKernel : public ::testing::TestWithParam<int64_t> {};

TEST_P(DocumentKernel, ForwardAndBackwardMatchAFloat64MaskedSoftmax) {
  const int64_t B = 3, H = 4, G = 2, S = 64, Dh = GetParam();
  torch::manual_seed(5);
  const at::Tensor q = torch::randn({B, H, S, Dh}, torch::kDouble), k = torch::randn({B, G, S, Dh}, torch::kDouble),
                   v = torch::randn({B, G, S, Dh}, torch::kDouble), dout = torch::randn({B, H, S, Dh}, torch::kDouble);
  const at::Tensor starts = starts_of(kLengths);
  const Grads want = run([&](auto& a, auto& b, auto& c) { return reference(a, b, c, kLengths); }, q, k, v, dout);
  // fp32: the kernel (AVX-512) or the masked SDPA where ATen's CPU is not AVX-512.
  const Grads got = run(
      [&](auto& a, auto& b, auto& c) {
        return fused_causal_attention(model_layout(a.to(at::kFloat)), model_layout(b.to(at::kFloat)),
                                      model_layout(c.to(at::kFloat)), starts);
      },
      q, k, v, dout.to(at::kFloat));
  for (const auto& [name, g, w] : {std::tuple{"out", got.out, want.out}, std::tuple{"dq", got.dq, want.dq},
                                   std::tuple{"dk", got.dk, want.dk}, std::tuple{"dv", got.dv, want.dv}})
    EXPECT_TRUE(torch::allclose(g.to(at::kDouble), w, 1e-5, 5e-6))
        << name << " Dh " << Dh << " max err " << (g.to(at::kDouble) - w).abs().max().item<double>();
  // float64 inputs take the masked-SDPA path (documents on any device).
  const Grads sdpa = run([&](auto& a, auto& b, auto& c) { return fused_causal_attention(a, b, c, starts); }, q, k, v,
                         dout);
  EXPECT_TRUE(torch::allclose(sdpa.out, want.out, 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(sdpa.dk, want.dk, 1e-12, 1e-12));
}

TEST_P(DocumentKernel, OneDocumentPerSampleIsTheCausalKernelBitForBit) {
  const int64_t B = 2, H = 4, G = 4, S = 48, Dh = GetParam();
  torch::manual_seed(6);
  const at::Tensor q = torch::randn({B, H, S, Dh}), k = torch::randn({B, G, S, Dh}), v = torch::randn({B, G, S, Dh}),
                   dout = torch::randn({B, H, S, Dh});
  const Grads causal =
      run([&](auto& a, auto& b, auto& c) { return fused_causal_attention(a, b, c); }, q, k, v, dout);
  const Grads docs = run(
      [&](auto& a, auto& b, auto& c) { return fused_causal_attention(a, b, c, torch::zeros({B, S}, torch::kLong)); },
      q, k, v, dout);
  if (!fused_kernels_available()) GTEST_SKIP() << "no AVX-512 here: the masked SDPA is not the causal kernel";
  EXPECT_TRUE(torch::equal(causal.out, docs.out));
  EXPECT_TRUE(torch::equal(causal.dq, docs.dq));
  EXPECT_TRUE(torch::equal(causal.dk, docs.dk));
  EXPECT_TRUE(torch::equal(causal.dv, docs.dv));
}

INSTANTIATE_TEST_SUITE_P(HeadDims, DocumentKernel, ::testing::Values(16, 32, 64),
                         [](const auto& info) { return "Dh" + std::to_string(info.param); });

struct CpCase {
  int cp;
  const char* method;
  const char* balancer;
};
class DocumentCp : public ::testing::TestWithParam<CpCase> {};

TEST_P(DocumentCp, ContextParallelAttentionMatchesTheReference) {
  const CpCase c = GetParam();
  const int64_t B = 3, H = 4, G = 2, S = 64, Dh = 8;
  torch::manual_seed(7);
  const at::Tensor q0 = torch::randn({B, H, S, Dh}, torch::kDouble), k0 = torch::randn({B, G, S, Dh}, torch::kDouble),
                   v0 = torch::randn({B, G, S, Dh}, torch::kDouble), dout = torch::randn({B, H, S, Dh}, torch::kDouble);
  const Grads want = run([&](auto& a, auto& b, auto& cc) { return reference(a, b, cc, kLengths); }, q0, k0, v0, dout);
  const at::Tensor starts = starts_of(kLengths);
  std::mutex mu;
  testing::run_group(c.cp, [&](int r, Communicator& g) {
    ContextParallelOptions cp;
    cp.group = &g;
    cp.rotate_method = c.method;
    cp.load_balancer = c.balancer;
    if (std::string(c.balancer) == "ptrr") cp.ptrr_blocks = ptrr_assignment(starts, c.cp, ptrr_block_size(S, c.cp));
    const at::Tensor pos = cp_positions(cp.load_balancer, cp.size(), r, S, cp.ptrr_blocks);
    at::Tensor ql = q0.index_select(2, pos).requires_grad_(true), kl = k0.index_select(2, pos).requires_grad_(true),
               vl = v0.index_select(2, pos).requires_grad_(true);
    const at::Tensor out = context_parallel_attention(model_layout(ql), model_layout(kl), model_layout(vl), pos, cp,
                                                      std::nullopt, starts.index_select(1, pos));
    out.backward(dout.index_select(2, pos));
    std::lock_guard<std::mutex> lock(mu);
    const std::string at = std::string(c.method) + " cp " + std::to_string(c.cp) + " rank " + std::to_string(r);
    EXPECT_TRUE(torch::allclose(out, want.out.index_select(2, pos), 1e-10, 1e-12)) << at;
    EXPECT_TRUE(torch::allclose(ql.grad(), want.dq.index_select(2, pos), 1e-10, 1e-12)) << at << " dq";
    EXPECT_TRUE(torch::allclose(kl.grad(), want.dk.index_select(2, pos), 1e-10, 1e-12)) << at << " dk";
    EXPECT_TRUE(torch::allclose(vl.grad(), want.dv.index_select(2, pos), 1e-10, 1e-12)) << at << " dv";
  });
}

INSTANTIATE_TEST_SUITE_P(Methods, DocumentCp,
                         ::testing::Values(CpCase{2, "allgather", "headtail"}, CpCase{2, "alltoall", "headtail"},
                                           CpCase{4, "allgather", "headtail"}, CpCase{4, "alltoall", "none"},
                                           CpCase{2, "allgather", "ptrr"}, CpCase{4, "alltoall", "ptrr"}),
                         [](const auto& info) {
                           return std::string(info.param.method) + "_cp" + std::to_string(info.param.cp) + "_" +
                                  info.param.balancer;
                         });

// The model's dispatch in bf16 at head dim 64 (Llama 3 125M's heads): with
// compile the document attention runs the fp32 kernel on cast heads, without
// it SDPA with the mask — the same loss and gradients within bf16 rounding.
TEST(Documents, Bf16HeadsThroughTheKernelMatchMaskedSdpa) {
  ModelArgs a = llama3_flavor("125M", 1);
  a.attn_type = "flex";
  a.attn_mask_type = "block_causal";
  at::Tensor tokens = torch::randint(1, 1000, {2, 64}, torch::kLong);
  for (int64_t p : {0, 20, 21, 40}) tokens[0][p] = 0;
  const at::Tensor labels = torch::randint(0, 1000, {2, 64}, torch::kLong);
  std::vector<double> loss;
  std::vector<at::Tensor> grad;
  for (bool compile : {false, true}) {
    ModelTechniques techniques;
    techniques.compile_model = compile;
    Transformer m(a, at::kBFloat16, 64, c10::Device(c10::kCPU), ModelPart{}, ParamStore::Storage::kFlat, {},
                  techniques);
    m.init_weights(3);
    m.set_documents(document_starts(tokens, 0));
    at::Tensor l = m.forward_loss(tokens, labels);
    l.backward();
    m.store().accumulate_grads();
    loss.push_back(l.item<double>());
    grad.push_back(m.store().grad("layers.0.attention.wq.weight").to(at::kFloat).clone());
  }
  EXPECT_NEAR(loss[1], loss[0], 1e-2 * std::abs(loss[0]));
  EXPECT_LT((grad[1] - grad[0]).abs().max().item<double>(), 0.05 * grad[0].abs().max().item<double>());
}

// torch's _PTRRLoadBalancer documents its deal on a block mask of documents
// of 4, 8 and 4 blocks over 2 ranks; with one-token blocks the visible pairs
// per row are that example's row values.
TEST(Ptrr, DealsTorchsDocumentedExample) {
  const at::Tensor starts = starts_of({{4, 8, 4}});
  const auto deal = ptrr_assignment(starts, 2, 1);
  EXPECT_EQ(deal[0], (std::vector<int64_t>{2, 3, 5, 6, 8, 11, 12, 13}));
  EXPECT_EQ(deal[1], (std::vector<int64_t>{0, 1, 4, 7, 9, 10, 14, 15}));
  ContextParallelOptions cp;
  cp.load_balancer = "ptrr";
  cp.ptrr_blocks = deal;
  EXPECT_EQ(ptrr_block_size(16, 2), 4);   // 4 blocks of 4, 2 per rank
  EXPECT_EQ(ptrr_block_size(4096, 4), 128);  // flex attention's block
  EXPECT_EQ(ptrr_block_size(6, 4), 0);
}

// On packed documents the deal by work balances the ranks better than the
// head-tail cut, which balances causal attention's triangle only: the
// busiest rank's visible pairs over the mean, C4-like documents (log-normal
// lengths, mean 427 tokens), 8 rows of 8192, cp 4.
TEST(Ptrr, BalancesDocumentsBetterThanHeadTail) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> length(std::log(230.0), std::sqrt(2.0 * std::log(427.0 / 230.0)));
  std::vector<std::vector<int64_t>> lengths(8);
  for (auto& row : lengths) {
    int64_t left = 8192;
    while (left > 0) {
      const int64_t n = std::min<int64_t>(left, std::max<int64_t>(1, std::llround(length(rng))));
      row.push_back(n);
      left -= n;
    }
  }
  const at::Tensor starts = starts_of(lengths);
  const auto imbalance = [&](const std::string& balancer) {
    const auto deal = balancer == "ptrr" ? ptrr_assignment(starts, 4, ptrr_block_size(8192, 4))
                                         : std::vector<std::vector<int64_t>>{};
    const std::vector<double> work = cp_rank_work(balancer, 4, deal, starts);
    double total = 0;
    for (double w : work) total += w;
    return *std::max_element(work.begin(), work.end()) / (total / 4);
  };
  const double none = imbalance("none"), headtail = imbalance("headtail"), ptrr = imbalance("ptrr");
  std::cout << "busiest rank / mean: none " << none << ", headtail " << headtail << ", ptrr " << ptrr << std::endl;
  EXPECT_LT(ptrr, headtail);
  EXPECT_LT(ptrr, 1.01);
}

}  // namespace
}  // namespace ctitan
