// `ctitan plan` end to end: predictions labelled, bad input in one line,
// the calibration of the CPU spec on the committed sweep database
// (hold-out error), a fresh CPU run's peak memory against the calibrated
// spec's prediction, and the published tables' median error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "tests/integration/process.h"

namespace ctitan::testing {
namespace {

namespace fs = std::filesystem;

std::string src(const std::string& rel) { return (fs::absolute(source_dir()) / rel).string(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? NAN : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

TEST(PlanCli, PredictionIsLabelledWithSpecAndCalibration) {
  const auto r = run_ctitan({"plan", src("recipes/llama3_8b.toml"), "--hardware", "h100_sxm", "--ngpu", "8",
                             "--training.local_batch_size", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("predicted on h100_sxm"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("predicted memory per rank"), std::string::npos);
  EXPECT_NE(r.out.find("predicted step time"), std::string::npos);
  EXPECT_NE(r.out.find("uncalibrated"), std::string::npos);  // h100_sxm's calibration source
  const auto j = run_ctitan({"plan", src("recipes/llama3_8b.toml"), "--hardware", "h100_sxm", "--ngpu", "16", "--json",
                             "--parallelism.tensor_parallel_degree", "8", "--nodes", "2"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto p = nlohmann::json::parse(j.out);
  EXPECT_EQ(p["kind"], "predicted");
  EXPECT_EQ(p["nodes"], 2);
  EXPECT_EQ(p["layout"], "dp_shard 2 x tp 8");
  EXPECT_GT(p["tps_per_device"].get<double>(), 0);
  // FSDP over 2 nodes crosses the network; TP stays on NVLink.
  for (const auto& c : p["communication"]) {
    if (c["dim"] == "tp") {
      EXPECT_NE(c["link"].get<std::string>().find("NVLink"), std::string::npos) << c;
    }
    if (c["dim"] == "dp_shard") {
      EXPECT_EQ(c["link"].get<std::string>().find("NVLink"), std::string::npos) << c;
    }
  }
}

TEST(PlanCli, GptModelsFromTheCommandLine) {
  const auto r = run_ctitan({"plan", src("recipes/llama3_8b.toml"), "--hardware", "a100_80gb", "--ngpu", "64", "--json",
                             "--model.family", "gpt", "--model.dim", "2048", "--model.n_layers", "24", "--model.n_heads",
                             "16", "--model.vocab_size", "50257"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto p = nlohmann::json::parse(r.out);
  EXPECT_NE(p["model"].get<std::string>().find("GELU"), std::string::npos) << p["model"];
  EXPECT_NE(p["memory_bytes"]["layout_source"].get<std::string>().find("derived"), std::string::npos);
}

TEST(PlanCli, BadInputIsOneLineExit2) {
  expect_one_line_exit2(run_ctitan({"plan", src("recipes/llama3_8b.toml"), "--hardware", "h1000"}), "h100_sxm");
  expect_one_line_exit2(run_ctitan({"plan", src("recipes/llama3_8b.toml"), "--ngpu", "8",
                                    "--parallelism.tensor_parallel_degree", "3"}),
                        "3");
  expect_one_line_exit2(run_ctitan({"plan", src("recipes/llama3_8b.toml"), "--ngpu", "8",
                                    "--parallelism.data_parallel_shard_degree", "3"}),
                        "8");
  expect_one_line_exit2(run_ctitan({"plan", src("recipes/llama3_8b.toml"), "--model.dimm", "4"}), "--model.dim");
  expect_one_line_exit2(run_ctitan({"plan", "--calibrate", "/nonexistent/x.db"}), "/nonexistent/x.db");
  // Issue 33, item 6: one world-size cap however the size is given.
  expect_one_line_exit2(run_ctitan({"plan", src("recipes/llama3_8b.toml"), "--ngpu", "1000000"}),
                        "plan: --ngpu: must be an integer in 1..65536, got '1000000'");
  expect_one_line_exit2(run_ctitan({"plan", src("recipes/llama3_8b.toml"), "--nodes", "65536", "--gpus-per-node", "8"}),
                        "the world size (--nodes x --gpus-per-node) is more than 65536 ranks");
  expect_one_line_exit2(run_ctitan({"plan", src("recipes/llama3_8b.toml"), "--parallelism.data_parallel_shard_degree",
                                    "4096", "--parallelism.tensor_parallel_degree", "32"}),
                        "the world size (the product of the recipe's parallel degrees) is more than 65536 ranks");
}

// The CPU spec's calibration, redone from the committed sweep database
// (recipes/sweeps/calibrate_cpu.toml, 47 runs measured on a 2-core Intel
// Xeon with AVX-512 bf16 and no AMX, each with its machine probe and its
// GEMM rates by size): 3-fold, so every run is
// predicted by a fit that did not see it, within 15 % (median) in step time
// and 10 % in peak memory. (A single every-third split of 15 runs measured
// 6 % on one sweep of this machine and 16.6 % on the next: the split, not
// the model, decided.)
TEST(PlanCli, CalibrationOnTheCpuSweepPredictsHeldOutRuns) {
  const fs::path dir = fresh_dir("calibrate");
  const auto r = run_ctitan({"plan", "--calibrate", src("tests/data/calibrate_cpu.db"), "--hardware", "cpu", "--out",
                             (dir / "cpu.toml").string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["holdout"].size(), j["fit"].size()) << "3-fold: every run held out once";
  EXPECT_EQ(j["holdout"].size(), 47u);
  EXPECT_LE(j["holdout_step_median_abs_error"].get<double>(), 0.15) << r.out;
  EXPECT_LE(j["holdout_mem_median_abs_error"].get<double>(), 0.10) << r.out;
  EXPECT_EQ(j["tps_log_error"]["n"].get<int>(), 47) << "the interval comes from every run's out-of-sample error";
  // The fitted spec loads and names its source.
  const auto p = run_ctitan({"plan", src("recipes/llama3_debugmodel.toml"), "--hardware", (dir / "cpu.toml").string(),
                             "--ngpu", "2"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("calibrated from calibrate_cpu.db"), std::string::npos) << p.out;
}

// Extrapolation on ctitan's own CPU runs: fitted on world sizes 1 and 2
// only, the calibration predicts the sweep's world sizes 4 and 8 (ranks
// outnumbering the two cores, which the fitted runs never did) within 15 %
// (median), step time and peak memory. The oversubscribed collectives'
// law comes from each run's machine probe, not from the fit.
TEST(PlanCli, CalibrationOnSmallWorldsPredictsTheLargestHeldOut) {
  const fs::path dir = fresh_dir("calibrate_largest");
  const auto r = run_ctitan({"plan", "--calibrate", src("tests/data/calibrate_cpu.db"), "--hardware", "cpu",
                             "--holdout", "largest", "--out", (dir / "cpu.toml").string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  ASSERT_GE(j["holdout"].size(), 15u);
  for (const auto& row : j["holdout"]) EXPECT_NE(row["why"].get<std::string>().find("world size"), std::string::npos);
  for (const auto& row : j["fit"]) EXPECT_EQ(row["label"].get<std::string>().rfind("ws=", 0), 0u);
  EXPECT_LE(j["holdout_step_median_abs_error"].get<double>(), 0.15) << r.out;
  EXPECT_LE(j["holdout_mem_median_abs_error"].get<double>(), 0.15) << r.out;
}

// A run measured now, not in the database: FSDP 2 on this machine, its
// peak memory against the shipped (calibrated) cpu spec's prediction.
TEST(PlanCli, PredictedPeakMemoryOfAFreshCpuRun) {
  const fs::path dir = fresh_dir("fresh_run");
  const std::vector<std::string> cfg = {"--job.config_file", src("recipes/llama3_debugmodel_markov.toml"),
                                        "--training.steps", "3", "--training.seq_len", "256",
                                        "--training.local_batch_size", "4", "--activation_checkpoint.mode", "full"};
  std::vector<std::string> train = {"train", "--nproc", "2"};
  train.insert(train.end(), cfg.begin(), cfg.end());
  train.insert(train.end(), {"--job.dump_folder", (dir / "run").string()});
  const auto t = run_ctitan(train, {}, dir.string());
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const double measured = read_json(dir / "run" / "summary.json")["mem_peak_bytes"].get<double>();
  std::vector<std::string> plan = {"plan", src("recipes/llama3_debugmodel_markov.toml"), "--hardware", "cpu", "--ngpu",
                                   "2", "--json"};
  plan.insert(plan.end(), cfg.begin() + 2, cfg.end());
  const auto p = run_ctitan(plan, {}, dir.string());
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const double predicted = nlohmann::json::parse(p.out)["memory_bytes"]["total"].get<double>();
  EXPECT_NEAR(predicted / measured, 1.0, 0.10) << "predicted " << predicted << " measured " << measured;
}

// The other families, measured now: Qwen3's MoE debug flavor (every layer
// MoE, 64 experts, top 8) and DeepSeek-V3's (MLA, a dense layer, then
// routed + shared experts), 2 layers each, one process: the predicted peak
// against the measured one. (The state is the trainer's own layout; the
// activations are the planner's per-token widths: the experts' top_k
// hidden states, MLA's heads and latents.)
TEST(PlanCli, PredictedPeakMemoryOfFreshMoeRuns) {
  const fs::path dir = fresh_dir("fresh_moe");
  for (const auto& [name, flavor] : {std::pair<std::string, std::string>{"qwen3", "debugmodel_moe"}, {"deepseek_v3", "debugmodel"}}) {
    SCOPED_TRACE(name);
    const std::vector<std::string> cfg = {"--job.config_file", src("recipes/llama3_debugmodel_markov.toml"),
                                          "--model.name", name, "--model.flavor", flavor, "--model.n_layers", "2",
                                          "--training.steps", "2", "--training.local_batch_size", "2"};
    std::vector<std::string> train = {"train"};
    train.insert(train.end(), cfg.begin(), cfg.end());
    train.insert(train.end(), {"--job.dump_folder", (dir / name).string()});
    const auto t = run_ctitan(train, {}, dir.string());
    ASSERT_EQ(t.exit_code, 0) << t.err;
    const double measured = read_json(dir / name / "summary.json")["mem_peak_bytes"].get<double>();
    std::vector<std::string> plan = {"plan", src("recipes/llama3_debugmodel_markov.toml"), "--hardware", "cpu", "--json"};
    plan.insert(plan.end(), cfg.begin() + 2, cfg.end());
    const auto p = run_ctitan(plan, {}, dir.string());
    ASSERT_EQ(p.exit_code, 0) << p.err;
    const double predicted = nlohmann::json::parse(p.out)["memory_bytes"]["total"].get<double>();
    EXPECT_NEAR(predicted / measured, 1.0, 0.15) << "predicted " << predicted << " measured " << measured;
  }
}

// The bar: over the rows of the published tables in
// shared/published/torchtitan_llama3.json, the median |error| of predicted
// tokens/s per GPU is at most 10 %, one spec per hardware.
TEST(PlanCli, PublishedRowsMedianErrorWithinTenPercent) {
  const auto r = run_ctitan({"plan", "--validate", src("recipes/published"), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const std::set<std::string> shared_tables = {"llama3_8b_h100_8gpu_fsdp", "llama3_8b_h100_128gpu_fsdp",
                                               "llama3_70b_h100_256gpu_2d", "llama3_8b_a100_64gpu_fsdp",
                                               "llama3_70b_a100_64gpu_fsdp"};
  std::vector<double> errors;
  std::vector<double> published;
  for (const auto& row : j["rows"]) {
    if (!shared_tables.count(row["table"].get<std::string>())) continue;
    ASSERT_FALSE(row["predicted"]["tps_error_pct"].is_null()) << row;
    errors.push_back(std::fabs(row["predicted"]["tps_error_pct"].get<double>()));
    published.push_back(row["published"]["tps"].get<double>());
  }
  ASSERT_EQ(errors.size(), 11u);
  EXPECT_LE(median(errors), 10.0);
  // The figures in recipes/published are the shared table's, where it is here.
  const fs::path shared = fs::absolute(source_dir()) / ".." / "shared" / "published" / "torchtitan_llama3.json";
  if (!fs::exists(shared)) GTEST_SKIP() << "no ../shared/published: figures not cross-checked";
  std::multiset<double> expected;
  std::ifstream in(shared);
  const nlohmann::json facts = nlohmann::json::parse(in);
  for (const auto& t : facts["tables"])
    for (const auto& row : t["rows"]) expected.insert(row["tps"].get<double>());
  EXPECT_EQ(std::multiset<double>(published.begin(), published.end()), expected);
}

}  // namespace
// Out of sample on published data: each published table of the H100 rows
// predicted by a spec fitted to the other tables only (another model size,
// layout or scale than it saw), median |error| of tokens/s at most 10 %.
TEST(PlanCli, PublishedTablesPredictedLeavingEachTableOut) {
  const fs::path out = fresh_dir("plan_loto") / "h100.toml";
  const auto r =
      run_ctitan({"plan", "--calibrate", src("recipes/published"), "--hardware", "h100_sxm_500w", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string key = "leave-one-out, ";
  const size_t at = r.out.find(key);
  ASSERT_NE(at, std::string::npos) << r.out;
  const double loto = std::stod(r.out.substr(at + key.size()));
  EXPECT_LE(loto, 10.0) << r.out;
  EXPECT_NE(r.out.find("% leave-one-table-out (9 tables)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("LOTO err"), std::string::npos) << r.out;
}

}  // namespace ctitan::testing
