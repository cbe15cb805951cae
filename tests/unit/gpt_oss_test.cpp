// GPT-OSS's pieces against references written here, independent of the
// code under test:
// - attention with sinks and the sliding window: a float64 loop over every
//   (batch, head, row) — scores, the visible keys by the mask rule, the sink
//   logit as one more softmax term, weights × values — and its gradients
//   by central differences of that loop (the sink's own included). Checked:
//   the fused CPU kernel (fp32), ATen's CPU flash kernel with the sinks
//   applied to its output (float64, fp32) and the eager chain (float64), windows of 1,
//   16 (one kernel key block), 128, and ≥ the sequence (= causal, bit for
//   bit), with documents;
// - the clamped SwiGLU at and beyond its limit, against its formula and
//   its derivative by hand;
// - YaRN's table against TorchTitan's precompute_rope_cache arithmetic;
// - the flavors' parameter counts against a hand count (OpenAI's model
//   card: 20.91B / 116.83B total; 3.61B / 5.13B active without the
//   embedding) and TorchTitan's FLOPs formula.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <mutex>
#include <vector>

#include "tests/unit/thread_ranks.h"
#include "trainer/kernels/flash_sinks.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/sink_attention.h"
#include "trainer/model/attention.h"
#include "trainer/model/moe.h"
#include "trainer/models/registry.h"
#include "trainer/parallel/context_parallel.h"

namespace ctitan {
namespace {

struct Case {
  int64_t B, H, G, S, Dh, window;
  bool sinks, documents;
};

// The float64 loop: o[b,h,i] = Σ_j e^{s_ij} v_j / (e^{sink_h} + Σ_j e^{s_ij})
// over the visible j (j ≤ i, i − j < window, j ≥ the row's document start).
at::Tensor reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                     const std::vector<std::vector<int64_t>>& starts, int64_t window) {
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), Dh = q.size(3), G = k.size(1);
  at::Tensor o = at::zeros_like(q);
  auto qa = q.accessor<double, 4>(), ka = k.accessor<double, 4>(), va = v.accessor<double, 4>();
  auto oa = o.accessor<double, 4>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(Dh));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> s;
        std::vector<int64_t> js;
        double m = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          if (window > 0 && i - j >= window) continue;
          if (!starts.empty() && j < starts[b][i]) continue;
          double dot = 0;
          for (int64_t d = 0; d < Dh; ++d) dot += qa[b][h][i][d] * ka[b][g][j][d];
          s.push_back(dot * scale);
          js.push_back(j);
          m = std::max(m, dot * scale);
        }
        const double sink = sinks.defined() ? sinks.data_ptr<double>()[h] : -INFINITY;
        m = std::max(m, sink);
        double l = std::exp(sink - m);
        for (double x : s) l += std::exp(x - m);
        for (size_t n = 0; n < js.size(); ++n)
          for (int64_t d = 0; d < Dh; ++d) oa[b][h][i][d] += std::exp(s[n] - m) / l * va[b][g][js[n]][d];
      }
    }
  return o;
}

// d(Σ reference·R)/dx for each element of x, by central differences.
at::Tensor numeric_grad(at::Tensor x, const std::function<at::Tensor()>& f, const at::Tensor& R) {
  at::Tensor g = at::zeros_like(x);
  const double eps = 1e-6;
  auto flat = x.view({-1});
  for (int64_t n = 0; n < flat.numel(); ++n) {
    const double keep = flat[n].item<double>();
    flat[n] = keep + eps;
    const double up = (f() * R).sum().item<double>();
    flat[n] = keep - eps;
    const double down = (f() * R).sum().item<double>();
    flat[n] = keep;
    g.view({-1})[n] = (up - down) / (2 * eps);
  }
  return g;
}

std::vector<std::vector<int64_t>> document_starts_of(int64_t B, int64_t S) {
  // Documents of 1, 16, 3, 21, then the rest (crossing the 16-key blocks).
  std::vector<std::vector<int64_t>> out(B);
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t> lengths = {1 + b, 16, 3, 21};
    int64_t start = 0, next = 0;
    size_t d = 0;
    for (int64_t i = 0; i < S; ++i) {
      if (i == next) {
        start = i;
        next = d < lengths.size() ? i + lengths[d++] : S;
      }
      out[b].push_back(start);
    }
  }
  return out;
}

at::Tensor starts_tensor(const std::vector<std::vector<int64_t>>& starts) {
  if (starts.empty()) return {};
  std::vector<int64_t> flat;
  for (const auto& r : starts) flat.insert(flat.end(), r.begin(), r.end());
  return torch::tensor(flat, torch::kLong).view({static_cast<int64_t>(starts.size()), -1});
}

class SinkWindow : public ::testing::TestWithParam<Case> {};

TEST_P(SinkWindow, KernelAndEagerChainMatchTheFloat64Loop) {
  const Case c = GetParam();
  torch::manual_seed(7);
  const auto d = torch::kDouble;
  at::Tensor q = torch::randn({c.B, c.H, c.S, c.Dh}, d), k = torch::randn({c.B, c.G, c.S, c.Dh}, d);
  at::Tensor v = torch::randn({c.B, c.G, c.S, c.Dh}, d);
  at::Tensor sinks = c.sinks ? torch::randn({c.H}, d) * 2 : at::Tensor();
  const auto starts = c.documents ? document_starts_of(c.B, c.S) : std::vector<std::vector<int64_t>>{};
  const at::Tensor R = torch::randn({c.B, c.H, c.S, c.Dh}, d);
  const at::Tensor want = reference(q, k, v, sinks, starts, c.window);
  const auto f = [&] { return reference(q, k, v, sinks, starts, c.window); };
  const at::Tensor dq = numeric_grad(q, f, R), dk = numeric_grad(k, f, R), dv = numeric_grad(v, f, R);
  const at::Tensor dsink = c.sinks ? numeric_grad(sinks, f, R) : at::Tensor();

  enum Path { kEager, kKernel, kFlash };
  const auto run = [&](at::ScalarType dt, Path path) {
    const auto leaf = [&](const at::Tensor& t) { return t.detach().to(dt).clone().requires_grad_(); };
    at::Tensor q2 = leaf(q), k2 = leaf(k), v2 = leaf(v);
    at::Tensor s2 = c.sinks ? leaf(sinks) : at::Tensor();
    const AttentionExtras extras{c.window, s2};
    const at::Tensor st = starts_tensor(starts);
    const at::Tensor o = path == kKernel  ? fused_causal_attention(q2, k2, v2, st, extras)
                         : path == kFlash ? flash_sink_window_attention(q2, k2, v2, st, extras)
                                          : sink_window_attention(q2, k2, v2, st, extras);
    (o * R.to(dt)).sum().backward();
    return std::vector<at::Tensor>{o.to(d), q2.grad().to(d), k2.grad().to(d), v2.grad().to(d),
                                   c.sinks ? s2.grad().to(d) : at::Tensor()};
  };
  const auto check = [&](const std::vector<at::Tensor>& got, double tol, const char* what) {
    EXPECT_TRUE(torch::allclose(got[0], want, tol, tol)) << what << " output, max diff "
                                                          << (got[0] - want).abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(got[1], dq, tol, tol)) << what << " dq " << (got[1] - dq).abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(got[2], dk, tol, tol)) << what << " dk " << (got[2] - dk).abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(got[3], dv, tol, tol)) << what << " dv " << (got[3] - dv).abs().max().item<double>();
    if (c.sinks) {
      EXPECT_TRUE(torch::allclose(got[4], dsink, tol, tol)) << what << " dsink " << got[4] << " want " << dsink;
    }
  };
  check(run(torch::kDouble, kEager), 1e-6, "eager float64");
  check(run(torch::kDouble, kFlash), 1e-6, "ATen flash float64");
  check(run(torch::kFloat, kFlash), 2e-4, "ATen flash fp32");
  if (!fused_kernels_available()) GTEST_SKIP() << "the fused CPU kernel needs ATen at AVX-512; the eager chain passed";
  check(run(torch::kFloat, kKernel), 2e-4, "kernel fp32");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SinkWindow,
    ::testing::Values(Case{1, 4, 2, 40, 16, 1, true, false},    // window 1: each row sees itself (and the sink)
                      Case{2, 2, 1, 48, 16, 16, true, false},   // one kernel key block
                      Case{1, 2, 2, 37, 32, 16, false, false},  // window without sinks, a ragged tail
                      Case{1, 2, 1, 40, 16, 0, true, false},    // sinks alone (causal)
                      Case{2, 2, 1, 64, 16, 8, true, true},     // window with documents
                      Case{1, 2, 1, 64, 64, 16, true, true}),   // GPT-OSS's head size
    [](const ::testing::TestParamInfo<Case>& i) {
      const Case& c = i.param;
      char name[64];
      std::snprintf(name, sizeof name, "S%lld_Dh%lld_w%lld%s%s", static_cast<long long>(c.S),
                    static_cast<long long>(c.Dh), static_cast<long long>(c.window), c.sinks ? "_sinks" : "",
                    c.documents ? "_docs" : "");
      return std::string(name);
    });

// Window 128 at S 160 (past one window): the forward and the sink's gradient
// against the loop (the q/k/v differences are covered above at small S).
TEST(SinkWindowLong, Window128AtSequence160) {
  torch::manual_seed(3);
  const auto d = torch::kDouble;
  const at::Tensor q = torch::randn({1, 2, 160, 16}, d), k = torch::randn({1, 1, 160, 16}, d),
                   v = torch::randn({1, 1, 160, 16}, d), sinks = torch::randn({2}, d);
  const at::Tensor want = reference(q, k, v, sinks, {}, 128);
  const at::Tensor R = torch::randn({1, 2, 160, 16}, d);
  const at::Tensor dsink = numeric_grad(sinks, [&] { return reference(q, k, v, sinks, {}, 128); }, R);
  for (bool fused : {false, true}) {
    if (fused && !fused_kernels_available()) continue;
    const auto dt = fused ? torch::kFloat : torch::kDouble;
    at::Tensor s2 = sinks.detach().to(dt).clone().requires_grad_();
    const AttentionExtras extras{128, s2};
    const at::Tensor o = fused ? fused_causal_attention(q.to(dt), k.to(dt), v.to(dt), {}, extras)
                               : sink_window_attention(q.to(dt), k.to(dt), v.to(dt), {}, extras);
    (o * R.to(dt)).sum().backward();
    const double tol = fused ? 2e-4 : 1e-8;
    EXPECT_TRUE(torch::allclose(o.to(d), want, tol, tol)) << (fused ? "kernel" : "eager");
    EXPECT_TRUE(torch::allclose(s2.grad().to(d), dsink, tol, tol)) << s2.grad() << " want " << dsink;
  }
}

// A window as long as the sequence is causal attention: the kernel with it
// is the causal kernel bit for bit (with and without documents), and so is
// the eager chain's.
TEST(SinkWindowLong, AWindowOfTheSequenceIsCausalBitForBit) {
  torch::manual_seed(5);
  const at::Tensor q = torch::randn({2, 4, 50, 16}), k = torch::randn({2, 2, 50, 16}), v = torch::randn({2, 2, 50, 16});
  const at::Tensor st = starts_tensor(document_starts_of(2, 50));
  for (int64_t w : {50, 64, 1000}) {
    EXPECT_TRUE(torch::equal(fused_causal_attention(q, k, v, {}, AttentionExtras{w, {}}), fused_causal_attention(q, k, v)));
    EXPECT_TRUE(torch::equal(fused_causal_attention(q, k, v, st, AttentionExtras{w, {}}), fused_causal_attention(q, k, v, st)));
    EXPECT_TRUE(torch::equal(sink_window_attention(q, k, v, {}, AttentionExtras{w, {}}),
                             sink_window_attention(q, k, v, {}, AttentionExtras{0, torch::full({4}, -INFINITY)})));
  }
}

TEST(SinkWindowLong, VisiblePairsByHand) {
  EXPECT_DOUBLE_EQ(window_visible_pairs(4, 0), 10);     // 1+2+3+4
  EXPECT_DOUBLE_EQ(window_visible_pairs(5, 2), 9);      // 1+2+2+2+2
  EXPECT_DOUBLE_EQ(window_visible_pairs(4, 4), 10);
  EXPECT_DOUBLE_EQ(window_visible_pairs(2048, 128), 128.0 * 129 / 2 + 1920.0 * 128);
}

// Context parallelism with the window and the sinks over thread ranks,
// both rotate methods, against the one-process eager chain in float64 (the
// float64 loop above checks that chain): the window is one more mask on
// each chunk pair, pairs outside every query's window are skipped, the
// sinks rescale the merged chunks and get their gradient from them. Windows
// inside one chunk (8 at cp 4, chunks of 8) and crossing chunk boundaries
// (20), with documents.
struct WindowCpCase {
  int cp;
  const char* method;
  const char* balancer;
  int64_t window;
  bool documents;
};
class WindowCp : public ::testing::TestWithParam<WindowCpCase> {};

TEST_P(WindowCp, MatchesOneProcess) {
  const WindowCpCase c = GetParam();
  const int64_t B = 2, H = 4, G = 2, S = 64, Dh = 8;
  torch::manual_seed(11);
  const auto d = torch::kDouble;
  const at::Tensor q0 = torch::randn({B, H, S, Dh}, d), k0 = torch::randn({B, G, S, Dh}, d),
                   v0 = torch::randn({B, G, S, Dh}, d), dout = torch::randn({B, H, S, Dh}, d);
  const at::Tensor sinks0 = torch::randn({H}, d);
  const at::Tensor starts = c.documents ? starts_tensor(document_starts_of(B, S)) : at::Tensor();
  at::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_(),
             sk = sinks0.clone().requires_grad_();
  const at::Tensor want = sink_window_attention(q, k, v, starts, AttentionExtras{c.window, sk});
  want.backward(dout);
  std::mutex mu;
  at::Tensor dsink_sum = torch::zeros({H}, d);
  const auto model_layout = [](const at::Tensor& t) { return t.transpose(1, 2).contiguous().transpose(1, 2); };
  testing::run_group(c.cp, [&](int r, Communicator& g) {
    ContextParallelOptions cp;
    cp.group = &g;
    cp.rotate_method = c.method;
    cp.load_balancer = c.balancer;
    if (std::string(c.balancer) == "ptrr")
      cp.ptrr_blocks = ptrr_assignment(starts.defined() ? starts : torch::zeros({B, S}, torch::kLong), c.cp,
                                       ptrr_block_size(S, c.cp));
    const at::Tensor pos = cp_positions(cp.load_balancer, cp.size(), r, S, cp.ptrr_blocks);
    at::Tensor ql = q0.index_select(2, pos).requires_grad_(true), kl = k0.index_select(2, pos).requires_grad_(true),
               vl = v0.index_select(2, pos).requires_grad_(true), sl = sinks0.clone().requires_grad_(true);
    const at::Tensor out =
        context_parallel_attention(model_layout(ql), model_layout(kl), model_layout(vl), pos, cp, std::nullopt,
                                   c.documents ? starts.index_select(1, pos) : at::Tensor(), AttentionExtras{c.window, sl});
    out.backward(dout.index_select(2, pos));
    std::lock_guard<std::mutex> lock(mu);
    const std::string at = std::string(c.method) + " cp " + std::to_string(c.cp) + " rank " + std::to_string(r);
    EXPECT_TRUE(torch::allclose(out, want.index_select(2, pos), 1e-10, 1e-12)) << at;
    EXPECT_TRUE(torch::allclose(ql.grad(), q.grad().index_select(2, pos), 1e-10, 1e-12)) << at << " dq";
    EXPECT_TRUE(torch::allclose(kl.grad(), k.grad().index_select(2, pos), 1e-10, 1e-12)) << at << " dk";
    EXPECT_TRUE(torch::allclose(vl.grad(), v.grad().index_select(2, pos), 1e-10, 1e-12)) << at << " dv";
    dsink_sum += sl.grad();  // each rank's queries' part (FSDP sums them over cp in training)
  });
  EXPECT_TRUE(torch::allclose(dsink_sum, sk.grad(), 1e-10, 1e-12)) << dsink_sum << " want " << sk.grad();
}

INSTANTIATE_TEST_SUITE_P(
    Methods, WindowCp,
    ::testing::Values(WindowCpCase{2, "allgather", "headtail", 8, false}, WindowCpCase{2, "alltoall", "headtail", 8, false},
                      WindowCpCase{4, "alltoall", "none", 20, false}, WindowCpCase{4, "allgather", "headtail", 20, true},
                      WindowCpCase{4, "alltoall", "headtail", 8, true}, WindowCpCase{2, "alltoall", "ptrr", 20, true},
                      WindowCpCase{4, "allgather", "ptrr", 8, false}),
    [](const ::testing::TestParamInfo<WindowCpCase>& i) {
      char name[64];
      std::snprintf(name, sizeof name, "%s_cp%d_%s_w%lld%s", i.param.method, i.param.cp, i.param.balancer,
                    static_cast<long long>(i.param.window), i.param.documents ? "_docs" : "");
      return std::string(name);
    });

// GPT-OSS's activation: g = min(h1, L), u = clamp(h3, ±L), g·σ(αg)·(u+1).
TEST(ClampedSwiglu, AtAndBeyondTheLimitByHand) {
  MoeArgs a;
  a.swiglu_limit = 7.0;
  a.swiglu_alpha = 1.702;
  const std::vector<double> g = {-9.0, -1.0, 0.5, 6.9, 7.0, 7.5, 20.0};
  const std::vector<double> u = {-9.0, -7.0, 0.3, 6.5, 7.0, 8.0, -20.0};
  at::Tensor h1 = torch::tensor(g, torch::kDouble).requires_grad_(), h3 = torch::tensor(u, torch::kDouble).requires_grad_();
  const at::Tensor y = expert_activation(h1, h3, a);
  y.sum().backward();
  const auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  for (size_t i = 0; i < g.size(); ++i) {
    const double gc = std::min(g[i], 7.0), uc = std::max(-7.0, std::min(u[i], 7.0));
    const double want = gc * sig(1.702 * gc) * (uc + 1);
    EXPECT_NEAR(y[i].item<double>(), want, 1e-12) << i;
    // d/dg: (σ(αg) + αg·σ(αg)(1−σ(αg)))·(u+1) inside the clamp, 0 from
    // the limit on (torch.clamp passes no gradient at the bound itself).
    const double s = sig(1.702 * gc);
    const double dg = g[i] < 7.0 ? (s + 1.702 * gc * s * (1 - s)) * (uc + 1) : 0.0;
    const double du = (u[i] > -7.0 && u[i] < 7.0) ? gc * s : 0.0;
    EXPECT_NEAR(h1.grad()[i].item<double>(), dg, 1e-12) << i;
    EXPECT_NEAR(h3.grad()[i].item<double>(), du, 1e-12) << i;
  }
  a.swiglu_limit = 0;  // off: silu(h1)·h3
  EXPECT_NEAR(expert_activation(torch::tensor({2.0}, torch::kDouble), torch::tensor({3.0}, torch::kDouble), a).item<double>(),
              2.0 * sig(2.0) * 3.0, 1e-12);
}

// TorchTitan's precompute_rope_cache for GPT-OSS, in double: inv_freq
// blended between 1/(factor·freq) and 1/freq by the unrounded NTK-by-parts
// ramp, angles t·inv_freq, cos and sin times 0.1·ln(factor) + 1.
TEST(GptOssYarn, TableIsTorchTitansRopeCache) {
  const ModelArgs a = model_flavor("gpt_oss", "20b");
  const int64_t dim = a.head_dim(), S = 300;
  const at::Tensor table = precompute_yarn_freqs_cis(dim, S, a.rope_theta, a.yarn);
  ASSERT_EQ(table.sizes(), (std::vector<int64_t>{S, dim / 2}));
  const double base = 150000, factor = 32, alpha = 1, beta = 32, orig = 4096, half = dim / 2.0;
  const double low = half * std::log(orig / (beta * 2 * M_PI)) / std::log(base);
  const double high = half * std::log(orig / (alpha * 2 * M_PI)) / std::log(base);
  ASSERT_TRUE(0 < low && low < high && high < half - 1);  // TorchTitan's own assertion
  const double mscale = 0.1 * std::log(factor) + 1;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double freq = std::pow(base, 2.0 * i / dim);
    const double mask = 1 - std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double inv = 1 / (factor * freq) * (1 - mask) + 1 / freq * mask;
    for (int64_t t : {int64_t{1}, int64_t{17}, S - 1}) {
      const c10::complex<float> z = table[t][i].item<c10::complex<float>>();
      EXPECT_NEAR(z.real(), mscale * std::cos(t * inv), 2e-4) << t << " " << i;
      EXPECT_NEAR(z.imag(), mscale * std::sin(t * inv), 2e-4) << t << " " << i;
    }
  }
}

// Hand counts (per layer: wq 2880·4096 + 4096, wk and wv 2880·512 + 512,
// wo 4096·2880 + 2880, 64 sinks; each expert 3·2880·2880 + 2·2880 + 2880;
// the router 2880·E + E; two norms; embedding and output 201088·2880 each).
TEST(GptOssFlavors, ParameterCountsAndFlopsByHand) {
  const int64_t attention = (2880 * 4096 + 4096) + 2 * (2880 * 512 + 512) + (4096 * 2880 + 2880) + 64;
  const int64_t expert = 3 * 2880 * 2880 + 2 * 2880 + 2880, norms = 2 * 2880, emb = 201088 * 2880;
  const auto total = [&](int64_t layers, int64_t E) {
    return layers * (attention + E * expert + 2880 * E + E + norms) + 2 * emb + 2880;
  };
  const ParamCounts c20 = count_params(model_flavor("gpt_oss", "20b"));
  EXPECT_EQ(c20.total, total(24, 32));
  EXPECT_EQ(c20.total, 20914757184);           // 20.91B (OpenAI's model card)
  EXPECT_EQ(c20.active, c20.total - 24 * 28 * expert);
  EXPECT_EQ(c20.active - c20.embedding, 3608307264);  // 3.61B active without the embedding
  const ParamCounts c120 = count_params(model_flavor("gpt_oss", "120b"));
  EXPECT_EQ(c120.total, total(36, 128));
  EXPECT_EQ(c120.total, 116829156672);         // 116.83B
  EXPECT_EQ(c120.active - c120.embedding, 5132849472);  // 5.13B
  // TorchTitan: 6·(active − embedding) + 6·L·H·(2·head_dim)·S.
  EXPECT_DOUBLE_EQ(flops_per_token(model_flavor("gpt_oss", "20b"), 4096),
                   6.0 * 3608307264 + 6.0 * 24 * 64 * 128 * 4096);
  const ModelArgs dbg = model_flavor("gpt_oss", "debugmodel");
  EXPECT_EQ(dbg.n_layers, 4);
  EXPECT_EQ(dbg.dim, 256);
  EXPECT_EQ(dbg.moe.num_experts, 8);
  EXPECT_EQ(dbg.window_of(0), 128);
  EXPECT_EQ(dbg.window_of(1), 0);
}

}  // namespace
}  // namespace ctitan
