// GPU checks (CTest label `gpu`, `scripts/gpu_check.sh`): run where LibTorch
// sees a CUDA device and skip, with one line saying why, everywhere else —
// the CUDA path is compiled in every build but only runs on a GPU.
//
// Tolerances, stated once: fp32 with TF32 off on both sides. The model's
// loss agrees to 1e-5 relative and its gradients to 1e-4 of the largest
// gradient (cuBLAS and the CPU reduce in different orders); ten training
// steps agree to 1e-3 relative (the differences grow through AdamW).
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>

#include "planner/hardware.h"
#include "profiling/gpu_info.h"
#include "profiling/gpu_probe.h"
#include "profiling/gpu_tracer.h"
#include "tests/integration/process.h"
#include "trainer/models/llama3.h"
#include "trainer/float8/float8_linear.h"
#include "trainer/kernels/expert_swiglu.h"
#include "trainer/kernels/flash_sinks.h"
#include "trainer/kernels/fused_cuda.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/documents.h"
#include "trainer/models/registry.h"
#include "trainer/model/moe.h"
#include "trainer/model/transformer.h"
#include "trainer/model/weight_grad.h"
#include "trainer/optim/adamw.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;
using testing::read_json;
using testing::read_jsonl;
using testing::run_ctitan;

#define CTITAN_REQUIRE_GPU()                                                                         \
  do {                                                                                              \
    if (!torch::cuda::is_available())                                                               \
      GTEST_SKIP() << "no GPU: LibTorch sees no CUDA device here (the CUDA path is compiled, not run)"; \
  } while (0)

void fp32_everywhere() {
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
}

// One forward/backward of `args` on cuda:0 against the CPU, fp32, TF32 off:
// loss to 1e-5 relative, gradients to 1e-4 of the largest.
void expect_gpu_matches_cpu_fp32(const ModelArgs& args) {
  fp32_everywhere();
  Transformer cpu(args, torch::kFloat, 64), gpu(args, torch::kFloat, 64, c10::Device(c10::kCUDA, 0));
  cpu.init_weights(7);
  gpu.init_weights(7);  // a function of (seed, FQN, index): the same weights on both devices
  const auto tokens = torch::randint(0, args.vocab_size, {2, 64}, torch::kLong);
  const auto labels = torch::randint(0, args.vocab_size, {2, 64}, torch::kLong);
  at::Tensor lc = cpu.forward_loss(tokens, labels);
  at::Tensor lg = gpu.forward_loss(tokens.cuda(), labels.cuda());
  lc.backward();
  lg.backward();
  const double c = lc.item<double>(), g = lg.item<double>();
  EXPECT_NEAR(g, c, 1e-5 * std::abs(c));
  const at::Tensor gc = cpu.store().flat_grads(), gg = gpu.store().flat_grads().cpu();
  const double scale = gc.abs().max().item<double>();
  EXPECT_LT((gg - gc).abs().max().item<double>(), 1e-4 * scale);
}

TEST(GpuModel, ForwardBackwardMatchesTheCpuFp32Result) {
  CTITAN_REQUIRE_GPU();
  expect_gpu_matches_cpu_fp32(llama3_flavor("debugmodel"));
}

// GPT-OSS on CUDA: sinks and the sliding window run the eager chain
// (sink_window_attention) there, with the biased experts and the clamped
// SwiGLU, against the CPU in fp32 at seq 64 (the tiny flavor's window of 8
// cuts it; debugmodel's 64 heads of 64 with their sinks, two layers).
TEST(GpuModel, GptOssMatchesTheCpuFp32Result) {
  CTITAN_REQUIRE_GPU();
  expect_gpu_matches_cpu_fp32(model_flavor("gpt_oss", "tiny"));
  ModelArgs debug = model_flavor("gpt_oss", "debugmodel");
  debug.n_layers = 2;
  expect_gpu_matches_cpu_fp32(debug);
}

std::vector<double> losses_of(const fs::path& dir) {
  std::vector<double> out;
  for (const auto& j : read_jsonl(dir / "metrics.jsonl"))
    if (j.contains("loss") && j["loss"].is_number()) out.push_back(j["loss"].get<double>());
  return out;
}

// The ten losses of run `b` within `rtol` (1e-3: see the tolerances above) of run `a`'s.
void expect_ten_losses_track(const fs::path& a, const fs::path& b, double rtol = 1e-3) {
  const auto la = losses_of(a), lb = losses_of(b);
  ASSERT_EQ(la.size(), 10u);
  ASSERT_EQ(lb.size(), 10u);
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(lb[i], la[i], rtol * std::abs(la[i])) << "step " << i + 1;
}

std::vector<std::string> train_args(const fs::path& dir, const std::string& device) {
  return {"train", "--model.flavor", "debugmodel", "--training.steps", "10", "--training.seq_len", "256",
          "--training.local_batch_size", "4", "--training.mixed_precision_param", "float32", "--metrics.log_freq",
          "1", "--training.device", device, "--job.dump_folder", dir.string()};
}

TEST(GpuTrain, TenStepsOfDebugmodelTrackTheCpuLosses) {
  CTITAN_REQUIRE_GPU();
  const fs::path dir = testing::fresh_dir("gpu_train");
  const auto cpu = run_ctitan(train_args(dir / "cpu", "cpu"));
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  const auto gpu = run_ctitan(train_args(dir / "cuda", "cuda"));
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  expect_ten_losses_track(dir / "cpu", dir / "cuda");
  const auto summary = read_json(dir / "cuda" / "summary.json");
  EXPECT_NE(summary["device"].get<std::string>().find("cuda:0"), std::string::npos) << summary.dump();
  // Memory categories come from the CPU allocator's accounting: host memory on CUDA, named so.
  EXPECT_FALSE(summary.contains("mem_by_category"));
  EXPECT_TRUE(summary.contains("host_mem_by_category"));
  const auto env = read_json(dir / "cuda" / "env.json");
  EXPECT_GE(env["gpu_count"].get<int>(), 1);
  EXPECT_FALSE(env["gpu_name"].get<std::string>().empty());
  EXPECT_FALSE(env["nccl_version"].get<std::string>().empty());
  // The CUDA caching allocator's numbers, as TorchTitan logs them.
  const auto last = read_jsonl(dir / "cuda" / "metrics.jsonl").back();
  EXPECT_GT(last["mem_reserved_peak_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(last["mem_ooms"].get<int64_t>(), 0);
  fs::remove_all(dir);
}

// |got − want| ≤ atol·max|want| + rtol·|want| everywhere (tests/fused_cases.h's rule).
::testing::AssertionResult close_to(const at::Tensor& got, const at::Tensor& want, double atol, double rtol) {
  const at::Tensor g = got.detach().to(at::kDouble).cpu(), w = want.detach().to(at::kDouble).cpu();
  if (g.sizes() != w.sizes()) return ::testing::AssertionFailure() << g.sizes() << " vs " << w.sizes();
  const double scale = w.abs().max().item<double>();
  const at::Tensor excess = (g - w).abs() - rtol * w.abs() - atol * scale;
  const int64_t k = excess.flatten().argmax().item<int64_t>();
  if (excess.flatten()[k].item<double>() <= 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << k << ": got " << g.flatten()[k].item<double>() << ", want "
                                       << w.flatten()[k].item<double>() << " (scale " << scale << ")";
}

// ctitan's CUDA kernels (compile.enable on CUDA) against the eager ATen chain
// on the same GPU, forward and backward: fp32 to 1e-5, bf16 within two bf16
// ulps (the kernels round once, the bf16 chain after every op).
class GpuFused : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(GpuFused, KernelsMatchTheEagerChain) {
  CTITAN_REQUIRE_GPU();
  fp32_everywhere();
  ASSERT_TRUE(cuda_kernels_built()) << "this build has no CUDA kernels";
  const auto dt = GetParam();
  const double atol = dt == at::kFloat ? 1e-5 : 8e-3, rtol = dt == at::kFloat ? 1e-5 : 1.6e-2;
  const auto on = torch::device(torch::kCUDA).dtype(dt);
  torch::manual_seed(11);
  auto leaf = [](const at::Tensor& t) { return t.detach().clone().requires_grad_(); };
  {  // RMSNorm [B,S,D]
    const at::Tensor x = torch::randn({4, 128, 512}, on), w = 1 + 0.1 * torch::randn({512}, on);
    const at::Tensor dy = torch::randn_like(x);
    const at::Tensor xf = leaf(x), wf = leaf(w), xe = leaf(x), we = leaf(w);
    const at::Tensor yf = fused_rms_norm(xf, wf, 1e-5), ye = at::rms_norm(xe, {512}, we, 1e-5);
    yf.backward(dy);
    ye.backward(dy);
    EXPECT_TRUE(close_to(yf, ye, atol, rtol)) << "rms_norm y";
    EXPECT_TRUE(close_to(xf.grad(), xe.grad(), atol, rtol)) << "rms_norm dx";
    EXPECT_TRUE(close_to(wf.grad(), we.grad(), atol, rtol)) << "rms_norm dw";
  }
  {  // SwiGLU [B,S,2F]
    const at::Tensor gu = 2 * torch::randn({4, 128, 2 * 384}, on), dy = torch::randn({4, 128, 384}, on);
    const at::Tensor gf = leaf(gu), ge = leaf(gu);
    const at::Tensor yf = fused_swiglu(gf);
    const auto parts = ge.split(384, -1);
    const at::Tensor ye = at::silu(parts[0]) * parts[1];
    yf.backward(dy);
    ye.backward(dy);
    EXPECT_TRUE(close_to(yf, ye, atol, rtol)) << "swiglu y";
    EXPECT_TRUE(close_to(gf.grad(), ge.grad(), atol, rtol)) << "swiglu d gate_up";
  }
  {  // The experts' SwiGLU [N,F], GPT-OSS's clamped form and the plain one
    for (const double limit : {7.0, 0.0}) {
      const at::Tensor h1 = 4 * torch::randn({512, 384}, on), h3 = 4 * torch::randn({512, 384}, on);
      const at::Tensor dy = torch::randn({512, 384}, on);
      const at::Tensor af = leaf(h1), bf = leaf(h3), ae = leaf(h1), be = leaf(h3);
      const at::Tensor yf = fused_expert_swiglu(af, bf, limit, 1.702);
      at::Tensor ye = at::silu(ae) * be;
      if (limit > 0) {
        const at::Tensor g = ae.clamp_max(limit), u = be.clamp(-limit, limit);
        ye = g * at::sigmoid(g * 1.702) * (u + 1);
      }
      yf.backward(dy);
      ye.backward(dy);
      EXPECT_TRUE(close_to(yf, ye, atol, rtol)) << "expert swiglu y, limit " << limit;
      EXPECT_TRUE(close_to(af.grad(), ae.grad(), atol, rtol)) << "expert swiglu dh1, limit " << limit;
      EXPECT_TRUE(close_to(bf.grad(), be.grad(), atol, rtol)) << "expert swiglu dh3, limit " << limit;
    }
  }
  {  // RoPE of q and k, split views of one [B,S,(H+2K)·Dh] projection, as in the model
    const int64_t B = 2, S = 64, H = 8, K = 2, Dh = 64;
    const at::Tensor qkv = torch::randn({B, S, (H + 2 * K) * Dh}, on);
    const at::Tensor inv = at::pow(500000.0, -at::arange(0, Dh, 2, at::kDouble) / Dh);
    const at::Tensor ang = at::outer(at::arange(S, at::kDouble), inv).to(at::kFloat);
    const at::Tensor freqs = at::polar(at::ones_like(ang), ang).cuda();
    const at::Tensor dq = torch::randn({B, S, H, Dh}, on), dk = torch::randn({B, S, K, Dh}, on);
    const at::Tensor pf = leaf(qkv), pe = leaf(qkv);
    const auto sf = pf.split_with_sizes({H * Dh, K * Dh, K * Dh}, 2);
    const auto [qf, kf] = cuda_rope_qk(sf[0].view({B, S, H, Dh}), sf[1].view({B, S, K, Dh}), freqs, dt);
    const auto se = pe.split_with_sizes({H * Dh, K * Dh, K * Dh}, 2);
    auto eager = [&](const at::Tensor& x, int64_t n) {
      const at::Tensor c = at::view_as_complex(x.view({B, S, n, Dh}).to(at::kFloat).reshape({B, S, n, Dh / 2, 2}));
      return at::view_as_real(c * freqs.view({1, S, 1, Dh / 2})).flatten(3).to(dt);
    };
    const at::Tensor qe = eager(se[0], H), ke = eager(se[1], K);
    ((qf * dq).sum() + (kf * dk).sum()).backward();
    ((qe * dq).sum() + (ke * dk).sum()).backward();
    EXPECT_TRUE(close_to(qf, qe, atol, rtol)) << "rope q";
    EXPECT_TRUE(close_to(kf, ke, atol, rtol)) << "rope k";
    EXPECT_TRUE(close_to(pf.grad(), pe.grad(), atol, rtol)) << "rope d qkv";
  }
  {  // The output projection's cross-entropy; fp32 also over several chunks
    const int64_t N = 300, D = 64;
    const int64_t V = dt == at::kFloat ? (int64_t{1} << 27) / 128 + 7 : 5000;  // 128 rows per chunk: 3 chunks
    const at::Tensor h = torch::randn({N, D}, on), w = 0.2 * torch::randn({V, D}, on);
    const at::Tensor labels = torch::randint(0, V, {N}, torch::device(torch::kCUDA).dtype(torch::kLong));
    const at::Tensor hf = leaf(h), wf = leaf(w), he = leaf(h), we = leaf(w);
    const at::Tensor lf = cuda_linear_cross_entropy(hf, wf, labels);
    const at::Tensor le = at::cross_entropy_loss(at::linear(he, we).to(at::kFloat), labels);
    (2.5 * lf).backward();
    (2.5 * le).backward();
    EXPECT_NEAR(lf.item<double>(), le.item<double>(), (dt == at::kFloat ? 1e-5 : 1e-2) * le.item<double>());
    // d h sums a million products per element in two GEMMs of different
    // splits: fp32 gradients are held to 1e-4 of the largest, as the model's
    // (the first H200 run: 1.2e-7 apart at a largest value of 6.6e-3).
    const double gatol = dt == at::kFloat ? 1e-4 : atol, grtol = dt == at::kFloat ? 0.0 : rtol;
    EXPECT_TRUE(close_to(hf.grad(), he.grad(), gatol, grtol)) << "linear CE dh";
    EXPECT_TRUE(close_to(wf.grad(), we.grad(), gatol, grtol)) << "linear CE dw";
    torch::NoGradGuard no_grad;  // validation: the loss alone
    EXPECT_NEAR(cuda_linear_cross_entropy(h, w, labels).item<double>(), lf.item<double>(), 1e-6 * lf.item<double>());
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuFused, ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const auto& info) { return info.param == at::kFloat ? "fp32" : "bf16"; });

// Ten CUDA steps of debugmodel into dir/eager and, with --compile.enable,
// dir/compile; `dtype` is training.mixed_precision_param.
::testing::AssertionResult run_eager_and_compiled(const fs::path& dir, const std::string& dtype) {
  for (const char* run : {"eager", "compile"}) {
    auto args = train_args(dir / run, "cuda");
    for (auto& a : args)
      if (a == "float32") a = dtype;
    if (std::string(run) == "compile") args.push_back("--compile.enable");
    const auto r = run_ctitan(args);
    if (r.exit_code != 0) return ::testing::AssertionFailure() << run << ": exit " << r.exit_code << ": " << r.err;
  }
  return ::testing::AssertionSuccess();
}

// compile.enable on CUDA changes the kernels, not the math: ten fp32 steps of
// debugmodel with and without it agree as the CPU and GPU runs do (1e-3).
TEST(GpuFusedTrain, CompileTracksTheEagerLossesAndSaysItsKernels) {
  CTITAN_REQUIRE_GPU();
  const fs::path dir = testing::fresh_dir("gpu_fused_train");
  ASSERT_TRUE(run_eager_and_compiled(dir, "float32"));
  expect_ten_losses_track(dir / "eager", dir / "compile");
  const auto summary = read_json(dir / "compile" / "summary.json");
  EXPECT_NE(summary["techniques"].get<std::string>().find("fused CUDA kernels"), std::string::npos)
      << summary["techniques"];
  fs::remove_all(dir);
}

// bf16, the trainer's default: compile.enable adds ctitan's AdamW kernel,
// which applies the clipping and writes the next step's bf16 compute copy
// in its pass. Ten steps with and without compile agree within 1e-2
// relative (the fused kernels round once where the bf16 chain rounds per
// op). On random tokens the loss barely moves from ln(vocab), so the
// optimizer's wiring is checked by the next test, not here.
TEST(GpuFusedTrain, Bf16CompileWithTheFusedAdamWTracksEager) {
  CTITAN_REQUIRE_GPU();
  const fs::path dir = testing::fresh_dir("gpu_fused_adamw");
  ASSERT_TRUE(run_eager_and_compiled(dir, "bfloat16"));
  expect_ten_losses_track(dir / "eager", dir / "compile", 1e-2);
  EXPECT_NE(read_json(dir / "compile" / "summary.json")["techniques"].get<std::string>().find(
                "AdamW writing the bf16 compute copy"),
            std::string::npos);
  fs::remove_all(dir);
}

// The train step's wiring of the fused AdamW (train.cpp's order: backward,
// gradients into fp32, clip norm with the coefficient deferred, step,
// begin_step(after the step)) on a bf16 debugmodel with compile: the
// buffer the optimizer writes is the one the next forward reads (the
// compute copy equals master.to(bf16) after every step, and begin_step
// leaves it) through four steps with the clipping active; after the first
// step (the same gradients on both sides) the master equals that of ATen's
// AdamW with a separate clip and cast within 1e-5. Later steps are not
// compared: AdamW turns an ulp of difference in a near-zero gradient into
// an update of ±lr (seen on the H200: 8.6e-4 apart after four steps).
TEST(GpuFusedOptimizer, TheStepWritesTheComputeCopyTheForwardReads) {
  CTITAN_REQUIRE_GPU();
  const ModelArgs args = llama3_flavor("debugmodel");
  const c10::Device cuda(c10::kCUDA, 0);
  torch::manual_seed(11);
  const auto tokens = torch::randint(0, args.vocab_size, {2, 64}, torch::kLong).to(cuda);
  const auto labels = torch::randint(0, args.vocab_size, {2, 64}, torch::kLong).to(cuda);
  std::vector<at::Tensor> masters;
  for (bool fused : {true, false}) {
    ModelTechniques techniques;
    techniques.compile_model = techniques.compile_loss = true;
    Transformer m(args, torch::kBFloat16, 64, cuda, ModelPart{}, ParamStore::Storage::kFlat, {}, techniques);
    m.init_weights(7);
    AdamW opt(m.store().flat_params(), m.store().flat_grads(), AdamWOptions{});
    const at::Tensor init = m.store().flat_params().clone();
    if (fused) {
      ASSERT_TRUE(opt.write_compute_copy(m.store().compute_for_optimizer()));
      m.store().set_optimizer_writes_compute();
    }
    for (int step = 0; step < 4; ++step) {
      m.store().zero_grad();
      m.forward_loss(tokens, labels).backward();
      m.store().accumulate_grads();
      double coef = 1.0;
      clip_grad_norm_(m.store().flat_grads(), 0.05, fused ? &coef : nullptr);  // 0.05: clipping on
      if (fused) {
        EXPECT_LT(coef, 1.0);
      }
      opt.step(1e-3, coef);
      m.store().begin_step(/*after_optimizer_step=*/true);
      if (fused) {
        ASSERT_TRUE(torch::equal(m.store().compute_for_optimizer(), m.store().flat_params().to(torch::kBFloat16)))
            << "step " << step;
      }
      if (step == 0) masters.push_back(m.store().flat_params().clone());
    }
    EXPECT_GT((m.store().flat_params() - init).abs().max().item<double>(), 1e-4) << "the steps moved nothing";
  }
  EXPECT_TRUE(close_to(masters[0], masters[1], 1e-5, 1e-5));
}

// ctitan's AdamW kernel against ATen's _fused_adamw_ after a separate
// clipping multiply (what it replaces), on the same GPU, three steps: the
// same math, within 1e-6 relative (nvcc may contract differently); the
// compute copy it writes is exactly params.to(bf16). Aligned buffers (four
// elements at a time) and views one element in (one at a time), an odd
// length for the tail.
TEST(GpuFusedOptimizer, AdamWMatchesAtenAfterClippingAndWritesTheComputeCopy) {
  CTITAN_REQUIRE_GPU();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const double lr = 3e-3, b1 = 0.9, b2 = 0.95, wd = 0.1, eps = 1e-8;
  for (int64_t shift : {0, 1}) {
    const int64_t N = (int64_t{1} << 20) + 3;
    torch::manual_seed(5);
    auto view = [&](at::Tensor t) { return t.narrow(0, shift, N); };
    at::Tensor p = view(torch::randn({N + shift}, cuda)), m = view(torch::zeros({N + shift}, cuda)),
               v = view(torch::zeros({N + shift}, cuda)), g = view(torch::empty({N + shift}, cuda));
    at::Tensor compute = view(torch::empty({N + shift}, cuda.dtype(torch::kBFloat16)));
    at::Tensor step = torch::zeros({}, cuda);
    at::Tensor rp = p.clone(), rm = torch::zeros({N}, cuda), rv = torch::zeros({N}, cuda), rstep = torch::zeros({}, cuda);
    const double scales[] = {1.0, 0.37, 1.0};
    for (int t = 0; t < 3; ++t) {
      g.copy_(torch::randn({N}, cuda) * (t == 1 ? 5.0 : 0.5));
      step.add_(1);
      cuda_adamw_(p, g, m, v, step, lr, b1, b2, wd, eps, scales[t], compute);
      at::Tensor rg = g.clone();
      if (scales[t] != 1.0) rg.mul_(scales[t]);
      rstep.add_(1);
      at::_fused_adamw_({rp}, {rg}, {rm}, {rv}, {}, {rstep}, lr, b1, b2, wd, eps, false, false);
    }
    EXPECT_TRUE(close_to(p, rp, 1e-7, 1e-6)) << "params, shift " << shift;
    EXPECT_TRUE(close_to(m, rm, 1e-7, 1e-6)) << "exp_avg, shift " << shift;
    EXPECT_TRUE(close_to(v, rv, 1e-7, 1e-6)) << "exp_avg_sq, shift " << shift;
    EXPECT_TRUE(torch::equal(compute, p.to(torch::kBFloat16))) << "compute copy, shift " << shift;
  }
}

// The gradient copy of compile.enable (bf16 backward gradients into the
// fp32 buffer, written or added) is exact, vectorised or not.
TEST(GpuFusedOptimizer, GradientCopyIntoFp32IsExact) {
  CTITAN_REQUIRE_GPU();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  for (int64_t shift : {0, 1})
    for (int64_t N : {4096, 4099})
      for (auto dt : {torch::kBFloat16, torch::kFloat}) {
        const at::Tensor src = torch::randn({N + shift}, cuda).to(dt).narrow(0, shift, N);
        at::Tensor dst = torch::full({N + shift}, 7.0, cuda).narrow(0, shift, N);
        cuda_accumulate_into(dst, src, false);
        EXPECT_TRUE(torch::equal(dst, src.to(torch::kFloat))) << "copy N " << N << " shift " << shift << " " << dt;
        cuda_accumulate_into(dst, src, true);
        EXPECT_TRUE(torch::equal(dst, src.to(torch::kFloat) + src.to(torch::kFloat)))
            << "add N " << N << " shift " << shift << " " << dt;
      }
}

// Qwen3's MoE flavor on the GPU (routing, the grouped expert GEMMs through
// at::_grouped_mm, the scatter back) against the CPU, fp32, TF32 off: the
// model's tolerances (loss 1e-5 relative, gradients 1e-4 of the largest).
TEST(GpuMoe, Qwen3MoeForwardBackwardMatchesTheCpuFp32Result) {
  CTITAN_REQUIRE_GPU();
  expect_gpu_matches_cpu_fp32(model_flavor("qwen3", "tiny_moe"));
}

// The grouped expert GEMM in bf16 on the GPU (at::_grouped_mm, the path of
// bf16 MoE training) against one fp32 GEMM per expert, forward and
// backward, with an expert that receives no rows: within bf16 rounding.
TEST(GpuMoe, GroupedGemmMatchesOneGemmPerExpertInBf16) {
  CTITAN_REQUIRE_GPU();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const int64_t E = 4, D = 64, H = 128;
  const at::Tensor counts = torch::tensor({40, 0, 17, 71}, torch::kLong).to(torch::kCUDA);
  const int64_t N = 128;
  torch::manual_seed(9);
  const at::Tensor x0 = torch::randn({N, D}, cuda), w0 = torch::randn({E, H, D}, cuda) * 0.1;
  at::Tensor x = x0.to(torch::kBFloat16).requires_grad_(), w = w0.to(torch::kBFloat16).requires_grad_();
  at::Tensor y = grouped_linear(x, w, counts);
  const at::Tensor dy = torch::randn({N, H}, cuda);
  y.backward(dy.to(torch::kBFloat16));
  // Reference: fp32 from the same bf16 values, one GEMM per expert.
  at::Tensor xr = x.detach().to(torch::kFloat).requires_grad_(), wr = w.detach().to(torch::kFloat).requires_grad_();
  std::vector<at::Tensor> parts;
  const int64_t c[] = {40, 0, 17, 71};
  for (int64_t e = 0, start = 0; e < E; start += c[e], ++e)
    if (c[e] > 0) parts.push_back(at::linear(xr.narrow(0, start, c[e]), wr.select(0, e)));
  at::Tensor yr = at::cat(parts, 0);
  yr.backward(dy.to(torch::kBFloat16).to(torch::kFloat));
  EXPECT_TRUE(close_to(y, yr, 8e-3, 1.6e-2)) << "y";
  EXPECT_TRUE(close_to(x.grad(), xr.grad(), 8e-3, 1.6e-2)) << "dx";
  EXPECT_TRUE(close_to(w.grad(), wr.grad(), 8e-3, 1.6e-2)) << "dw";
  EXPECT_EQ(w.grad().select(0, 1).abs().max().item<double>(), 0.0) << "the expert with no rows";
}

TEST(GpuFsdp, TwoRanksOverNcclMatchOneRank) {
  CTITAN_REQUIRE_GPU();
  if (torch::cuda::device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs; this machine has " << torch::cuda::device_count();
  const fs::path dir = testing::fresh_dir("gpu_fsdp");
  auto one = train_args(dir / "one", "cuda");
  one.insert(one.end(), {"--training.global_batch_size", "8"});
  ASSERT_EQ(run_ctitan(one).exit_code, 0);
  std::vector<std::string> two = {"launch", "--nproc", "2", "--"};
  auto inner = train_args(dir / "two", "cuda");
  two.insert(two.end(), inner.begin(), inner.end());
  two.insert(two.end(), {"--training.global_batch_size", "8", "--parallelism.data_parallel_shard_degree", "2"});
  const auto r = run_ctitan(two);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto l1 = losses_of(dir / "one"), l2 = losses_of(dir / "two");
  ASSERT_EQ(l1.size(), l2.size());
  for (size_t i = 0; i < l1.size(); ++i) EXPECT_NEAR(l2[i], l1[i], 1e-3 * std::abs(l1[i])) << "step " << i + 1;
  fs::remove_all(dir);
}

// Every layout's CUDA code as ranks that share the one GPU: NCCL refuses
// two ranks on one device, so the collectives run on Gloo through host
// copies (comm.cuda_backend = "gloo"); everything else — the sharded
// parameters, the TP/SP, pipeline, CP and EP code on CUDA tensors — is the
// CUDA path. fp32, TF32 off inside ctitan's fp32 runs, 10 steps at seq 64
// and a global batch of 8: every loss within 1e-5 (relative) of one rank on
// the same GPU. Not covered: NCCL's own streams and grouping.
TEST(GpuSharedGpu, LayoutsAsRanksOnOneGpuMatchOneRank) {
  CTITAN_REQUIRE_GPU();
  const fs::path dir = testing::fresh_dir("gpu_shared");
  struct Layout {
    std::string name;
    int world;
    std::vector<std::string> flags;
    bool moe = false;
  };
  const std::vector<Layout> layouts = {
      {"fsdp2", 2, {"--parallelism.data_parallel_shard_degree", "2"}},
      {"hsdp2x2", 4, {"--parallelism.data_parallel_replicate_degree", "2", "--parallelism.data_parallel_shard_degree", "2"}},
      {"tp2_sp", 2, {"--parallelism.tensor_parallel_degree", "2"}},
      {"pp2_1f1b", 2, {"--parallelism.pipeline_parallel_degree", "2", "--parallelism.pipeline_parallel_schedule", "1F1B"}},
      {"pp2_zbv", 2, {"--parallelism.pipeline_parallel_degree", "2", "--parallelism.pipeline_parallel_schedule",
                      "ZBVZeroBubble"}},
      {"cp2", 2, {"--parallelism.context_parallel_degree", "2"}},
      {"fsdp2_tp2", 4, {"--parallelism.data_parallel_shard_degree", "2", "--parallelism.tensor_parallel_degree", "2"}},
      {"ep2", 2, {"--parallelism.data_parallel_shard_degree", "2", "--parallelism.expert_parallel_degree", "2"}, true},
  };
  const auto args = [&](const fs::path& dump, int world, bool moe) {
    std::vector<std::string> a = {"train"};
    if (world > 1) a.insert(a.end(), {"--nproc", std::to_string(world), "--comm.cuda_backend", "gloo"});
    const std::vector<std::string> rest = {
        "--model.name", moe ? "qwen3" : "llama3", "--model.flavor", moe ? "debugmodel_moe" : "debugmodel",
        "--training.mixed_precision_param", "float32", "--training.dataset", "markov", "--training.seq_len", "64",
        "--training.steps", "10", "--training.global_batch_size", "8", "--training.local_batch_size", "4",
        "--metrics.log_freq", "1", "--training.device", "cuda", "--job.dump_folder", dump.string()};
    a.insert(a.end(), rest.begin(), rest.end());
    return a;
  };
  for (const bool moe : {false, true}) {
    const auto one = run_ctitan(args(dir / (moe ? "one_moe" : "one"), 1, moe));
    ASSERT_EQ(one.exit_code, 0) << one.err;
  }
  for (const Layout& l : layouts) {
    auto a = args(dir / l.name, l.world, l.moe);
    a.insert(a.end(), l.flags.begin(), l.flags.end());
    const auto r = run_ctitan(a);
    EXPECT_EQ(r.exit_code, 0) << l.name << ": " << r.err;
    if (r.exit_code != 0) continue;
    const auto want = losses_of(dir / (l.moe ? "one_moe" : "one")), got = losses_of(dir / l.name);
    ASSERT_EQ(got.size(), want.size()) << l.name;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i])) << l.name << " step " << i + 1;
    const auto summary = read_json(dir / l.name / "summary.json");
    std::cout << l.name << ": mem_peak_bytes " << summary.value("mem_peak_bytes", nlohmann::json()).dump()
              << ", exposed_comm_s " << summary.value("exposed_comm_s", nlohmann::json()).dump() << std::endl;
  }
}

TEST(GpuFloat8, ScaledMmMatchesTheEmulation) {
  CTITAN_REQUIRE_GPU();
  const GpuDevice g = gpu_inventory().devices.at(0);
  if (g.major * 10 + g.minor < 89)
    GTEST_SKIP() << "float8 GEMMs need sm89 or newer; this GPU is sm" << g.major << g.minor;
  torch::manual_seed(0);
  const auto x = torch::randn({256, 512}).to(torch::kBFloat16), w = torch::randn({384, 512}).to(torch::kBFloat16) * 0.02;
  const auto ref = at::linear(x.to(torch::kFloat), w.to(torch::kFloat));
  for (Float8Recipe recipe : {Float8Recipe::kTensorwise, Float8Recipe::kRowwise}) {
    const auto dev = c10::Device(c10::kCUDA, 0);
    EXPECT_EQ(float8_backend(dev, false), "scaled_mm");
    const auto fast = float8_linear(x.to(dev), w.to(dev), recipe, /*emulate=*/false).to(torch::kFloat).cpu();
    const auto emul = float8_linear(x, w, recipe, /*emulate=*/true).to(torch::kFloat);
    // Both quantise alike and their GEMMs accumulate differently: the same
    // SQNR against fp32 within 1 dB, and more than 30 dB SQNR between them.
    EXPECT_NEAR(sqnr_db(ref, fast), sqnr_db(ref, emul), 1.0) << float8_recipe_name(recipe);
    EXPECT_GT(sqnr_db(emul, fast), 30.0) << float8_recipe_name(recipe);
  }
}

bool sm89_or_newer() {
  const GpuDevice g = gpu_inventory().devices.at(0);
  return g.major * 10 + g.minor >= 89;
}

// FSDP's float8 all-gather hands float8_linear the weight as the gathered
// e4m3 codes in the backend's operand form (DataParallel::unpack_float8
// through float8_operand_data): on sm89+ they go into _scaled_mm beside the
// float8 input and grad_output, in forward and backward.
TEST(GpuFloat8, FsdpGatheredWeightRunsThroughScaledMm) {
  CTITAN_REQUIRE_GPU();
  if (!sm89_or_newer()) GTEST_SKIP() << "float8 GEMMs need sm89 or newer";
  torch::manual_seed(0);
  const auto dev = c10::Device(c10::kCUDA, 0);
  ASSERT_EQ(float8_backend(dev, false), "scaled_mm");
  const auto x = torch::randn({256, 512}).to(torch::kBFloat16), w = torch::randn({384, 512}).to(torch::kBFloat16) * 0.02;
  const Float8Cast cast{Float8Scaling::kTensorwise, Fp8Format::kE4M3FN};
  const at::Tensor scale = float8_scale(w.to(torch::kFloat), cast, false);
  const at::Tensor codes = fp8_encode(w.to(torch::kFloat) * scale, Fp8Format::kE4M3FN);  // what the gather brings
  struct Out {
    at::Tensor y, gx, gw;
  };
  const auto run = [&](const c10::Device& d, const std::string& backend) {
    const Float8Tensor wq{float8_operand_data(codes.to(d), Fp8Format::kE4M3FN, backend), scale.to(d), Fp8Format::kE4M3FN};
    const at::Tensor xd = x.to(d).requires_grad_(true), wd = w.to(d).requires_grad_(true);
    const at::Tensor y = float8_linear(xd, wd, Float8Recipe::kTensorwise, backend == "emulated", &wq);
    y.backward(torch::ones_like(y));
    return Out{y.detach().to(torch::kFloat).cpu(), xd.grad().to(torch::kFloat).cpu(), wd.grad().to(torch::kFloat).cpu()};
  };
  const Out fast = run(dev, "scaled_mm"), emul = run(c10::Device(c10::kCPU), "emulated");
  EXPECT_GT(sqnr_db(emul.y, fast.y), 30.0);
  EXPECT_GT(sqnr_db(emul.gx, fast.gx), 25.0);
  EXPECT_GT(sqnr_db(emul.gw, fast.gw), 25.0);
}

// fp32 compute with rowwise scales: _scaled_mm is asked for bf16 (the only
// rowwise output on sm90) and the result cast to fp32.
TEST(GpuFloat8, RowwiseWithFp32ComputeRunsThroughScaledMm) {
  CTITAN_REQUIRE_GPU();
  if (!sm89_or_newer()) GTEST_SKIP() << "float8 GEMMs need sm89 or newer";
  torch::manual_seed(1);
  const auto dev = c10::Device(c10::kCUDA, 0);
  const auto x = torch::randn({128, 256}), w = torch::randn({192, 256}) * 0.02;
  for (Float8Recipe recipe : {Float8Recipe::kRowwise, Float8Recipe::kRowwiseWithGwHp}) {
    const at::Tensor xd = x.to(dev).requires_grad_(true);
    const at::Tensor fast = float8_linear(xd, w.to(dev), recipe, /*emulate=*/false);
    EXPECT_EQ(fast.scalar_type(), torch::kFloat);
    fast.sum().backward();
    const at::Tensor emul = float8_linear(x, w, recipe, /*emulate=*/true);
    EXPECT_GT(sqnr_db(emul, fast.detach().cpu()), 30.0) << float8_recipe_name(recipe);
  }
}

// Two ranks: FSDP with the float8 all-gather (scaled_mm on sm89+), and
// 1F1B whose activations (8 MiB) outgrow NCCL's buffers, so that a send
// and a receive between the two ranks that were not grouped would deadlock.
// Both end with every NCCL group shut down: no destructor warning.
TEST(GpuDist, Float8AllGatherAndOneFOneBOverNccl) {
  CTITAN_REQUIRE_GPU();
  if (torch::cuda::device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs; this machine has " << torch::cuda::device_count();
  const fs::path dir = testing::fresh_dir("gpu_dist");
  const auto launch = [&](const std::string& name, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"launch", "--nproc", "2", "--"};
    auto inner = train_args(dir / name, "cuda");
    args.insert(args.end(), inner.begin(), inner.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return run_ctitan(args);
  };
  std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
      {"pp", {"--parallelism.pipeline_parallel_degree", "2", "--parallelism.pipeline_parallel_schedule", "1F1B",
              "--parallelism.pipeline_parallel_microbatch_size", "1", "--training.seq_len", "8192"}}};
  if (sm89_or_newer())
    runs.push_back({"fsdp_float8", {"--parallelism.data_parallel_shard_degree", "2", "--model.converters",
                                    "quantize.linear.float8", "--quantize.linear.float8.enable_fsdp_float8_all_gather",
                                    "--training.mixed_precision_param", "bfloat16"}});
  for (const auto& [name, extra] : runs) {
    const auto r = launch(name, extra);
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_EQ(losses_of(dir / name).size(), 10u) << name;
    EXPECT_EQ(r.err.find("destroy_process_group"), std::string::npos) << name << ": " << r.err;
  }
  fs::remove_all(dir);
}

TEST(GpuCupti, TraceHasKernelsAndItsBusyTimeIsTheStepTime) {
  CTITAN_REQUIRE_GPU();
  std::string why;
  auto tracer = GpuTracer::create(&why);
  // CUPTI can be held by another profiler (Nsight Systems, DCGM) or denied
  // to non-admin users: the run goes on without it, and so does this test.
  if (!tracer) GTEST_SKIP() << "CUPTI cannot run here: " << why;
  const auto a = torch::randn({4096, 4096}, torch::device(torch::kCUDA)), b = torch::randn_like(a);
  // Warm-up with the loop's own body: cuBLAS handles, the allocator, and
  // each kernel's module, which CUDA loads lazily at its first launch (the
  // first H200 run measured 12 ms of a 67 ms window idle for tanh's).
  at::Tensor c = at::mm(at::mm(a, b).tanh(), b);
  torch::cuda::synchronize();
  tracer->flush();
  const int64_t t0 = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now().time_since_epoch()).count();
  for (int i = 0; i < 20; ++i) c = at::mm(c.tanh(), b);  // compute-bound: the GPU never waits
  torch::cuda::synchronize();
  const int64_t t1 = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now().time_since_epoch()).count();
  const auto acts = tracer->flush();
  size_t kernels = 0;
  for (const auto& x : acts) kernels += x.kind == GpuActivity::Kind::kKernel;
  EXPECT_GE(kernels, 40u);
  const double busy = gpu_busy_seconds(acts, t0, t1), step = (t1 - t0) / 1e9;
  EXPECT_NEAR(busy, step, 0.1 * step) << "busy " << busy << " s of a " << step << " s step";
}

// Autograd runs a CUDA GEMM's backward on its device thread, not on the
// thread that opened the split-backward scope: dW must still be deferred.
TEST(GpuWeightGrad, DeviceThreadBackwardQueuesTheWeightGradient) {
  CTITAN_REQUIRE_GPU();
  fp32_everywhere();
  const auto dev = torch::device(torch::kCUDA);
  const at::Tensor x0 = torch::randn({64, 32}, dev), w0 = torch::randn({48, 32}, dev), dy = torch::randn({64, 48}, dev);
  at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  at::Tensor sunk;
  WeightGradQueue queue([&](const at::Tensor&, const at::Tensor& g) { sunk = g.clone(); });
  {
    DeferWeightGrads defer(&queue);
    deferrable_linear(x, w).backward(dy);
  }
  EXPECT_FALSE(w.grad().defined()) << "dW was computed in the I pass (the device thread missed the scope)";
  ASSERT_EQ(queue.size(), 1u);
  queue.run();
  ASSERT_TRUE(sunk.defined());
  EXPECT_LT((sunk - dy.t().mm(x0)).abs().max().item<double>(), 1e-4);
}

// block_causal on CUDA: ATen's varlen flash kernel (bf16) against SDPA with
// the document mask in fp32 — forward and the q/k/v gradients within bf16's
// rounding — on documents of 1 token, of a flash block and crossing blocks,
// with GQA; and a 1-layer Llama 3 step through the model's dispatch.
TEST(GpuDocuments, VarlenFlashMatchesTheMaskedSoftmax) {
  CTITAN_REQUIRE_GPU();
  fp32_everywhere();
  const int64_t B = 2, H = 8, G = 2, S = 256, Dh = 64;
  torch::manual_seed(3);
  at::Tensor tokens = torch::randint(1, 100, {B, S}, torch::kLong);
  for (int64_t p : {0, 1, 64, 200}) tokens[0][p] = 0;  // row 0: 1, 1, 63, 136, 55 tokens
  tokens[1][130] = 0;                                   // row 1: 131, 125
  const at::Tensor starts = document_starts(tokens, 0).cuda();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const at::Tensor q = torch::randn({B, S, H, Dh}, cuda), k = torch::randn({B, S, G, Dh}, cuda),
                   v = torch::randn({B, S, G, Dh}, cuda), dout = torch::randn({B, H, S, Dh}, cuda);
  const auto run = [&](bool varlen) {
    const auto dt = varlen ? at::kBFloat16 : at::kFloat;
    // Fresh leaves each run: q.to(kFloat) is q itself, so without the copy the fp32 run made q
    // require grad and the bf16 run's q.to(bf16) a non-leaf with no .grad (the H200, 2026-11-29).
    const auto leaf = [&](const at::Tensor& t) { return t.detach().to(dt).clone().requires_grad_(true); };
    at::Tensor ql = leaf(q), kl = leaf(k), vl = leaf(v);
    const at::Tensor qt = ql.transpose(1, 2), kt = kl.transpose(1, 2), vt = vl.transpose(1, 2);
    EXPECT_EQ(varlen_refuses(qt, kt, vt), varlen ? "" : "flash takes bf16/fp16 only");
    const at::Tensor o = varlen ? document_attention_varlen(qt, kt, vt, varlen_documents(starts))
                                : document_attention_sdpa(qt, kt, vt, starts);
    o.backward(dout.to(dt));
    return std::vector<at::Tensor>{o.to(at::kFloat), ql.grad().to(at::kFloat), kl.grad().to(at::kFloat),
                                   vl.grad().to(at::kFloat)};
  };
  const auto want = run(false), got = run(true);
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < want.size(); ++i) {
    const double scale = want[i].abs().max().item<double>();
    EXPECT_LT((got[i] - want[i]).abs().max().item<double>(), 2e-2 * scale)
        << names[i];
  }
  const VarlenDocuments d = varlen_documents(starts);
  EXPECT_TRUE(torch::equal(d.cu_seqlens.cpu(), torch::tensor({0, 1, 2, 65, 201, 256, 387, 512}, torch::kInt)));
  EXPECT_EQ(d.max_len, 136);
}

// GPT-OSS's attention on CUDA: ATen's flash kernel with the window as its
// window_size_left and the sinks on its output (flash_sinks.h) against the
// eager chain in fp32 — the output and the q/k/v and sink gradients within
// bf16's rounding — at window 32 (a flash block is 64 or 128 keys: the
// window ends inside one), window 0 (causal, sinks only), with GQA.
TEST(GpuAttention, SinkWindowFlashMatchesTheEagerChain) {
  CTITAN_REQUIRE_GPU();
  fp32_everywhere();
  const int64_t B = 2, H = 8, G = 2, S = 256, Dh = 64;
  torch::manual_seed(4);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const at::Tensor q = torch::randn({B, S, H, Dh}, cuda), k = torch::randn({B, S, G, Dh}, cuda),
                   v = torch::randn({B, S, G, Dh}, cuda), dout = torch::randn({B, H, S, Dh}, cuda),
                   sinks = torch::randn({H}, cuda);
  for (const int64_t window : {int64_t{32}, int64_t{0}}) {
    const auto run = [&](bool flash) {
      const auto dt = flash ? at::kBFloat16 : at::kFloat;
      const auto leaf = [&](const at::Tensor& t, at::ScalarType d) { return t.detach().to(d).clone().requires_grad_(true); };
      at::Tensor ql = leaf(q, dt), kl = leaf(k, dt), vl = leaf(v, dt), sl = leaf(sinks, at::kFloat);
      const at::Tensor qt = ql.transpose(1, 2), kt = kl.transpose(1, 2), vt = vl.transpose(1, 2);
      const AttentionExtras extras{window, sl};
      EXPECT_EQ(cuda_flash_sinks_run(qt, kt, vt, {}), flash);
      const at::Tensor o = flash ? cuda_flash_sink_window_attention(qt, kt, vt, extras)
                                 : sink_window_attention(qt, kt, vt, at::Tensor(), extras);
      o.backward(dout.to(dt));
      return std::vector<at::Tensor>{o.to(at::kFloat), ql.grad().to(at::kFloat), kl.grad().to(at::kFloat),
                                     vl.grad().to(at::kFloat), sl.grad()};
    };
    const auto want = run(false), got = run(true);
    const char* names[] = {"out", "dq", "dk", "dv", "dsinks"};
    for (size_t i = 0; i < want.size(); ++i) {
      const double scale = want[i].abs().max().item<double>();
      EXPECT_LT((got[i] - want[i]).abs().max().item<double>(), 2e-2 * scale) << names[i] << ", window " << window;
    }
  }
}

// `ctitan plan --probe --hardware h200` on the node: every rate measured,
// the bf16 GEMM faster at 8192³ than at 512³, and the spec's efficiencies
// from it in range.
TEST(GpuProbe, MeasuresTheNodesGemmsAndHbm) {
  CTITAN_REQUIRE_GPU();
  const GpuProbe p = measure_gpu();
  ASSERT_EQ(p.gemm_bf16.size(), std::size(kGpuGemmSizes));
  for (const auto& [n, r] : p.gemm_bf16) EXPECT_GT(r, 0) << n;
  EXPECT_GT(p.gemm_bf16.back().second, p.gemm_bf16.front().second);
  EXPECT_GT(p.gemm_fp32, 0);
  EXPECT_GT(p.hbm_bandwidth, 0);
  HardwareSpec h = load_hardware("h200");
  apply_gpu_probe(h, p);
  EXPECT_GT(h.eff.gemm, 0);
  EXPECT_LE(h.eff.gemm, 1);
  EXPECT_LE(h.eff.memory, 1);
  std::printf("%s\n  h200: gemm %.3f, gemm_half_size %.0f, memory %.3f\n", p.describe().c_str(), h.eff.gemm,
              h.eff.gemm_half_size, h.eff.memory);
}

TEST(GpuInfo, InventoryNamesEveryGpu) {
  CTITAN_REQUIRE_GPU();
  const GpuInventory inv = gpu_inventory();
  ASSERT_EQ(inv.devices.size(), static_cast<size_t>(torch::cuda::device_count()));
  EXPECT_GT(inv.devices[0].memory_bytes, 0);
  EXPECT_FALSE(inv.driver_version.empty());
  EXPECT_FALSE(inv.runtime_version.empty());
}

}  // namespace
}  // namespace ctitan
