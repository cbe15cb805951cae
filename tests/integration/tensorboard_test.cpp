// `ctitan train --metrics.enable_tensorboard` read back by the tensorboard
// package itself (tests/tools/read_tensorboard.py: EventAccumulator, and
// its record reader for every CRC): TorchTitan's folder layout and tags, and
// per step the same values as metrics.jsonl (to float32 precision, the type
// TensorBoard stores). One process, two ranks writing a folder each, and a
// folder that cannot be written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/integration/process.h"

namespace fs = std::filesystem;
using ctitan::testing::fresh_dir;
using ctitan::testing::read_jsonl;
using ctitan::testing::run_ctitan;
using ctitan::testing::source_dir;

namespace {

// The reader needs the venv's tensorboard (scripts/requirements-test.txt).
bool have_tensorboard() { return ctitan::testing::python_has("tensorboard"); }

// read_tensorboard.py's JSON for `folder`: {run: {tag: [[step, value], ...]}}.
nlohmann::json read_tensorboard(const fs::path& folder) {
  const auto r = ctitan::testing::run_python_tool("read_tensorboard.py", {folder.string()});
  EXPECT_EQ(r.exit_code, 0) << folder << "\n" << r.out << r.err;
  return nlohmann::json::parse(r.out, nullptr, false);
}

std::vector<std::string> run_args(const fs::path& dump) {
  return {"train",
          "--model.flavor",
          "debugmodel",
          "--training.seq_len",
          "32",
          "--training.local_batch_size",
          "2",
          "--training.steps",
          "4",
          "--metrics.log_freq",
          "1",
          "--metrics.enable_tensorboard",
          "--metrics.peak_tflops",
          "1",
          "--training.mixed_precision_param",
          "float32",
          "--job.dump_folder",
          dump.string()};
}

// The one timestamp folder under dump/tb, named as TorchTitan's %Y%m%d-%H%M.
fs::path timestamp_folder(const fs::path& dump) {
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dump / "tb")) found.push_back(e.path());
  EXPECT_EQ(found.size(), 1u);
  if (found.empty()) return {};
  EXPECT_TRUE(std::regex_match(found[0].filename().string(), std::regex("[0-9]{8}-[0-9]{4}"))) << found[0];
  return found[0];
}

// tag -> value at `step`; NaN when absent.
double at_step(const nlohmann::json& run, const std::string& tag, int64_t step) {
  if (!run.contains(tag)) return std::nan("");
  for (const auto& sv : run[tag])
    if (sv[0].get<int64_t>() == step) return sv[1].get<double>();
  return std::nan("");
}

// Every logged step: the TensorBoard scalar equals metrics.jsonl's value
// rounded to float32.
void expect_scalars_match_jsonl(const nlohmann::json& run, const std::vector<nlohmann::json>& rows) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const std::vector<std::pair<std::string, std::string>> same = {{"loss_metrics/global_avg_loss", "loss"},
                                                                 {"loss_metrics/global_max_loss", "max_loss"},
                                                                 {"grad_norm", "grad_norm"},
                                                                 {"lr", "lr"},
                                                                 {"throughput(tps)", "tps"},
                                                                 {"tflops", "tflops"},
                                                                 {"mfu(%)", "mfu"},
                                                                 {"time_metrics/end_to_end(s)", "step_time_s"},
                                                                 {"time_metrics/data_loading(s)", "data_time_s"}};
  for (const auto& row : rows) {
    const int64_t step = row["step"].get<int64_t>();
    for (const auto& [tag, key] : same) {
      const double want = row[key].get<double>(), got = at_step(run, tag, step);
      EXPECT_NEAR(got, want, 1e-6 * std::abs(want) + 1e-30) << tag << " at step " << step;
    }
    const double data_pct = 100.0 * row["data_time_s"].get<double>() / row["step_time_s"].get<double>();
    EXPECT_NEAR(at_step(run, "time_metrics/data_loading(%)", step), data_pct, 1e-5 * data_pct + 1e-12) << step;
    const double gib = row["mem_peak_bytes"].get<double>() / kGiB;
    EXPECT_NEAR(at_step(run, "memory/max_active(GiB)", step), gib, 1e-6 * gib) << step;
    EXPECT_GT(at_step(run, "memory/max_reserved(GiB)", step), 0) << step;
  }
}

TEST(TensorBoard, ScalarsEqualMetricsJsonl) {
  if (!have_tensorboard()) GTEST_SKIP() << ctitan::testing::venv_python() << " cannot import tensorboard (scripts/bootstrap.sh installs it)";
  const auto dump = fresh_dir("tensorboard");
  const auto r = run_ctitan(run_args(dump));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const fs::path ts = timestamp_folder(dump);
  const auto tb = read_tensorboard(dump / "tb");
  ASSERT_TRUE(tb.is_object()) << tb;
  const std::string run_name = ts.filename().string();
  ASSERT_TRUE(tb.contains(run_name)) << tb.dump();
  const auto& run = tb[run_name];
  for (const char* tag :
       {"loss_metrics/global_avg_loss", "loss_metrics/global_max_loss", "grad_norm", "throughput(tps)", "tflops",
        "mfu(%)", "time_metrics/end_to_end(s)", "time_metrics/data_loading(s)", "time_metrics/data_loading(%)",
        "memory/max_active(GiB)", "memory/max_active(%)", "memory/max_reserved(GiB)", "memory/max_reserved(%)", "lr"})
    EXPECT_EQ(run.contains(tag) ? run[tag].size() : 0u, 4u) << tag;
  const auto rows = read_jsonl(dump / "metrics.jsonl");
  ASSERT_EQ(rows.size(), 4u);
  expect_scalars_match_jsonl(run, rows);
  // One process: the largest rank loss is the mean.
  for (const auto& row : rows) EXPECT_EQ(row["max_loss"], row["loss"]);
}

// An MoE run's expert load: moe/load_cv, moe/load_min, moe/load_max per
// logged step, equal to metrics.jsonl's moe_load_* (float32).
TEST(TensorBoard, MoeExpertLoadEqualsMetricsJsonl) {
  if (!have_tensorboard()) GTEST_SKIP() << ctitan::testing::venv_python() << " cannot import tensorboard (scripts/bootstrap.sh installs it)";
  const auto dump = fresh_dir("tensorboard_moe");
  std::vector<std::string> args = run_args(dump);
  args[2] = "tiny_moe";
  args.insert(args.begin() + 1, {"--model.name", "qwen3"});
  const auto r = run_ctitan(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto tb = read_tensorboard(dump / "tb");
  const std::string run_name = timestamp_folder(dump).filename().string();
  ASSERT_TRUE(tb.contains(run_name)) << tb.dump();
  const auto rows = read_jsonl(dump / "metrics.jsonl");
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& row : rows)
    for (const char* key : {"load_cv", "load_min", "load_max"}) {
      const double want = row[std::string("moe_") + key].get<double>();
      EXPECT_NEAR(at_step(tb[run_name], std::string("moe/") + key, row["step"].get<int64_t>()), want,
                  1e-6 * std::abs(want) + 1e-30)
          << key;
    }
}

TEST(TensorBoard, SaveForAllRanksWritesARankFolderEach) {
  if (!have_tensorboard()) GTEST_SKIP() << ctitan::testing::venv_python() << " cannot import tensorboard (scripts/bootstrap.sh installs it)";
  const auto dump = fresh_dir("tensorboard_ranks");
  auto args = run_args(dump);
  for (std::string a :
       {"--nproc", "2", "--parallelism.data_parallel_shard_degree", "2", "--metrics.save_for_all_ranks"})
    args.push_back(a);
  const auto r = run_ctitan(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const fs::path ts = timestamp_folder(dump);
  EXPECT_TRUE(fs::is_directory(ts / "rank_0"));
  EXPECT_TRUE(fs::is_directory(ts / "rank_1"));
  const auto tb = read_tensorboard(dump / "tb");
  const std::string name = ts.filename().string();
  ASSERT_TRUE(tb.contains(name + "/rank_0") && tb.contains(name + "/rank_1")) << tb.dump();
  const auto rows = read_jsonl(dump / "metrics.jsonl");  // rank 0's
  ASSERT_EQ(rows.size(), 4u);
  const auto& rank0 = tb[name + "/rank_0"];
  const auto& rank1 = tb[name + "/rank_1"];
  expect_scalars_match_jsonl(rank0, rows);
  for (const auto& row : rows) {
    const int64_t step = row["step"].get<int64_t>();
    // The global loss, its max over the ranks and the norm are the same on both ranks.
    for (const char* tag : {"loss_metrics/global_avg_loss", "loss_metrics/global_max_loss", "grad_norm", "lr"})
      EXPECT_EQ(at_step(rank1, tag, step), at_step(rank0, tag, step)) << tag << " at step " << step;
    // Two ranks see different batches: the max is the larger one's loss.
    EXPECT_GE(row["max_loss"].get<double>(), row["loss"].get<double>()) << step;
  }
}

TEST(TensorBoard, UnwritableFolderIsOneLineAndExitCode2) {
  const auto dump = fresh_dir("tensorboard_bad");
  { std::ofstream(dump / "tb") << "a file where the TensorBoard folder goes"; }
  const auto r = run_ctitan(run_args(dump));
  ctitan::testing::expect_one_line_exit2(r, (dump / "tb").string());
  EXPECT_NE(r.err.find("writable folder"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dump / "metrics.jsonl"));
  EXPECT_TRUE(fs::is_regular_file(dump / "tb"));
}

}  // namespace
