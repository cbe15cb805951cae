// DeepSeek-V3 (trainer/models/deepseek_v3.cpp): its flavors against counts
// derived by hand from TorchTitan's shapes, YaRN's frequencies and a whole
// forward (multi-head latent attention with the low-rank q, YaRN active,
// the dense FFN, the final norm's dtype eps) against a float64 reference
// written here from TorchTitan's model code, and the layouts it refuses.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "common/errors.h"
#include "trainer/models/registry.h"
#include "trainer/model/transformer.h"
#include "trainer/parallel/tensor_parallel.h"

namespace ctitan {
namespace {

// Hand counts (TorchTitan's shapes, deepseek_v3/model/args.py at v0.2.2).
// debugmodel: embedding and output 2048·256 each, final norm 256; per layer
// wq 16·192·256 + wkv_a 576·256 + kv_norm 512 + wkv_b 16·256·512 + wo
// 256·16·128 = 3,555,840 and two norms 512; layer 0's FFN 3·1024·256; five
// MoE layers of router 8·256, 8 experts and 2 shared of 3·256·256 each:
// 33,014,016 in all, 4,915,200 fewer active (5 unused experts per MoE layer).
TEST(DeepSeekV3, FlavorsMatchHandCounts) {
  struct Row {
    const char* flavor;
    int64_t total, active;
    double flops_4096;  // per token at seq 4096: 6·(active − embedding) + 6·L·H·(192 + 128)·4096
  };
  for (const Row& r : {Row{"debugmodel", 33014016, 28098816, 920421888.0},
                       Row{"16B", 15706484224, 2661150208, 18105996288.0},
                       Row{"236B", 235741434880, 21375800320, 185507051520.0},
                       Row{"671B", 671026404352, 37552282624, 281158232064.0}}) {
    const ModelArgs a = model_flavor("deepseek_v3", r.flavor);
    const ParamCounts c = count_params(a);
    EXPECT_EQ(c.total, r.total) << r.flavor;
    EXPECT_EQ(c.active, r.active) << r.flavor;
    EXPECT_DOUBLE_EQ(flops_per_token(a, 4096), r.flops_4096) << r.flavor;
    // The parameter specs add up to the same count.
    int64_t spec_total = 0;
    for (const auto& s : model_param_specs(a, {ModelPart{}})) spec_total += s.numel;
    EXPECT_EQ(spec_total, r.total) << r.flavor;
  }
}

// YaRN as deepseek_v3/model/model.py's precompute_freqs_cis, by hand for
// rope dim 64, θ 1e4, original length 4096, factor 40, β 32 and 1: the
// correction dims are 64·ln(4096/(β·2π))/(2·ln 1e4) = 10.47 and 22.51, so
// frequencies 0..10 stay, 23.. are divided by 40, and i in between blends
// with ramp (i − 10)/13. Within 4096 tokens nothing is scaled.
TEST(DeepSeekV3, YarnFrequenciesMatchAHandComputation) {
  const YarnArgs y{true, 4096, 40.0, 32.0, 1.0};
  const at::Tensor scaled = precompute_yarn_freqs_cis(64, 4097, 1e4, y);
  const at::Tensor plain = precompute_yarn_freqs_cis(64, 4096, 1e4, y);
  ASSERT_EQ(scaled.sizes(), (std::vector<int64_t>{4097, 32}));
  for (int64_t i = 0; i < 32; ++i) {
    const double f = std::pow(1e4, -2.0 * static_cast<double>(i) / 64.0);
    const double ramp = std::clamp((static_cast<double>(i) - 10.0) / 13.0, 0.0, 1.0);
    const double want = f / 40.0 * ramp + f * (1 - ramp);
    // The angle at position 1 is the frequency itself.
    EXPECT_NEAR(at::angle(scaled[1][i]).item<double>(), want, 1e-6 * want) << "i " << i;
    EXPECT_NEAR(at::angle(plain[1][i]).item<double>(), f, 1e-6 * f) << "i " << i;
  }
}

// --- a float64 reference of TorchTitan's DeepSeek-V3 forward -----------------

at::Tensor rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

// Interleaved-pair RoPE on x [B,S,n,d] with angles [S, d/2].
at::Tensor rope_ref(const at::Tensor& x, const at::Tensor& angles) {
  const at::Tensor x0 = x.index({"...", torch::indexing::Slice(0, torch::indexing::None, 2)});
  const at::Tensor x1 = x.index({"...", torch::indexing::Slice(1, torch::indexing::None, 2)});
  const at::Tensor c = angles.cos().view({1, angles.size(0), 1, -1}), s = angles.sin().view({1, angles.size(0), 1, -1});
  return at::stack({x0 * c - x1 * s, x1 * c + x0 * s}, -1).flatten(3);
}

TEST(DeepSeekV3, OneLayerForwardMatchesAFloat64Reference) {
  const ModelArgs a = model_flavor("deepseek_v3", "tiny", /*n_layers=*/1);  // layer 0: dense
  const MlaArgs& m = a.mla;
  ASSERT_GT(m.q_lora_rank, 0);
  const int64_t B = 2, S = 48, H = a.n_heads, nope = m.qk_nope_head_dim, rp = m.qk_rope_head_dim;
  ASSERT_GT(S, a.yarn.original_seq_len) << "YaRN must be active";
  Transformer model(a, torch::kDouble, S);
  model.init_weights(3);
  torch::manual_seed(3);
  const at::Tensor tokens = torch::randint(0, a.vocab_size, {B, S}, torch::kLong);
  const at::Tensor got = model.forward_logits(tokens).detach();

  ParamStore& st = model.store();
  auto p = [&](const std::string& n) { return st.param(n).to(torch::kDouble); };
  // Frequencies as TorchTitan computes them: fp32 throughout (θ^(-2i/d),
  // the ramp between the correction dims, the outer product with positions).
  const double theta = a.rope_theta, L = static_cast<double>(a.yarn.original_seq_len);
  auto corr = [&](double rot) { return rp * std::log(L / (rot * 2 * M_PI)) / (2 * std::log(theta)); };
  const double low = std::max(std::floor(corr(a.yarn.beta_fast)), 0.0);
  const double high = std::min(std::ceil(corr(a.yarn.beta_slow)), static_cast<double>(rp - 1));
  at::Tensor freqs = 1.0 / at::pow(theta, torch::arange(0, rp, 2, torch::kFloat) / static_cast<double>(rp));
  const at::Tensor smooth = 1 - ((torch::arange(rp / 2, torch::kFloat) - low) / (high - low)).clamp(0, 1);
  freqs = freqs / a.yarn.factor * (1 - smooth) + freqs * smooth;
  const at::Tensor angles = torch::outer(torch::arange(S, torch::kFloat), freqs);
  const at::Tensor ang = at::atan2(angles.sin(), angles.cos()).to(torch::kDouble);  // fp32 cos/sin, as polar
  const double mscale = 0.1 * m.mscale * std::log(a.yarn.factor) + 1.0;
  const double scale = std::pow(static_cast<double>(nope + rp), -0.5) * mscale * mscale;

  at::Tensor h = p("tok_embeddings.weight").index_select(0, tokens.flatten()).view({B, S, -1});
  const at::Tensor x = rms(h, p("layers.0.attention_norm.weight"), a.norm_eps);
  at::Tensor q = at::linear(rms(at::linear(x, p("layers.0.attention.wq_a.weight")),
                                p("layers.0.attention.q_norm.weight"), a.norm_eps),
                            p("layers.0.attention.wq_b.weight"))
                     .view({B, S, H, nope + rp});
  q = at::cat({q.narrow(3, 0, nope), rope_ref(q.narrow(3, nope, rp), ang)}, 3);
  const at::Tensor kv_a = at::linear(x, p("layers.0.attention.wkv_a.weight"));
  const at::Tensor k_pe = rope_ref(kv_a.narrow(2, m.kv_lora_rank, rp).unsqueeze(2), ang);
  const at::Tensor kv = at::linear(rms(kv_a.narrow(2, 0, m.kv_lora_rank), p("layers.0.attention.kv_norm.weight"),
                                       a.norm_eps),
                                   p("layers.0.attention.wkv_b.weight"))
                            .view({B, S, H, nope + m.v_head_dim});
  const at::Tensor k = at::cat({kv.narrow(3, 0, nope), k_pe.expand({B, S, H, rp})}, 3);
  const at::Tensor v = kv.narrow(3, nope, m.v_head_dim);
  at::Tensor scores = at::einsum("bshd,bthd->bhst", {q, k}) * scale;
  scores = scores.masked_fill(torch::ones({S, S}, torch::kBool).triu(1), -INFINITY);
  const at::Tensor o = at::einsum("bhst,bthd->bshd", {at::softmax(scores, -1), v}).reshape({B, S, -1});
  h = h + at::linear(o, p("layers.0.attention.wo.weight"));
  const at::Tensor f = rms(h, p("layers.0.ffn_norm.weight"), a.norm_eps);
  h = h + at::linear(at::silu(at::linear(f, p("layers.0.feed_forward.w1.weight"))) *
                         at::linear(f, p("layers.0.feed_forward.w3.weight")),
                     p("layers.0.feed_forward.w2.weight"));
  // The final norm's eps is torch.finfo(float64).eps here (nn.RMSNorm(dim)).
  const at::Tensor want = at::linear(rms(h, p("norm.weight"), 2.220446049250313e-16), p("output.weight"));
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_LT((got - want).abs().max().item<double>(), 1e-9 * want.abs().max().item<double>());
}

TEST(DeepSeekV3, RefusedLayoutsAndFlavorsAreOneLine) {
  const ModelArgs tiny = model_flavor("deepseek_v3", "tiny");
  EXPECT_NO_THROW(check_model_layout(tiny, ModelLayout{1, 2, 1, 1, 2, false}));  // FSDP and PP run
  EXPECT_NO_THROW(check_model_layout(tiny, ModelLayout{1, 1, 2, 2, 1, false}));  // TP and CP run
  // A TP degree that does not divide MLA's heads (debugmodel: 16) is one line.
  try {
    check_tensor_parallel_degree(model_flavor("deepseek_v3", "debugmodel"), 3);
    ADD_FAILURE() << "tp 3 of 16 heads was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("n_heads 16"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_model_layout(tiny, ModelLayout{1, 1, 1, 1, 1, true}));  // float8 on MLA's head GEMMs
  // The flex flavors (block_causal documents) run, except under CP, which
  // TorchTitan's DeepSeek-V3 runs with sdpa only.
  for (const char* flavor : {"debugmodel_flex_attn", "16B", "236B", "671B"}) {
    const ModelArgs a = model_flavor("deepseek_v3", flavor);
    EXPECT_TRUE(a.block_causal() && a.attn_type == "flex") << flavor;
    EXPECT_NO_THROW(check_model_layout(a, ModelLayout{1, 2, 1, 2, 2, false})) << flavor;
    try {
      check_model_layout(a, ModelLayout{1, 1, 2, 1, 1, false});
      ADD_FAILURE() << flavor << " was accepted under CP";
    } catch (const InputError& e) {
      EXPECT_STREQ(e.what(), "model deepseek_v3: context parallelism does not run flex attention (TorchTitan refuses it "
                             "too; its deepseek_v3 CP takes sdpa only); set parallelism.context_parallel_degree = 1");
    }
  }
  EXPECT_NO_THROW(check_model_layout(model_flavor("deepseek_v3", "debugmodel"), ModelLayout{}));
}

}  // namespace
}  // namespace ctitan
