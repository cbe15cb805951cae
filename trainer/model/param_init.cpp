#include "trainer/model/param_init.h"

#include <ATen/Dispatch.h>               // AT_DISPATCH_FLOATING_TYPES_AND2
#include <ATen/Parallel.h>               // at::get_num_threads
#include <ATen/core/PhiloxRNGEngine.h>   // at::Philox4_32
#include <ATen/native/Math.h>            // calc_ndtri (Cephes, double precision)
#include <c10/util/accumulate.h>         // c10::multiply_integers
#include <c10/core/GradMode.h>           // c10::NoGradGuard

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

namespace ctitan {

namespace {

constexpr double kBaseStd = 0.02;

// The layer weights and whether their std shrinks with depth (TorchTitan's
// weight_init_std for the residual-branch outputs wo, w2 and w3).
struct LayerWeightRule {
  const char* name;
  bool depth_scaled;
};
constexpr LayerWeightRule kLayerWeights[] = {
    {"attention.wq.weight", false},   {"attention.wk.weight", false}, {"attention.wv.weight", false},
    {"feed_forward.w1.weight", false}, {"attention.wo.weight", true},  {"feed_forward.w2.weight", true},
    {"feed_forward.w3.weight", true},
    // MoE (TorchTitan's MoE.init_weights): the router and w2/w3 depth-scaled.
    {"moe.experts.w1", false},        {"moe.experts.w2", true},         {"moe.experts.w3", true},
    {"moe.router.gate.weight", true},
    {"moe.shared_experts.w1.weight", false}, {"moe.shared_experts.w2.weight", true},
    {"moe.shared_experts.w3.weight", true},
    // DeepSeek-V3's MLA (TorchTitan: std 0.02 for all but wo).
    {"attention.wq_a.weight", false}, {"attention.wq_b.weight", false}, {"attention.wkv_a.weight", false},
    {"attention.wkv_b.weight", false},
    // GPT-OSS's biases and sinks (its Attention and experts' init_weights).
    {"attention.wq.bias", true}, {"attention.wk.bias", true}, {"attention.wv.bias", true},
    {"attention.wo.bias", true}, {"attention.sinks", true},   {"moe.experts.b1", true},
    {"moe.experts.b2", true},    {"moe.experts.b3", true},
};

ParamInitRule trunc_normal(double std, double bound) {
  return {ParamInitRule::Kind::kTruncatedNormal, std, -bound, bound};
}

[[noreturn]] void unknown_fqn(const std::string& fqn) {
  throw std::invalid_argument("no init rule for parameter '" + fqn +
                              "' (names look like tok_embeddings.weight, layers.0.attention.wq.weight, output.weight)");
}

// One Philox block (4 × 32 bits) serves the element pair (2p, 2p+1): 53
// bits each as a uniform double in the open interval (0, 1), centred in their
// cell so that neither 0 nor 1 (quantile ±inf) can occur. Still a function of
// (key, global index) only; sharing the block halves the generator's cost.
std::array<double, 2> uniform_pair(uint64_t key, uint64_t pair) {
  at::Philox4_32 gen(key, /*subsequence=*/pair);
  std::array<double, 2> u{};
  for (double& x : u) {
    const uint64_t hi = gen(), lo = gen();
    x = (static_cast<double>(((hi << 32) | lo) >> 11) + 0.5) * std::ldexp(1.0, -53);
  }
  return u;
}

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// Inverse-CDF sampling of N(0, σ²) cut at [lo, hi], as
// torch.nn.init.trunc_normal_ does: p ~ U(Φ(lo/σ), Φ(hi/σ)),
// x = clamp(σ·Φ⁻¹(p), lo, hi). trunc_normal_ writes Φ⁻¹(p) as
// √2·erfinv(2p − 1); Cephes' ndtri (ATen's calc_ndtri) is the same function
// to double precision without erfinv's two Newton steps, ~3x cheaper. A
// plain normal is the same with infinite bounds.
struct Sampler {
  uint64_t key;
  double std, lo, hi, p_lo, p_span;

  Sampler(const ParamInitRule& r, uint64_t k) : key(k), std(r.std), uniform(r.kind == ParamInitRule::Kind::kUniform) {
    const bool cut = r.kind == ParamInitRule::Kind::kTruncatedNormal || uniform;
    lo = cut ? r.lo : -std::numeric_limits<double>::infinity();
    hi = cut ? r.hi : std::numeric_limits<double>::infinity();
    p_lo = normal_cdf(lo / std);
    p_span = normal_cdf(hi / std) - p_lo;
  }
  double quantile(double u) const {
    if (uniform) return lo + (hi - lo) * u;
    return std::clamp(std * calc_ndtri(p_lo + p_span * u), lo, hi);
  }
  bool uniform = false;
};

// Rounds once to fp32/fp64; bf16/half go through fp32, which is what casting
// the fp32 master to a bf16 compute copy gives.
template <typename T>
T round_to(double x) {
  if constexpr (std::is_same_v<T, double>) {
    return x;
  } else {
    return static_cast<T>(static_cast<float>(x));
  }
}

// Runs fn over [0, n) in at::get_num_threads() contiguous chunks.
// at::parallel_for is no use here: its OpenMP body is inline in ATen's
// headers and runs serially in a file built without -fopenmp. The values do
// not depend on the split.
void parallel_chunks(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kGrain = 1 << 16;  // below this a thread costs more than it saves
  const int64_t threads = std::clamp<int64_t>(n / kGrain, 1, at::get_num_threads());
  const int64_t chunk = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(fn, std::min(n, t * chunk), std::min(n, (t + 1) * chunk));
  fn(0, std::min(n, chunk));
  for (auto& th : pool) th.join();
}

// data: the box, contiguous row-major. Each element i of the box maps to
// global coordinates offset + unravel(i) and hence to its global linear index;
// along the last dimension consecutive elements have consecutive indices.
template <typename T>
void fill_box(T* data, const Sampler& s, c10::IntArrayRef box, c10::IntArrayRef global,
              c10::IntArrayRef offset) {
  const int64_t nd = static_cast<int64_t>(box.size());
  std::vector<int64_t> gstride(nd, 1);
  for (int64_t d = nd - 2; d >= 0; --d) gstride[d] = gstride[d + 1] * global[d + 1];
  const int64_t numel = c10::multiply_integers(box);
  const int64_t row = nd > 0 ? box[nd - 1] : 1;
  if (numel == 0) return;
  parallel_chunks(numel, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end;) {
      int64_t rem = i, g = 0;
      for (int64_t d = nd - 1; d >= 0; --d) {
        g += (rem % box[d] + offset[d]) * gstride[d];
        rem /= box[d];
      }
      const int64_t run = std::min(end - i, row - i % row);
      for (int64_t j = 0; j < run;) {
        const uint64_t index = static_cast<uint64_t>(g + j);
        const std::array<double, 2> u = uniform_pair(s.key, index >> 1);
        if ((index & 1) == 0 && j + 1 < run) {
          data[i + j] = round_to<T>(s.quantile(u[0]));
          data[i + j + 1] = round_to<T>(s.quantile(u[1]));
          j += 2;
        } else {
          data[i + j] = round_to<T>(s.quantile(u[index & 1]));
          j += 1;
        }
      }
      i += run;
    }
  });
}

}  // namespace

ParamInitRule model_init_rule(const std::string& fqn, const ModelArgs& args) {
  // A tied embedding is the output matrix, initialised last (as TorchTitan).
  if (fqn == "tok_embeddings.weight" && !args.tie_embeddings) return {ParamInitRule::Kind::kNormal, 1.0, 0.0, 0.0};
  if (fqn == "norm.weight") return {ParamInitRule::Kind::kOnes, 0.0, 0.0, 0.0};
  if (fqn == "output.weight" || fqn == "tok_embeddings.weight") {
    const double final_std = std::pow(static_cast<double>(args.dim), -0.5);
    return trunc_normal(final_std, 3 * final_std);
  }
  const std::string prefix = "layers.";
  if (fqn.compare(0, prefix.size(), prefix) != 0) unknown_fqn(fqn);
  const size_t dot = fqn.find('.', prefix.size());
  const std::string digits = fqn.substr(prefix.size(), dot == std::string::npos ? 0 : dot - prefix.size());
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) unknown_fqn(fqn);
  const int64_t layer = std::stoll(digits);
  if (layer >= args.n_layers) unknown_fqn(fqn);
  const std::string rest = fqn.substr(dot + 1);
  if (rest == "attention_norm.weight" || rest == "ffn_norm.weight" || rest == "attention.q_norm.weight" ||
      rest == "attention.k_norm.weight" || rest == "attention.kv_norm.weight")
    return {ParamInitRule::Kind::kOnes, 0.0, 0.0, 0.0};
  if (rest == "moe.router.gate.bias") {
    const double bound = 1.0 / std::sqrt(static_cast<double>(args.dim));
    return {ParamInitRule::Kind::kUniform, 0.0, -bound, bound};
  }
  for (const auto& w : kLayerWeights) {
    if (rest != w.name) continue;
    if (!w.depth_scaled && !args.depth_init_all) return trunc_normal(kBaseStd, 2.0);
    const double depth = args.depth_init ? 2.0 * static_cast<double>(layer + 1)
                                         : 2.0 * static_cast<double>(args.n_layers);
    return trunc_normal(kBaseStd / std::sqrt(depth), 2.0);
  }
  unknown_fqn(fqn);
}

uint64_t param_init_key(uint64_t seed, const std::string& fqn) {
  // FNV-1a over the seed's bytes (fixed little-endian order) and the FQN,
  // then splitmix64's finaliser so that names differing in one character
  // give keys differing in about half their bits.
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](uint8_t byte) {
    h ^= byte;
    h *= 0x100000001b3ULL;
  };
  for (int i = 0; i < 8; ++i) mix(static_cast<uint8_t>(seed >> (8 * i)));
  for (char c : fqn) mix(static_cast<uint8_t>(c));
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

void init_box(at::Tensor out, const ParamInitRule& rule, uint64_t key, c10::IntArrayRef global_shape,
              c10::IntArrayRef box_offset) {
  if (out.is_meta()) return;
  TORCH_CHECK(out.dim() == static_cast<int64_t>(global_shape.size()) && global_shape.size() == box_offset.size(),
              "init_box: out has ", out.dim(), " dims, global shape ", global_shape, ", box offset ", box_offset);
  for (int64_t d = 0; d < out.dim(); ++d)
    TORCH_CHECK(box_offset[d] >= 0 && box_offset[d] + out.size(d) <= global_shape[d], "init_box: box ",
                out.sizes(), " at offset ", box_offset, " does not fit in global shape ", global_shape);
  TORCH_CHECK(at::isFloatingType(out.scalar_type()), "init_box: out must be floating point, got ",
              out.scalar_type());
  c10::NoGradGuard no_grad;
  if (rule.kind == ParamInitRule::Kind::kOnes) {
    out.fill_(1.0);
    return;
  }
  const bool direct = out.is_cpu() && out.is_contiguous();
  at::Tensor dst = direct ? out : at::empty(out.sizes(), out.options().device(at::kCPU));
  const Sampler sampler(rule, key);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dst.scalar_type(), "init_box", [&] {
    fill_box<scalar_t>(dst.data_ptr<scalar_t>(), sampler, dst.sizes(), global_shape, box_offset);
  });
  if (!direct) out.copy_(dst);
}

void init_param_box(at::Tensor out, const std::string& fqn, c10::IntArrayRef global_shape,
                    c10::IntArrayRef box_offset, const ModelArgs& args, uint64_t seed) {
  init_box(std::move(out), model_init_rule(fqn, args), param_init_key(seed, fqn), global_shape, box_offset);
}

void init_param_storage(at::Tensor storage, const ParamSpec& spec, const ModelArgs& args, uint64_t seed) {
  TORCH_CHECK(storage.sizes() == c10::IntArrayRef(spec.shape), "init_param_storage: ", spec.name, " storage is ",
              storage.sizes(), ", its spec says ", shape_str(spec.shape));
  at::Tensor box = storage;
  for (size_t d = 0; d < spec.shape.size(); ++d) box = box.narrow(static_cast<int64_t>(d), 0, spec.box_shape[d]);
  if (box.numel() < storage.numel()) storage.zero_();
  if (box.numel() > 0) init_param_box(box, spec.name, spec.global_shape, spec.box_offset, args, seed);
}

}  // namespace ctitan
