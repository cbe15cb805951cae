// The MoE layer (trainer/model/moe.h) against a float64 reference written
// here, token by token (softmax/sigmoid scores, top-k with ties to the lower
// index, group limits, route_norm, shared experts), forward and backward;
// Qwen3's flavors against hand counts; TorchTitan's expert-bias rule.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "common/errors.h"
#include "trainer/models/registry.h"
#include "trainer/model/moe.h"
#include "trainer/model/transformer.h"
#include "trainer/optim/adamw.h"
#include "trainer/parallel/layout_seams.h"
#include "trainer/parallel/train_model.h"
#include "trainer/runtime.h"
#include "tests/unit/thread_ranks.h"

namespace ctitan {
namespace {

// The reference: for each token t, its experts by descending (score + bias),
// lower index first on ties, within the n_limited best groups (a group's
// score: the sum of its two best), then y_t = Σ_j g_j · expert_j(x_t)
// (+ the shared experts). Double precision, one small op at a time.
at::Tensor reference_moe(const at::Tensor& x, const MoeWeights& w, const at::Tensor& bias, const MoeArgs& a) {
  const int64_t T = x.size(0), E = w.router.size(0);
  std::vector<at::Tensor> rows;
  for (int64_t t = 0; t < T; ++t) {
    const at::Tensor xt = x[t];
    const at::Tensor logits = at::mv(w.router, xt);
    const at::Tensor s = a.score_func == "sigmoid" ? 1.0 / (1.0 + at::exp(-logits))
                                                   : at::exp(logits - logits.max()) / at::exp(logits - logits.max()).sum();
    std::vector<double> choice(E);
    for (int64_t e = 0; e < E; ++e) choice[e] = s[e].item<double>() + (bias.defined() ? bias[e].item<double>() : 0.0);
    std::vector<bool> allowed(E, true);
    if (a.n_expert_groups > 1) {
      const int64_t G = a.n_expert_groups, per = E / G;
      std::vector<std::pair<double, int64_t>> groups;
      for (int64_t g = 0; g < G; ++g) {
        std::vector<double> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
        std::sort(v.rbegin(), v.rend());
        groups.push_back({v[0] + v[1], g});
      }
      std::stable_sort(groups.begin(), groups.end(), [](auto& p, auto& q) { return p.first > q.first; });
      std::fill(allowed.begin(), allowed.end(), false);
      for (int64_t i = 0; i < a.n_limited_groups; ++i)
        for (int64_t e = 0; e < per; ++e) allowed[groups[i].second * per + e] = true;
    }
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
      if (allowed[p] != allowed[q]) return static_cast<bool>(allowed[p]);
      return choice[p] > choice[q];
    });
    std::vector<at::Tensor> g;
    for (int64_t j = 0; j < a.top_k; ++j) g.push_back(s[order[j]]);
    at::Tensor gsum = at::zeros({}, x.options());
    for (const auto& gj : g) gsum = gsum + gj;
    at::Tensor y = at::zeros_like(xt);
    for (int64_t j = 0; j < a.top_k; ++j) {
      const int64_t e = order[j];
      at::Tensor gate = g[j];
      if (a.route_norm) gate = gate / (gsum + 1e-20);
      gate = gate * a.route_scale;
      const at::Tensor in = a.score_before_experts ? xt * gate : xt;
      at::Tensor h = at::mv(w.w1[e], in);
      h = h / (1.0 + at::exp(-h)) * at::mv(w.w3[e], in);
      const at::Tensor out = at::mv(w.w2[e], h);
      y = y + (a.score_before_experts ? out : out * gate);
    }
    if (w.shared_w1.defined()) {
      at::Tensor h = at::mv(w.shared_w1, xt);
      y = y + at::mv(w.shared_w2, h / (1.0 + at::exp(-h)) * at::mv(w.shared_w3, xt));
    }
    rows.push_back(y);
  }
  return at::stack(rows);
}

struct Case {
  const char* name;
  MoeArgs args;
  int64_t shared = 0;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// D 16, 8 experts of width 8: experts 0 and 1 have the same router row
// (their scores tie exactly: the lower index must win) and expert 7's row
// is zero (with the bias below, no token reaches it).
constexpr int64_t kD = 16, kE = 8, kHm = 8;
MoeWeights random_weights(int64_t shared, at::Generator& gen) {
  const auto f64 = at::TensorOptions(at::kDouble);
  const int64_t S = shared * kHm;
  MoeWeights w64;
  w64.router = at::randn({kE, kD}, gen, f64) * 0.5;
  w64.router[1].copy_(w64.router[0]);
  w64.router[7].fill_(0.0);
  w64.w1 = at::randn({kE, kHm, kD}, gen, f64) * 0.3;
  w64.w2 = at::randn({kE, kD, kHm}, gen, f64) * 0.3;
  w64.w3 = at::randn({kE, kHm, kD}, gen, f64) * 0.3;
  if (S > 0) {
    w64.shared_w1 = at::randn({S, kD}, gen, f64) * 0.3;
    w64.shared_w2 = at::randn({kD, S}, gen, f64) * 0.3;
    w64.shared_w3 = at::randn({S, kD}, gen, f64) * 0.3;
  }
  return w64;
}

// Expert 7 is never chosen: the bias pushes it below every other score.
at::Tensor bias_against_expert_7() {
  at::Tensor bias = at::zeros({kE}, at::kFloat);
  bias[7] = -10.0f;
  return bias;
}

// Leaf copies in `dt`; with `ep_rank`/`ep`, only that rank's routed experts.
MoeWeights leaves(const MoeWeights& w, at::ScalarType dt, int64_t ep_rank = 0, int64_t ep = 1) {
  MoeWeights o;
  for (auto [dst, src] : {std::pair{&o.router, &w.router}, {&o.w1, &w.w1}, {&o.w2, &w.w2}, {&o.w3, &w.w3},
                          {&o.shared_w1, &w.shared_w1}, {&o.shared_w2, &w.shared_w2}, {&o.shared_w3, &w.shared_w3}}) {
    if (!src->defined()) continue;
    const bool routed = dst == &o.w1 || dst == &o.w2 || dst == &o.w3;
    const at::Tensor t = routed ? src->narrow(0, ep_rank * kE / ep, kE / ep) : *src;
    *dst = t.to(dt).detach().requires_grad_(true);
  }
  return o;
}

class MoeLayer : public ::testing::TestWithParam<Case> {};

// 12 tokens through the layer against the reference, forward and backward;
// expert 7 gets no token (and so no gradient).
TEST_P(MoeLayer, MatchesTheFloat64ReferenceForwardAndBackward) {
  const Case& c = GetParam();
  const MoeArgs& a = c.args;
  const int64_t T = 12, S = c.shared * kHm;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto f64 = at::TensorOptions(at::kDouble);
  const MoeWeights w64 = random_weights(c.shared, gen);
  const at::Tensor x64 = at::randn({T, kD}, gen, f64);
  const at::Tensor bias = bias_against_expert_7();
  const MoeWeights w32 = leaves(w64, at::kFloat), wref = leaves(w64, at::kDouble);
  const at::Tensor x32 = x64.to(at::kFloat).requires_grad_(true), xref = x64.clone().requires_grad_(true);
  at::Tensor counts;
  const at::Tensor y = moe_forward(x32, w32, bias, a, &counts);
  const at::Tensor want = reference_moe(xref, wref, bias.to(at::kDouble), a);
  ASSERT_EQ(y.sizes(), want.sizes());
  EXPECT_LT((y.to(at::kDouble) - want).abs().max().item<double>(), 1e-5 * std::max(1.0, want.abs().max().item<double>()));
  EXPECT_EQ(counts.sum().item<int64_t>(), T * a.top_k);
  EXPECT_EQ(counts[7].item<int64_t>(), 0) << "expert 7 must receive no token";

  const at::Tensor dy = at::randn({T, kD}, gen, f64);
  y.backward(dy.to(at::kFloat));
  want.backward(dy);
  auto close = [](const at::Tensor& got, const at::Tensor& ref, const char* what) {
    ASSERT_TRUE(got.defined()) << what;
    const double scale = std::max(1.0, ref.abs().max().item<double>());
    EXPECT_LT((got.to(at::kDouble) - ref).abs().max().item<double>(), 2e-5 * scale) << what;
  };
  close(x32.grad(), xref.grad(), "dx");
  close(w32.router.grad(), wref.router.grad(), "d router");
  close(w32.w1.grad(), wref.w1.grad(), "d w1");
  close(w32.w2.grad(), wref.w2.grad(), "d w2");
  close(w32.w3.grad(), wref.w3.grad(), "d w3");
  if (S > 0) close(w32.shared_w2.grad(), wref.shared_w2.grad(), "d shared w2");
  EXPECT_EQ(w32.w1.grad()[7].abs().max().item<float>(), 0.0f) << "an expert without tokens gets no gradient";
}

// Expert parallelism (thread ranks over Gloo, EP 2 and 4): each rank routes
// its own 6 tokens and holds 8/ep experts, whose rows arrive from every
// rank; outputs and every gradient against the float64 reference on all
// ranks' tokens at once (the router's and shared experts' gradients summed
// over the ranks, as the data-parallel reduction will).
TEST_P(MoeLayer, ExpertParallelMatchesTheReference) {
  const Case& c = GetParam();
  const MoeArgs& a = c.args;
  for (int world : {2, 4}) {
    const int64_t T = 6, L = kE / world;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
    const MoeWeights w64 = random_weights(c.shared, gen);
    const at::Tensor x64 = at::randn({world * T, kD}, gen, at::kDouble), dy = at::randn({world * T, kD}, gen, at::kDouble);
    const at::Tensor bias = bias_against_expert_7();
    const MoeWeights wref = leaves(w64, at::kDouble);
    const at::Tensor xref = x64.clone().requires_grad_(true);
    const at::Tensor want = reference_moe(xref, wref, bias.to(at::kDouble), a);
    want.backward(dy);
    testing::run_group(world, [&](int r, Communicator& ep) {
      const MoeWeights mine = leaves(w64, at::kFloat, r, world);
      const at::Tensor x = x64.narrow(0, r * T, T).to(at::kFloat).requires_grad_(true);
      const ExpertDispatch dispatch{ep, *parallel_seams()};
      const at::Tensor y = moe_forward(x, mine, bias, a, nullptr, &dispatch);
      y.backward(dy.narrow(0, r * T, T).to(at::kFloat));
      const auto close = [&](const at::Tensor& got, const at::Tensor& ref, const std::string& what) {
        const double scale = std::max(1.0, ref.abs().max().item<double>());
        EXPECT_LT((got.to(at::kDouble) - ref).abs().max().item<double>(), 2e-5 * scale)
            << what << " (ep " << world << ", rank " << r << ")";
      };
      const auto summed = [&](const at::Tensor& g) {
        at::Tensor t = g.clone();
        ep.all_reduce(t)->wait();
        return t;
      };
      close(y, want.narrow(0, r * T, T), "y");
      close(x.grad(), xref.grad().narrow(0, r * T, T), "dx");
      close(mine.w1.grad(), wref.w1.grad().narrow(0, r * L, L), "d w1");
      close(mine.w2.grad(), wref.w2.grad().narrow(0, r * L, L), "d w2");
      close(mine.w3.grad(), wref.w3.grad().narrow(0, r * L, L), "d w3");
      close(summed(mine.router.grad()), wref.router.grad(), "d router");
      if (c.shared > 0) close(summed(mine.shared_w1.grad()), wref.shared_w1.grad(), "d shared w1");
    });
  }
}

MoeArgs qwen3_like() {
  MoeArgs a;
  a.num_experts = 8;
  a.top_k = 3;
  a.hidden_dim = 8;
  a.score_func = "softmax";
  a.route_norm = true;
  return a;
}
MoeArgs deepseek_like() {
  MoeArgs a = qwen3_like();
  a.score_func = "sigmoid";
  a.route_norm = true;
  a.route_scale = 2.5;
  a.score_before_experts = false;
  a.n_expert_groups = 4;
  a.n_limited_groups = 2;
  a.num_shared_experts = 2;
  return a;
}
MoeArgs scores_first() {
  MoeArgs a = qwen3_like();
  a.route_norm = false;
  a.score_before_experts = true;
  return a;
}

INSTANTIATE_TEST_SUITE_P(Routing, MoeLayer,
                         ::testing::Values(Case{"qwen3_softmax_route_norm", qwen3_like()},
                                           Case{"sigmoid_groups_shared", deepseek_like(), 2},
                                           Case{"scores_before_experts", scores_first()}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(MoeLayer, TiesGoToTheLowerExpertIndex) {
  MoeArgs a = qwen3_like();
  a.top_k = 1;
  const at::Tensor logits = at::zeros({3, 8});  // every score ties
  const MoeRouting r = moe_route(logits, at::Tensor(), a);
  EXPECT_EQ(r.counts[0].item<int64_t>(), 3);
  EXPECT_EQ(r.counts.sum().item<int64_t>(), 3);
}

TEST(MoeLayer, ForcedLoadBalanceRoutesRoundRobin) {
  MoeArgs a = qwen3_like();
  a.force_load_balance = true;
  const MoeRouting r = moe_route(at::randn({8, 8}), at::Tensor(), a);  // 8 tokens x top 3 = 24 rows over 8 experts
  EXPECT_TRUE(r.counts.equal(at::full({8}, 3, at::kLong))) << r.counts;
}

// TorchTitan's rule worked by hand: counts [10, 0, 5, 5], mean 5, coeff 0.1:
// sign(mean − c) = [−1, +1, 0, 0] → delta [−0.1, 0.1, 0, 0], mean 0.
TEST(MoeLayer, ExpertBiasFollowsTorchTitansRule) {
  at::Tensor bias = at::zeros({4});
  update_expert_bias(bias, at::tensor({10.0, 0.0, 5.0, 5.0}), 0.1);
  EXPECT_TRUE(at::allclose(bias, at::tensor({-0.1f, 0.1f, 0.0f, 0.0f}))) << bias;
  update_expert_bias(bias, at::tensor({9.0, 3.0, 0.0, 0.0}), 0.1);  // mean 3: [−1, 0, +1, +1] → centred by 0.025
  EXPECT_TRUE(at::allclose(bias, at::tensor({-0.225f, 0.075f, 0.075f, 0.075f}))) << bias;
  const ExpertLoad l = expert_load(at::tensor({2, 4, 6, 4}));
  EXPECT_EQ(l.min, 2);
  EXPECT_EQ(l.max, 6);
  EXPECT_NEAR(l.cv, std::sqrt(2.0) / 4.0, 1e-12);  // population std sqrt(2), mean 4
}

// Hand counts (dim D, L layers, H heads, K kv heads, Dh 128, V vocab, E
// experts, M expert width): per layer D·H·Dh·2 + 2·D·K·Dh + 2·Dh (q/k norms)
// + 2·D (norms) + E·D (router) + 3·E·M·D, plus V·D embedding, V·D output
// (untied) and D. debugmodel_moe (D 256, L 8, H 16, K 8, V 2048, E 64, top
// 8, M 768): 39,338,752 per layer → 315,758,848; active (8 of 64 experts):
// 6,308,608 per layer → 51,517,696; FLOPs at S 4096 = 6·(51,517,696 −
// 524,288) + 12·8·16·128·4096 = 1,111,266,816.
TEST(Qwen3, FlavorsMatchHandCounts) {
  const ModelArgs moe = model_flavor("qwen3", "debugmodel_moe");
  EXPECT_EQ(count_params(moe).total, 315758848);
  EXPECT_EQ(count_params(moe).active, 51517696);
  EXPECT_DOUBLE_EQ(flops_per_token(moe, 4096), 1111266816.0);
  // 30B-A3B (D 2048, L 48, H 32, K 4, E 128, M 768, V 151936): 623,120,640
  // per layer + 2·V·D + D.
  EXPECT_EQ(count_params(model_flavor("qwen3", "30B-A3B")).total, 30532122624LL);
  // 8B dense (D 4096, L 36, H 32, K 8, F 12288, V 151936): 8,190,735,360.
  EXPECT_EQ(count_params(model_flavor("qwen3", "8B")).total, 8190735360LL);
  // 0.6B, tied: the output is the embedding, counted once: 596,049,920.
  EXPECT_EQ(count_params(model_flavor("qwen3", "0.6B")).total, 596049920LL);
  // The allocated parameters (specs, a separate path) add up to the count.
  for (const char* f : {"debugmodel_moe", "debugmodel", "tiny_moe"}) {
    Transformer m(model_flavor("qwen3", f), at::kFloat, 16, c10::Device(c10::kMeta));
    EXPECT_EQ(m.store().num_params(), count_params(m.args()).total) << f;
  }
}

TEST(Qwen3, UnknownFlavorAndFamilyAreOneLine) {
  EXPECT_THROW(model_flavor("qwen3", "7B"), InputError);
  try {
    model_flavor("qwen4", "debugmodel");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("\"llama3\", \"qwen3\""), std::string::npos) << e.what();
  }
}

// ctitan's MoE keys over a flavor (sweep axes): applied, and bad values one
// line — top_k above the experts (or above what the group limit leaves), a
// dense flavor, experts the groups do not divide.
TEST(MoeOverrides, ReplaceTheFlavorsValuesOrSayWhyNot) {
  const ModelArgs a = model_flavor("qwen3", "debugmodel_moe", FlavorOverrides{2, 16, 4, 0.0, "", ""});
  EXPECT_EQ(a.n_layers, 2);
  EXPECT_EQ(a.moe.num_experts, 16);
  EXPECT_EQ(a.moe.top_k, 4);
  EXPECT_EQ(a.moe.load_balance_coeff, 0.0);
  EXPECT_EQ(model_flavor("qwen3", "debugmodel_moe").moe.load_balance_coeff, 1e-3);  // -1 keeps the flavor's
  const auto error = [](const char* name, const char* flavor, FlavorOverrides o) {
    try {
      model_flavor(name, flavor, o);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("qwen3", "tiny_moe", {0, 0, 8, -1, "", ""}).find("model.moe_top_k 8 exceeds the 4 experts a token can reach"),
            std::string::npos);
  // DeepSeek-V3 tiny: 2 groups of 2, the best 1 group: a token reaches 2.
  EXPECT_NE(error("deepseek_v3", "tiny", {0, 0, 3, -1, "", ""}).find("exceeds the 2 experts a token can reach in its best 1 groups"),
            std::string::npos);
  EXPECT_NE(error("deepseek_v3", "tiny", {0, 5, 0, -1, "", ""}).find("not divisible by the flavor's 2 expert groups"),
            std::string::npos);
  EXPECT_NE(error("llama3", "debugmodel", {0, 8, 0, -1, "", ""}).find("llama3 debugmodel has no MoE layers"), std::string::npos);
  EXPECT_EQ(error("deepseek_v3", "tiny", {0, 8, 2, -1, "", ""}), "");
}

// The float8 GEMM units name their own weights: with QK-norm between wo and
// the FFN, and MoE layers without a dense FFN (router and experts stay in
// the compute dtype; a filter entry naming them is accepted).
TEST(Qwen3, Float8GemmsHoldTheirOwnWeights) {
  for (const char* flavor : {"tiny", "tiny_moe"}) {
    const bool moe = std::string(flavor) == "tiny_moe";
    ModelTechniques techniques;
    techniques.float8 = Float8Options{
        Float8Recipe::kTensorwise, true,
        moe ? std::vector<std::string>{"output", "router.gate"} : std::vector<std::string>{"output"}};
    Transformer m(model_flavor("qwen3", flavor), at::kFloat, 16, c10::Device(c10::kCPU), ModelPart{},
                  ParamStore::Storage::kFlat, {}, techniques);
    size_t n = 0;
    for (const auto& g : m.float8().gemms()) {
      for (size_t s : g.slots) {
        const std::string& fqn = m.slots()[s].name;
        const std::string module = fqn.substr(0, fqn.rfind('.'));  // layers.0.attention.wq
        EXPECT_NE(g.name.find(module.substr(module.rfind('.') + 1)), std::string::npos) << g.name << " holds " << fqn;
        EXPECT_EQ(fqn.rfind(g.name.substr(0, g.name.find('.', 7) + 1), 0), 0u) << g.name << " holds " << fqn;
        ++n;
      }
    }
    EXPECT_EQ(n, moe ? 8u : 14u) << flavor << ": 2 layers of wq wk wv wo (+ w1 w3 w2 dense)";
  }
}

// DeepSeek-V3's float8 units: MLA's head-sharded GEMMs (wq_b, or wq
// without the low-rank q; wkv_b; wo) and the dense layers' FFN; the
// low-rank down-projections wq_a / wkv_a, the router and the experts stay in
// the compute dtype. The SQNR probe sees exactly those units run in float8,
// with float8-sized errors.
TEST(DeepSeekV3, Float8OnMlaHeadShardedGemms) {
  for (const char* flavor : {"tiny", "debugmodel"}) {
    SCOPED_TRACE(flavor);
    const ModelArgs args = model_flavor("deepseek_v3", flavor);
    ModelTechniques techniques;
    techniques.float8 = Float8Options{Float8Recipe::kTensorwise, true, {"output", "router.gate", "attention.wkv_a"}};
    Transformer m(args, at::kFloat, 16, c10::Device(c10::kCPU), ModelPart{}, ParamStore::Storage::kFlat, {},
                  techniques);
    const std::string q = args.mla.q_lora_rank > 0 ? "attention.wq_b" : "attention.wq";
    std::vector<std::string> want;
    for (int64_t l = 0; l < args.n_layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      for (const std::string& u : {q, std::string("attention.wkv_b"), std::string("attention.wo")}) want.push_back(p + u);
      if (l < args.n_dense_layers) {
        want.push_back(p + "feed_forward.w1|w3");
        want.push_back(p + "feed_forward.w2");
      }
    }
    std::vector<std::string> got;
    for (const auto& g : m.float8().gemms()) got.push_back(g.name);
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want);
    if (std::string(flavor) != "tiny") continue;
    {
      torch::NoGradGuard no_grad;
      torch::manual_seed(3);
      for (const auto& sl : m.slots()) {
        at::Tensor p = m.store().param(sl.name);
        if (p.dim() == 1)
          p.fill_(1.0);
        else
          p.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(p.size(-1))));
      }
    }
    const auto sqnr = m.float8_sqnr(at::randint(args.vocab_size, {2, 16}, at::kLong));
    std::vector<std::string> probed;
    for (const auto& [name, db] : sqnr) {
      probed.push_back(name);
      EXPECT_GT(db, 15.0) << name;
      EXPECT_LT(db, 60.0) << name;
    }
    std::sort(probed.begin(), probed.end());
    probed.erase(std::unique(probed.begin(), probed.end()), probed.end());
    EXPECT_EQ(probed, want);
  }
}

TEST(Qwen3, TiedFlavorsRefuseFsdpAndPipelines) {
  const ModelArgs tied = model_flavor("qwen3", "debugmodel");
  EXPECT_THROW(check_model_layout(tied, ModelLayout{1, 2, 1, 1, 1, false}), InputError);
  EXPECT_THROW(check_model_layout(tied, ModelLayout{1, 1, 1, 1, 2, false}), InputError);
  EXPECT_NO_THROW(check_model_layout(tied, ModelLayout{2, 1, 1, 2, 1, false}));
  EXPECT_NO_THROW(check_model_layout(model_flavor("qwen3", "debugmodel_moe"), ModelLayout{1, 2, 1, 1, 2, false}));
}

// The balancing loop on its own: 512 tokens whose router logits are
// diverse (N(0, 1) per token and expert) but skewed by expert (+1.5, +0.75,
// 0, −0.75, … : most tokens prefer the first experts), routed top 2 of 8
// with softmax scores, the bias updated from each step's counts by
// TorchTitan's rule. Returns each step's CV.
std::vector<double> balancing_loop(double coeff, int steps) {
  MoeArgs a;
  a.num_experts = 8;
  a.top_k = 2;
  a.route_norm = true;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const at::Tensor skew = at::linspace(1.5, -3.75, 8);
  at::Tensor bias = at::zeros({8});
  std::vector<double> cv;
  for (int s = 0; s < steps; ++s) {
    const at::Tensor logits = at::randn({512, 8}, gen) + skew;  // new tokens every step
    const MoeRouting r = moe_route(logits, bias, a);
    cv.push_back(expert_load(r.counts).cv);
    if (coeff > 0) update_expert_bias(bias, r.counts, coeff);
  }
  return cv;
}

double mean_of(const std::vector<double>& v, size_t from, size_t to) {
  return std::accumulate(v.begin() + from, v.begin() + to, 0.0) / static_cast<double>(to - from);
}

// TorchTitan's default coeff 1e-3: the bias moves at most 0.2 in 200 steps,
// which is enough to lift the starved experts (softmax scores of a few
// hundredths) into some tokens' top 2: the CV must fall below half its
// start (an independent NumPy-style simulation of the same loop gives 1.30
// → 0.52; a larger coeff oscillates: 5e-2 only reaches 0.82). Off, the
// load stays where the skew puts it (the same distribution every step).
TEST(MoeLoadBalance, ExpertBiasLevelsASkewedLoad) {
  const std::vector<double> on = balancing_loop(1e-3, 200), off = balancing_loop(0.0, 200);
  const double start = mean_of(off, 0, 10), on_end = mean_of(on, 190, 200), off_end = mean_of(off, 190, 200);
  EXPECT_GT(start, 1.0) << "the load must start skewed";
  EXPECT_LT(on_end, 0.5 * start) << "with the bias: CV " << start << " -> " << on_end;
  EXPECT_GT(off_end, 0.9 * start) << "without: CV " << start << " -> " << off_end;
}

// The same through the trainer's step (parallelize_model → forward_backward
// → balance_experts → AdamW), one process, qwen3 tiny_moe: with the coeff
// the biases move (by ±coeff-sized steps, mean zero) and the load is
// reported; without, the biases stay zero.
TEST(MoeLoadBalance, TheTrainStepUpdatesTheBiasesFromItsCounts) {
  for (double coeff : {1e-3, 0.0}) {
    JobConfig cfg;
    cfg.model.name = "qwen3";
    cfg.model.flavor = "tiny_moe";
    cfg.training.seq_len = 16;
    cfg.training.local_batch_size = 2;
    cfg.training.mixed_precision_param = "float32";
    Runtime rt;
    rt.mesh = DeviceMesh::single();
    ModelArgs args = model_flavor("qwen3", "tiny_moe");
    args.moe.load_balance_coeff = coeff;
    auto tm = parallelize_model(args, rt, cfg);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    ExpertLoad load;
    for (int s = 0; s < 3; ++s) {
      const at::Tensor batch = at::randint(64, {2, 17}, gen, at::kLong);
      tm->forward_backward(batch.narrow(1, 0, 16).contiguous(), batch.narrow(1, 1, 16).contiguous(), 1.0, true, true);
      load = tm->balance_experts();
      tm->begin_step();
    }
    EXPECT_EQ(load.min + load.max > 0, true) << "the step's tokens were counted";
    EXPECT_LE(load.max, 2 * 16 * 2) << "each token counted once per chosen expert (no recomputation, no eval)";
    for (int64_t l : tm->model().moe_layers()) {
      const at::Tensor b = tm->model().moe_layer(l).bias();
      EXPECT_NEAR(b.sum().item<double>(), 0.0, 1e-6);
      if (coeff > 0)
        EXPECT_GT(b.abs().max().item<double>(), 0.5 * coeff) << "layer " << l;
      else
        EXPECT_EQ(b.abs().max().item<double>(), 0.0) << "layer " << l;
    }
  }
}

}  // namespace
}  // namespace ctitan
