// Deterministic per-parameter init: any box of a parameter (FSDP row shards,
// tensor-parallel column shards, shards of shards) equals the single-process
// tensor at those coordinates, and the values follow TorchTitan's rules.
#include "trainer/models/llama3.h"
#include "trainer/model/param_init.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/model/transformer.h"

namespace ctitan {
namespace {

constexpr uint64_t kSeed = 1234;

ModelArgs args_with_layers(int64_t n_layers) {
  ModelArgs a = llama3_flavor("tiny");
  a.n_layers = n_layers;
  return a;
}

// The single-process tensor: the whole parameter as one box at offset 0.
at::Tensor full(const std::string& fqn, std::vector<int64_t> shape, at::ScalarType dtype = torch::kFloat,
                uint64_t seed = kSeed, const ModelArgs& args = args_with_layers(4)) {
  at::Tensor t = torch::zeros(shape, dtype);
  init_param_box(t, fqn, shape, std::vector<int64_t>(shape.size(), 0), args, seed);
  return t;
}

// FSDP's dim-0 sharding as ctitan's FSDP does it: chunk = ceil(rows / n) rows
// per rank, the last ranks short (or empty) and zero-padded to chunk rows;
// all-gather = concatenate the padded shards and drop the padding.
at::Tensor gather_row_shards(const std::string& fqn, const std::vector<int64_t>& shape, int64_t n) {
  const int64_t rows = shape[0], chunk = (rows + n - 1) / n;
  std::vector<at::Tensor> shards;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t begin = std::min(r * chunk, rows), valid = std::min(chunk, rows - begin);
    std::vector<int64_t> local = shape, offset(shape.size(), 0);
    local[0] = chunk;
    offset[0] = begin;
    at::Tensor shard = torch::zeros(local);
    init_param_box(shard.narrow(0, 0, valid), fqn, shape, offset, args_with_layers(4), kSeed);
    EXPECT_EQ(shard.narrow(0, valid, chunk - valid).count_nonzero().item<int64_t>(), 0) << "padding was written";
    shards.push_back(shard);
  }
  return torch::cat(shards).narrow(0, 0, rows);
}

// Tensor-parallel dim-1 sharding (2 ranks, uneven when the width is odd),
// each rank's shard allocated on its own.
at::Tensor gather_column_shards(const std::string& fqn, const std::vector<int64_t>& shape) {
  const int64_t cols = shape[1], left = (cols + 1) / 2;
  at::Tensor a = torch::zeros({shape[0], left}), b = torch::zeros({shape[0], cols - left});
  init_param_box(a, fqn, shape, {0, 0}, args_with_layers(4), kSeed);
  init_param_box(b, fqn, shape, {0, left}, args_with_layers(4), kSeed);
  return torch::cat({a, b}, 1);
}

// FSDP over TP (2-D parallel): a dim-0 shard of each dim-1 shard, written
// straight into the matching (non-contiguous) window of a full-size tensor.
at::Tensor gather_2d_shards(const std::string& fqn, const std::vector<int64_t>& shape) {
  at::Tensor out = torch::zeros(shape);
  const int64_t cols = shape[1], left = (cols + 1) / 2, rows = shape[0], chunk = (rows + 2) / 3;
  for (int64_t c0 : {int64_t{0}, left}) {
    const int64_t width = c0 == 0 ? left : cols - left;
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      at::Tensor window = out.narrow(0, r0, std::min(chunk, rows - r0)).narrow(1, c0, width);
      init_param_box(window, fqn, shape, {r0, c0}, args_with_layers(4), kSeed);
    }
  }
  return out;
}

struct Case {
  std::string fqn;
  std::vector<int64_t> shape;
};
const std::vector<Case> kCases = {
    {"tok_embeddings.weight", {7, 10}},        {"tok_embeddings.weight", {64, 32}},
    {"layers.3.attention.wq.weight", {9, 6}},  {"layers.3.attention.wo.weight", {7, 13}},
    {"layers.1.feed_forward.w2.weight", {32, 96}}, {"output.weight", {11, 8}},
    {"norm.weight", {7}},                      {"layers.2.ffn_norm.weight", {5}},
};

TEST(ParamInit, RowShardsConcatenateToTheSingleProcessTensor) {
  for (const auto& c : kCases) {
    const at::Tensor want = full(c.fqn, c.shape);
    for (int64_t n : {1, 2, 4}) EXPECT_TRUE(torch::equal(gather_row_shards(c.fqn, c.shape, n), want)) << c.fqn << " n=" << n;
  }
}

TEST(ParamInit, ColumnShardsAndShardsOfShardsConcatenateToTheSingleProcessTensor) {
  for (const auto& c : kCases) {
    if (c.shape.size() < 2) continue;
    const at::Tensor want = full(c.fqn, c.shape);
    EXPECT_TRUE(torch::equal(gather_column_shards(c.fqn, c.shape), want)) << c.fqn;
    EXPECT_TRUE(torch::equal(gather_2d_shards(c.fqn, c.shape), want)) << c.fqn;
  }
}

TEST(ParamInit, AnyBoxOfA3dParameterEqualsThatSliceOfTheWhole) {
  const std::vector<int64_t> shape = {4, 5, 6};
  const at::Tensor whole = full("tok_embeddings.weight", shape, torch::kDouble);
  at::Tensor box = torch::empty({2, 3, 4}, torch::kDouble);
  init_param_box(box, "tok_embeddings.weight", shape, {1, 2, 1}, args_with_layers(4), kSeed);
  EXPECT_TRUE(torch::equal(box, whole.narrow(0, 1, 2).narrow(1, 2, 3).narrow(2, 1, 4)));
}

TEST(ParamInit, LowPrecisionBoxesAreTheRoundedFp32Values) {
  const std::vector<int64_t> shape = {16, 24};
  const at::Tensor f32 = full("layers.0.attention.wk.weight", shape);
  const at::Tensor f64 = full("layers.0.attention.wk.weight", shape, torch::kDouble);
  EXPECT_TRUE(torch::equal(full("layers.0.attention.wk.weight", shape, torch::kBFloat16), f32.to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(f64.to(torch::kFloat), f32));
}

TEST(ParamInit, ThreadCountDoesNotChangeTheValues) {
  const std::vector<int64_t> shape = {300, 200};  // several parallel_for tasks
  const at::Tensor many = full("output.weight", shape);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor one = full("output.weight", shape);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(one, many));
}

TEST(ParamInit, SameSeedAndNameRepeatDifferentOnesDiffer) {
  const std::vector<int64_t> shape = {8, 32};
  const at::Tensor q0 = full("layers.0.attention.wq.weight", shape);
  EXPECT_TRUE(torch::equal(q0, full("layers.0.attention.wq.weight", shape)));
  // Same rule and shape, so only the key tells them apart.
  for (const char* other : {"layers.0.attention.wk.weight", "layers.1.attention.wq.weight",
                            "layers.0.feed_forward.w1.weight"})
    EXPECT_FALSE(torch::equal(q0, full(other, shape))) << other;
  EXPECT_FALSE(torch::equal(q0, full("layers.0.attention.wq.weight", shape, torch::kFloat, kSeed + 1)));
  EXPECT_NE(param_init_key(0, "output.weight"), param_init_key(1, "output.weight"));
  EXPECT_NE(param_init_key(0, "layers.1.attention.wq.weight"), param_init_key(0, "layers.10.attention.wq.weight"));
}

TEST(ParamInit, InitWeightsFillsEverySlotAsOneBox) {
  const ModelArgs args = llama3_flavor("tiny");
  Transformer a(args, torch::kFloat, 8), b(args, torch::kFloat, 8);
  a.init_weights(3);
  b.init_weights(3);
  EXPECT_TRUE(torch::equal(a.store().flat_params(), b.store().flat_params()));
  for (const auto& s : a.slots())
    EXPECT_TRUE(torch::equal(a.store().param(s.name), full(s.name, s.shape, torch::kFloat, 3, args))) << s.name;
  b.init_weights(4);
  EXPECT_FALSE(torch::equal(a.store().flat_params(), b.store().flat_params()));
}

TEST(ParamInit, MetaTensorsAndEmptyBoxesAreNoOps) {
  at::Tensor meta = torch::empty({32000, 768}, torch::TensorOptions().device(torch::kMeta));
  EXPECT_NO_THROW(init_param_box(meta, "output.weight", {32000, 768}, {0, 0}, args_with_layers(4), kSeed));
  at::Tensor empty = torch::empty({0, 8});
  EXPECT_NO_THROW(init_param_box(empty, "output.weight", {5, 8}, {5, 0}, args_with_layers(4), kSeed));
}

TEST(ParamInit, RejectsUnknownNamesAndBoxesOutsideTheParameter) {
  at::Tensor t = torch::empty({2, 4});
  const ModelArgs args = args_with_layers(4);
  EXPECT_THROW(init_param_box(t, "layers.4.attention.wq.weight", {4, 4}, {0, 0}, args, kSeed), std::invalid_argument);
  EXPECT_THROW(init_param_box(t, "layers.x.attention.wq.weight", {4, 4}, {0, 0}, args, kSeed), std::invalid_argument);
  EXPECT_THROW(init_param_box(t, "layers.0.attention.wz.weight", {4, 4}, {0, 0}, args, kSeed), std::invalid_argument);
  EXPECT_THROW(init_param_box(t, "output.weight", {4, 4}, {3, 0}, args, kSeed), c10::Error);
  EXPECT_THROW(init_param_box(t, "output.weight", {4, 4, 1}, {0, 0, 0}, args, kSeed), c10::Error);
}

// --- distributions, checked against closed forms computed here ---------------

double normal_pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); }
double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// x: a large sample that should be N(0, sigma²) cut at ±k·sigma. Checks the
// truncated normal's mean (0), standard deviation
// sigma·sqrt(1 − 2kφ(k)/Z) with Z = Φ(k) − Φ(−k), the mass within ±sigma and
// ±2sigma, and the bounds. Tolerances are 5 standard errors.
void expect_truncated_normal(const at::Tensor& x, double sigma, double k, const std::string& what) {
  const double n = static_cast<double>(x.numel());
  const double z = normal_cdf(k) - normal_cdf(-k);
  const double sd = sigma * std::sqrt(1.0 - (std::isinf(k) ? 0.0 : 2.0 * k * normal_pdf(k) / z));
  EXPECT_NEAR(x.mean().item<double>(), 0.0, 5.0 * sd / std::sqrt(n)) << what;
  EXPECT_NEAR(x.std().item<double>() / sd, 1.0, 5.0 * std::sqrt(0.5 / n)) << what;
  for (double m : {1.0, 2.0}) {
    const double p = m >= k ? 1.0 : (normal_cdf(m) - normal_cdf(-m)) / z;
    const double got = (x.abs() < m * sigma).to(torch::kDouble).mean().item<double>();
    EXPECT_NEAR(got, p, 5.0 * std::sqrt(p * (1 - p) / n) + 1e-12) << what << " mass within " << m << " sigma";
  }
  EXPECT_GE(x.min().item<double>(), -k * sigma) << what;
  EXPECT_LE(x.max().item<double>(), k * sigma) << what;
}

TEST(ParamInit, DistributionsFollowTorchTitansRules) {
  const std::vector<int64_t> shape = {1000, 1000};
  const ModelArgs args = args_with_layers(4);  // dim 32
  auto sample = [&](const std::string& fqn, const ModelArgs& a) { return full(fqn, shape, torch::kDouble, 9, a); };
  expect_truncated_normal(sample("tok_embeddings.weight", args), 1.0, INFINITY, "tok_embeddings");
  const double out_std = 1.0 / std::sqrt(32.0);
  expect_truncated_normal(sample("output.weight", args), out_std, 3.0, "output");
  expect_truncated_normal(sample("layers.2.attention.wv.weight", args), 0.02, 2.0 / 0.02, "wv");
  expect_truncated_normal(sample("layers.2.feed_forward.w1.weight", args), 0.02, 2.0 / 0.02, "w1");
  const double depth3 = 0.02 / std::sqrt(2.0 * 4);  // depth_init: layer 3 → 2(3+1)
  expect_truncated_normal(sample("layers.3.attention.wo.weight", args), depth3, 2.0 / depth3, "wo layer 3");
  ModelArgs flat = args_with_layers(6);
  flat.depth_init = false;  // every layer: 0.02 / sqrt(2 · n_layers)
  const double flat_std = 0.02 / std::sqrt(12.0);
  expect_truncated_normal(sample("layers.0.feed_forward.w3.weight", flat), flat_std, 2.0 / flat_std, "w3 flat");
  for (const char* norm : {"norm.weight", "layers.0.attention_norm.weight", "layers.3.ffn_norm.weight"}) {
    const at::Tensor w = full(norm, {1000});
    EXPECT_TRUE(torch::equal(w, torch::ones({1000}))) << norm;
  }
}

}  // namespace
}  // namespace ctitan
