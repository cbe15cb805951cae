// MFU that names its peaks (trainer/metrics.h): Float8's GEMMs at the fp8
// peak, attention over the pairs the masks leave, and no MFU where a peak
// is unknown — each against a count done by hand here.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "planner/hardware.h"
#include "profiling/peak_flops.h"
#include "tests/unit/meta_runtime.h"
#include "trainer/metrics.h"
#include "trainer/models/registry.h"
#include "trainer/model/model_args.h"
#include "trainer/models/llama3.h"
#include "trainer/parallel/train_model.h"

using namespace ctitan;

namespace {

// Llama 3 8B's linears per layer (dim 4096, 8 KV heads of 128, FFN 14336):
// wq, wo 4096 x 4096; wk, wv 1024 x 4096; w1, w3, w2 14336 x 4096.
constexpr double kDim = 4096, kKv = 1024, kFfn = 14336, kLayers = 32, kVocab = 128256;
constexpr double kLayerLinears = 2 * kDim * kDim + 2 * kKv * kDim + 3 * kFfn * kDim;

std::unique_ptr<TrainModel> meta_8b(const std::vector<std::string>& filter) {
  JobConfig cfg;
  cfg.model.flavor = "8B";
  cfg.training.seq_len = 8192;
  cfg.training.local_batch_size = 1;
  cfg.model.converters = {"quantize.linear.float8"};
  cfg.float8.filter_fqns = filter;
  return parallelize_model(llama3_flavor("8B"), meta_runtime(MeshShape{}, 0), cfg);
}

}  // namespace

// TorchTitan's default filter keeps the output projection in bf16: float8
// runs every block linear, 6 FLOPs per weight element and token. At the
// planner's H100 SXM peaks (989.4 and 1978.9 TFLOP/s) a step's time at peak
// is the bf16 FLOPs over the bf16 peak plus the fp8 FLOPs over the fp8 peak.
TEST(MfuByDtype, Float8EightBOnTheH100SpecMatchesAHandCount) {
  const auto tm = meta_8b({"output"});
  const double fp8 = tm->model().float8_flops_per_token();
  EXPECT_DOUBLE_EQ(fp8, 6 * kLayers * kLayerLinears);
  // Whole model, TorchTitan's formula: 6 x (non-embedding parameters) + 12 L H Dh S.
  const double params = kLayers * (kLayerLinears + 2 * kDim) + kDim + kVocab * kDim;
  const double total = 6 * params + 12 * kLayers * 32 * 128 * 8192.0;
  EXPECT_DOUBLE_EQ(flops_per_token(tm->model().args(), 8192), total);

  const HardwareSpec h100 = load_hardware("h100_sxm");
  ASSERT_EQ(h100.peak_bf16_flops, 989.4e12);
  ASSERT_EQ(h100.peak_fp8_flops, 1978.9e12);
  const double tps = 7000;  // tokens/s per device
  const auto mfu = mfu_at_peaks(tps, {{total - fp8, h100.peak_bf16_flops}, {fp8, h100.peak_fp8_flops}});
  ASSERT_TRUE(mfu);
  const double by_hand = 100 * tps * ((total - fp8) / 989.4e12 + fp8 / 1978.9e12);
  EXPECT_NEAR(*mfu, by_hand, 1e-9 * by_hand);
  // TorchTitan's figure divides everything by the bf16 peak: higher than the fp8-aware one.
  EXPECT_GT(100 * tps * total / 989.4e12, *mfu * 1.5);

  // Filtering the FFN's w2 as well leaves 32 x 14336 x 4096 x 6 FLOPs in bf16.
  EXPECT_DOUBLE_EQ(meta_8b({"output", "w2"})->model().float8_flops_per_token(),
                   6 * kLayers * (kLayerLinears - kFfn * kDim));
}

TEST(MfuByDtype, AnUnknownPeakGivesNoMfu) {
  EXPECT_FALSE(mfu_at_peaks(1000, {{1e9, 1e12}, {1e9, 0}}));  // float8 FLOPs, no fp8 peak
  EXPECT_DOUBLE_EQ(*mfu_at_peaks(1000, {{1e9, 1e12}, {0, 0}}), 100.0 * 1000 * 1e9 / 1e12);  // none in float8
  // A device the table does not know: no peak, so no MFU (never a guessed one).
  const PeakFlops mi350 = resolve_gpu_peak_flops("AMD Instinct MI350X", 0);
  EXPECT_EQ(mi350.flops, 0);
  EXPECT_EQ(mi350.source, "unknown");
  EXPECT_EQ(resolve_gpu_fp8_peak_flops("NVIDIA A100-SXM4-80GB").flops, 0);  // Ampere: no fp8 tensor cores
  EXPECT_EQ(resolve_gpu_fp8_peak_flops("NVIDIA H100 80GB HBM3").flops, 1978.9e12);
  EXPECT_EQ(resolve_gpu_fp8_peak_flops("NVIDIA H100 PCIe").flops, 1513e12);
  EXPECT_EQ(resolve_gpu_fp8_peak_flops("NVIDIA H200").source, "table:H200 SXM fp8");
}

// Useful FLOPs: TorchTitan's attention term counts all S x S pairs; causal
// attention computes S (S + 1) / 2 of them, and documents a share of those.
TEST(MfuByDtype, UsefulFlopsCountTheVisibleAttentionPairs) {
  const ModelArgs a = llama3_flavor("debugmodel");
  const int64_t S = 256;
  const double attention = 12.0 * a.n_layers * a.n_heads * a.head_dim() * S;
  const double rest = flops_per_token(a, S) - attention;
  EXPECT_DOUBLE_EQ(useful_flops_per_token(a, S, 1.0), rest + attention * (S * (S + 1) / 2.0) / (S * S));
  EXPECT_DOUBLE_EQ(useful_flops_per_token(a, S, 0.25), rest + attention * 257.0 / 512.0 * 0.25);
}

// GPT-OSS's debugmodel at S 256: layers 0 and 2 see windows of 128 keys
// (128·129/2 + 128·128 = 24,640 pairs), layers 1 and 3 all 256·257/2 =
// 32,896: attention computes (2·24,640 + 2·32,896) / (4·32,896) of causal's.
TEST(MfuByDtype, UsefulFlopsCountTheSlidingWindowsPairs) {
  const ModelArgs a = model_flavor("gpt_oss", "debugmodel");
  const int64_t S = 256;
  const double share = (2 * 24640.0 + 2 * 32896.0) / (4 * 32896.0);
  EXPECT_DOUBLE_EQ(window_attention_share(a, S), share);
  const double attention = 6.0 * a.n_layers * a.n_heads * 2 * a.head_dim() * S;
  const double rest = flops_per_token(a, S) - attention;
  EXPECT_NEAR(useful_flops_per_token(a, S, 1.0), rest + attention * 257.0 / 512.0 * share, 1e-6 * rest);
}
