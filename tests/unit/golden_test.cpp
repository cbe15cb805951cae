// ctitan's Llama 3 against golden values from an independent float64 PyTorch
// implementation (tests/peer/make_goldens.py, cross-checked by
// check_goldens.py): logits, loss, every gradient, the clipped grad norm and
// the parameters after one AdamW step. Run in fp32 here.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "trainer/models/llama3.h"
#include "trainer/model/transformer.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/lr_schedule.h"

namespace ctitan {
namespace {

class GoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* src = std::getenv("CTITAN_SOURCE_DIR");
    const auto path = std::filesystem::path(src ? src : ".") / "tests" / "golden" / "llama3_tiny.json";
    std::ifstream in(path);
    ASSERT_TRUE(in) << "missing " << path;
    golden_ = new nlohmann::json(nlohmann::json::parse(in));
  }
  static void TearDownTestSuite() { delete golden_; }
  static at::Tensor tensor(const nlohmann::json& j) {
    auto data = j.at("data").get<std::vector<float>>();
    return torch::tensor(data).view(j.at("shape").get<std::vector<int64_t>>());
  }
  static at::Tensor tokens(const char* key) {
    auto rows = golden_->at(key).get<std::vector<std::vector<int64_t>>>();
    std::vector<int64_t> flat;
    for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    return torch::tensor(flat, torch::kLong).view({static_cast<int64_t>(rows.size()), -1});
  }
  // A tiny-flavor model holding the golden weights.
  static std::unique_ptr<Transformer> model() {
    auto m = std::make_unique<Transformer>(llama3_flavor("tiny"), torch::kFloat, 8);
    torch::NoGradGuard ng;
    for (const auto& s : m->slots()) m->store().param(s.name).copy_(tensor(golden_->at("params").at(s.name)));
    return m;
  }
  static nlohmann::json* golden_;
};
nlohmann::json* GoldenTest::golden_ = nullptr;

TEST_F(GoldenTest, LogitsAndLossMatch) {
  auto m = model();
  torch::NoGradGuard ng;
  auto logits = m->forward_logits(tokens("tokens"));
  auto expected = tensor(golden_->at("logits_row0"));
  EXPECT_LT((logits[0] - expected).abs().max().item<double>(), 2e-5);
  const double loss = m->forward_loss(tokens("tokens"), tokens("labels")).item<double>();
  EXPECT_NEAR(loss, golden_->at("loss").get<double>(), 1e-5);
}

TEST_F(GoldenTest, EveryGradientMatches) {
  auto m = model();
  m->forward_loss(tokens("tokens"), tokens("labels")).backward();
  for (const auto& s : m->slots()) {
    auto expected = torch::tensor(golden_->at("grads").at(s.name).get<std::vector<float>>()).view(s.shape);
    const double err = (m->store().grad(s.name) - expected).abs().max().item<double>();
    EXPECT_LT(err, 1e-6 + 1e-4 * expected.abs().max().item<double>()) << s.name;
  }
}

TEST_F(GoldenTest, ClippedAdamWStepMatches) {
  auto m = model();
  m->forward_loss(tokens("tokens"), tokens("labels")).backward();
  const auto& o = golden_->at("optimizer");
  const double norm = clip_grad_norm_(m->store().flat_grads(), o.at("max_norm").get<double>());
  EXPECT_NEAR(norm, golden_->at("grad_norm").get<double>(), 1e-5);
  AdamW opt(m->store().flat_params(), m->store().flat_grads(),
            {o.at("lr").get<double>(), o.at("betas")[0].get<double>(), o.at("betas")[1].get<double>(),
             o.at("eps").get<double>(), o.at("weight_decay").get<double>(), "fused"});
  opt.step(o.at("lr").get<double>());
  for (const auto& s : m->slots()) {
    auto expected = torch::tensor(golden_->at("params_after_step").at(s.name).get<std::vector<float>>()).view(s.shape);
    EXPECT_LT((m->store().param(s.name) - expected).abs().max().item<double>(), 1e-5) << s.name;
  }
}

TEST_F(GoldenTest, LrScheduleMatchesThePythonReference) {
  const auto& ex = golden_->at("lr_schedule_example");
  const auto factors = ex.at("factors").get<std::vector<double>>();
  const int64_t steps = ex.at("warmup_steps").get<int64_t>() + ex.at("stable_steps").get<int64_t>() +
                        ex.at("decay_steps").get<int64_t>();
  LrSchedule s(steps, ex.at("warmup_steps").get<int64_t>(), std::nullopt, "linear", 0.0);
  for (size_t i = 0; i < factors.size(); ++i) EXPECT_NEAR(s.factor(static_cast<int64_t>(i)), factors[i], 1e-12) << i;
}

}  // namespace
}  // namespace ctitan
