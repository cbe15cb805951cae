// Hardware spec files: TOML <-> HardwareSpec.
//
// The format (recipes/hardware/*.toml). Every unit is spelled in its key;
// the struct holds SI (bytes, bytes/s, seconds). Every key is required
// except `name` (default: the file's stem) and `cores` (default 0), and an
// unknown key is an error.
//
//   name = "h100_sxm"                 # optional; the file's stem
//   title = "NVIDIA H100 SXM5 80GB"
//   kind = "gpu"                      # "gpu" | "cpu"
//   source = "..."                    # where the maker's figures come from
//   peak_bf16_flops = 989.4e12        # FLOP/s per device, dense (no sparsity)
//   peak_fp8_flops = 1978.9e12        # 0: no fp8 tensor cores
//   peak_fp32_flops = 67e12           # cpu: 0 = this machine's probe (also peak_bf16_flops,
//                                     #   memory bandwidth, link bandwidth and latency:
//                                     #   trainer/machine_probe.h, HardwareSpec::probed)
//   memory_gib = 80                   # or memory_gb (1e9) or memory_bytes;
//                                     # cpu: 0 = /proc/meminfo MemTotal
//   memory_bandwidth_tb_s = 3.35      # or memory_bandwidth_gb_s / _bytes_s
//   flash_attention = true
//   devices_per_node = 8
//   cores = 0                         # cpu: cores the ranks share; 0 = this machine's
//
//   [intra_node]                      # and [inter_node]: the network, per device
//   name = "NVLink 4"
//   bandwidth_gb_s = 450              # GB/s (1e9 bytes/s) per device, one direction
//                                     # (or bandwidth_bytes_s)
//   latency_us = 3                    # per message / collective step (or latency_s)
//
//   [efficiency]                      # fractions of the peaks, fixed costs
//   gemm = 0.75                       # > 0 (gemm, attention, memory and comm are fractions of the
//                                     #   figures; a fit may exceed 1 where a figure is a guess)
//   gemm_half_size = 256              # >= 0
//   fp8_gemm = 0.65                   # (0, 1]
//   attention = 0.55                  # > 0
//   memory = 0.8                      # > 0
//   fused_traffic = 0.45              # > 0
//   kernel_overhead_us = 4            # >= 0 (or kernel_overhead_s)
//   dispatch = 8.8                    # optional, cpu: a kernel costs this many probed ATen
//                                     #   dispatches (replaces kernel_overhead_us; 0 or absent: not)
//   comm = 0.75                       # > 0
//   overlap = 0.9                     # [0, 1]
//   step_overhead_ms = 0              # >= 0 (or step_overhead_s)
//   multi_thread = 1.0                # > 0: cpu, a multi-threaded rank's rate over single-thread ranks
//   activation_factor = 1.0           # > 0: saved activations over the structural count
//   memory_overhead = 0.05            # >= 0
//   memory_fixed_gib = 0              # >= 0 (or memory_fixed_bytes)
//
//   [calibration]
//   source = "uncalibrated: maker's figures with default efficiencies"
//
//   [gemm_by_size]                    # optional, cpu with its peaks written in (`ctitan plan
//                                     #   --probe --out`): the probe's GEMM rate at n³
//   n = [64, 128, 256, 512, 1024, 2048]   # increasing
//   threads = 2                       # the threads the first rows ran on
//   bf16_flops = [...]                # one per n, FLOP/s, on `threads`
//   bf16_1t_flops = [...]             # on one thread
//   fp32_flops = [...]
//   fp32_1t_flops = [...]
//
// hardware_toml writes the first spelling of each quantity, or the SI one
// where the scaled value would not read back bit for bit.
#include "planner/hardware.h"
#include "common/file_io.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/errors.h"
#include "common/limits.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

// Concatenation that starts from a std::string: GCC 12 flags `"lit" +
// std::string` with a false stringop-overflow under -Werror.
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  ((out += parts), ...);
  return out;
}

// One spelling of a quantity: the key and its unit in SI, as a factor or
// (for units below one) a divisor, so that "4 us" reads as exactly 4e-6.
struct Unit {
  const char* key;
  double factor = 1;
  double divisor = 1;

  double to_si(double v) const { return v * factor / divisor; }
  double from_si(double v) const { return v * divisor / factor; }
};

const std::vector<Unit> kMemoryUnits = {{"memory_gib", 1073741824.0}, {"memory_gb", 1e9}, {"memory_bytes", 1}};
const std::vector<Unit> kMemoryBandwidthUnits = {
    {"memory_bandwidth_tb_s", 1e12}, {"memory_bandwidth_gb_s", 1e9}, {"memory_bandwidth_bytes_s", 1}};
const std::vector<Unit> kLinkBandwidthUnits = {{"bandwidth_gb_s", 1e9}, {"bandwidth_bytes_s", 1}};
const std::vector<Unit> kLatencyUnits = {{"latency_us", 1, 1e6}, {"latency_s", 1}};
const std::vector<Unit> kKernelOverheadUnits = {{"kernel_overhead_us", 1, 1e6}, {"kernel_overhead_s", 1}};
const std::vector<Unit> kStepOverheadUnits = {{"step_overhead_ms", 1, 1e3}, {"step_overhead_s", 1}};
const std::vector<Unit> kMemoryFixedUnits = {{"memory_fixed_gib", 1073741824.0}, {"memory_fixed_bytes", 1}};

}  // namespace

bool SpecRange::contains(double v) const { return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi; }

double SpecRange::clamp(double v) const {
  if (!(v > lo)) return lo_open ? std::nextafter(lo, hi) : lo;
  return std::min(v, hi);
}

SpecRange spec_range(const std::string& key, bool cpu) {
  // name → {lo, hi, lo_open}, SI units; efficiencies are fractions of a peak.
  static const std::map<std::string, SpecRange> common = {
      {"peak_fp8_flops", {0, 1e18, false}},
      {"memory_bandwidth", {1e8, 1e15, false}},           // 0.1 GB/s to 1 PB/s
      {"link_bandwidth", {1e6, 1e14, false}},             // 1 MB/s to 100 TB/s per device
      {"latency", {0, 1, false}},                         // seconds per message
      {"fp8_gemm", {0, 1, true}},
      {"gemm_half_size", {0, 1e6, false}},
      {"fused_traffic", {0, 4, true}},
      {"kernel_overhead", {0, 1, false}},                 // seconds per kernel
      {"dispatch", {0, 1000, false}},                     // probed dispatches per kernel
      {"comm", {0, 4, true}},
      {"overlap", {0, 1, false}},
      {"step_overhead", {0, 3600, false}},                // seconds per step
      {"multi_thread", {0, 1024, true}},
      {"activation_factor", {0, 100, true}},
      {"memory_overhead", {0, 10, false}},
      {"memory_fixed", {0, 1e15, false}}};                // bytes per rank
  // A GPU's datasheet peaks are what it cannot exceed; a cpu's are measured
  // on the planning machine (0: measure), which its fitted efficiencies correct.
  static const std::map<std::string, SpecRange> gpu = {
      {"peak_flops", {1e9, 1e18, false}}, {"memory_bytes", {1e6, 1e15, false}}, {"gemm", {0, 1, true}},
      {"attention", {0, 1, true}},        {"memory", {0, 1, true}}};
  static const std::map<std::string, SpecRange> cpu_only = {
      {"peak_flops", {0, 1e18, false}}, {"memory_bytes", {0, 1e15, false}}, {"gemm", {0, 16, true}},
      {"attention", {0, 16, true}},     {"memory", {0, 16, true}},
      // 0: this machine's probe
      {"memory_bandwidth", {0, 1e15, false}}, {"link_bandwidth", {0, 1e14, false}}};
  const auto& kind = cpu ? cpu_only : gpu;
  if (auto it = kind.find(key); it != kind.end()) return it->second;
  if (auto it = common.find(key); it != common.end()) return it->second;
  throw std::logic_error("spec_range: no range for '" + key + "'");
}

namespace {

// "a number in (0, 1]" in the unit the value was written in.
std::string range_text(const SpecRange& r, double si_per_unit) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "a number in %s%.6g, %.6g]", r.lo_open ? "(" : "[", r.lo / si_per_unit,
                r.hi / si_per_unit);
  return buf;
}

std::string shown(const toml::node& n) {
  if (n.is_table()) return "a table";
  if (n.is_array()) return "an array";
  std::ostringstream os;
  n.visit([&](auto&& v) { os << v; });
  return os.str();
}

// The spec's file for messages; every failure is one line naming file:line.
class SpecReader {
 public:
  explicit SpecReader(std::string where) : where_(std::move(where)) {}

  [[noreturn]] void fail(const toml::source_region& src, const std::string& what) const {
    std::string msg = "hardware spec error: ";
    msg += where_;
    if (src.begin.line > 0) msg += cat(":", std::to_string(src.begin.line));
    msg += ": ";
    msg += what;
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::replace(msg.begin(), msg.end(), '\r', ' ');
    throw InputError(msg);
  }

 private:
  std::string where_;
};

// The keys a table accepts, in the order messages list them: plain keys
// and every spelling of its quantities.
struct Keys {
  std::vector<std::string> list;
  Keys& add(const char* key) {
    list.push_back(key);
    return *this;
  }
  Keys& add(const std::vector<Unit>& units) {
    for (const Unit& u : units) list.push_back(u.key);
    return *this;
  }
};

// One table of the spec. A key outside `keys` fails first (a misspelt key
// is the cause of the "missing key" it would otherwise produce); then the
// reads take the keys one by one.
class TableReader {
 public:
  TableReader(const SpecReader& r, const toml::table& t, std::string prefix, const Keys& keys)
      : r_(r), t_(t), prefix_(std::move(prefix)), keys_(keys.list) {
    for (auto&& [k, n] : t_) {
      const std::string key(k.str());
      if (std::find(keys_.begin(), keys_.end(), key) != keys_.end()) continue;
      std::string list;
      for (const std::string& x : keys_) list += cat(list.empty() ? "" : ", ", x);
      r_.fail(k.source(),
              cat("unknown key '", dotted(key), "'; ", where(), " takes ", list, " (format: planner/hardware.cpp)"));
    }
  }

  std::string string(const char* key, bool required = true, const std::string& fallback = "") {
    const toml::node* n = take(key, required, "a string");
    if (!n) return fallback;
    auto s = n->as_string();
    if (!s) r_.fail(n->source(), cat("'", dotted(key), "' must be a string, got ", shown(*n)));
    if (s->get().empty()) r_.fail(n->source(), cat("'", dotted(key), "' is empty; give it a value"));
    return s->get();
  }

  bool boolean(const char* key) {
    const toml::node* n = take(key, true, "true or false");
    auto b = n->as_boolean();
    if (!b) r_.fail(n->source(), cat("'", dotted(key), "' must be true or false, got ", shown(*n)));
    return b->get();
  }

  int64_t integer(const char* key, int64_t lo, int64_t hi, bool required, int64_t fallback) {
    const std::string want = cat("an integer in ", std::to_string(lo), "..", std::to_string(hi));
    const toml::node* n = take(key, required, want);
    if (!n) return fallback;
    auto i = n->as_integer();
    if (!i || i->get() < lo || i->get() > hi)
      r_.fail(n->source(), cat("'", dotted(key), "' must be ", want, ", got ", shown(*n)));
    return i->get();
  }

  double number(const char* key, const SpecRange& range, const char* meaning) {
    return quantity({{key, 1}}, range, meaning);
  }
  // A key that may be left out (`fallback` then).
  double optional_number(const char* key, const SpecRange& range, const char* meaning, double fallback) {
    return take(key, false, "") ? quantity({{key, 1}}, range, meaning) : fallback;
  }

  // A quantity spelled in one of `units` (exactly one present), in SI.
  double quantity(const std::vector<Unit>& units, const SpecRange& range, const char* meaning) {
    const toml::node* found = nullptr;
    const Unit* unit = nullptr;
    std::string spellings;
    for (const Unit& u : units) {
      spellings += spellings.empty() ? "" : " or ";
      spellings += cat("'", dotted(u.key), "'");
      const toml::node* n = take(u.key, false, "");
      if (!n) continue;
      if (found)
        r_.fail(n->source(),
                cat("'", dotted(u.key), "' and '", dotted(unit->key), "' give the same quantity; keep one"));
      found = n;
      unit = &u;
    }
    if (!found) missing(spellings, meaning);
    double v = std::numeric_limits<double>::quiet_NaN();
    if (auto i = found->as_integer()) v = static_cast<double>(i->get());
    if (auto d = found->as_floating_point()) v = d->get();
    if (!range.contains(unit->to_si(v)))
      r_.fail(found->source(), cat("'", dotted(unit->key), "' must be ", range_text(range, unit->to_si(1)), " (",
                                   meaning, "), got ", shown(*found)));
    return unit->to_si(v);
  }

  // An array of numbers, each in `range` (SI after `scale`), `size` of them (0: any, at least one).
  std::vector<double> numbers(const char* key, const SpecRange& range, double scale, size_t size,
                              const char* meaning) {
    const toml::node* n = take(key, true, meaning);
    const toml::array* a = n->as_array();
    const std::string want = size ? cat("an array of ", std::to_string(size), " numbers") : std::string("an array of numbers");
    if (!a || a->empty() || (size && a->size() != size))
      r_.fail(n->source(), cat("'", dotted(key), "' must be ", want, " (", meaning, "), got ", shown(*n)));
    std::vector<double> out;
    for (const toml::node& e : *a) {
      double v = std::numeric_limits<double>::quiet_NaN();
      if (auto i = e.as_integer()) v = static_cast<double>(i->get());
      if (auto d = e.as_floating_point()) v = d->get();
      if (!range.contains(v * scale))
        r_.fail(e.source(), cat("'", dotted(key), "' holds ", shown(e), "; each must be ", range_text(range, scale),
                                " (", meaning, ")"));
      out.push_back(v * scale);
    }
    return out;
  }
  // A table that may be left out (nullptr then).
  const toml::table* optional_table(const char* key) {
    const toml::node* n = take(key, false, "");
    if (!n) return nullptr;
    auto t = n->as_table();
    if (!t) r_.fail(n->source(), cat("'", dotted(key), "' must be a table: write [", dotted(key), "]"));
    return t;
  }

  const toml::table& table(const char* key, const char* meaning) {
    const toml::node* n = take(key, true, meaning);
    auto t = n->as_table();
    if (!t) r_.fail(n->source(), cat("'", dotted(key), "' must be a table: write [", dotted(key), "]"));
    return *t;
  }

 private:
  const toml::node* take(const char* key, bool required, const std::string& meaning) {
    if (std::find(keys_.begin(), keys_.end(), key) == keys_.end())
      throw std::logic_error(cat("hardware spec reader: key '", key, "' read but not declared"));
    const toml::node* n = t_.get(key);
    if (!n && required) missing(cat("'", dotted(key), "'"), meaning);
    return n;
  }

  [[noreturn]] void missing(const std::string& spellings, const std::string& meaning) const {
    r_.fail(t_.source(), cat("missing key ", spellings, " in ", where(), "; add it (", meaning, ")"));
  }

  std::string dotted(const std::string& key) const { return prefix_.empty() ? key : cat(prefix_, ".", key); }
  std::string where() const { return prefix_.empty() ? std::string("the top level") : cat("[", prefix_, "]"); }

  const SpecReader& r_;
  const toml::table& t_;
  std::string prefix_;
  std::vector<std::string> keys_;
};

Link read_link(const SpecReader& r, const toml::table& t, const std::string& table, bool cpu) {
  TableReader tr(r, t, table, Keys().add("name").add(kLinkBandwidthUnits).add(kLatencyUnits));
  Link l;
  l.name = tr.string("name");
  l.bandwidth = tr.quantity(kLinkBandwidthUnits, spec_range("link_bandwidth", cpu),
                            cpu ? "GB/s per rank, one direction; 0: this machine's probe" : "GB/s per device, one direction");
  l.latency_s = tr.quantity(kLatencyUnits, spec_range("latency", false), "microseconds per message");
  return l;
}

Efficiency read_efficiency(const SpecReader& r, const toml::table& t, bool cpu) {
  const auto range = [cpu](const char* key) { return spec_range(key, cpu); };
  TableReader tr(r, t, "efficiency",
                 Keys()
                     .add("gemm")
                     .add("gemm_half_size")
                     .add("fp8_gemm")
                     .add("attention")
                     .add("memory")
                     .add("fused_traffic")
                     .add(kKernelOverheadUnits)
                     .add("dispatch")
                     .add("comm")
                     .add("overlap")
                     .add(kStepOverheadUnits)
                     .add("multi_thread")
                     .add("activation_factor")
                     .add("memory_overhead")
                     .add(kMemoryFixedUnits));
  Efficiency e;
  e.gemm = tr.number("gemm", range("gemm"), "fraction of the peak a large GEMM reaches");
  e.gemm_half_size = tr.number("gemm_half_size", range("gemm_half_size"), "min(m, n, k) at half the GEMM efficiency");
  e.fp8_gemm = tr.number("fp8_gemm", range("fp8_gemm"), "fraction of the fp8 peak a large fp8 GEMM reaches");
  e.attention = tr.number("attention", range("attention"), "fraction of the peak attention reaches");
  e.memory = tr.number("memory", range("memory"), "fraction of memory bandwidth element-wise kernels reach");
  e.fused_traffic = tr.number("fused_traffic", range("fused_traffic"), "element-wise bytes left after fusion, fraction");
  e.kernel_overhead_s = tr.quantity(kKernelOverheadUnits, range("kernel_overhead"), "microseconds per kernel");
  e.dispatch = tr.optional_number("dispatch", range("dispatch"), "cpu: probed ATen dispatches per kernel", 0);
  e.comm = tr.number("comm", range("comm"), "fraction of link bandwidth a collective reaches");
  e.overlap = tr.number("overlap", range("overlap"), "fraction of overlappable communication hidden");
  e.step_overhead_s = tr.quantity(kStepOverheadUnits, range("step_overhead"), "milliseconds per step");
  e.multi_thread = tr.number("multi_thread", range("multi_thread"), "cpu: compute rate of a multi-threaded rank, relative");
  e.activation_factor = tr.number("activation_factor", range("activation_factor"), "saved activations over the structural count");
  e.memory_overhead = tr.number("memory_overhead", range("memory_overhead"), "allocator slack, fraction of live bytes");
  e.memory_fixed_bytes = tr.quantity(kMemoryFixedUnits, range("memory_fixed"), "GiB per rank never freed");
  return e;
}

double machine_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t kb = 0;
  while (in >> name >> kb) {
    if (name == "MemTotal:") return static_cast<double>(kb) * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

// Shortest text that reads back to exactly `v` (TOML accepts "9.894e+14").
std::string number_text(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

// `key = value` in the first spelling of `units` whose scaled value reads
// back bit for bit, else in SI (the last spelling).
std::string quantity_line(const std::vector<Unit>& units, double v) {
  const Unit& first = units.front();
  const double t = first.from_si(v);
  for (double c : {t, std::nextafter(t, HUGE_VAL), std::nextafter(t, -HUGE_VAL)}) {
    if (first.to_si(c) == v) return cat(first.key, " = ", number_text(c), "\n");
  }
  return cat(units.back().key, " = ", number_text(v), "\n");
}

std::string link_toml(const char* table, const Link& l) {
  std::string out = "\n[";
  out += table;
  out += cat("]\nname = ", quoted(l.name), "\n");
  out += quantity_line(kLinkBandwidthUnits, l.bandwidth);
  out += quantity_line(kLatencyUnits, l.latency_s);
  return out;
}

bool is_path(const std::string& s) {
  return s.find('/') != std::string::npos || (s.size() >= 5 && s.compare(s.size() - 5, 5, ".toml") == 0);
}

}  // namespace

double HardwareSpec::peak_flops(const std::string& dtype) const {
  // Every listed device runs fp16 and bf16 at the same tensor-core rate.
  if (dtype == "bfloat16" || dtype == "bf16" || dtype == "float16" || dtype == "fp16") return peak_bf16_flops;
  if (dtype == "float8" || dtype == "fp8") return peak_fp8_flops;
  if (dtype == "float32" || dtype == "fp32") return peak_fp32_flops;
  std::string msg = "no peak FLOP/s for dtype '";
  msg += dtype;
  msg += cat("' in hardware spec '", name, "'; use bfloat16, float16, float32 or float8");
  throw InputError(msg);
}

std::string hardware_dir() {
  if (const char* env = std::getenv("CTITAN_HARDWARE_DIR"); env && *env) return env;
  std::string dir = CTITAN_RECIPES_DIR;
  dir += "/hardware";
  return dir;
}

std::vector<std::string> known_hardware() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(hardware_dir(), ec)) {
    if (e.path().extension() == ".toml" && e.is_regular_file(ec)) out.push_back(e.path().stem().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

HardwareSpec parse_hardware(const std::string& toml_text, const std::string& where) {
  const SpecReader r(where);
  check_toml_nesting(toml_text, where);
  toml::table root;
  try {
    root = toml::parse(toml_text, where);
  } catch (const toml::parse_error& e) {
    std::string what = "invalid TOML: ";
    what += e.description();
    r.fail(e.source(), what + "; fix the syntax");
  }

  TableReader top(r, root, "",
                  Keys()
                      .add("name")
                      .add("title")
                      .add("kind")
                      .add("source")
                      .add("peak_bf16_flops")
                      .add("peak_fp8_flops")
                      .add("peak_fp32_flops")
                      .add(kMemoryUnits)
                      .add(kMemoryBandwidthUnits)
                      .add("flash_attention")
                      .add("devices_per_node")
                      .add("cores")
                      .add("intra_node")
                      .add("inter_node")
                      .add("efficiency")
                      .add("calibration")
                      .add("gemm_by_size"));
  HardwareSpec s;
  s.path = where;
  s.name = top.string("name", false, fs::path(where).stem().string());
  s.title = top.string("title");
  s.kind = top.string("kind");
  if (s.kind != "gpu" && s.kind != "cpu")
    r.fail(root.get("kind")->source(), cat("'kind' must be \"gpu\" or \"cpu\", got \"", s.kind, "\""));
  const bool cpu = s.kind == "cpu";
  s.source = top.string("source");
  // A cpu's peaks may be 0 (measured at plan time); a gpu's bf16 and fp32 may not.
  const SpecRange peak = spec_range("peak_flops", cpu);
  s.peak_bf16_flops = top.number("peak_bf16_flops", peak, "dense FLOP/s per device");
  s.peak_fp8_flops = top.number("peak_fp8_flops", spec_range("peak_fp8_flops", cpu), "dense FLOP/s per device; 0: no fp8");
  s.peak_fp32_flops = top.number("peak_fp32_flops", peak, "dense FLOP/s per device");
  s.memory_bytes = top.quantity(kMemoryUnits, spec_range("memory_bytes", cpu),
                                cpu ? "GiB per device; 0: this machine's MemTotal" : "GiB per device");
  s.memory_bandwidth = top.quantity(kMemoryBandwidthUnits, spec_range("memory_bandwidth", cpu), "TB/s per device");
  s.flash_attention = top.boolean("flash_attention");
  s.devices_per_node = static_cast<int>(top.integer("devices_per_node", 1, kMaxWorldSize, true, 0));
  s.cores = static_cast<int>(top.integer("cores", 0, 1 << 20, false, 0));
  s.intra_node = read_link(r, top.table("intra_node", "the link between devices of one node"), "intra_node", cpu);
  s.inter_node = read_link(r, top.table("inter_node", "the network between nodes, per device"), "inter_node", cpu);
  s.eff = read_efficiency(r, top.table("efficiency", "the efficiencies; copy the table of a shipped spec"), cpu);
  {
    TableReader cal(r, top.table("calibration", "where the efficiencies come from"), "calibration",
                    Keys().add("source").add("tps_log_error_n").add("tps_log_error_mean").add("tps_log_error_sd"));
    s.calibration = cal.string("source");
    s.tps_error.n = static_cast<int>(cal.integer("tps_log_error_n", 0, 1000000, false, 0));
    if (s.tps_error.n > 0) {
      s.tps_error.mean = cal.number("tps_log_error_mean", SpecRange{-5, 5},
                                    "the mean of log(measured / predicted tokens/s) over the held-out runs");
      s.tps_error.sd = cal.number("tps_log_error_sd", SpecRange{0, 5}, "their standard deviation");
    }
  }

  if (const toml::table* g = top.optional_table("gemm_by_size")) {
    if (!cpu)
      r.fail(root.get("gemm_by_size")->source(),
             "[gemm_by_size] is a cpu spec's probed GEMM rates; a gpu spec has its peaks and gemm_half_size");
    TableReader t(r, *g, "gemm_by_size",
                  Keys().add("n").add("threads").add("bf16_flops").add("bf16_1t_flops").add("fp32_flops").add(
                      "fp32_1t_flops"));
    const std::vector<double> n = t.numbers("n", SpecRange{1, 1 << 20}, 1, 0, "GEMM sizes, increasing");
    if (!std::is_sorted(n.begin(), n.end(), std::less_equal<double>()))
      r.fail(g->get("n")->source(), "'gemm_by_size.n' must increase (each size once)");
    s.probe_threads = static_cast<int>(t.integer("threads", 1, 1 << 20, true, 0));
    const SpecRange rate = spec_range("peak_flops", false);
    const auto rates = [&](const char* key) { return t.numbers(key, rate, 1, n.size(), "FLOP/s, one per size"); };
    const std::vector<double> bf16 = rates("bf16_flops"), bf16_1t = rates("bf16_1t_flops"),
                              fp32 = rates("fp32_flops"), fp32_1t = rates("fp32_1t_flops");
    for (size_t i = 0; i < n.size(); ++i) s.probed_gemms.push_back({n[i], bf16[i], fp32[i], bf16_1t[i], fp32_1t[i]});
  }

  if (cpu && s.memory_bytes == 0) {
    s.memory_bytes = machine_memory_bytes();
    s.memory_from_machine = true;
    if (s.memory_bytes == 0)
      r.fail(toml::source_region{}, "memory is 0 (this machine's) but /proc/meminfo has no MemTotal; give memory_gib");
  }
  if (cpu && s.cores == 0) {
    s.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    s.cores_from_machine = true;
  }
  if (cpu) {
    const std::pair<const char*, double> zeros[] = {
        {"peak_bf16_flops", s.peak_bf16_flops},           {"peak_fp32_flops", s.peak_fp32_flops},
        {"memory_bandwidth", s.memory_bandwidth},         {"intra_node.bandwidth", s.intra_node.bandwidth},
        {"intra_node.latency", s.intra_node.latency_s},   {"inter_node.bandwidth", s.inter_node.bandwidth},
        {"inter_node.latency", s.inter_node.latency_s}};
    for (const auto& [key, v] : zeros)
      if (v == 0) s.probed.push_back(key);
  }
  return s;
}


HardwareSpec load_hardware(const std::string& name_or_path) {
  std::string path = name_or_path;
  if (!is_path(name_or_path)) {
    path = (fs::path(hardware_dir()) / (name_or_path + ".toml")).string();
    if (!fs::is_regular_file(path)) {
      std::string known;
      for (const std::string& k : known_hardware()) known += cat(known.empty() ? "" : ", ", k);
      std::string msg = "hardware '";
      msg += name_or_path;
      msg += cat("' is unknown; known: ", known.empty() ? std::string("none") : known, " (files in ", hardware_dir(),
                 "), or pass a path to a .toml spec");
      throw InputError(msg);
    }
  } else if (!fs::exists(path)) {
    std::string msg = "hardware spec '";
    msg += path;
    msg += cat("' does not exist; pass a .toml spec (see ", hardware_dir(), ") or a name from there");
    throw InputError(msg);
  }
  return parse_hardware(read_file_bounded(path, "hardware spec", kMaxConfigBytes, /*allow_empty=*/false), path);
}

std::string hardware_toml(const HardwareSpec& s) {
  std::string out = "# Hardware spec (format: planner/hardware.cpp). Peaks in FLOP/s, dense.\n";
  out += cat("name = ", quoted(s.name), "\n");
  out += cat("title = ", quoted(s.title), "\n");
  out += cat("kind = ", quoted(s.kind), "\n");
  out += cat("source = ", quoted(s.source), "\n");
  // A probed figure is written as 0: the spec stays "the machine that reads it".
  const auto figure = [&s](const char* key, double v) {
    return std::find(s.probed.begin(), s.probed.end(), key) != s.probed.end() ? 0.0 : v;
  };
  out += cat("peak_bf16_flops = ", number_text(figure("peak_bf16_flops", s.peak_bf16_flops)), "\n");
  out += cat("peak_fp8_flops = ", number_text(s.peak_fp8_flops), "\n");
  out += cat("peak_fp32_flops = ", number_text(figure("peak_fp32_flops", s.peak_fp32_flops)), "\n");
  out += quantity_line(kMemoryUnits, s.memory_from_machine ? 0.0 : s.memory_bytes);
  out += quantity_line(kMemoryBandwidthUnits, figure("memory_bandwidth", s.memory_bandwidth));
  out += cat("flash_attention = ", s.flash_attention ? "true" : "false", "\n");
  out += cat("devices_per_node = ", std::to_string(s.devices_per_node), "\n");
  out += cat("cores = ", std::to_string(s.cores_from_machine ? 0 : s.cores), "\n");
  Link intra = s.intra_node, inter = s.inter_node;
  intra.bandwidth = figure("intra_node.bandwidth", intra.bandwidth);
  intra.latency_s = figure("intra_node.latency", intra.latency_s);
  inter.bandwidth = figure("inter_node.bandwidth", inter.bandwidth);
  inter.latency_s = figure("inter_node.latency", inter.latency_s);
  out += link_toml("intra_node", intra);
  out += link_toml("inter_node", inter);
  const Efficiency& e = s.eff;
  out += "\n[efficiency]\n";
  out += cat("gemm = ", number_text(e.gemm), "\n");
  out += cat("gemm_half_size = ", number_text(e.gemm_half_size), "\n");
  out += cat("fp8_gemm = ", number_text(e.fp8_gemm), "\n");
  out += cat("attention = ", number_text(e.attention), "\n");
  out += cat("memory = ", number_text(e.memory), "\n");
  out += cat("fused_traffic = ", number_text(e.fused_traffic), "\n");
  out += quantity_line(kKernelOverheadUnits, e.kernel_overhead_s);
  if (e.dispatch > 0) out += cat("dispatch = ", number_text(e.dispatch), "\n");
  out += cat("comm = ", number_text(e.comm), "\n");
  out += cat("overlap = ", number_text(e.overlap), "\n");
  out += quantity_line(kStepOverheadUnits, e.step_overhead_s);
  out += cat("multi_thread = ", number_text(e.multi_thread), "\n");
  out += cat("activation_factor = ", number_text(e.activation_factor), "\n");
  out += cat("memory_overhead = ", number_text(e.memory_overhead), "\n");
  out += quantity_line(kMemoryFixedUnits, e.memory_fixed_bytes);
  out += cat("\n[calibration]\nsource = ", quoted(s.calibration), "\n");
  if (s.tps_error.n > 0) {
    out += "# log(measured / predicted tokens/s) over the held-out runs: each prediction's 80 % interval\n";
    out += cat("tps_log_error_n = ", std::to_string(s.tps_error.n), "\n");
    out += cat("tps_log_error_mean = ", number_text(s.tps_error.mean), "\n");
    out += cat("tps_log_error_sd = ", number_text(s.tps_error.sd), "\n");
  }
  // The GEMM rates by size where the peaks are written in (a probe's are
  // the machine's that reads the file, as its peaks are).
  const bool peaks_probed = figure("peak_bf16_flops", 1) == 0 || figure("peak_fp32_flops", 1) == 0;
  if (!s.probed_gemms.empty() && !peaks_probed) {
    const auto row = [&](const char* key, double HardwareSpec::ProbedGemm::*v) {
      std::string line = cat(key, " = [");
      for (size_t i = 0; i < s.probed_gemms.size(); ++i)
        line += cat(i ? ", " : "", number_text(s.probed_gemms[i].*v));
      return line + "]\n";
    };
    out += "\n[gemm_by_size]\n";
    out += row("n", &HardwareSpec::ProbedGemm::n);
    out += cat("threads = ", std::to_string(s.probe_threads), "\n");
    out += row("bf16_flops", &HardwareSpec::ProbedGemm::bf16);
    out += row("bf16_1t_flops", &HardwareSpec::ProbedGemm::bf16_1t);
    out += row("fp32_flops", &HardwareSpec::ProbedGemm::fp32);
    out += row("fp32_1t_flops", &HardwareSpec::ProbedGemm::fp32_1t);
  }
  return out;
}

void save_hardware(const HardwareSpec& spec, const std::string& path) {
  write_file_atomic(path, hardware_toml(spec));
}

}  // namespace ctitan
