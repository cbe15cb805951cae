#include "trainer/machine_probe.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/file_io.h"
#include "common/utc_time.h"
#include "profiling/env_info.h"
#include "trainer/distributed/comm.h"
#include "trainer/model/gemm.h"

namespace ctitan {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The ISA flags that decide which kernels ctitan's GEMMs and casts take.
std::string bf16_flags() {
  static const std::set<std::string> wanted = {"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"};
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> have;
    for (std::string w; words >> w;)
      if (wanted.count(w)) have.insert(w);
    std::string out;
    for (const auto& w : have) out += (out.empty() ? "" : " ") + w;
    return out;
  }
  return "";
}

// Best rate of `op` doing `flop` (or bytes) per call, over about `seconds`.
template <typename Op>
double best_rate(double work, double seconds, Op op) {
  op();  // warm-up: kernel selection, page faults
  double best = 0, total = 0;
  for (int i = 0; i < 3 || total < seconds; ++i) {
    const auto t0 = Clock::now();
    op();
    const double dt = since(t0);
    total += dt;
    best = std::max(best, work / dt);
  }
  return best;
}

double gemm_rate(at::ScalarType dtype, int64_t n, double seconds) {
  const at::Tensor a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
  // gemm_mm: the path ctitan's linears take (bf16 widened where ATen has no AVX-512).
  return best_rate(2.0 * n * n * n, seconds, [&] { (void)gemm_mm(a, b); });
}

// Median rate of `op` over at least 7 calls and about `seconds`: what a run
// meets, where the best call of a few varies by a third between probes.
template <typename Op>
double median_rate(double work, double seconds, Op op) {
  op();  // warm-up
  std::vector<double> rates;
  double total = 0;
  for (int i = 0; i < 7 || total < seconds; ++i) {
    const auto t0 = Clock::now();
    op();
    const double dt = since(t0);
    total += dt;
    rates.push_back(work / dt);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

double memory_bandwidth() {
  constexpr int64_t n = 16 << 20;  // 64 MiB of fp32 per tensor: far beyond any cache
  const at::Tensor a = at::rand({n}), b = at::rand({n});
  at::Tensor c = at::empty({n});
  return median_rate(3.0 * 4 * n, 0.25, [&] { at::add_out(c, a, b); });
}

double dispatch_seconds() {
  const at::Tensor x = at::zeros({1});
  constexpr int kOps = 2000;
  double best = INFINITY;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kOps; ++i) (void)at::add(x, x);
    best = std::min(best, since(t0) / kOps);
  }
  return best;
}

// Gloo's ring all-reduce among `n` thread ranks on loopback: one float's
// (median of 100) and 16 MiB's (best and median of `reps`).
struct RingTimes {
  double small_s = 0, big_best_s = 0, big_median_s = 0;
  static constexpr double kBigBytes = 16.0 * (1 << 20);
};

RingTimes gloo_ring(int n, int reps) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  RingTimes out;
  std::string error;
  std::mutex mu;
  auto rank = [&](int r) {
    try {
      CommOptions o;
      o.timeout = std::chrono::seconds(30);
      o.init_timeout = std::chrono::seconds(30);
      auto comm = Communicator::create(c10::make_intrusive<c10d::PrefixStore>("machine_probe", store), r, n,
                                       "machine_probe", r, o);
      at::Tensor one = at::ones({1}), big = at::ones({static_cast<int64_t>(RingTimes::kBigBytes / 4)});
      comm->all_reduce(one)->wait();
      comm->all_reduce(big)->wait();
      // Each small all-reduce timed alone, the median kept: their mean
      // moved 56-205 us between probes as the two cores were scheduled.
      constexpr int kSmall = 100;
      std::vector<double> small;
      for (int i = 0; i < kSmall; ++i) {
        const auto t = Clock::now();
        comm->all_reduce(one)->wait();
        small.push_back(since(t));
      }
      std::sort(small.begin(), small.end());
      const double s = small[small.size() / 2];
      std::vector<double> b;
      for (int i = 0; i < reps; ++i) {
        const auto t0 = Clock::now();
        comm->all_reduce(big)->wait();
        b.push_back(since(t0));
      }
      std::sort(b.begin(), b.end());
      if (r == 0) out = {s, b.front(), b[b.size() / 2]};
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      error = e.what();
    }
  };
  std::vector<std::thread> others;
  for (int r = 1; r < n; ++r) others.emplace_back(rank, r);
  rank(0);
  for (auto& t : others) t.join();
  if (!error.empty()) throw std::runtime_error("the Gloo loopback probe failed: " + error);
  return out;
}

// Seconds per byte of a ring all-reduce's 4 MiB among `n` ranks, taken out
// of the ring's 2(n-1)/n volume and its latency steps (median: what a run
// meets, not the luckiest repeat).
double ring_seconds_per_byte(const RingTimes& t, int n) {
  const double volume = 2.0 * (n - 1) / n * RingTimes::kBigBytes;
  return std::max(t.big_median_s - t.small_s, 1e-9) / volume;
}

// Gloo between two thread ranks on loopback: (bandwidth, latency), in the
// ring law the planner charges (two ranks: t = bytes / bandwidth + 2 · latency).
std::pair<double, double> gloo_loopback(const RingTimes& two) {
  const double latency = two.small_s / 2;
  // The median 16 MiB ring: the best of nine moved 1.3-2.0 GB/s between probes.
  const double bandwidth = RingTimes::kBigBytes / std::max(two.big_median_s - two.small_s, 1e-9);
  return {bandwidth, latency};
}

// How a rank's collective bandwidth falls once ranks outnumber the cores:
// the exponent g of (cores / ranks)^g, from the ring's per-byte time with
// as many thread ranks as cores and with twice as many (0: oversubscribed
// ranks keep their rate; 1: they split the cores' rate evenly). The median
// of five pairs of rings, clamped into [0, 1]. A machine of more than 16
// cores is not measured (twice its cores in thread ranks would take long,
// and ctitan's CPU runs do not outnumber its cores): 1, the even split.
double gloo_oversubscription(int cores, const RingTimes& two) {
  if (cores > 16) return 1.0;
  const int base = std::max(cores, 2);
  std::vector<double> g;
  for (int i = 0; i < 5; ++i) {
    const double fair = ring_seconds_per_byte(base == 2 && i == 0 ? two : gloo_ring(base, 9), base);
    const double over = ring_seconds_per_byte(gloo_ring(2 * base, 9), 2 * base);
    g.push_back(std::clamp(std::log2(over / fair), 0.0, 1.0));
  }
  std::sort(g.begin(), g.end());
  return g[2];
}

// CPU seconds the whole machine spent busy (user, nice, system, irq,
// softirq, steal: /proc/stat's first line) and its CPUs; {0, 0} where it
// cannot be read.
std::pair<double, int> machine_busy_seconds() {
  std::ifstream in("/proc/stat");
  std::string line, name;
  double busy = 0;
  int cpus = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    fields >> name;
    if (name == "cpu") {
      double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
      fields >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
      busy = user + nice + system + irq + softirq + steal;
    } else if (name.rfind("cpu", 0) == 0) {
      ++cpus;
    }
  }
  return {busy / static_cast<double>(sysconf(_SC_CLK_TCK)), cpus};
}

// This process's CPU seconds (every thread).
double own_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::filesystem::path cache_file() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::filesystem::path base = xdg && *xdg ? xdg
                                     : home && *home ? std::filesystem::path(home) / ".cache"
                                                     : std::filesystem::temp_directory_path();
  return base / "ctitan" / "machine_probe.json";
}

nlohmann::json read_cache() {
  std::ifstream in(cache_file());
  nlohmann::json j = nlohmann::json::object();
  if (!in) return j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception&) {
    return nlohmann::json::object();  // a damaged cache is measured again, not fatal
  }
  return j.is_object() ? j : nlohmann::json::object();
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

std::string machine_fingerprint() {
  return cpu_model() + "|" + at::get_cpu_capability() + "|" + bf16_flags() + "|" +
         std::to_string(std::thread::hardware_concurrency()) + " cores|torch " + TORCH_VERSION;
}

std::string MachineProbe::describe() const {
  // ", 256³ 0.20" where sizes were measured.
  const auto at256 = [this](bool bf16) {
    for (const GemmAt& g : gemm_sizes)
      if (g.n == 256) return ", 256³ " + fmt("%.2f", (bf16 ? g.bf16 : g.fp32) / 1e12);
    return std::string();
  };
  std::string date = measured_at;
  if (date.size() >= 16) date = date.substr(0, 10) + " " + date.substr(11, 5) + " UTC";
  return "machine probe of " + date + " (" + cpu_model + ", " + isa + ", " + std::to_string(cores) +
         " cores): GEMM bf16 " + fmt("%.2f", gemm_bf16_flops / 1e12) + " TFLOP/s (" + bf16_path + at256(true) +
         "), fp32 " + fmt("%.2f", gemm_fp32_flops / 1e12) + " TFLOP/s" + (gemm_sizes.empty() ? "" : " (" + at256(false).substr(2) + ")") + "; memory " + fmt("%.1f", memory_bandwidth / 1e9) +
         " GB/s; dispatch " + fmt("%.1f", dispatch_s * 1e6) + " us; Gloo loopback " +
         fmt("%.2f", link_bandwidth / 1e9) + " GB/s, " + fmt("%.0f", link_latency_s * 1e6) + " us" +
         (link_oversubscription >= 0 ? ", x(cores/ranks)^" + fmt("%.2f", link_oversubscription) + " oversubscribed"
                                     : std::string()) +
         (contended() ? " (other processes used " + fmt("%.0f", 100 * busy_others) + " % of the cores meanwhile)"
                      : std::string());
}

nlohmann::json MachineProbe::to_json() const {
  nlohmann::json j = {{"version", version},
                      {"fingerprint", fingerprint},
          {"measured_at", measured_at},
          {"seconds", seconds},
          {"cpu_model", cpu_model},
          {"isa", isa},
          {"bf16_path", bf16_path},
          {"cores", cores},
          {"threads", threads},
          {"gemm_fp32_flops", gemm_fp32_flops},
          {"gemm_bf16_flops", gemm_bf16_flops},
          {"memory_bandwidth", memory_bandwidth},
          {"dispatch_s", dispatch_s},
          {"link_bandwidth", link_bandwidth},
          {"link_latency_s", link_latency_s},
          {"link_oversubscription", link_oversubscription},
          {"busy_others", busy_others}};
  // Flat keys ("gemm_bf16_256_flops", "gemm_bf16_256_1t_flops"): a results
  // database stores env.json's keys flattened, one value each.
  for (const GemmAt& g : gemm_sizes) {
    const std::string n = std::to_string(static_cast<int>(g.n));
    j["gemm_bf16_" + n + "_flops"] = g.bf16;
    j["gemm_fp32_" + n + "_flops"] = g.fp32;
    j["gemm_bf16_" + n + "_1t_flops"] = g.bf16_1t;
    j["gemm_fp32_" + n + "_1t_flops"] = g.fp32_1t;
  }
  return j;
}

std::optional<MachineProbe> MachineProbe::from_json(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  MachineProbe p;
  // A results database flattens env.json: its values come back as text.
  const auto number = [&j](const char* key, double& out) {
    const auto it = j.find(key);
    if (it == j.end()) return false;
    try {
      out = it->is_number() ? it->get<double>() : it->is_string() ? std::stod(it->get<std::string>()) : 0;
    } catch (const std::exception&) {
      return false;
    }
    return std::isfinite(out) && out > 0;
  };
  const auto text = [&j](const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  double cores = 0, threads = 0;
  const bool ok = number("gemm_fp32_flops", p.gemm_fp32_flops) && number("gemm_bf16_flops", p.gemm_bf16_flops) &&
                  number("memory_bandwidth", p.memory_bandwidth) && number("dispatch_s", p.dispatch_s) &&
                  number("link_bandwidth", p.link_bandwidth) && number("link_latency_s", p.link_latency_s);
  if (!ok) return std::nullopt;
  number("seconds", p.seconds);
  if (double v = 0; number("version", v)) p.version = static_cast<int>(v);
  for (const int n : kGemmProbeSizes) {
    MachineProbe::GemmAt g;
    g.n = n;
    const std::string k = "gemm_%_" + std::to_string(n) + "_flops", k1 = "gemm_%_" + std::to_string(n) + "_1t_flops";
    const auto key = [](std::string pattern, const char* dtype) { return pattern.replace(pattern.find('%'), 1, dtype); };
    if (number(key(k, "bf16").c_str(), g.bf16) && number(key(k, "fp32").c_str(), g.fp32) &&
        number(key(k1, "bf16").c_str(), g.bf16_1t) && number(key(k1, "fp32").c_str(), g.fp32_1t))
      p.gemm_sizes.push_back(g);
  }
  // A partial set of sizes (a hand-edited cache) is no curve.
  if (p.gemm_sizes.size() != std::size(kGemmProbeSizes)) p.gemm_sizes.clear();
  // Probes before it measured the oversubscription exponent lack it (-1).
  if (double g = -1; j.contains("link_oversubscription") && (number("link_oversubscription", g) || g == 0))
    p.link_oversubscription = std::min(g, 1.0);
  if (double b = -1; j.contains("busy_others") && (number("busy_others", b) || b == 0)) p.busy_others = std::min(b, 1.0);
  number("cores", cores);
  number("threads", threads);
  p.cores = static_cast<int>(cores);
  p.threads = static_cast<int>(threads);
  p.fingerprint = text("fingerprint");
  p.measured_at = text("measured_at");
  p.cpu_model = text("cpu_model");
  p.isa = text("isa");
  p.bf16_path = text("bf16_path");
  return p;
}

MachineProbe measure_machine() {
  const auto t0 = Clock::now();
  const double busy0 = machine_busy_seconds().first, own0 = own_cpu_seconds();
  MachineProbe p;
  p.version = kProbeVersion;
  p.fingerprint = machine_fingerprint();
  p.measured_at = utc_now();
  p.cpu_model = cpu_model();
  p.isa = at::get_cpu_capability();
  p.bf16_path = widen_gemm(at::empty({0}, at::kBFloat16)) ? "widened" : "native";
  p.cores = static_cast<int>(std::thread::hardware_concurrency());
  p.threads = at::get_num_threads();
  p.gemm_fp32_flops = gemm_rate(at::kFloat, 2048, 0.3);
  p.gemm_bf16_flops = gemm_rate(at::kBFloat16, 2048, 0.3);
  const int threads = at::get_num_threads();
  for (const int n : kGemmProbeSizes) {
    MachineProbe::GemmAt g;
    g.n = n;
    const bool peak = n == 2048;  // measured above
    g.fp32 = peak ? p.gemm_fp32_flops : gemm_rate(at::kFloat, n, 0.05);
    g.bf16 = peak ? p.gemm_bf16_flops : gemm_rate(at::kBFloat16, n, 0.05);
    at::set_num_threads(1);
    g.fp32_1t = threads == 1 ? g.fp32 : gemm_rate(at::kFloat, n, 0.05);
    g.bf16_1t = threads == 1 ? g.bf16 : gemm_rate(at::kBFloat16, n, 0.05);
    at::set_num_threads(threads);
    p.gemm_sizes.push_back(g);
  }
  p.memory_bandwidth = memory_bandwidth();
  p.dispatch_s = dispatch_seconds();
  const RingTimes two = gloo_ring(2, 15);
  std::tie(p.link_bandwidth, p.link_latency_s) = gloo_loopback(two);
  p.link_oversubscription = gloo_oversubscription(p.cores, two);
  p.seconds = since(t0);
  const auto [busy1, cpus] = machine_busy_seconds();
  if (cpus > 0 && p.seconds > 0)
    p.busy_others = std::clamp((busy1 - busy0 - (own_cpu_seconds() - own0)) / (p.seconds * cpus), 0.0, 1.0);
  return p;
}

bool MachineProbe::contended() const { return busy_others > kProbeBusyLimit; }

std::optional<MachineProbe> cached_machine_probe() {
  const nlohmann::json cache = read_cache();
  const auto it = cache.find(machine_fingerprint());
  if (it == cache.end()) return std::nullopt;
  auto probe = MachineProbe::from_json(*it);
  // A cache written before the probe measured oversubscription, what else
  // ran meanwhile, or by an older version (GEMM rates by size, medians) is
  // measured again.
  if (probe && (probe->link_oversubscription < 0 || probe->busy_others < 0 || probe->gemm_sizes.empty() ||
                probe->version < kProbeVersion))
    return std::nullopt;
  return probe;
}

const MachineProbe& this_machine(bool refresh, bool* measured) {
  static std::mutex mu;
  static std::optional<MachineProbe> probe;
  std::lock_guard<std::mutex> lock(mu);
  if (measured) *measured = false;
  if (!refresh && probe) return *probe;
  probe = refresh ? std::nullopt : cached_machine_probe();
  if (probe && !probe->contended()) return *probe;
  const std::optional<MachineProbe> earlier = probe;
  probe = measure_machine();
  if (measured) *measured = true;
  if (probe->contended()) {
    // Two contended probes: the less contended one stands (and is cached).
    if (earlier && earlier->busy_others < probe->busy_others) probe = earlier;
    std::fprintf(stderr,
                 "ctitan: the machine probe ran while other processes used %.0f %% of the cores, so its rates are "
                 "low; plan on a quiet machine (`ctitan plan --probe` measures again)\n",
                 100 * probe->busy_others);
  }
  nlohmann::json cache = read_cache();
  cache[probe->fingerprint] = probe->to_json();
  std::error_code ec;
  std::filesystem::create_directories(cache_file().parent_path(), ec);
  try {
    write_file_atomic(cache_file().string(), cache.dump(2) + "\n");
  } catch (const InputError&) {
    // The cache only saves measuring again next time; an unwritable one is not the plan's failure.
  }
  return *probe;
}

}  // namespace ctitan
