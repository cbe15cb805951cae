// Hardware specs (planner/hardware.h): every shipped file loads with the
// maker's figures, specs round-trip through hardware_toml, and every bad
// name or file fails with one line naming the file, line and key.
#include <gtest/gtest.h>

#include "tests/unit/input_error.h"
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <sstream>

#include "common/errors.h"
#include "planner/hardware.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `text` with its first `from` replaced by `to` (which must be there).
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// "file:N" for the line of `text` holding `needle`.
std::string where(const std::string& file, const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  const long line = 1 + std::count(text.begin(), text.begin() + static_cast<long>(at), '\n');
  std::string out = file;
  out += std::string(":") + std::to_string(line) + ":";
  return out;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

const std::vector<std::string> kShipped = {"a100_40gb", "a100_80gb",     "b200", "cpu",   "h100_pcie",
                                           "h100_sxm",  "h100_sxm_500w", "h200", "mi300x"};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

TEST(HardwareSpecs, EveryShippedFileLoadsWithItsName) {
  ASSERT_EQ(known_hardware(), kShipped);
  for (const std::string& name : kShipped) {
    SCOPED_TRACE(name);
    const HardwareSpec s = load_hardware(name);
    EXPECT_EQ(s.name, name);
    EXPECT_EQ(s.path, hardware_dir() + "/" + name + ".toml");
    EXPECT_FALSE(s.title.empty());
    EXPECT_FALSE(s.source.empty());
    // An uncalibrated spec carries the struct's defaults; `--calibrate`
    // rewrites [efficiency] and says so in [calibration].
    if (s.calibration.rfind("uncalibrated", 0) == 0) {
      EXPECT_EQ(s.eff, Efficiency{});
    } else {
      EXPECT_NE(s.calibration.find("calibrated from"), std::string::npos) << s.calibration;
    }
    EXPECT_GT(s.memory_bytes, 0);
    // A cpu spec's zeros are this machine's probe (MachineProbe tests).
    const auto given = [&s](double v, const char* key) {
      return v > 0 || std::find(s.probed.begin(), s.probed.end(), key) != s.probed.end();
    };
    EXPECT_TRUE(given(s.memory_bandwidth, "memory_bandwidth"));
    EXPECT_TRUE(given(s.intra_node.bandwidth, "intra_node.bandwidth"));
    EXPECT_TRUE(given(s.inter_node.bandwidth, "inter_node.bandwidth"));
    if (s.kind == "gpu") {
      EXPECT_TRUE(s.probed.empty());
    }
    if (s.kind == "gpu") {
      EXPECT_GT(s.peak_bf16_flops, 100e12);
      EXPECT_GT(s.peak_fp32_flops, 1e12);
      EXPECT_TRUE(s.flash_attention);
      EXPECT_EQ(s.devices_per_node, 8);
      EXPECT_GT(s.intra_node.bandwidth, s.inter_node.bandwidth);
    }
  }
}

TEST(HardwareSpecs, MakersFiguresInSi) {
  const HardwareSpec h = load_hardware("h100_sxm");
  EXPECT_EQ(h.kind, "gpu");
  EXPECT_EQ(h.peak_bf16_flops, 989.4e12);
  EXPECT_EQ(h.peak_fp8_flops, 1978.9e12);
  EXPECT_EQ(h.memory_bytes, 80 * kGiB);
  EXPECT_DOUBLE_EQ(h.memory_bandwidth, 3.35e12);
  EXPECT_EQ(h.intra_node.bandwidth, 450e9);
  EXPECT_EQ(h.inter_node.bandwidth, 50e9);
  EXPECT_EQ(h.intra_node.latency_s, 3e-6);
  EXPECT_EQ(h.eff.kernel_overhead_s, 4e-6);
  EXPECT_EQ(h.peak_flops("bfloat16"), 989.4e12);
  EXPECT_EQ(h.peak_flops("bf16"), 989.4e12);
  EXPECT_EQ(h.peak_flops("float8"), 1978.9e12);
  EXPECT_EQ(h.peak_flops("float32"), 67e12);

  const HardwareSpec a = load_hardware("a100_80gb");
  EXPECT_EQ(a.peak_bf16_flops, 312e12);
  EXPECT_EQ(a.peak_flops("float8"), 0) << "no fp8 tensor cores: 0, no fallback to bf16";
  EXPECT_DOUBLE_EQ(a.memory_bandwidth, 2.039e12);
  EXPECT_EQ(a.intra_node.bandwidth, 300e9);
  EXPECT_EQ(a.inter_node.bandwidth, 25e9);

  const HardwareSpec t = load_hardware("h100_sxm_500w");
  EXPECT_EQ(t.peak_bf16_flops, 989e12);
  EXPECT_EQ(t.memory_bytes, 96 * kGiB);
  EXPECT_NE(t.source.find("not published"), std::string::npos) << "its HBM bandwidth is assumed, and says so";

  EXPECT_EQ(load_hardware("mi300x").intra_node.bandwidth, 448e9);
  EXPECT_EQ(load_hardware("b200").peak_fp8_flops, 4.5e15);
  EXPECT_NE(error_of([&] { h.peak_flops("int4"); }).find("'int4'"), std::string::npos);
}

TEST(HardwareSpecs, CpuSpecReadsThisMachine) {
  const HardwareSpec c = load_hardware("cpu");
  EXPECT_EQ(c.kind, "cpu");
  EXPECT_FALSE(c.flash_attention);
  EXPECT_EQ(c.peak_fp32_flops, 0) << "measured at plan time";
  EXPECT_TRUE(c.memory_from_machine);
  EXPECT_TRUE(c.cores_from_machine);
  EXPECT_GT(c.memory_bytes, 64 * 1024 * 1024.0);
  EXPECT_GE(c.cores, 1);
  EXPECT_GE(c.devices_per_node, 8) << "every world size runs on the one machine";
  // Written back as "this machine", not as the numbers found here.
  const std::string text = hardware_toml(c);
  EXPECT_NE(text.find("\nmemory_gib = 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ncores = 0\n"), std::string::npos) << text;
}

TEST(HardwareSpecs, RoundTripShippedSpecs) {
  for (const std::string& name : kShipped) {
    SCOPED_TRACE(name);
    const HardwareSpec a = load_hardware(name);
    const HardwareSpec b = parse_hardware(hardware_toml(a), a.path);
    EXPECT_EQ(a, b) << hardware_toml(a);
    EXPECT_EQ(hardware_toml(a), hardware_toml(b));
  }
}

// Values that no unit divides evenly and strings TOML must escape still read
// back bit for bit.
TEST(HardwareSpecs, RoundTripAwkwardValues) {
  std::mt19937_64 rng(18);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const auto pos = [&](double scale) { return scale * (0.001 + unit(rng)); };
  for (int i = 0; i < 300; ++i) {
    HardwareSpec s = load_hardware("h100_sxm");
    s.name = std::string("odd_") + std::to_string(i);
    s.title = "quote \" backslash \\ tab \t unicode \xc3\xa9";
    s.source = "line\nbreak";
    s.peak_bf16_flops = pos(1e15);
    s.peak_fp8_flops = i % 3 == 0 ? 0 : pos(2e15);
    s.peak_fp32_flops = pos(1e14);
    s.memory_bytes = std::floor(pos(1e11));
    s.memory_bandwidth = pos(1e13);
    s.flash_attention = i % 2 == 0;
    s.devices_per_node = 1 + i % 16;
    s.cores = i % 5;
    s.intra_node = {"link \"x\"", pos(1e12), pos(1e-4)};
    s.inter_node = {"net", pos(1e11), pos(1e-3)};
    s.eff.gemm = pos(0.99);
    s.eff.gemm_half_size = pos(1000);
    s.eff.fp8_gemm = pos(0.99);
    s.eff.attention = pos(0.99);
    s.eff.memory = pos(0.99);
    s.eff.fused_traffic = pos(2);
    s.eff.kernel_overhead_s = pos(1e-5);
    s.eff.comm = pos(0.99);
    s.eff.overlap = unit(rng);
    s.eff.step_overhead_s = pos(1e-2);
    s.eff.activation_factor = pos(2);
    s.eff.multi_thread = pos(4);
    s.eff.memory_overhead = pos(0.2);
    s.eff.memory_fixed_bytes = std::floor(pos(4e9));
    s.calibration = "calibrated from runs.db (12 runs, hold-out median error 7.5 %)";
    s.tps_error = i % 2 ? LogSpread{} : LogSpread{3 + i % 50, unit(rng) - 0.5, pos(0.5)};
    s.path = "odd.toml";
    const std::string text = hardware_toml(s);
    HardwareSpec back;
    ASSERT_NO_THROW(back = parse_hardware(text, "odd.toml")) << text;
    ASSERT_EQ(back, s) << text;
  }
}

// The shipped h100_sxm.toml with one change, parsed as "bad.toml": the
// message is one line naming bad.toml, the line and the key.
void expect_bad(const std::string& from, const std::string& to, const std::vector<std::string>& wants,
                const std::string& line_of = "") {
  SCOPED_TRACE(to);
  const std::string text = replaced(read(hardware_dir() + "/h100_sxm.toml"), from, to);
  const std::string msg = error_of([&] { parse_hardware(text, "bad.toml"); });
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find(where("bad.toml", text, line_of.empty() ? to : line_of)), std::string::npos) << msg;
  for (const std::string& w : wants) EXPECT_NE(msg.find(w), std::string::npos) << "want '" << w << "' in: " << msg;
}

TEST(HardwareSpecs, BadFilesFailWithOneLineNamingFileLineAndKey) {
  expect_bad("devices_per_node = 8", "devices_per_node = 8\nmemory_bandwith_tb_s = 3",
             {"unknown key 'memory_bandwith_tb_s'", "memory_bandwidth_tb_s"}, "memory_bandwith_tb_s");
  expect_bad("latency_us = 3 ", "latency_ms = 3 ",
             {"unknown key 'intra_node.latency_ms'",
              "[intra_node] takes name, bandwidth_gb_s, bandwidth_bytes_s, latency_us"});
  expect_bad("\n[calibration]", "\n[calibrations]", {"unknown key 'calibrations'"}, "[calibrations]");
  expect_bad("peak_bf16_flops = 989.4e12", "peak_bf16_flops = \"989.4e12\"",
             {"'peak_bf16_flops' must be a number in [1e+09, 1e+18]", "989.4e12"});
  expect_bad("flash_attention = true", "flash_attention = 1", {"'flash_attention' must be true or false"});
  expect_bad("devices_per_node = 8", "devices_per_node = 0", {"'devices_per_node' must be an integer in 1.."});
  expect_bad("bandwidth_gb_s = 450", "bandwidth_gb_s = -450",
             {"'intra_node.bandwidth_gb_s' must be a number in [0.001, 100000]", "-450"});
  expect_bad("gemm = 0.75", "gemm = 0", {"'efficiency.gemm' must be a number in (0, 1]"});
  expect_bad("fp8_gemm = 0.65", "fp8_gemm = 1.5", {"'efficiency.fp8_gemm' must be a number in (0, 1]"});
  // Issue 33, item 6: absurd values that used to be accepted (1e300 gave 163 % MFU,
  // 1e-300 GB/s a 63-digit step time).
  expect_bad("gemm = 0.75", "gemm = 1e300", {"'efficiency.gemm' must be a number in (0, 1]", "1e+300"});
  expect_bad("bandwidth_gb_s = 450", "bandwidth_gb_s = 1e-300", {"'intra_node.bandwidth_gb_s' must be a number in [0.001"});
  expect_bad("latency_us = 3 ", "latency_us = 1e20 ", {"'intra_node.latency_us' must be a number in [0, 1e+06]"});
  expect_bad("memory_gib = 80", "memory_gib = 1e300", {"'memory_gib' must be a number in"});
  expect_bad("devices_per_node = 8", "devices_per_node = 1000000", {"'devices_per_node' must be an integer in 1..65536"});
  expect_bad("kind = \"gpu\"", "kind = \"tpu\"", {"'kind' must be \"gpu\" or \"cpu\"", "tpu"});
  expect_bad("memory_gib = 80", "memory_gib = 80\nmemory_bytes = 85899345920",
             {"'memory_bytes' and 'memory_gib' give the same quantity"}, "memory_bytes");
  expect_bad("memory_gib = 80", "memory_gib = = 80", {"invalid TOML"});
  // The calibration's spread of log errors, for every prediction's interval.
  expect_bad("\n[calibration]", "\n[calibration]\ntps_log_error_n = 5\ntps_log_error_mean = 0\ntps_log_error_sd = -1",
             {"'calibration.tps_log_error_sd' must be a number in [0, 5]"}, "tps_log_error_sd");
  expect_bad("\n[calibration]", "\n[calibration]\ntps_log_error_n = -2",
             {"'calibration.tps_log_error_n' must be an integer in 0..1000000"}, "tps_log_error_n");
}

TEST(HardwareSpecs, MissingKeyIsNamed) {
  const std::string text =
      replaced(read(hardware_dir() + "/h100_sxm.toml"), "memory_bandwidth_tb_s = 3.35", "# removed");
  const std::string msg = error_of([&] { parse_hardware(text, "bad.toml"); });
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad.toml"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing key 'memory_bandwidth_tb_s' or 'memory_bandwidth_gb_s'"), std::string::npos) << msg;

  const std::string no_link = replaced(read(hardware_dir() + "/h100_sxm.toml"), "latency_us = 10", "");
  const std::string msg2 = error_of([&] { parse_hardware(no_link, "bad.toml"); });
  EXPECT_NE(msg2.find("missing key 'inter_node.latency_us'"), std::string::npos) << msg2;
  EXPECT_NE(msg2.find(where("bad.toml", no_link, "[inter_node]")), std::string::npos) << msg2;

  const std::string no_mean = replaced(read(hardware_dir() + "/h100_sxm.toml"), "\n[calibration]",
                                       "\n[calibration]\ntps_log_error_n = 5\ntps_log_error_sd = 0.1");
  const std::string msg3 = error_of([&] { parse_hardware(no_mean, "bad.toml"); });
  EXPECT_NE(msg3.find("missing key 'calibration.tps_log_error_mean'"), std::string::npos) << msg3;
}

TEST(HardwareSpecs, UnknownNameListsTheKnownOnesInOneLine) {
  const std::string msg = error_of([] { load_hardware("xyz"); });
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  std::string want = "hardware 'xyz' is unknown; known: a100_40gb, a100_80gb, b200, cpu, h100_pcie, h100_sxm, ";
  want += std::string("h100_sxm_500w, h200, mi300x (files in ") + hardware_dir() + "), or pass a path to a .toml spec";
  EXPECT_EQ(msg, want);

  const std::string missing = error_of([] { load_hardware("/nonexistent/box.toml"); });
  EXPECT_NE(missing.find("'/nonexistent/box.toml' does not exist"), std::string::npos) << missing;
}

TEST(HardwareSpecs, HardwareDirFromEnvironmentAndPaths) {
  const fs::path dir = fs::temp_directory_path() / (std::string("ctitan_hw_test_") + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string shipped = hardware_dir() + "/h100_sxm.toml";
  std::ofstream(dir / "mybox.toml") << read(shipped);  // no name key: the stem names it
  std::ofstream(dir / "notes.txt") << "not a spec";
  {
    ScopedEnv env("CTITAN_HARDWARE_DIR", dir.string());
    EXPECT_EQ(hardware_dir(), dir.string());
    EXPECT_EQ(known_hardware(), std::vector<std::string>{"mybox"});
    const HardwareSpec s = load_hardware("mybox");
    EXPECT_EQ(s.name, "mybox");
    EXPECT_EQ(s.peak_bf16_flops, 989.4e12);
    const std::string msg = error_of([] { load_hardware("h100_sxm"); });
    EXPECT_NE(msg.find(std::string("known: mybox (files in ") + dir.string() + ")"), std::string::npos) << msg;
    // A path wins over the folder, with or without a '/'.
    EXPECT_EQ(load_hardware(shipped).name, "h100_sxm");
  }
  EXPECT_NE(hardware_dir(), dir.string());
  const std::string by_path = (dir / "mybox.toml").string();
  EXPECT_EQ(load_hardware(by_path).name, "mybox");
  EXPECT_EQ(load_hardware(by_path).path, by_path);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ctitan
