#include "profiling/peak_flops.h"
#include "common/errors.h"
#include "common/file_io.h"

#include <ATen/Parallel.h>
#include <torch/version.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "profiling/env_info.h"

namespace ctitan {

double measure_cpu_gemm_half_size(at::ScalarType dtype) {
  static std::mutex mu;
  static std::map<int, double> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto hit = cache.find(static_cast<int>(dtype));
  if (hit != cache.end()) return hit->second;
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  std::vector<std::pair<double, double>> work_seconds;  // (k, seconds per FLOP)
  constexpr int64_t n = 2048;
  for (int64_t k = 16; k <= 1024; k *= 2) {
    at::Tensor a = at::randn({n, k}).to(dtype), b = at::randn({k, n}).to(dtype);
    at::Tensor c = at::empty({n, n}, a.options());
    at::mm_out(c, a, b);  // warm-up
    double best = INFINITY, total = 0;
    for (int i = 0; i < 3 || total < 0.03; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      at::mm_out(c, a, b);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      total += dt;
      best = std::min(best, dt);
    }
    work_seconds.emplace_back(static_cast<double>(k), best / (2.0 * n * n * static_cast<double>(k)));
  }
  at::set_num_threads(threads);
  // s(k) = a · (1 + h/k): for each h the best a is closed-form.
  double best_err = INFINITY, best_h = 0;
  for (double h = 0.5; h <= 1e5; h *= 1.05) {
    double num = 0, den = 0;
    for (const auto& [k, s] : work_seconds) num += (1 + h / k) / s, den += (1 + h / k) * (1 + h / k) / (s * s);
    const double a = num / den;
    double err = 0;
    for (const auto& [k, s] : work_seconds) err += std::pow(a * (1 + h / k) / s - 1, 2);
    if (err < best_err) best_err = err, best_h = h;
  }
  cache[static_cast<int>(dtype)] = best_h;
  return best_h;
}

double measure_cpu_gemm_flops(at::ScalarType dtype, int64_t n, double min_seconds) {
  at::Tensor a = at::randn({n, n}).to(dtype);
  at::Tensor b = at::randn({n, n}).to(dtype);
  at::Tensor c = at::empty({n, n}, a.options());
  at::mm_out(c, a, b);  // warm-up: oneDNN/BLAS kernel selection, page faults
  const double flop = 2.0 * n * n * n;
  double best = 0.0, total = 0.0;
  while (total < min_seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    at::mm_out(c, a, b);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += dt;
    best = std::max(best, flop / dt);
  }
  return best;
}

std::optional<GpuPeak> gpu_table_peak_flops(const std::string& name) {
  // TorchTitan's get_peak_flops (torchtitan/tools/utils.py), dense bf16, in
  // its order: the H100 variants are told apart by "NVL" / "PCIe" in the
  // name, anything else called H100 is an SXM part. Matching ignores case
  // (TorchTitan tests "l40s" in lower case, which NVIDIA's "L40S" never matches).
  // H200 NVL (CUDA's "NVIDIA H200 NVL") is a 600 W PCIe card, not the SXM
  // part TorchTitan's "H200" entry means: NVIDIA's H200 datasheet gives BF16
  // Tensor Core 1,979 TFLOPS (SXM) and 1,671 TFLOPS (NVL), both with
  // sparsity, so 989 and 835 dense — the H100 NVL's figure.
  //
  // The dense fp8 peaks (ctitan's; TorchTitan has none) are the makers'
  // "with sparsity" figures halved, as recipes/hardware/*.toml state them:
  // H100/H200 SXM 3,958, H100 PCIe 3,026, H100/H200 NVL 3,341, HGX B200
  // 9,000, MI300X/MI325X 5,229.8, L40S 1,466 TFLOPS. 0 where the part has no
  // fp8 tensor cores (A100, MI250X) or no figure is kept here (MI355X): a
  // Float8 run there gets no fp8-aware MFU.
  struct Row {
    std::string key;
    double bf16, fp8;
  };
  static const std::vector<Row> table = {
      {"A100", 312e12, 0},           {"H100 NVL", 835e12, 1670.5e12}, {"H100 PCIe", 756e12, 1513e12},
      {"H100", 989e12, 1978.9e12},   {"H200 NVL", 835e12, 1670.5e12}, {"H200", 989e12, 1978.9e12},
      {"B200", 2.25e15, 4.5e15},     {"MI355X", 2500e12, 0},          {"MI300X", 1300e12, 2614.9e12},
      {"MI325X", 1300e12, 2614.9e12}, {"MI250X", 191.5e12, 0},        {"L40S", 362e12, 733e12},
  };
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string n = lower(name);
  for (const auto& [key, flops, fp8] : table) {
    const size_t space = key.find(' ');
    if (space != std::string::npos) {  // "H100 NVL": both words, anywhere in the name
      if (n.find(lower(key.substr(0, space))) != std::string::npos &&
          n.find(lower(key.substr(space + 1))) != std::string::npos)
        return GpuPeak{key, flops, fp8};
    } else if (n.find(lower(key)) != std::string::npos) {
      return GpuPeak{key == "H100" || key == "H200" ? key + " SXM" : key, flops, fp8};
    }
  }
  return std::nullopt;
}

PeakFlops resolve_gpu_peak_flops(const std::string& device_name, double override_tflops) {
  if (override_tflops > 0) return {override_tflops * 1e12, "override", ""};
  if (auto p = gpu_table_peak_flops(device_name)) return {p->flops, "table:" + p->entry, ""};
  return {0.0, "unknown",
          "no peak FLOPs known for GPU '" + device_name +
              "'; MFU and HFU are not reported: pass --metrics.peak_tflops <dense bf16 TFLOPs of one device>"};
}

PeakFlops resolve_gpu_fp8_peak_flops(const std::string& device_name) {
  const auto p = gpu_table_peak_flops(device_name);
  if (p && p->fp8_flops > 0) return {p->fp8_flops, "table:" + p->entry + " fp8", ""};
  return {0.0, "unknown", "no fp8 peak known for GPU '" + device_name + "'"};
}

std::string host_fingerprint() {
  const nlohmann::json env = environment_fingerprint();
  return env.value("hostname", "?") + "|" + env.value("cpu_model", "?") + "|" +
         std::to_string(at::get_num_threads()) + "|" + TORCH_VERSION;
}

namespace {

std::filesystem::path cache_file() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::filesystem::path base = xdg && *xdg ? xdg : (home && *home ? std::filesystem::path(home) / ".cache"
                                                                   : std::filesystem::temp_directory_path());
  return base / "ctitan" / "peak_flops.json";
}

}  // namespace

PeakFlops resolve_cpu_peak_flops(at::ScalarType dtype, double override_tflops) {
  if (override_tflops > 0) return {override_tflops * 1e12, "override", ""};
  const std::string key = host_fingerprint() + "|" + c10::toString(dtype);
  const auto path = cache_file();
  nlohmann::json cache = nlohmann::json::object();
  {
    std::ifstream in(path);
    if (in) {
      try {
        in >> cache;
      } catch (const nlohmann::json::exception&) {
        cache = nlohmann::json::object();  // a damaged cache is re-measured, not fatal
      }
    }
  }
  // A measurement taken while other work shared the cores (a build, another
  // run) is low, and a cached low peak would inflate every later MFU (over
  // 100 % was seen). So the cache keeps the highest peak measured on this
  // host, and a run with a cached value still takes one short measurement:
  // the peak can only rise towards the machine's, never stick low.
  const bool cached = cache.is_object() && cache.contains(key) && cache[key].is_number();
  const double before = cached ? cache[key].get<double>() : 0.0;
  const double now = measure_cpu_gemm_flops(dtype, 2048, cached ? 0.1 : 0.4);
  if (cached && now <= before) return {before, "cached", ""};
  cache[key] = now;
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  try {
    write_file_atomic(path.string(), cache.dump(2) + "\n");
  } catch (const InputError&) {
    // The cache only saves a re-measurement next time; a full disk here is not the run's failure.
  }
  return {now, "measured", ""};
}

}  // namespace ctitan
