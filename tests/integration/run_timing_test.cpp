// Stragglers and goodput against known answers (common/run_timing.h): a
// delay injected on one rank of four (debug.slow_rank, step_delay_ms) is
// named and measured, a stalled loader (data_stall_ms) shows as the data
// part, and a run's goodput parts add up to its wall clock with checkpoint
// saves (sync and async) and validation — all from real `ctitan train` runs.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "results/results_db.h"
#include "tests/integration/process.h"

namespace fs = std::filesystem;
using ctitan::testing::expect_one_line_exit2;
using ctitan::testing::fresh_dir;
using ctitan::testing::read_json;
using ctitan::testing::read_jsonl;
using ctitan::testing::run_ctitan;

namespace {

std::vector<std::string> tiny_run(const fs::path& dir, int steps) {
  return {"train", "--model.flavor", "tiny", "--training.seq_len", "32", "--training.local_batch_size", "2",
          "--training.steps", std::to_string(steps), "--metrics.log_freq", "3", "--metrics.warmup_steps", "2",
          "--job.dump_folder", dir.string()};
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace

// Four ranks over Gloo, rank 2 sleeping 300 ms at the start of every step
// (large beside the jitter of four ranks sharing two cores with another test):
// the others wait for it in the gradient all-reduce, so their busy time is
// their work and rank 2's is its work plus the delay.
TEST(RunTiming, ADelayedRankIsNamedAndItsDelayMeasured) {
  const fs::path dir = fresh_dir("straggler") / "run";
  const double delay_s = 0.300;
  auto r = run_ctitan(with(tiny_run(dir, 14), {"--nproc", "4", "--debug.slow_rank", "2", "--debug.step_delay_ms",
                                               std::to_string(delay_s * 1e3)}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json s = read_json(dir / "summary.json");
  ASSERT_TRUE(s.contains("stragglers")) << s.dump(2);
  const nlohmann::json& st = s["stragglers"];
  EXPECT_EQ(st["ranks"], 4);
  EXPECT_EQ(st["steps"], 12);  // 14 steps, 2 of warm-up
  EXPECT_EQ(st["slowest_rank"], 2);
  EXPECT_GE(st["slowest_steps"][2].get<int>(), 11) << "rank 2 slowest in >= 90 % of 12 steps";
  EXPECT_NEAR(st["spread_s"].get<double>(), delay_s, 0.1 * delay_s) << "max - min busy time against the delay";
  EXPECT_TRUE(st["marked"].get<bool>());
  EXPECT_LT(st["chance_p"].get<double>(), 1e-5);  // 4 x (1/4)^12 for 12 of 12
  ASSERT_EQ(st["by_step"].size(), 12u);
  EXPECT_EQ(st["by_step"][0]["busy_s"].size(), 4u);
  // Each log line carries the interval's spread and names the rank.
  int logged = 0;
  for (const nlohmann::json& line : read_jsonl(dir / "metrics.jsonl")) {
    if (!line.contains("rank_busy_s_max")) continue;
    ++logged;
    EXPECT_EQ(line["slowest_rank"], 2) << line.dump();
    EXPECT_GT(line["rank_busy_s_max"].get<double>(), line["rank_busy_s_min"].get<double>() + 0.5 * delay_s);
    EXPECT_EQ(line["rank_busy_s"].size(), 4u);
  }
  EXPECT_EQ(logged, 5);  // steps 3, 6, 9, 12 and the last

  // The results database keeps the figures, every rank's steady steps and the goodput parts.
  ctitan::ResultsDb db((dir.parent_path() / "r.db").string());
  ctitan::RunRow row;
  row.status = "ok";
  row.world_size = 4;
  row.run_dir = dir.string();
  const int64_t id = db.insert_run(row);
  db.ingest_run_dir(id, dir.string());
  const auto sum = db.summary(id);
  ASSERT_TRUE(sum);
  EXPECT_EQ(sum->straggler_rank, 2);
  EXPECT_EQ(sum->straggler_marked, true);
  EXPECT_EQ(sum->straggler_spread_s, st["spread_s"].get<double>());
  EXPECT_EQ(sum->wall_s, s["goodput"]["wall_s"].get<double>());
  const auto rows = db.rank_steps(id);
  ASSERT_EQ(rows.size(), 12u * 4u);
  EXPECT_EQ(rows[2].rank, 2);
  EXPECT_EQ(rows[2].busy_s, st["by_step"][0]["busy_s"][2].get<double>());
  const auto parts = db.goodput(id);
  ASSERT_EQ(parts.size(), 10u);
  EXPECT_EQ(parts.front().first, "init_s");
}

// Without a delay no rank is marked — on tiny steps a couple of
// milliseconds of jitter are a tenth of a step, but one rank is not the
// slowest in 12 steps beyond what chance gives — and metrics.rank_timing =
// false gathers nothing.
TEST(RunTiming, EvenRanksAreNotMarkedAndTheGatherCanBeOff) {
  const fs::path base = fresh_dir("even_ranks");
  auto on = run_ctitan(with(tiny_run(base / "on", 14), {"--nproc", "2"}));
  ASSERT_EQ(on.exit_code, 0) << on.out << on.err;
  const nlohmann::json st = read_json(base / "on" / "summary.json")["stragglers"];
  EXPECT_FALSE(st["marked"].get<bool>()) << st.dump(2);
  auto off = run_ctitan(with(tiny_run(base / "off", 8), {"--nproc", "2", "--metrics.rank_timing", "false"}));
  ASSERT_EQ(off.exit_code, 0) << off.out << off.err;
  EXPECT_FALSE(read_json(base / "off" / "summary.json").contains("stragglers"));
  for (const nlohmann::json& line : read_jsonl(base / "off" / "metrics.jsonl"))
    EXPECT_FALSE(line.contains("rank_busy_s_max")) << line.dump();
}

// A loader that stalls 100 ms per batch: the data part is the stall.
TEST(RunTiming, AStalledLoaderIsTheDataPart) {
  const fs::path dir = fresh_dir("stall") / "run";
  const int steps = 8;
  auto r = run_ctitan(with(tiny_run(dir, steps), {"--debug.data_stall_ms", "100"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json g = read_json(dir / "summary.json")["goodput"];
  EXPECT_NEAR(g["data_s"].get<double>(), steps * 0.100, 0.1 * steps * 0.100) << g.dump(2);
  EXPECT_NEAR(g["unaccounted_s"].get<double>(), 0.0, 0.01 * g["wall_s"].get<double>()) << g.dump(2);
}

// Checkpoints every 3 steps (sync, then async) and validation every 4: the
// parts sum to the wall clock within 1 %, the wall clock is the process's
// (within what the test's own clock saw around it), and each part is where
// it belongs.
TEST(RunTiming, GoodputPartsSumToTheWallClock) {
  for (const std::string mode : {"disabled", "async"}) {
    SCOPED_TRACE(mode);
    const fs::path dir = fresh_dir("goodput_" + mode) / "run";
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_ctitan(with(tiny_run(dir, 9),
                             {"--checkpoint.enable", "--checkpoint.interval", "3", "--checkpoint.async_mode", mode,
                              "--validation.enable", "--validation.freq", "4", "--validation.steps", "2",
                              "--training.dataset", "markov", "--validation.dataset", "markov"}));
    const double outside_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const nlohmann::json g = read_json(dir / "summary.json")["goodput"];
    const double wall = g["wall_s"].get<double>();
    double parts = 0;
    for (const char* k : {"init_s", "checkpoint_load_s", "warmup_steps_s", "steady_steps_s", "data_s", "validation_s",
                          "checkpoint_save_sync_s", "checkpoint_save_async_s", "logging_s", "teardown_s"}) {
      ASSERT_TRUE(g.contains(k)) << k;
      EXPECT_GE(g[k].get<double>(), 0.0) << k;
      parts += g[k].get<double>();
    }
    EXPECT_NEAR(parts, wall, 0.01 * wall) << g.dump(2);
    EXPECT_LE(wall, outside_s);
    EXPECT_GT(wall, 0.8 * outside_s) << "the process's clock starts at its exec";
    EXPECT_GT(g["validation_s"].get<double>(), 0.0);
    EXPECT_GT(g[mode == "disabled" ? "checkpoint_save_sync_s" : "checkpoint_save_async_s"].get<double>(), 0.0);
    EXPECT_EQ(g[mode == "disabled" ? "checkpoint_save_async_s" : "checkpoint_save_sync_s"].get<double>(), 0.0);
    EXPECT_EQ(g["steady_tokens"], (9 - 2) * 2 * 32);  // 2 warm-up steps
  }
}

TEST(RunTiming, ASlowRankOutsideTheWorldIsOneLine) {
  const fs::path dir = fresh_dir("slow_rank_bad") / "run";
  expect_one_line_exit2(run_ctitan(with(tiny_run(dir, 2), {"--debug.slow_rank", "3"})), "debug.slow_rank 3");
  EXPECT_FALSE(fs::exists(dir / "summary.json"));
  expect_one_line_exit2(run_ctitan(with(tiny_run(dir, 2), {"--debug.step_slowdown", "-0.1"})), "debug.step_slowdown");
}
