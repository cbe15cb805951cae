// Float8 training numerics for linear layers: dynamic amax scaling, the three
// TorchTitan/torchao recipes, and an autograd-aware float8 linear.
//
// The recipes are torchao's `Float8LinearConfig.from_recipe_name`
// (pytorch/ao torchao/float8/config.py, commit c6c388b5; the axes are the
// `get_maybe_axiswise_dim` calls in torchao/float8/float8_linear.py). For
//   output      = x [N,in] @ wᵀ          (x flattened to 2-D)
//   grad_input  = go [N,out] @ w [out,in]
//   grad_weight = goᵀ [out,N] @ x [N,in]
// each GEMM operand is cast as follows ("per row" = one scale per row of the
// 2-D tensor as written, i.e. amax over the GEMM's reduction dim):
//
//   operand              tensorwise        rowwise              rowwise_with_gw_hp
//   x  (output)          e4m3fn, tensor    e4m3fn, per row      e4m3fn, per row (token)
//   w  (output)          e4m3fn, tensor    e4m3fn, per row(out) e4m3fn, per row (out)
//   go (grad_input)      e5m2,   tensor    e4m3fn, per row      e4m3fn, per row
//   w  (grad_input)      e4m3fn, tensor    e4m3fn, per col(in)  e4m3fn, tensor
//   go (grad_weight)     e5m2,   tensor    e4m3fn, per col(out) high precision
//   x  (grad_weight)     e4m3fn, tensor    e4m3fn, per col(in)  high precision
//   scales rounded down to a power of two:  no / yes / no
//
// So gradients are e5m2 only in `tensorwise`; torchao's rowwise recipes use
// e4m3fn for gradients too, and ctitan follows torchao. "High precision" is
// torchao's ScalingType.DISABLED: the operands' own dtype (bf16 in training).
//
// Scales: scale = fp8_max / max(amax, 1e-12), a float32 (torchao divides in
// float64 and rounds to float32; so do we, bit for bit). Quantised value =
// fp8(x · scale) with ctitan's saturating codec (fp8_codec.h).
//
// Saved for backward: when a backward GEMM casts x (or w) exactly as the
// forward did — only in `tensorwise` — the forward's float8 operand is kept
// and reused (same numbers, one quantise pass fewer; bf16-sized on the
// emulated backend, 1 byte per element on scaled_mm); otherwise the
// high-precision tensor is kept and re-quantised, as torchao does.
//
// GEMM backends (float8_backend()):
//  - "scaled_mm": at::_scaled_mm on CUDA devices with compute capability ≥
//    8.9 when emulate=false. Compiled here, never run (no GPU on these
//    machines). LibTorch 2.15 also registers a CPU _scaled_mm, but it is a
//    reference kernel (~0.04 GFLOP/s measured here), so CPU never uses it.
//  - "emulated": everywhere else. Operands are quantised to float8 codes,
//    decoded to their exact values in bf16 (every e4m3fn/e5m2 value is a
//    bf16), multiplied by a bf16 GEMM (fp32 accumulation), then divided by
//    the scales in fp32 and rounded once more to the output dtype. torchao's
//    emulation instead dequantises into fp32 and runs an fp32 GEMM; the two
//    differ by the bf16 rounding of the GEMM result (≤ 2^-9 relative). With
//    an fp32 output on the CPU (fp32 training) the GEMM is torchao's: fp32
//    throughout, so a tensor-parallel row-wise GEMM's partial sums are not
//    rounded to bf16 before tp adds them.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "trainer/distributed/comm.h"
#include "trainer/float8/fp8_codec.h"

namespace ctitan {

enum class Float8Recipe { kTensorwise, kRowwise, kRowwiseWithGwHp };

// "tensorwise" | "rowwise" | "rowwise_with_gw_hp"; anything else: InputError.
Float8Recipe parse_float8_recipe(const std::string& name);
const char* float8_recipe_name(Float8Recipe r);

// How one 2-D GEMM operand is cast (see the table above).
enum class Float8Scaling {
  kHighPrecision,  // not quantised
  kTensorwise,     // one scale; scale shape []
  kPerRow,         // amax over dim 1; scale shape [R, 1]
  kPerColumn,      // amax over dim 0; scale shape [1, C]
};
struct Float8Cast {
  Float8Scaling scaling;
  Fp8Format format;
};
struct Float8RecipeSpec {
  Float8Cast input, weight;                          // output GEMM
  Float8Cast grad_output, weight_for_grad_input;     // grad_input GEMM
  Float8Cast grad_output_for_grad_weight, input_for_grad_weight;  // grad_weight GEMM
  bool pow2_scales;
};
Float8RecipeSpec float8_recipe_spec(Float8Recipe r);

// A quantised 2-D operand. `data` holds the float8 values of x · scale:
// bf16 for the emulated backend, at::kFloat8_* for scaled_mm. `scale` is
// float32 with shape [], [R, 1] or [1, C].
struct Float8Tensor {
  at::Tensor data;
  at::Tensor scale;
  Fp8Format format;
  Float8Tensor t() const;  // transposed view, scale transposed with it
};

// A 2-D operand that is one rank's shard of a tensor split along `dim`
// over `group` (tensor parallelism): an amax that reduces over that dim
// (tensorwise: any; per row: dim 1; per column: dim 0) is the MAX over the
// group, so every rank scales with the whole tensor's amax, as torchao's
// float8 does on DTensors. dim −1 or no group: not sharded.
struct AmaxShard {
  Communicator* group = nullptr;
  int dim = -1;
};

// amax-based float32 scale of a 2-D tensor for the given cast.
at::Tensor float8_scale(const at::Tensor& x2d, const Float8Cast& cast, bool pow2, AmaxShard shard = {});
// Quantise a 2-D tensor (cast.scaling must not be kHighPrecision).
Float8Tensor float8_quantize(const at::Tensor& x2d, const Float8Cast& cast, bool pow2, bool emulate,
                             AmaxShard shard = {});
// data / scale in `dtype`: what the GEMM effectively sees.
at::Tensor float8_dequantize(const Float8Tensor& q, at::ScalarType dtype = at::kFloat);
// (a.data @ b.data) / (a.scale ⊗ b.scale) in `dtype`; a [M,K] with scale []
// or [M,1], b [K,N] with scale [] or [1,N]. bf16 data → emulated GEMM,
// float8 data → at::_scaled_mm (fast_accum is its use_fast_accum).
at::Tensor float8_mm(const Float8Tensor& a, const Float8Tensor& b, at::ScalarType dtype, bool fast_accum);

// y = x @ wᵀ like at::linear without bias: x [*, in], w [out, in], output in
// x's dtype; differentiable in x and w (grads in their own dtypes).
// `w_quantized` (tensorwise recipe only): w's float8 form computed elsewhere
// — FSDP's float8 all-gather — used instead of quantising w here; w itself
// then only receives the gradient.
// Under tensor parallelism: how x, w and the output's gradient go are split
// over tp (column-wise GEMM: w rows, go columns; row-wise: x and w columns).
struct Float8TpSharding {
  Communicator* tp = nullptr;
  int x_dim = -1, w_dim = -1, go_dim = -1;  // 2-D operand dims sharded over tp (x, go as [N, *])
  static Float8TpSharding column(Communicator* tp) { return {tp, -1, 0, 1}; }
  static Float8TpSharding row(Communicator* tp) { return {tp, 1, 1, -1}; }
};
at::Tensor float8_linear(const at::Tensor& x, const at::Tensor& w, Float8Recipe recipe, bool emulate,
                         const Float8Tensor* w_quantized = nullptr, Float8TpSharding tp = {});

// "scaled_mm" or "emulated": which GEMM float8_linear runs on `device`.
std::string float8_backend(const at::Device& device, bool emulate);

// Float8 values (OCP codes as uint8, or a LibTorch float8 dtype) in the form
// `backend` multiplies: decoded to bf16 for "emulated" (exact), the float8
// dtype itself for "scaled_mm" — _scaled_mm takes both operands in float8,
// so a weight that FSDP all-gathered as codes goes in as it came (torchao's
// WeightWithDynamicFloat8CastTensor), never decoded.
at::Tensor float8_operand_data(const at::Tensor& fp8, Fp8Format format, const std::string& backend);

// The out_dtype float8_mm asks _scaled_mm for: `wanted`, except that rowwise
// scales (either scale not a single value) support only a bf16 output on
// sm90 — fp32/fp16 are then computed in bf16 and cast (as torchao's
// addmm_float8_unwrapped does).
at::ScalarType scaled_mm_out_dtype(at::ScalarType wanted, bool rowwise);

// Signal-to-quantisation-noise ratio, 20·log10(‖ref‖ / ‖ref − q‖) in dB
// (torchao's compute_error); +inf when equal. Computed in float64.
double sqnr_db(const at::Tensor& ref, const at::Tensor& quantised);

}  // namespace ctitan
