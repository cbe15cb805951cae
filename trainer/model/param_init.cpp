#include "trainer/model/param_init.h"

#include <ATen/Dispatch.h>               // AT_DISPATCH_FLOATING_TYPES_AND2
#include <ATen/Parallel.h>               // at::parallel_for
#include <ATen/core/PhiloxRNGEngine.h>   // at::Philox4_32
#include <ATen/native/Math.h>            // calc_erfinv (double precision, Newton-refined)
#include <c10/util/accumulate.h>         // c10::multiply_integers
#include <c10/core/GradMode.h>           // c10::NoGradGuard

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
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
};

ParamInitRule trunc_normal(double std, double bound) {
  return {ParamInitRule::Kind::kTruncatedNormal, std, -bound, bound};
}

[[noreturn]] void unknown_fqn(const std::string& fqn) {
  throw std::invalid_argument("no Llama 3 init rule for parameter '" + fqn +
                              "' (names look like tok_embeddings.weight, layers.0.attention.wq.weight, output.weight)");
}

// Philox's output for one global element as a uniform double in the open
// interval (0, 1): 53 bits, centred in their cell so that neither 0 nor 1
// (erfinv(±1) = ±inf) can occur.
double uniform_open(uint64_t key, uint64_t index) {
  at::Philox4_32 gen(key, /*subsequence=*/index);
  const uint64_t hi = gen(), lo = gen();
  const uint64_t bits = ((hi << 32) | lo) >> 11;
  return (static_cast<double>(bits) + 0.5) * std::ldexp(1.0, -53);
}

// torch.nn.init.trunc_normal_'s inverse-CDF transform, per element:
// y ~ U(2Φ(lo/σ) − 1, 2Φ(hi/σ) − 1), x = clamp(σ√2·erfinv(y), lo, hi).
// A plain normal is the same with infinite bounds.
struct Sampler {
  uint64_t key;
  double y_lo, y_span, scale, lo, hi;

  Sampler(const ParamInitRule& r, uint64_t k) : key(k), scale(r.std * std::sqrt(2.0)) {
    const bool cut = r.kind == ParamInitRule::Kind::kTruncatedNormal;
    lo = cut ? r.lo : -std::numeric_limits<double>::infinity();
    hi = cut ? r.hi : std::numeric_limits<double>::infinity();
    y_lo = std::erf(lo / scale);
    y_span = std::erf(hi / scale) - y_lo;
  }
  double operator()(uint64_t index) const {
    const double y = y_lo + y_span * uniform_open(key, index);
    return std::clamp(scale * calc_erfinv(y), lo, hi);
  }
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
  constexpr int64_t kGrain = 1 << 14;  // ~1 ms of work per task
  at::parallel_for(0, numel, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end;) {
      int64_t rem = i, g = 0;
      for (int64_t d = nd - 1; d >= 0; --d) {
        g += (rem % box[d] + offset[d]) * gstride[d];
        rem /= box[d];
      }
      const int64_t run = std::min(end - i, row - i % row);
      for (int64_t j = 0; j < run; ++j) data[i + j] = round_to<T>(s(g + j));
      i += run;
    }
  });
}

}  // namespace

ParamInitRule llama3_init_rule(const std::string& fqn, const LlamaArgs& args) {
  if (fqn == "tok_embeddings.weight") return {ParamInitRule::Kind::kNormal, 1.0, 0.0, 0.0};
  if (fqn == "norm.weight") return {ParamInitRule::Kind::kOnes, 0.0, 0.0, 0.0};
  if (fqn == "output.weight") {
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
  if (rest == "attention_norm.weight" || rest == "ffn_norm.weight")
    return {ParamInitRule::Kind::kOnes, 0.0, 0.0, 0.0};
  for (const auto& w : kLayerWeights) {
    if (rest != w.name) continue;
    if (!w.depth_scaled) return trunc_normal(kBaseStd, 2.0);
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
                    c10::IntArrayRef box_offset, const LlamaArgs& args, uint64_t seed) {
  init_box(std::move(out), llama3_init_rule(fqn, args), param_init_key(seed, fqn), global_shape, box_offset);
}

}  // namespace ctitan
