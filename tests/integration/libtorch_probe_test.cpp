// The LibTorch probe (docs/libtorch.md): what ctitan relies on from the
// torch wheel, checked on every CI run — c10d + Gloo from C++ (with Debian's
// gloo headers), float8 dtypes, bf16 matmul, and the profiler.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

namespace {

// Runs fn(rank, pg) on `world` threads, each its own Gloo rank.
void with_gloo_ranks(int world, const std::function<void(int, c10d::ProcessGroupGloo&)>& fn) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto opts = c10d::ProcessGroupGloo::Options::create();
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
        c10d::ProcessGroupGloo pg(store, r, world, opts);
        fn(r, pg);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(LibTorchProbe, GlooAllReduceBf16AllGatherReduceScatter) {
  with_gloo_ranks(2, [](int r, c10d::ProcessGroupGloo& pg) {
    std::vector<at::Tensor> t{torch::full({4}, r + 1, torch::kBFloat16)};
    pg.allreduce(t)->wait();
    EXPECT_TRUE(torch::equal(t[0], torch::full({4}, 3, torch::kBFloat16)));
    auto out = torch::empty({8});
    auto in = torch::full({4}, static_cast<float>(r));
    pg._allgather_base(out, in)->wait();
    EXPECT_TRUE(torch::equal(out, torch::cat({torch::zeros({4}), torch::ones({4})})));
    auto rs_in = torch::arange(8, torch::kFloat), rs_out = torch::empty({4});
    pg._reduce_scatter_base(rs_out, rs_in)->wait();
    EXPECT_TRUE(torch::equal(rs_out, torch::arange(4 * r, 4 * r + 4, torch::kFloat) * 2));
  });
}

TEST(LibTorchProbe, Float8DtypesRoundToNearestRepresentable) {
  auto x = torch::tensor({1.0f, 0.3f, 448.0f, 1000.0f});
  auto e4m3 = x.to(at::kFloat8_e4m3fn).to(torch::kFloat);
  EXPECT_FLOAT_EQ(e4m3[0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(e4m3[1].item<float>(), 0.3125f);  // nearest e4m3 value to 0.3
  EXPECT_FLOAT_EQ(e4m3[2].item<float>(), 448.0f);   // e4m3fn max
  auto e5m2 = x.to(at::kFloat8_e5m2).to(torch::kFloat);
  EXPECT_FLOAT_EQ(e5m2[1].item<float>(), 0.3125f);
}

TEST(LibTorchProbe, Bf16MatmulMatchesFp32) {
  auto a = torch::randn({256, 256}), b = torch::randn({256, 256});
  auto ref = torch::mm(a, b);
  auto got = torch::mm(a.to(torch::kBFloat16), b.to(torch::kBFloat16)).to(torch::kFloat);
  EXPECT_LT(((got - ref).abs().max() / ref.abs().max()).item<double>(), 0.02);
}

TEST(LibTorchProbe, ProfilerWritesAChromeTrace) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "probe_trace.json";
  {
    torch::autograd::profiler::RecordProfile guard(path.string());
    auto a = torch::randn({64, 64}, torch::requires_grad());
    torch::mm(a, a).sum().backward();
  }
  std::ifstream in(path);
  auto trace = nlohmann::json::parse(in);
  const auto& events = trace.is_array() ? trace : trace["traceEvents"];
  bool saw_mm = false;
  for (const auto& e : events) saw_mm |= e.value("name", "") == "aten::mm";
  EXPECT_TRUE(saw_mm);
}

}  // namespace
