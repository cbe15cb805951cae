// The machine probe (trainer/machine_probe.h): a real measurement of this
// machine, its cache under XDG_CACHE_HOME, and the figures a cpu spec's
// zeros take from it (planner/hardware.h apply_probe, resolved_for_plan).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include <filesystem>
#include <fstream>

#include "common/errors.h"
#include "planner/hardware.h"
#include "planner/plan.h"
#include "profiling/gpu_probe.h"
#include "trainer/machine_probe.h"
#include "trainer/model/gemm.h"
#include "trainer/models/registry.h"

namespace ctitan {
namespace {

MachineProbe made_up_probe() {
  return {.version = kProbeVersion,
          .fingerprint = "test cpu|AVX512|avx512_bf16|2 cores|torch x",
          .measured_at = "2026-11-29T21:50:07Z",
          .seconds = 1.5,
          .cpu_model = "test cpu",
          .isa = "AVX512",
          .bf16_path = "native",
          .cores = 2,
          .threads = 2,
          .gemm_fp32_flops = 4e11,
          .gemm_bf16_flops = 2e12,
          .memory_bandwidth = 3e10,
          .dispatch_s = 5e-7,
          .link_bandwidth = 1e9,
          .link_latency_s = 2e-4,
          .link_oversubscription = 0.5};
}

// The made-up probe with GEMM rates by size: all threads' bf16 rate rises
// from 0.1 TFLOP/s at 64³ to 2 at 2048³ (doubling per doubling of n up to
// 256³, 1.5 at 512³ and beyond), one thread's is half of it, fp32's a fifth.
MachineProbe with_sizes(MachineProbe p) {
  const double bf16[] = {0.1e12, 0.2e12, 0.4e12, 1.5e12, 1.5e12, 2e12};
  for (size_t i = 0; i < std::size(kGemmProbeSizes); ++i)
    p.gemm_sizes.push_back({.n = static_cast<double>(kGemmProbeSizes[i]),
                            .bf16 = bf16[i],
                            .fp32 = bf16[i] / 5,
                            .bf16_1t = bf16[i] / 2,
                            .fp32_1t = bf16[i] / 10});
  return p;
}

// A plan of debugmodel at seq 256 and this local batch (the world size and probe to set).
PlanRequest debugmodel_request(int64_t local_batch) {
  PlanRequest q;
  q.cfg.model.flavor = "debugmodel";
  q.cfg.training.seq_len = 256;
  q.cfg.training.local_batch_size = local_batch;
  q.model = model_from_config(q.cfg.model);
  return q;
}

TEST(MachineProbe, MeasuresEveryFigureOfThisMachineAndCachesIt) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "ctitan_probe_cache_test";
  std::filesystem::remove_all(dir);
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  EXPECT_FALSE(cached_machine_probe().has_value()) << "an empty cache has no probe";
  bool measured = false;
  const MachineProbe p = this_machine(/*refresh=*/true, &measured);
  EXPECT_TRUE(measured);
  for (const double v : {p.gemm_fp32_flops, p.gemm_bf16_flops,
                         p.memory_bandwidth, p.dispatch_s, p.link_bandwidth, p.link_latency_s, p.seconds})
    EXPECT_GT(v, 0);
  EXPECT_GE(p.link_oversubscription, 0);
  EXPECT_LE(p.link_oversubscription, 1);
  EXPECT_GE(p.busy_others, 0);
  EXPECT_LE(p.busy_others, 1);
  EXPECT_EQ(p.fingerprint, machine_fingerprint());
  EXPECT_EQ(p.bf16_path, widen_gemm(at::empty({0}, at::kBFloat16)) ? "widened" : "native");
  EXPECT_EQ(p.measured_at.size(), 20u) << p.measured_at;
  ASSERT_EQ(p.gemm_sizes.size(), std::size(kGemmProbeSizes)) << "every size measured";
  for (size_t i = 0; i < p.gemm_sizes.size(); ++i) {
    const MachineProbe::GemmAt& g = p.gemm_sizes[i];
    EXPECT_EQ(g.n, kGemmProbeSizes[i]);
    for (const double v : {g.bf16, g.fp32, g.bf16_1t, g.fp32_1t}) EXPECT_GT(v, 0) << "n " << g.n;
  }
  EXPECT_EQ(p.gemm_sizes.back().bf16, p.gemm_bf16_flops) << "2048³ on all threads is the peak";
  const auto cached = cached_machine_probe();
  ASSERT_TRUE(cached.has_value()) << "written under " << dir;
  EXPECT_EQ(*cached, p);
  EXPECT_TRUE(std::filesystem::exists(dir / "ctitan" / "machine_probe.json"));
  // A cache from before the probe measured oversubscription is measured again.
  nlohmann::json old_probe = p.to_json();
  old_probe.erase("link_oversubscription");
  std::ofstream(dir / "ctitan" / "machine_probe.json") << nlohmann::json{{p.fingerprint, old_probe}}.dump();
  EXPECT_FALSE(cached_machine_probe().has_value());
  old_probe = p.to_json();
  old_probe.erase("busy_others");
  std::ofstream(dir / "ctitan" / "machine_probe.json") << nlohmann::json{{p.fingerprint, old_probe}}.dump();
  EXPECT_FALSE(cached_machine_probe().has_value()) << "nor what else ran meanwhile";
  old_probe = p.to_json();
  old_probe.erase("gemm_bf16_256_1t_flops");
  std::ofstream(dir / "ctitan" / "machine_probe.json") << nlohmann::json{{p.fingerprint, old_probe}}.dump();
  EXPECT_FALSE(cached_machine_probe().has_value()) << "nor the GEMM rates by size";
  old_probe = p.to_json();
  old_probe.erase("version");
  std::ofstream(dir / "ctitan" / "machine_probe.json") << nlohmann::json{{p.fingerprint, old_probe}}.dump();
  EXPECT_FALSE(cached_machine_probe().has_value()) << "nor a probe of an older version";
  EXPECT_EQ(p.version, kProbeVersion);
  // A damaged cache is measured again, not an error.
  std::ofstream(dir / "ctitan" / "machine_probe.json") << "{ not json";
  EXPECT_FALSE(cached_machine_probe().has_value());
  if (old)
    setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else
    unsetenv("XDG_CACHE_HOME");
  std::filesystem::remove_all(dir);
}

// A probe beside busy processes says so: one busy loop per core in child
// processes competes with its GEMMs, and /proc/stat less the probe's own
// CPU time shows them. (Only the busy case is asserted: under ctest -j2 a
// quiet machine is not guaranteed.)
TEST(MachineProbe, AProbeBesideBusyProcessesSaysTheyUsedTheCores) {
  std::vector<pid_t> children;
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      volatile uint64_t x = 0;
      for (;;) {
        const uint64_t next = x + 1;
        x = next;
      }
    }
    children.push_back(pid);
  }
  const MachineProbe p = measure_machine();
  for (pid_t pid : children) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  EXPECT_GT(p.busy_others, 0.3) << p.describe();
  EXPECT_TRUE(p.contended());
  EXPECT_NE(p.describe().find("other processes used"), std::string::npos) << p.describe();
}

TEST(MachineProbe, RoundTripsThroughJsonAndADatabasesTextValues) {
  const MachineProbe p = with_sizes(made_up_probe());
  EXPECT_EQ(MachineProbe::from_json(p.to_json()), p);
  // env.json flattened into a results database comes back as text.
  const nlohmann::json j = p.to_json();
  nlohmann::json text = nlohmann::json::object();
  for (auto it = j.begin(); it != j.end(); ++it)
    text[it.key()] = it->is_string() ? it->get<std::string>() : it->dump();
  const auto back = MachineProbe::from_json(text);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->gemm_bf16_flops, 2e12);
  EXPECT_EQ(back->cores, 2);
  EXPECT_EQ(back->gemm_sizes, p.gemm_sizes) << "the rates by size as flat keys";
  EXPECT_EQ(j.value("gemm_bf16_256_1t_flops", 0.0), 0.2e12);
  nlohmann::json missing = p.to_json();
  missing.erase("link_bandwidth");
  EXPECT_FALSE(MachineProbe::from_json(missing).has_value()) << "a probe without a figure is no probe";
  missing = p.to_json();
  missing["dispatch_s"] = 0;
  EXPECT_FALSE(MachineProbe::from_json(missing).has_value()) << "nor one with a zero";
  // An older probe (a database's runs before it was measured) has no
  // oversubscription exponent: -1, and a plan splits the cores evenly.
  nlohmann::json older = p.to_json();
  older.erase("link_oversubscription");
  const auto old_probe = MachineProbe::from_json(older);
  ASSERT_TRUE(old_probe.has_value());
  EXPECT_EQ(old_probe->link_oversubscription, -1);
  HardwareSpec s = load_hardware("cpu");
  apply_probe(s, *old_probe);
  EXPECT_EQ(s.oversubscription, 1);
  older["link_oversubscription"] = "0";
  EXPECT_EQ(MachineProbe::from_json(older)->link_oversubscription, 0) << "0 is a measured exponent";
  EXPECT_EQ(made_up_probe().describe(),
            "machine probe of 2026-11-29 21:50 UTC (test cpu, AVX512, 2 cores): GEMM bf16 2.00 TFLOP/s (native), "
            "fp32 0.40 TFLOP/s; memory 30.0 GB/s; dispatch 0.5 us; Gloo loopback 1.00 GB/s, 200 us, x(cores/ranks)^0.50 oversubscribed");
  EXPECT_NE(p.describe().find("GEMM bf16 2.00 TFLOP/s (native, 256³ 0.40), fp32 0.40 TFLOP/s (256³ 0.08);"),
            std::string::npos)
      << p.describe();
  // Sizes missing in part (a hand-edited cache): no curve, the peaks' law.
  nlohmann::json partial = p.to_json();
  partial.erase("gemm_fp32_64_flops");
  EXPECT_TRUE(MachineProbe::from_json(partial)->gemm_sizes.empty());
}

// The rate of a GEMM by its smallest dimension on a probed curve, by hand:
// log-log between sizes, the largest's beyond, in proportion below.
TEST(MachineProbe, AGemmsRateIsInterpolatedOnTheProbedSizes) {
  const std::vector<std::pair<double, double>> curve = {{64, 1e11}, {256, 4e11}, {1024, 4e11}};
  EXPECT_DOUBLE_EQ(gemm_rate_at(curve, 64), 1e11);
  EXPECT_NEAR(gemm_rate_at(curve, 128), 2e11, 1);  // halfway in log n: the geometric mean
  EXPECT_DOUBLE_EQ(gemm_rate_at(curve, 512), 4e11);
  EXPECT_DOUBLE_EQ(gemm_rate_at(curve, 8192), 4e11);
  EXPECT_DOUBLE_EQ(gemm_rate_at(curve, 16), 0.25e11);
  EXPECT_EQ(gemm_rate_at({}, 16), 0);
}

// With a probe that measured sizes, a block's GEMMs run at the rate of
// their size, not the peak's saturation law: debugmodel's (dim 256, FFN
// 768, 16 heads of 16 kv heads) over 256 tokens have 256 as their smallest
// dimension, 2 · 256 · (4 · 256² + 3 · 256 · 768) FLOPs forward, at the
// probe's 256³ rate times the spec's efficiency: all threads' at one rank
// on two cores, one thread's at two, and half of that at four (two ranks
// per core).
TEST(MachineProbe, AModelsGemmsRunAtTheProbedRateOfTheirSize) {
  HardwareSpec cpu = load_hardware("cpu");
  cpu.cores = 2;
  PlanRequest q = debugmodel_request(1);
  q.machine = with_sizes(made_up_probe());
  const double flops = 2.0 * 256 * (4.0 * 256 * 256 + 3.0 * 256 * 768);
  const auto gemm_f = [&](int64_t world) {
    q.world_size = world;
    return predict(q, cpu).block.gemm_f;
  };
  const double mt = cpu.eff.multi_thread;  // the spec's factor for a rank with several threads
  EXPECT_NEAR(gemm_f(1), flops / (0.4e12 * mt * cpu.eff.gemm), 1e-9 * gemm_f(1));
  EXPECT_NEAR(gemm_f(2), flops / (0.2e12 * cpu.eff.gemm), 1e-9 * gemm_f(2));
  EXPECT_NEAR(gemm_f(4), flops / (0.1e12 * cpu.eff.gemm), 1e-9 * gemm_f(4));
  // An fp32 run takes the fp32 rates.
  q.cfg.training.mixed_precision_param = "float32";
  EXPECT_NEAR(gemm_f(2), flops / (0.04e12 * cpu.eff.gemm), 1e-9 * gemm_f(2));
  // A spec whose peak was set, not probed, keeps the peak's law.
  q.cfg.training.mixed_precision_param = "bfloat16";
  HardwareSpec fixed = cpu;
  fixed.peak_bf16_flops = 1e12;
  q.world_size = 1;
  EXPECT_TRUE(resolved_for_plan(fixed, &*q.machine).probed_gemms.empty());
  EXPECT_TRUE(resolved_for_plan(cpu, &*q.machine).probed_gemms.size() == std::size(kGemmProbeSizes));
}

// `ctitan plan --probe --out`: the probe's figures written in, its GEMM
// rates by size as [gemm_by_size], read back the same; planning with
// another machine's probe keeps the file's rates, and bad tables are one
// line naming the file, line and key.
TEST(MachineProbe, AWrittenSpecKeepsTheGemmRatesBySize) {
  const MachineProbe p = with_sizes(made_up_probe());
  HardwareSpec s = load_hardware("cpu");
  apply_probe(s, p);
  ASSERT_EQ(s.probed_gemms.size(), std::size(kGemmProbeSizes));
  EXPECT_EQ(hardware_toml(s).find("[gemm_by_size]"), std::string::npos) << "a probe's rates are not the file's";
  s.probed.clear();  // as plan --probe --out: the figures are written in
  const std::string text = hardware_toml(s);
  ASSERT_NE(text.find("\n[gemm_by_size]\nn = [64, 128, 256, 512, 1024, 2048]\nthreads = 2\n"), std::string::npos)
      << text;
  const HardwareSpec back = parse_hardware(text, "mine.toml");
  EXPECT_EQ(back.probed_gemms, s.probed_gemms);
  EXPECT_EQ(back.probe_threads, 2);
  MachineProbe other = with_sizes(made_up_probe());
  for (auto& g : other.gemm_sizes) g.bf16 *= 3;
  EXPECT_EQ(resolved_for_plan(back, &other).probed_gemms, s.probed_gemms);
  const auto error_of = [](const std::string& t) {
    try {
      parse_hardware(t, "mine.toml");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return error_of(t);
  };
  EXPECT_NE(with("n = [64, 128,", "n = [128, 64,").find("'gemm_by_size.n' must increase"), std::string::npos);
  EXPECT_NE(with("bf16_flops = [", "bf16_flops = [1e11, ").find("'gemm_by_size.bf16_flops' must be an array of 6 numbers"),
            std::string::npos);
  EXPECT_NE(with("fp32_1t_flops = [", "fp32_1t_flops = [-1, ").find("mine.toml:"), std::string::npos);
  EXPECT_NE(with("threads = 2", "threads = 2\nthread = 2").find("unknown key 'gemm_by_size.thread'"), std::string::npos);
  std::string gpu = hardware_toml(load_hardware("h100_sxm")) + text.substr(text.find("\n[gemm_by_size]"));
  EXPECT_NE(error_of(gpu).find("a cpu spec's probed GEMM rates"), std::string::npos) << error_of(gpu);
  EXPECT_EQ(error_of(gpu).find('\n'), std::string::npos);
}

// A GPU node's probe sets a GPU spec's gemm, gemm_half_size and memory:
// the saturation law is recovered from rates by size made from it by hand
// (700 TFLOP/s asymptote, half size 600), the efficiency is that over the
// bf16 peak, and a node above its datasheet is clamped to 1.
TEST(MachineProbe, AGpuProbeSetsTheSpecsGemmAndMemoryEfficiencies) {
  GpuProbe p;
  p.device_name = "test gpu";
  p.measured_at = "2026-11-30T10:00:00Z";
  p.devices = 1;
  for (const int n : kGpuGemmSizes) p.gemm_bf16.emplace_back(n, 700e12 * n / (n + 600.0));
  p.hbm_bandwidth = 2.68e12;
  const auto [a, half] = fit_gemm_saturation(p.gemm_bf16);
  EXPECT_NEAR(a, 700e12, 0.01 * 700e12);
  EXPECT_NEAR(half, 600, 0.02 * 600);
  HardwareSpec h = load_hardware("h100_sxm");
  const HardwareSpec before = h;
  apply_gpu_probe(h, p);
  EXPECT_NEAR(h.eff.gemm, a / h.peak_bf16_flops, 1e-12);
  EXPECT_DOUBLE_EQ(h.eff.gemm_half_size, half);
  EXPECT_DOUBLE_EQ(h.eff.memory, 2.68e12 / h.memory_bandwidth);
  EXPECT_EQ(h.peak_bf16_flops, before.peak_bf16_flops) << "the datasheet peak stays MFU's denominator";
  EXPECT_EQ(h.eff.comm, before.eff.comm);
  EXPECT_NE(h.calibration.find("measured by `ctitan plan --probe` on test gpu"), std::string::npos) << h.calibration;
  EXPECT_NE(h.source.find("GPU probe of 2026-11-30 10:00 UTC (test gpu, 1 on the node): GEMM bf16 512³ 322, 1024³ 441"),
            std::string::npos)
      << h.source;
  EXPECT_NE(h.source.find("TFLOP/s, fp32 8192³ 0.0 TFLOP/s; HBM 2.68 TB/s"), std::string::npos) << h.source;
  // Written and read back, the spec is the same.
  EXPECT_EQ(parse_hardware(hardware_toml(h), "probed.toml").eff, h.eff);
  for (auto& [n, r] : p.gemm_bf16) r *= 10;
  HardwareSpec fast = load_hardware("h100_sxm");
  apply_gpu_probe(fast, p);
  EXPECT_EQ(fast.eff.gemm, 1) << "no spec runs above its datasheet";
  if (torch::cuda::device_count() == 0) {
    try {
      measure_gpu();
      ADD_FAILURE() << "measured a GPU where LibTorch sees none";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("LibTorch sees no CUDA device here"), std::string::npos) << e.what();
    }
  }
}

TEST(MachineProbe, ACpuSpecsZerosAreTheProbesFiguresAndStayZerosInItsFile) {
  const HardwareSpec cpu = load_hardware("cpu");
  for (const char* key : {"peak_bf16_flops", "peak_fp32_flops", "memory_bandwidth", "intra_node.bandwidth",
                          "inter_node.bandwidth"})
    EXPECT_NE(std::find(cpu.probed.begin(), cpu.probed.end(), key), cpu.probed.end()) << key;
  const MachineProbe p = made_up_probe();
  HardwareSpec s = cpu;
  apply_probe(s, p);
  EXPECT_EQ(s.peak_bf16_flops, 2e12);
  EXPECT_EQ(s.peak_fp32_flops, 4e11);
  EXPECT_EQ(s.memory_bandwidth, 3e10);
  EXPECT_EQ(s.intra_node.bandwidth, 1e9);
  EXPECT_EQ(s.intra_node.latency_s, cpu.intra_node.latency_s) << "a latency the file gives is kept";
  EXPECT_EQ(s.probe, p.describe());
  EXPECT_EQ(hardware_toml(s), hardware_toml(cpu)) << "the file stays 'the machine that reads it'";
  const HardwareSpec r = resolved_for_plan(cpu, &p);
  ASSERT_GT(cpu.eff.dispatch, 0);
  EXPECT_DOUBLE_EQ(r.eff.kernel_overhead_s, cpu.eff.dispatch * 5e-7) << "a kernel costs `dispatch` probed dispatches";
  // A GPU spec has nothing to probe.
  const HardwareSpec h = load_hardware("h100_sxm");
  EXPECT_TRUE(h.probed.empty());
  EXPECT_EQ(resolved_for_plan(h, &p), h);
}

TEST(MachineProbe, APlanTakesTheRunsMachineGemmRateForItsDtype) {
  // The same recipe on two probes, one with twice the bf16 GEMM rate: its
  // GEMM time halves; an fp32 run follows the fp32 rate instead.
  const HardwareSpec cpu = load_hardware("cpu");
  PlanRequest q = debugmodel_request(2);
  q.world_size = 1;
  MachineProbe slow = made_up_probe(), fast = slow;
  fast.gemm_bf16_flops *= 2;
  q.machine = slow;
  const Prediction a = predict(q, cpu);
  q.machine = fast;
  const Prediction b = predict(q, cpu);
  EXPECT_NEAR(b.block.gemm_f, a.block.gemm_f / 2, 1e-12 * a.block.gemm_f);
  EXPECT_EQ(a.machine_probe, slow.describe()) << "the plan names the probe it used";
  q.cfg.training.mixed_precision_param = "float32";
  q.machine = slow;
  const Prediction c = predict(q, cpu);
  q.machine = fast;
  EXPECT_DOUBLE_EQ(predict(q, cpu).block.gemm_f, c.block.gemm_f) << "fp32 GEMMs do not take the bf16 rate";
}

TEST(MachineProbe, ItsOversubscriptionExponentSetsTheRateOfRanksBeyondTheCores) {
  // 8 ranks on 2 cores: FSDP's ring time is bytes / (bandwidth · (2/8)^g)
  // plus latencies g leaves alone, so going from g = 0 to 1 adds three
  // times what going from 0 to 0.5 adds (4 - 1 = 3 · (2 - 1)). At 2 ranks
  // on 2 cores g changes nothing.
  HardwareSpec cpu = load_hardware("cpu");
  cpu.cores = 2;
  PlanRequest q = debugmodel_request(2);
  const auto fsdp_s = [&](double g, int64_t world) {
    MachineProbe p = made_up_probe();
    p.link_oversubscription = g;
    q.machine = p;
    q.world_size = world;
    for (const CommDim& c : predict(q, cpu).time.comm)
      if (c.dim == "dp_shard") return c.seconds;
    ADD_FAILURE() << "no FSDP communication planned";
    return 0.0;
  };
  const double s0 = fsdp_s(0, 8), s_half = fsdp_s(0.5, 8), s1 = fsdp_s(1, 8);
  EXPECT_GT(s_half, s0);
  EXPECT_NEAR(s1 - s0, 3 * (s_half - s0), 1e-9 * s1);
  EXPECT_DOUBLE_EQ(fsdp_s(0, 2), fsdp_s(1, 2));
}

}  // namespace
}  // namespace ctitan
