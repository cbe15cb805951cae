// The CUPTI tracer without a GPU: hand-built activity records (the structs
// CUPTI's buffers hold) go through the converter, then into trace events and
// the step analysis, and the numbers come out as worked out by hand. On this
// machine the tracer itself must decline, with its reason.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cstring>

#include "profiling/gpu_tracer.h"
#include "profiling/trace.h"
#include "profiling/trace_analysis.h"
#include "profiling/trace_validate.h"

// profiling/CMakeLists.txt compiles the record converter whenever CUPTI's
// headers are found; they sit on the CUDA include path LibTorch adds.
#if __has_include(<cupti_activity.h>)
#define CTITAN_TEST_CUPTI_RECORDS 1
#include "profiling/cupti/cupti_records.h"
#endif

namespace ctitan {
namespace {

TEST(GpuTracer, DeclinesWithAReasonWithoutAGpu) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is present: tests/gpu/ runs the tracer on it";
  std::string why;
  EXPECT_EQ(GpuTracer::create(&why), nullptr);
  // With CUPTI in the build: no device here; without: the build says so.
  EXPECT_TRUE(why.find("no CUDA device") != std::string::npos || why.find("without CUPTI") != std::string::npos)
      << why;
}

// Every CUDA step's breakdown from CUPTI records alone (no trace file):
// compute kernels [0,10) and [20,30) ns, an NCCL kernel [5,25), a memcpy
// [32,34) and a sync record (ignored), in the window [0,40).
TEST(GpuActivity, StepBreakdownSplitsComputeAndExposedNccl) {
  auto act = [](GpuActivity::Kind k, int64_t a, int64_t b, bool nccl = false) {
    GpuActivity x;
    x.kind = k;
    x.start_ns = a;
    x.end_ns = b;
    x.nccl = nccl;
    return x;
  };
  using K = GpuActivity::Kind;
  const std::vector<GpuActivity> acts = {act(K::kKernel, 0, 10), act(K::kKernel, 20, 30), act(K::kKernel, 5, 25, true),
                                         act(K::kMemcpy, 32, 34), act(K::kSync, 0, 40), act(K::kKernel, 38, 50)};
  const StepBreakdown s = gpu_step_breakdown(acts, 0, 40);
  EXPECT_TRUE(s.gpu);
  constexpr double ns = 1e-9, tol = 1e-15;
  EXPECT_NEAR(s.step_s, 40 * ns, tol);
  EXPECT_NEAR(s.compute_s, (10 + 10 + 2 + 2) * ns, tol);  // the last kernel is clipped to [38,40)
  EXPECT_NEAR(s.comm_s, 20 * ns, tol);
  EXPECT_NEAR(s.exposed_comm_s, 10 * ns, tol);  // [10,20): NCCL with no compute beside it
  EXPECT_NEAR(s.idle_s, 6 * ns, tol);           // [30,32) and [34,38)
}

TEST(GpuActivity, NcclKernelsAreCommunication) {
  EXPECT_TRUE(is_nccl_kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"));
  EXPECT_TRUE(is_nccl_kernel("ncclKernel_ReduceScatter_RING_SIMPLE_Sum_bf16"));
  EXPECT_FALSE(is_nccl_kernel("sm90_xmma_gemm_bf16bf16_bf16f32"));
}

// CUPTI reports kernel names mangled, as the compiler emitted them (these
// are g++'s symbols for NCCL's kernel signatures: 2.19+ and older).
constexpr const char* kMangledAllReduce =
    "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE";
constexpr const char* kMangledOldAllGather = "_Z39ncclKernel_AllGather_RING_LL_Sum_int8_t12ncclWorkElem";
constexpr const char* kMangledComputeWithNcclArg =
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_12ncclReduceOpEEEviT0_";

TEST(GpuActivity, MangledNcclKernelsAreCommunication) {
  EXPECT_TRUE(is_nccl_kernel(kMangledAllReduce));
  EXPECT_TRUE(is_nccl_kernel("_Z48ncclDevKernel_ReduceScatter_Sum_bf16_RING_SIMPLE24ncclDevKernelArgsStorageILm4096EE"));
  EXPECT_TRUE(is_nccl_kernel(kMangledOldAllGather));
  // A truncated name the demangler refuses: the identifier after _Z<len> still decides.
  EXPECT_TRUE(is_nccl_kernel("_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStor"));
  // "nccl" only in a template argument or a parameter type: computation.
  EXPECT_FALSE(is_nccl_kernel(kMangledComputeWithNcclArg));
  EXPECT_FALSE(is_nccl_kernel("void at::native::vectorized_elementwise_kernel<4, at::native::ncclReduceOp>(int, "
                              "at::native::ncclReduceOp)"));
  EXPECT_FALSE(is_nccl_kernel("_Z18gemm_with_nccl_arg12ncclWorkElem"));
  EXPECT_FALSE(is_nccl_kernel("_ZN2at6native18elementwise_kernelILi128ELi4EEEviT_"));
}

TEST(GpuActivity, KernelNamesAreDemangledForTheTrace) {
  EXPECT_EQ(demangle_kernel_name(kMangledAllReduce),
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  EXPECT_EQ(demangle_kernel_name(kMangledComputeWithNcclArg),
            "void at::native::vectorized_elementwise_kernel<4, at::native::ncclReduceOp>(int, at::native::ncclReduceOp)");
  EXPECT_EQ(demangle_kernel_name("sm90_xmma_gemm_bf16bf16_bf16f32"), "sm90_xmma_gemm_bf16bf16_bf16f32");
  EXPECT_EQ(demangle_kernel_name("_Z39ncclDevKernel_Trunc"), "_Z39ncclDevKernel_Trunc") << "refused: unchanged";
}

#ifdef CTITAN_TEST_CUPTI_RECORDS

constexpr uint64_t kUs = 1000;  // CUPTI timestamps are nanoseconds

CUpti_ActivityKernel10 kernel(const char* name, uint64_t start_us, uint64_t end_us, uint32_t stream) {
  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof(k));
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = name;
  k.start = start_us * kUs;
  k.end = end_us * kUs;
  k.deviceId = 0;
  k.streamId = stream;
  k.correlationId = 40 + stream;
  return k;
}

CUpti_ActivityMemcpy6 memcpy_record(uint8_t copy_kind, uint64_t start_us, uint64_t end_us, uint32_t stream) {
  CUpti_ActivityMemcpy6 m;
  std::memset(&m, 0, sizeof(m));
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = copy_kind;
  m.start = start_us * kUs;
  m.end = end_us * kUs;
  m.streamId = stream;
  return m;
}

CUpti_ActivitySynchronization2 sync_record(uint64_t start_us, uint64_t end_us, uint32_t stream) {
  CUpti_ActivitySynchronization2 y;
  std::memset(&y, 0, sizeof(y));
  y.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  y.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  y.start = start_us * kUs;
  y.end = end_us * kUs;
  y.streamId = stream;
  return y;
}

const CUpti_Activity* as_record(const void* r) { return static_cast<const CUpti_Activity*>(r); }

TEST(CuptiRecords, KernelMemcpyMemsetAndSyncConvert) {
  const auto gemm = kernel("sm90_xmma_gemm_bf16bf16", 100, 160, 7);
  auto a = gpu_activity_from_cupti(as_record(&gemm));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->kind, GpuActivity::Kind::kKernel);
  EXPECT_EQ(a->name, "sm90_xmma_gemm_bf16bf16");
  EXPECT_EQ(a->start_ns, 100'000);
  EXPECT_EQ(a->end_ns, 160'000);
  EXPECT_EQ(a->stream, 7u);
  EXPECT_EQ(a->correlation, 47u);
  EXPECT_FALSE(a->nccl);
  const auto nccl = kernel("ncclDevKernel_ReduceScatter_RING_LL", 0, 10, 9);
  EXPECT_TRUE(gpu_activity_from_cupti(as_record(&nccl))->nccl);
  // As CUPTI reports them: mangled; the trace gets the readable name.
  const auto mangled = kernel(kMangledAllReduce, 0, 10, 9);
  const auto m_nccl = gpu_activity_from_cupti(as_record(&mangled));
  EXPECT_TRUE(m_nccl->nccl);
  EXPECT_EQ(m_nccl->name, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  const auto compute = kernel(kMangledComputeWithNcclArg, 0, 10, 7);
  EXPECT_FALSE(gpu_activity_from_cupti(as_record(&compute))->nccl);

  CUpti_ActivityMemcpy6 m = memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 5, 9, 3);
  m.bytes = 4096;
  m.deviceId = 1;
  auto c = gpu_activity_from_cupti(as_record(&m));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->kind, GpuActivity::Kind::kMemcpy);
  EXPECT_EQ(c->name, "Memcpy HtoD");
  EXPECT_EQ(c->bytes, 4096);
  EXPECT_EQ(c->device, 1u);

  CUpti_ActivityMemset4 s;
  std::memset(&s, 0, sizeof(s));
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.bytes = 512;
  s.start = 1 * kUs;
  s.end = 2 * kUs;
  auto ms = gpu_activity_from_cupti(as_record(&s));
  ASSERT_TRUE(ms.has_value());
  EXPECT_EQ(ms->kind, GpuActivity::Kind::kMemset);
  EXPECT_EQ(ms->bytes, 512);

  const CUpti_ActivitySynchronization2 y = sync_record(3, 4, 0);
  auto sync = gpu_activity_from_cupti(as_record(&y));
  ASSERT_TRUE(sync.has_value());
  EXPECT_EQ(sync->kind, GpuActivity::Kind::kSync);
  EXPECT_EQ(sync->name, "cudaStreamSynchronize");

  CUpti_ActivityAPI api;
  std::memset(&api, 0, sizeof(api));
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  EXPECT_FALSE(gpu_activity_from_cupti(as_record(&api)).has_value()) << "kinds ctitan does not trace";
}

// One step [0, 200) µs on GPU 0:
//   stream 7 (compute): GEMM [10, 60), GEMM [100, 150); memcpy [60, 70)
//   stream 9 (NCCL):    all-reduce [40, 90) (mangled, as CUPTI names it), reduce-scatter [140, 180)
//   stream 7 sync [150, 160) — not computation
//   => compute = 50 + 50 + 10 = 110; comm = 50 + 40 = 90;
//      exposed = [70, 90) + [150, 180) = 20 + 30 = 50;
//      busy (any kernel/copy) = [10, 90) + [100, 180) = 160; idle = 200 - 160 = 40.
TEST(CuptiRecords, SyntheticStepBreaksDownAsWorkedOutByHand) {
  const CUpti_ActivityKernel10 records[] = {
      kernel("gemm_a", 10, 60, 7), kernel("gemm_b", 100, 150, 7),
      kernel(kMangledAllReduce, 40, 90, 9), kernel("ncclDevKernel_ReduceScatter_RING_LL", 140, 180, 9)};
  std::vector<GpuActivity> acts;
  for (const auto& r : records) acts.push_back(*gpu_activity_from_cupti(as_record(&r)));
  const auto m = memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, 60, 70, 7);
  acts.push_back(*gpu_activity_from_cupti(as_record(&m)));
  const auto y = sync_record(150, 160, 7);
  acts.push_back(*gpu_activity_from_cupti(as_record(&y)));

  EXPECT_NEAR(gpu_busy_seconds(acts, 0, 200 * kUs), 160e-6, 1e-12);
  EXPECT_NEAR(gpu_busy_seconds(acts, 50 * kUs, 110 * kUs), 50e-6, 1e-12) << "clipped to the window";

  std::unordered_map<int64_t, std::string> names;
  std::vector<TraceEvent> events = gpu_activity_events(acts, names);
  EXPECT_EQ(names.at(kGpuTrackBase + 7), "GPU 0 stream 7");
  EXPECT_EQ(names.at(kGpuTrackBase + 9), "GPU 0 stream 9");
  // The CPU side of the step: its window, and a CPU range that must not count on a GPU trace.
  events.push_back({"step 1", trace_cat::kStep, 'X', 0, 200 * kUs, 1, {{"step", 1}}});
  events.push_back({"forward layers.0", trace_cat::kCompute, 'X', 0, 200 * kUs, 1, nullptr});
  TraceFileInfo info;
  info.gpu_source = "cupti";
  const nlohmann::json trace = chrome_trace(events, info, names);
  EXPECT_TRUE(validate_chrome_trace(trace).empty());
  int nccl = 0;
  for (const auto& e : trace["traceEvents"])
    if (e.value("cat", "") == "gpu_nccl") ++nccl;
  EXPECT_EQ(nccl, 2);
  const auto steps = analyze_trace(trace);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(steps[0].gpu);
  EXPECT_NEAR(steps[0].compute_s, 110e-6, 1e-12);
  EXPECT_NEAR(steps[0].comm_s, 90e-6, 1e-12);
  EXPECT_NEAR(steps[0].exposed_comm_s, 50e-6, 1e-12);
  EXPECT_NEAR(steps[0].idle_s, 40e-6, 1e-12);
}

#endif  // CTITAN_TEST_CUPTI_RECORDS

}  // namespace
}  // namespace ctitan
