#include "profiling/gpu_probe.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>

#include "common/errors.h"
#include "common/utc_time.h"

#ifdef CTITAN_WITH_CUDA
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#endif

namespace ctitan {
namespace {

#ifdef CTITAN_WITH_CUDA
// Median seconds of `op` over at least five calls and about 0.2 s, timed
// with CUDA events on the current stream after one warm-up call.
template <typename Op>
double median_seconds(Op op) {
  op();
  std::vector<double> t;
  double total = 0;
  for (int i = 0; i < 5 || (total < 0.2 && i < 200); ++i) {
    at::cuda::CUDAEvent start{cudaEventDefault}, end{cudaEventDefault};
    start.record();
    op();
    end.record();
    end.synchronize();
    t.push_back(start.elapsed_time(end) / 1e3);
    total += t.back();
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
#endif

}  // namespace

std::string GpuProbe::describe() const {
  std::string date = measured_at;
  if (date.size() >= 16) date = date.substr(0, 10) + " " + date.substr(11, 5) + " UTC";
  std::ostringstream os;
  os << "GPU probe of " << date << " (" << device_name << ", " << devices << " on the node): GEMM bf16 " << std::fixed
     << std::setprecision(0);
  for (size_t i = 0; i < gemm_bf16.size(); ++i)
    os << (i ? ", " : "") << static_cast<int>(gemm_bf16[i].first) << "³ " << gemm_bf16[i].second / 1e12;
  os << " TFLOP/s, fp32 8192³ " << std::setprecision(1) << gemm_fp32 / 1e12 << " TFLOP/s; HBM " << std::setprecision(2)
     << hbm_bandwidth / 1e12 << " TB/s";
  return os.str();
}

void require_cuda_device() {
  if (torch::cuda::device_count() == 0)
    throw InputError(
        "ctitan plan --probe with a GPU spec measures this node's GPU, and LibTorch sees no CUDA device here; run it "
        "on the GPU node (or plan with the spec's figures as they are)");
}

GpuProbe measure_gpu() {
  require_cuda_device();
#ifdef CTITAN_WITH_CUDA
  const auto t0 = std::chrono::steady_clock::now();
  GpuProbe p;
  p.measured_at = utc_now();
  p.devices = static_cast<int>(torch::cuda::device_count());
  p.device_name = at::cuda::getDeviceProperties(0)->name;
  const at::TensorOptions gpu = at::device(at::Device(at::kCUDA, 0));
  for (const int n : kGpuGemmSizes) {
    const at::Tensor a = at::randn({n, n}, gpu.dtype(at::kBFloat16)), b = at::randn({n, n}, gpu.dtype(at::kBFloat16));
    p.gemm_bf16.emplace_back(n, 2.0 * n * n * n / median_seconds([&] { (void)at::mm(a, b); }));
  }
  {
    // fp32 as fp32: TF32 off for the measurement, the setting restored.
    const bool tf32 = at::globalContext().allowTF32CuBLAS();
    at::globalContext().setAllowTF32CuBLAS(false);
    constexpr int64_t n = 8192;
    const at::Tensor a = at::randn({n, n}, gpu.dtype(at::kFloat)), b = at::randn({n, n}, gpu.dtype(at::kFloat));
    p.gemm_fp32 = 2.0 * n * n * n / median_seconds([&] { (void)at::mm(a, b); });
    at::globalContext().setAllowTF32CuBLAS(tf32);
  }
  {
    constexpr int64_t bytes = int64_t{1} << 30;
    const at::Tensor src = at::empty({bytes}, gpu.dtype(at::kByte));
    at::Tensor dst = at::empty({bytes}, gpu.dtype(at::kByte));
    p.hbm_bandwidth = 2.0 * static_cast<double>(bytes) / median_seconds([&] { dst.copy_(src); });
  }
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
#else
  throw InputError("ctitan plan --probe with a GPU spec: this ctitan was built without CUDA; build it with CUDA on the node");
#endif
}

}  // namespace ctitan
