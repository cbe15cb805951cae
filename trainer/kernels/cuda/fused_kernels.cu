// ctitan's fused CUDA kernels (declared in fused_kernels.h). Each kernel is a
// launch around row_math.h's per-element math: one block per row where a
// row needs a reduction (RMSNorm, cross-entropy), a grid-stride loop over
// elements where it does not (SwiGLU, RoPE). Loads widen to fp32, stores
// round once to the output dtype.
#include "trainer/kernels/cuda/fused_kernels.h"
#include "trainer/kernels/row_math.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace ctitan::cuda_kernels {
namespace {

namespace rm = ::ctitan::row_math;

__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

constexpr int kThreads = 256;

// The sum of v over the block (every thread gets it). Blocks of kThreads.
__device__ float block_sum(float v) {
  __shared__ float part[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // a previous call's readers are done with part
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  v = 0.f;
  for (int w = 0; w < kThreads / 32; ++w) v += part[w];
  return v;
}

// The log-sum-exp partial (m, s) merged over the block.
__device__ void block_lse(float& m, float& s) {
  __shared__ float pm[kThreads / 32], ps[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    rm::lse_merge(m, s, m2, s2);
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    pm[threadIdx.x >> 5] = m;
    ps[threadIdx.x >> 5] = s;
  }
  __syncthreads();
  m = -INFINITY;
  s = 0.f;
  for (int w = 0; w < kThreads / 32; ++w) rm::lse_merge(m, s, pm[w], ps[w]);
}

// --- RMSNorm ---------------------------------------------------------------------

template <typename T, typename W>
__global__ void rms_norm_forward_kernel(const T* x, const W* w, T* y, float* rstd, int64_t D, float eps) {
  const int64_t r = blockIdx.x;
  const T* xr = x + r * D;
  T* yr = y + r * D;
  float sq = 0.f;
  for (int64_t d = threadIdx.x; d < D; d += kThreads) {
    const float v = load(xr, d);
    sq += v * v;
  }
  const float inv = rm::rms_rstd(block_sum(sq), D, eps);
  if (threadIdx.x == 0) rstd[r] = inv;
  for (int64_t d = threadIdx.x; d < D; d += kThreads) store(yr, d, rm::rms_out(load(xr, d), inv, load(w, d)));
}

// Block b takes rows b, b + gridDim.x, ...; thread t always owns columns
// t, t + kThreads, ... of dw_partial[b], so its updates need no atomics.
template <typename T, typename W>
__global__ void rms_norm_backward_kernel(const T* dy, const T* x, const W* w, const float* rstd, T* dx,
                                         float* dw_partial, int64_t rows, int64_t D) {
  float* dwp = dw_partial + static_cast<int64_t>(blockIdx.x) * D;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* dyr = dy + r * D;
    const T* xr = x + r * D;
    T* dxr = dx + r * D;
    const float inv = rstd[r];
    float gx = 0.f;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) gx += load(dyr, d) * load(w, d) * load(xr, d);
    const float coef = rm::rms_dx_coef(block_sum(gx), inv, D);
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      const float xv = load(xr, d), dyv = load(dyr, d);
      store(dxr, d, rm::rms_dx(xv, dyv * load(w, d), inv, coef));
      dwp[d] += rm::rms_dw(xv, dyv, inv);
    }
  }
}

// --- SwiGLU ----------------------------------------------------------------------

template <typename T>
__global__ void swiglu_forward_kernel(const T* gu, T* y, int64_t rows, int64_t F) {
  const int64_t n = rows * F;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / F, c = i - r * F;
    const T* g = gu + r * 2 * F;
    store(y, i, rm::swiglu(load(g, c), load(g, F + c)));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* dy, const T* gu, T* dgu, int64_t rows, int64_t F) {
  const int64_t n = rows * F;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / F, c = i - r * F;
    const T* g = gu + r * 2 * F;
    T* dg = dgu + r * 2 * F;
    float da, db;
    rm::swiglu_grad(load(g, c), load(g, F + c), load(dy, i), da, db);
    store(dg, c, da);
    store(dg, F + c, db);
  }
}

// --- The experts' SwiGLU (two tensors, plain or clamped) ----------------------

template <typename T>
__global__ void expert_swiglu_forward_kernel(const T* h1, const T* h3, T* y, int64_t n, float limit, float alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store(y, i, rm::clamped_swiglu(load(h1, i), load(h3, i), limit, alpha));
}

template <typename T>
__global__ void expert_swiglu_backward_kernel(const T* dy, const T* h1, const T* h3, T* dh1, T* dh3, int64_t n,
                                              float limit, float alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float da, db;
    rm::clamped_swiglu_grad(load(h1, i), load(h3, i), load(dy, i), limit, alpha, da, db);
    store(dh1, i, da);
    store(dh3, i, db);
  }
}

// --- RoPE ------------------------------------------------------------------------

// Pairs of q then k, (b, s, head, i) innermost i; one thread per pair.
template <typename I, typename O>
__global__ void rope_kernel(RopeSide q, RopeSide k, const float* freqs, int64_t B, int64_t S, int64_t Dh,
                            bool inverse) {
  const int64_t half = Dh / 2;
  const int64_t nq = B * S * q.n * half, n = nq + B * S * k.n * half;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const bool is_q = i < nq;
    const RopeSide& side = is_q ? q : k;
    int64_t j = is_q ? i : i - nq;
    const int64_t p = j % half;
    j /= half;
    const int64_t h = j % side.n;
    j /= side.n;
    const int64_t s = j % S, b = j / S;
    const I* xr = static_cast<const I*>(side.x) + b * side.sb + s * side.ss + h * Dh;
    O* outr = static_cast<O*>(side.out) + ((b * S + s) * side.n + h) * Dh;
    const float c = freqs[(s * half + p) * 2], sn = freqs[(s * half + p) * 2 + 1];
    float y0, y1;
    if (inverse)
      rm::rope_inverse(load(xr, 2 * p), load(xr, 2 * p + 1), c, sn, y0, y1);
    else
      rm::rope(load(xr, 2 * p), load(xr, 2 * p + 1), c, sn, y0, y1);
    store(outr, 2 * p, y0);
    store(outr, 2 * p + 1, y1);
  }
}

// --- Cross-entropy -----------------------------------------------------------------

template <typename T>
__global__ void cross_entropy_kernel(T* logits, int64_t ld, const int64_t* labels, int64_t V, bool write_grad,
                                     float scale, float* loss_rows) {
  const int64_t r = blockIdx.x;
  T* xr = logits + r * ld;
  float m = -INFINITY, s = 0.f;
  for (int64_t v = threadIdx.x; v < V; v += kThreads) rm::lse_add(m, s, load(xr, v));
  block_lse(m, s);
  const float lse = rm::lse_value(m, s);
  const int64_t label = labels[r];
  if (threadIdx.x == 0) loss_rows[r] = rm::ce_loss(lse, load(xr, label));
  if (!write_grad) return;
  __syncthreads();  // thread 0 has read x[label] before it is overwritten
  for (int64_t v = threadIdx.x; v < V; v += kThreads) store(xr, v, rm::ce_grad(load(xr, v), lse, v == label, scale));
}

// --- AdamW and the gradient copy: memory-bound passes over flat buffers ---------

// Four elements per thread where every buffer is 16-byte aligned (the flat
// buffers are), one at a time for the rest.
template <typename C>
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, const float* step_count, int64_t n,
                             double lr, double beta1, double beta2, double wd, double eps, float grad_scale, C* out,
                             bool vec4) {
  const rm::AdamWStep s = rm::adamw_step(lr, beta1, beta2, wd, eps, *step_count, grad_scale);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec4) {
    const int64_t n4 = n / 4;
    for (int64_t i = first; i < n4; i += stride) {
      float4 pp = reinterpret_cast<float4*>(p)[i], mm = reinterpret_cast<float4*>(m)[i],
             vv = reinterpret_cast<float4*>(v)[i];
      const float4 gg = reinterpret_cast<const float4*>(g)[i];
      rm::adamw(pp.x, gg.x, mm.x, vv.x, s);
      rm::adamw(pp.y, gg.y, mm.y, vv.y, s);
      rm::adamw(pp.z, gg.z, mm.z, vv.z, s);
      rm::adamw(pp.w, gg.w, mm.w, vv.w, s);
      reinterpret_cast<float4*>(p)[i] = pp;
      reinterpret_cast<float4*>(m)[i] = mm;
      reinterpret_cast<float4*>(v)[i] = vv;
      if (out != nullptr) {
        store(out, 4 * i, pp.x);
        store(out, 4 * i + 1, pp.y);
        store(out, 4 * i + 2, pp.z);
        store(out, 4 * i + 3, pp.w);
      }
    }
    done = n4 * 4;
  }
  for (int64_t i = done + first; i < n; i += stride) {
    float pp = p[i], mm = m[i], vv = v[i];
    rm::adamw(pp, g[i], mm, vv, s);
    p[i] = pp;
    m[i] = mm;
    v[i] = vv;
    if (out != nullptr) store(out, i, pp);
  }
}

template <typename S>
__global__ void accumulate_kernel(float* dst, const S* src, int64_t n, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = accumulate ? dst[i] + load(src, i) : load(src, i);
}

// bf16 -> fp32 four at a time (8-byte loads, 16-byte stores).
__global__ void accumulate_bf16x4_kernel(float4* dst, const uint2* src, int64_t n4, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const uint2 raw = src[i];
    const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x),
                         hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
    float4 f{__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi)};
    if (accumulate) {
      const float4 d = dst[i];
      f.x += d.x;
      f.y += d.y;
      f.z += d.z;
      f.w += d.w;
    }
    dst[i] = f;
  }
}

int launched() { return static_cast<int>(cudaGetLastError()); }

// Grid of a grid-stride loop over n elements.
unsigned grid_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8)); }

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// Calls f(T{}, W{}) with the C++ types of (a, b).
template <typename Fn>
int with_types(Dtype a, Dtype b, Fn&& f) {
  if (a == Dtype::kFloat32 && b == Dtype::kFloat32) return f(float{}, float{});
  if (a == Dtype::kFloat32) return f(float{}, __nv_bfloat16{});
  if (b == Dtype::kFloat32) return f(__nv_bfloat16{}, float{});
  return f(__nv_bfloat16{}, __nv_bfloat16{});
}


bool aligned(const void* p, uintptr_t bytes) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0; }


}  // namespace

int adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const float* step_count, int64_t n,
          double lr, double beta1, double beta2, double weight_decay, double eps, float grad_scale, void* compute_out,
          Dtype compute_dtype, void* stream) {
  if (n == 0) return 0;
  const bool vec4 = aligned(param, 16) && aligned(grad, 16) && aligned(exp_avg, 16) && aligned(exp_avg_sq, 16);
  const unsigned grid = grid_for(vec4 ? (n + 3) / 4 : n);
  return with_types(compute_dtype, compute_dtype, [&](auto c, auto) {
    using C = decltype(c);
    adamw_kernel<C><<<grid, kThreads, 0, as_stream(stream)>>>(param, grad, exp_avg, exp_avg_sq, step_count, n, lr,
                                                             beta1, beta2, weight_decay, eps, grad_scale,
                                                             static_cast<C*>(compute_out), vec4);
    return launched();
  });
}

int accumulate_into(float* dst, const void* src, Dtype src_dtype, int64_t n, bool accumulate, void* stream) {
  if (n == 0) return 0;
  if (src_dtype == Dtype::kBFloat16 && n % 4 == 0 && aligned(dst, 16) && aligned(src, 8)) {
    accumulate_bf16x4_kernel<<<grid_for(n / 4), kThreads, 0, as_stream(stream)>>>(
        static_cast<float4*>(static_cast<void*>(dst)), static_cast<const uint2*>(src), n / 4, accumulate);
    return launched();
  }
  return with_types(src_dtype, src_dtype, [&](auto t, auto) {
    using S = decltype(t);
    accumulate_kernel<S><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(dst, static_cast<const S*>(src), n,
                                                                          accumulate);
    return launched();
  });
}

int rms_norm_forward(const void* x, Dtype xt, const void* w, Dtype wt, void* y, float* rstd, int64_t rows, int64_t D,
                     float eps, void* stream) {
  if (rows == 0) return 0;
  return with_types(xt, wt, [&](auto t, auto u) {
    using T = decltype(t);
    using W = decltype(u);
    rms_norm_forward_kernel<T, W><<<static_cast<unsigned>(rows), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(x), static_cast<const W*>(w), static_cast<T*>(y), rstd, D, eps);
    return launched();
  });
}

int64_t rms_norm_partial_rows(int64_t rows) { return std::max<int64_t>(1, std::min<int64_t>(rows, 1024)); }

int rms_norm_backward(const void* dy, const void* x, Dtype xt, const void* w, Dtype wt, const float* rstd, void* dx,
                      float* dw_partial, int64_t partial_rows, int64_t rows, int64_t D, void* stream) {
  if (rows == 0) return 0;
  return with_types(xt, wt, [&](auto t, auto u) {
    using T = decltype(t);
    using W = decltype(u);
    rms_norm_backward_kernel<T, W><<<static_cast<unsigned>(partial_rows), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const W*>(w), rstd, static_cast<T*>(dx),
        dw_partial, rows, D);
    return launched();
  });
}

int swiglu_forward(const void* gate_up, void* y, Dtype t, int64_t rows, int64_t F, void* stream) {
  if (rows * F == 0) return 0;
  return with_types(t, t, [&](auto a, auto) {
    using T = decltype(a);
    swiglu_forward_kernel<T><<<grid_for(rows * F), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(gate_up), static_cast<T*>(y), rows, F);
    return launched();
  });
}

int swiglu_backward(const void* dy, const void* gate_up, void* dgate_up, Dtype t, int64_t rows, int64_t F,
                    void* stream) {
  if (rows * F == 0) return 0;
  return with_types(t, t, [&](auto a, auto) {
    using T = decltype(a);
    swiglu_backward_kernel<T><<<grid_for(rows * F), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(dy), static_cast<const T*>(gate_up), static_cast<T*>(dgate_up), rows, F);
    return launched();
  });
}

int expert_swiglu_forward(const void* h1, const void* h3, void* y, Dtype t, int64_t n, float limit, float alpha,
                          void* stream) {
  if (n == 0) return 0;
  return with_types(t, t, [&](auto a, auto) {
    using T = decltype(a);
    expert_swiglu_forward_kernel<T><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(h1), static_cast<const T*>(h3), static_cast<T*>(y), n, limit, alpha);
    return launched();
  });
}

int expert_swiglu_backward(const void* dy, const void* h1, const void* h3, void* dh1, void* dh3, Dtype t, int64_t n,
                           float limit, float alpha, void* stream) {
  if (n == 0) return 0;
  return with_types(t, t, [&](auto a, auto) {
    using T = decltype(a);
    expert_swiglu_backward_kernel<T><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(dy), static_cast<const T*>(h1), static_cast<const T*>(h3), static_cast<T*>(dh1),
        static_cast<T*>(dh3), n, limit, alpha);
    return launched();
  });
}

int rope(const RopeSide& q, const RopeSide& k, Dtype in, Dtype out, const float* freqs, int64_t B, int64_t S,
         int64_t Dh, bool inverse, void* stream) {
  const int64_t n = B * S * (q.n + k.n) * (Dh / 2);
  if (n == 0) return 0;
  return with_types(in, out, [&](auto a, auto b) {
    using I = decltype(a);
    using O = decltype(b);
    rope_kernel<I, O><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(q, k, freqs, B, S, Dh, inverse);
    return launched();
  });
}

int cross_entropy_rows(void* logits, int64_t ld, Dtype t, const int64_t* labels, int64_t rows, int64_t V,
                       bool write_grad, float grad_scale, float* loss_rows, void* stream) {
  if (rows == 0) return 0;
  return with_types(t, t, [&](auto a, auto) {
    using T = decltype(a);
    cross_entropy_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, as_stream(stream)>>>(
        static_cast<T*>(logits), ld, labels, V, write_grad, grad_scale, loss_rows);
    return launched();
  });
}

const char* error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // namespace ctitan::cuda_kernels
