// TensorBoard event files: CRC-32C and its mask against published values,
// the writer's records read back through our own reading of the TFRecord
// framing (every CRC checked) and protobuf's generated Event parser, the
// metrics logger's TorchTitan tags, and a folder that cannot be written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/errors.h"
#include "trainer/metrics.h"
#include "trainer/tensorboard/event.pb.h"
#include "trainer/tensorboard/tb_writer.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

fs::path fresh(const std::string& name) {
  auto d = fs::path(::testing::TempDir()) / ("ctitan_tb_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

uint64_t read_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// The TFRecord framing read independently of the writer: length, masked
// CRC of the length, data, masked CRC of the data. `error` names the first
// record whose framing or checksum is wrong.
std::vector<std::string> read_records(const std::string& bytes, std::string& error) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    const std::string where = "record " + std::to_string(records.size()) + " at byte " + std::to_string(at);
    if (bytes.size() - at < 12) {
      error = where + ": truncated header";
      return records;
    }
    const uint64_t len = read_le(bytes, at, 8);
    if (read_le(bytes, at + 8, 4) != masked_crc32c(bytes.data() + at, 8)) {
      error = where + ": length CRC mismatch";
      return records;
    }
    if (bytes.size() - at - 12 < len + 4) {
      error = where + ": truncated data";
      return records;
    }
    std::string data = bytes.substr(at + 12, len);
    if (read_le(bytes, at + 12 + len, 4) != masked_crc32c(data.data(), data.size())) {
      error = where + ": data CRC mismatch";
      return records;
    }
    records.push_back(std::move(data));
    at += 12 + len + 4;
  }
  return records;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(e.path());
  return files;
}

// Every record of one file, parsed; the file_version event first.
std::vector<tensorboard::Event> read_events(const fs::path& file) {
  std::string error;
  const auto records = read_records(slurp(file), error);
  EXPECT_EQ(error, "") << file;
  std::vector<tensorboard::Event> events;
  for (const auto& r : records) {
    tensorboard::Event e;
    EXPECT_TRUE(e.ParseFromString(r));
    events.push_back(e);
  }
  return events;
}

// tag -> step -> value, from the scalar events.
std::map<std::string, std::map<int64_t, float>> scalars(const std::vector<tensorboard::Event>& events) {
  std::map<std::string, std::map<int64_t, float>> out;
  for (const auto& e : events)
    if (e.has_summary())
      for (const auto& v : e.summary().value()) out[v.tag()][e.step()] = v.simple_value();
  return out;
}

TEST(TensorBoardCrc, MatchesPublishedValues) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xE3069283u);  // the CRC-32C check value
  // TensorBoard's own masked_crc32c (tensorboard.compat.tensorflow_stub) gives these.
  EXPECT_EQ(masked_crc32c(check.data(), check.size()), 0xC78AB0E5u);
  const char len24[8] = {24, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(masked_crc32c(len24, 8), 0x224B7FA3u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(TensorBoardCrc, FramesARecord) {
  const std::string r = tfrecord("123456789");
  ASSERT_EQ(r.size(), 8u + 4 + 9 + 4);
  EXPECT_EQ(read_le(r, 0, 8), 9u);
  EXPECT_EQ(r.substr(12, 9), "123456789");
  EXPECT_EQ(read_le(r, 21, 4), 0xC78AB0E5u);
  std::string error;
  EXPECT_EQ(read_records(r, error).size(), 1u);
  EXPECT_EQ(error, "");
  std::string flipped = r;
  flipped[15] ^= 1;  // one bit of the data
  read_records(flipped, error);
  EXPECT_NE(error.find("data CRC mismatch"), std::string::npos) << error;
}

TEST(TensorBoardWriter, RoundTripsScalars) {
  const fs::path dir = fresh("roundtrip") / "tb" / "run";  // parents created by the writer
  std::string path;
  {
    TensorBoardWriter w(dir.string());
    path = w.path();
    w.add_scalar("loss_metrics/global_avg_loss", 10.5, 1);
    w.add_scalar("grad_norm", 0.125, 1);
    w.flush();
    // Flushed: readable while the writer is still open.
    std::string error;
    EXPECT_EQ(read_records(slurp(path), error).size(), 3u);
    EXPECT_EQ(error, "");
    w.add_scalar("loss_metrics/global_avg_loss", 9.25, 2);
    w.add_scalar("lr", 8e-4, 2);
  }  // closed: the rest is written
  const fs::path file(path);
  EXPECT_EQ(file.parent_path(), dir);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u) << file;
  EXPECT_NE(file.filename().string().find(std::string(".") + host), std::string::npos) << file;

  const auto events = read_events(file);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_FALSE(events[0].has_summary());
  const double now = static_cast<double>(std::time(nullptr));
  for (const auto& e : events) EXPECT_NEAR(e.wall_time(), now, 60.0);
  auto s = scalars(events);
  EXPECT_EQ(s["loss_metrics/global_avg_loss"][1], 10.5f);
  EXPECT_EQ(s["loss_metrics/global_avg_loss"][2], 9.25f);
  EXPECT_EQ(s["grad_norm"][1], 0.125f);
  EXPECT_EQ(s["lr"][2], static_cast<float>(8e-4));
  EXPECT_EQ(events[1].summary().value_size(), 1);  // one value per event, as SummaryWriter.add_scalar
}

TEST(TensorBoardWriter, SecondFileInTheSameSecondGetsItsOwnName) {
  const fs::path dir = fresh("twice");
  TensorBoardWriter a(dir.string()), b(dir.string());
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(event_files(dir).size(), 2u);
}

TEST(TensorBoardWriter, FolderThatIsAFileIsOneLineAndLeavesNothing) {
  const fs::path root = fresh("badfile");
  { std::ofstream(root / "tb") << "not a folder"; }
  for (const fs::path& bad : {root / "tb", root / "tb" / "20260101-0000" / "rank_0"}) {
    try {
      TensorBoardWriter w(bad.string());
      ADD_FAILURE() << "no error for " << bad;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(bad.string()), std::string::npos) << msg;
      EXPECT_NE(msg.find("writable folder"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(slurp(root / "tb"), "not a folder");
  EXPECT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()), 1);
}

TEST(TensorBoardWriter, ReadOnlyFolderIsOneLineAndLeavesNothing) {
  if (geteuid() == 0) GTEST_SKIP() << "running as root: a read-only folder is still writable";
  const fs::path root = fresh("readonly");
  fs::permissions(root, fs::perms::owner_read | fs::perms::owner_exec);
  EXPECT_THROW(TensorBoardWriter((root / "tb" / "x").string()), InputError);
  fs::permissions(root, fs::perms::owner_all);
  EXPECT_TRUE(fs::is_empty(root));
}

// Root passes permission checks; a folder under /proc cannot be made by anyone.
TEST(TensorBoardWriter, UncreatableFolderIsOneLine) {
  const std::string bad = "/proc/self/ctitan_tb/run";
  try {
    TensorBoardWriter w(bad);
    ADD_FAILURE() << "no error for " << bad;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists("/proc/self/ctitan_tb"));
}

TEST(TensorBoardLayout, TorchTitansFolders) {
  const char* old_tz = std::getenv("TZ");
  const std::string saved = old_tz ? old_tz : "";
  setenv("TZ", "UTC", 1);
  tzset();
  const int64_t t = 1767225600 + 12 * 3600 + 34 * 60 + 56;  // 2026-01-01 12:34:56 UTC
  EXPECT_EQ(tensorboard_folder("out", "tb", t, -1), "out/tb/20260101-1234");
  EXPECT_EQ(tensorboard_folder("out", "tb", t, 3), "out/tb/20260101-1234/rank_3");
  if (old_tz) {
    setenv("TZ", saved.c_str(), 1);
  } else {
    unsetenv("TZ");
  }
  tzset();
}

MetricsOptions logger_options(const fs::path& dump) {
  MetricsOptions mo;
  mo.dump_folder = dump.string();
  mo.log_freq = 1;
  mo.color = false;
  mo.flops_per_token = 1e6;
  mo.peak_flops = 1e12;
  mo.tensorboard_folder = (dump / "tb" / "now").string();
  return mo;
}

TEST(TensorBoardMetrics, LoggedStepsUseTorchTitansTags) {
  const fs::path dump = fresh("metrics");
  {
    MetricsLogger m(logger_options(dump));
    StepRecord r{1, 10.5, 2.0, 8e-4, 0.5, 0.1, 1000};
    r.max_loss = 11.0;
    m.record(r, false);
    m.record({2, 9.5, 1.5, 7e-4, 0.25, 0.05, 1000}, true);  // max_loss not read: no global_max_loss
  }
  const auto files = event_files(dump / "tb" / "now");
  ASSERT_EQ(files.size(), 1u);
  auto s = scalars(read_events(files[0]));
  for (const char* tag :
       {"loss_metrics/global_avg_loss", "grad_norm", "throughput(tps)", "tflops", "mfu(%)",
        "time_metrics/end_to_end(s)", "time_metrics/data_loading(s)", "time_metrics/data_loading(%)",
        "memory/max_active(GiB)", "memory/max_reserved(GiB)", "memory/max_active(%)", "memory/max_reserved(%)", "lr"})
    EXPECT_EQ(s[tag].size(), 2u) << tag;
  EXPECT_EQ(s["loss_metrics/global_max_loss"].size(), 1u);
  EXPECT_EQ(s["loss_metrics/global_max_loss"][1], 11.0f);
  EXPECT_EQ(s["loss_metrics/global_avg_loss"][2], 9.5f);
  EXPECT_EQ(s["throughput(tps)"][1], 2000.0f);  // 1000 tokens in 0.5 s
  EXPECT_EQ(s["tflops"][1], static_cast<float>(1e6 * 2000 / 1e12));
  EXPECT_EQ(s["mfu(%)"][2], static_cast<float>(100.0 * 1e6 * 4000 / 1e12));
  EXPECT_EQ(s["time_metrics/end_to_end(s)"][2], 0.25f);
  EXPECT_EQ(s["time_metrics/data_loading(s)"][1], 0.1f);
  EXPECT_EQ(s["time_metrics/data_loading(%)"][1], static_cast<float>(100.0 * 0.1 / 0.5));
  EXPECT_EQ(s["lr"][2], static_cast<float>(7e-4));

  std::ifstream in(dump / "metrics.jsonl");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(nlohmann::json::parse(line)["max_loss"], 11.0);
  std::getline(in, line);
  EXPECT_TRUE(nlohmann::json::parse(line)["max_loss"].is_null());
}

TEST(TensorBoardMetrics, ValidationGoesToConsoleJsonlAndTensorBoard) {
  const fs::path dump = fresh("validation");
  ::testing::internal::CaptureStdout();
  {
    MetricsLogger m(logger_options(dump));
    m.log_validation(20, 2.5, 4096, 2.0, 81920, 12.5);
  }
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("validate step 20: loss  2.5000  perplexity 12.18"), std::string::npos) << out;
  EXPECT_NE(out.find("tps 2,048"), std::string::npos) << out;

  std::ifstream in(dump / "metrics.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["step"], 20);
  EXPECT_EQ(j["validation_loss"], 2.5);
  EXPECT_DOUBLE_EQ(j["validation_perplexity"].get<double>(), std::exp(2.5));
  EXPECT_EQ(j["validation_tokens"], 4096);
  EXPECT_DOUBLE_EQ(j["validation_tps"].get<double>(), 2048.0);

  auto s = scalars(read_events(event_files(dump / "tb").at(0)));
  EXPECT_EQ(s["validation_metrics/loss"][20], 2.5f);
  EXPECT_EQ(s["validation_metrics/perplexity"][20], static_cast<float>(std::exp(2.5)));
  EXPECT_EQ(s["validation_metrics/throughput(tps)"][20], 2048.0f);
  EXPECT_EQ(s["validation_metrics/memory/max_active(GiB)"].size(), 1u);
  EXPECT_EQ(s.count("loss_metrics/global_avg_loss"), 0u);
}

TEST(TensorBoardMetrics, UnwritableFolderStopsBeforeMetricsJsonl) {
  const fs::path dump = fresh("unwritable");
  { std::ofstream(dump / "tb") << "x"; }
  EXPECT_THROW(MetricsLogger m(logger_options(dump)), InputError);
  EXPECT_FALSE(fs::exists(dump / "metrics.jsonl"));
}

}  // namespace
}  // namespace ctitan
