// Reports from a real SQLite results database filled with synthetic run
// directories (metrics.jsonl / summary.json / env.json as the trainer
// writes them, ingested through ResultsDb): which rows count, the numbers
// of every table (steady-state tps, speedups, stacked and scaling tables),
// and the four renderers.
#include "reports/report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/errors.h"
#include "reports/gate.h"
#include "reports/points.h"
#include "reports/render_common.h"
#include "reports/svg.h"
#include "results/results_db.h"

namespace fs = std::filesystem;
using namespace ctitan;

namespace {

constexpr int kWarmup = 2;

struct FakeRun {
  std::string label;
  int64_t world_size = 1;
  int64_t repeat = 0;
  double tps = 1000;  // steady-state steps are tps · (0.98, 0.99, 1.00, 1.01, 1.02)
  double mem = 4e8;
  double loss_final = 3.0;
  std::string status = "ok";
  std::string sha = "0123456789ab";
  std::optional<double> comm_s;
  std::string error;
  // A [quality] run: validation passes (train_tokens, loss) at the run's
  // tps (its wall clock), and the target in summary.json's quality.
  std::vector<std::pair<double, double>> validation;
  std::optional<double> target;
  // summary.json keys of issue 59 (goodput, stragglers, peaks) merged in; no_peak: no MFU anywhere.
  nlohmann::json timing = nlohmann::json::object();
  bool no_peak = false;

  explicit FakeRun(std::string l, int64_t ws = 1, int64_t rep = 0, double t = 1000)
      : label(std::move(l)), world_size(ws), repeat(rep), tps(t) {}
  FakeRun& failed(const std::string& st, const std::string& err = "") {
    status = st;
    error = err;
    return *this;
  }
  FakeRun& at_sha(const std::string& s) {
    sha = s;
    return *this;
  }
};

class ReportDb : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("ctitan_report_" + std::to_string(getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = std::make_unique<ResultsDb>((dir_ / "results.db").string());
  }
  void TearDown() override {
    db_.reset();
    fs::remove_all(dir_);
  }

  // A run directory as `ctitan train` leaves it, inserted and ingested.
  int64_t add(int64_t sweep_id, const FakeRun& f, const std::string& shared_dir = "") {
    const fs::path run_dir = shared_dir.empty() ? dir_ / ("run" + std::to_string(++count_)) : fs::path(shared_dir);
    if (shared_dir.empty() && f.status == "ok") {
      fs::create_directories(run_dir);
      std::ofstream metrics(run_dir / "metrics.jsonl");
      const double factors[] = {0.98, 0.99, 1.00, 1.01, 1.02};
      for (int step = 1; step <= kWarmup + 5; ++step) {
        // Warmup steps are slow (compilation, allocator growth): they must not count.
        const double tps = step <= kWarmup ? f.tps / 10 : f.tps * factors[step - kWarmup - 1];
        nlohmann::json j = {{"step", step},           {"loss", 5.0 - 0.25 * step}, {"tps", tps},
                            {"tflops", tps * 1e-6},   {"mfu", tps * 1e-3},         {"step_time_s", 2048 / tps},
                            {"mem_peak_bytes", f.mem}};
        if (f.no_peak) j["mfu"] = nullptr;
        metrics << j.dump() << "\n";
      }
      for (size_t i = 0; i < f.validation.size(); ++i)
        metrics << nlohmann::json{{"step", 10 * (i + 1)},
                                  {"validation_loss", f.validation[i].second},
                                  {"train_tokens", f.validation[i].first},
                                  {"elapsed_s", f.validation[i].first / f.tps}}
                       .dump()
                << "\n";
      nlohmann::json summary = {{"status", "ok"},          {"tps_median", f.tps},
                                {"mem_peak_bytes", f.mem}, {"loss_final", f.loss_final},
                                {"tflops", f.tps * 1e-6},  {"mfu", f.tps * 1e-3}};
      if (f.target) summary["quality"] = {{"seed", f.repeat}, {"target_loss", *f.target}};
      if (f.no_peak) summary["mfu"] = nullptr;
      summary.update(f.timing);
      if (f.comm_s)
        summary.update({{"compute_s", 0.5}, {"comm_s", *f.comm_s}, {"exposed_comm_s", 0.01}, {"idle_s", 0.0}});
      std::ofstream(run_dir / "summary.json") << summary.dump();
      std::ofstream(run_dir / "env.json")
          << nlohmann::json{{"git_sha", f.sha}, {"cpu_model", "Test CPU"}, {"libtorch_version", "2.9.0"}}.dump();
    }
    RunRow r;
    r.sweep_id = sweep_id;
    r.point_key = "key-" + f.label + "-ws" + std::to_string(f.world_size) + "-" + f.sha;  // keys include the build
    r.label = f.label;
    r.config_toml = "[metrics]\nwarmup_steps = " + std::to_string(kWarmup) + "\n";
    r.world_size = f.world_size;
    r.repeat = f.repeat;
    r.status = f.status;
    r.error = f.error;
    r.run_dir = run_dir.string();
    r.id = db_->insert_run(r);
    if (f.status == "ok") db_->ingest_run_dir(r.id, r.run_dir);
    return r.id;
  }

  // The stacked sweep: three [[stack]] rows at world sizes 1 and 2, two
  // repeats each, and a point that ran out of memory.
  int64_t stacked_sweep() {
    const int64_t s = db_->upsert_sweep("stacked", "");
    const std::string common = "model.flavor=tiny training.local_batch_size=2 ";
    const struct {
      const char* stack;
      double tps1, tps2, mem;
    } rows[] = {{"stack=1:FSDP", 1000, 900, 4e8},
                {"stack=2:+compile", 1500, 1350, 3.8e8},
                {"stack=3:+Float8", 1800, 1530, 3e8}};
    for (int repeat = 0; repeat < 2; ++repeat)
      for (const auto& row : rows)
        for (int64_t ws : {1, 2}) {
          FakeRun f(common + row.stack, ws, repeat, ws == 1 ? row.tps1 : row.tps2);
          f.mem = row.mem;
          if (ws == 2) f.comm_s = 0.1;
          add(s, f);
        }
    add(s, FakeRun("model.flavor=tiny training.local_batch_size=64")
               .failed("oom", "out of memory: tried to allocate 8 GiB\nmore stderr"));
    return s;
  }

  const PointStats& find(const SectionReport& sec, const std::string& stack, int64_t ws) {
    for (const PointStats& p : sec.points)
      if (p.label.find(stack) != std::string::npos && p.world_size == ws) return p;
    throw std::runtime_error("no point " + stack);
  }

  fs::path dir_;
  std::unique_ptr<ResultsDb> db_;
  int count_ = 0;
};

TEST_F(ReportDb, PointsTableNumbersFromSteadyStateSteps) {
  stacked_sweep();
  const Report r = build_report(*db_, {"stacked", "", {}});
  ASSERT_EQ(r.sections.size(), 1u);
  const SectionReport& sec = r.sections[0];
  ASSERT_EQ(sec.points.size(), 7u);
  const PointStats& fsdp = find(sec, "stack=1:FSDP", 1);
  EXPECT_EQ(fsdp.repeats, 2u);
  EXPECT_EQ(fsdp.ok_runs, 2u);
  EXPECT_EQ(fsdp.tps.n, 10u);  // 5 steady-state steps x 2 repeats; the 2 warmup steps of each are left out
  EXPECT_NEAR(fsdp.tps.median, 1000, 1e-9);
  EXPECT_NEAR(fsdp.tps.min, 980, 1e-9);
  EXPECT_NEAR(fsdp.tps.p10, 980, 1e-9);
  EXPECT_NEAR(fsdp.tps.p90, 1020, 1e-9);
  EXPECT_NEAR(*fsdp.mfu, 1.0, 1e-12);
  EXPECT_NEAR(*fsdp.mem_peak_bytes, 4e8, 1);
  EXPECT_NEAR(*fsdp.loss_final, 3.0, 1e-12);
  EXPECT_EQ(fsdp.loss_curve.size(), 7u);  // every logged step, warmup included
  // Labels lose the settings every point shares (model.flavor=tiny), keep the rest.
  EXPECT_EQ(fsdp.display_label, "training.local_batch_size=2 stack=1:FSDP");
  EXPECT_EQ(fsdp.short_label, "b2 FSDP");  // reports/aliases.h: training.local_batch_size=2 is "b2"
  EXPECT_EQ(sec.varying_keys, std::vector<std::string>{"training.local_batch_size"});
  EXPECT_EQ(fsdp.settings, std::vector<std::string>{"2"});
  EXPECT_EQ(fsdp.stack_index, 1);
  EXPECT_EQ(fsdp.stack_name, "FSDP");
  // Speedups against the first point at each world size.
  EXPECT_TRUE(fsdp.baseline);
  EXPECT_NEAR(*find(sec, "stack=3:+Float8", 1).speedup, 1.8, 1e-9);
  EXPECT_NEAR(*find(sec, "stack=3:+Float8", 2).speedup, 1.7, 1e-9);
  // The oom point: status and its error's first line.
  const PointStats& oom = find(sec, "local_batch_size=64", 1);
  EXPECT_EQ(oom.status, "oom");
  EXPECT_EQ(oom.tps.n, 0u);
  EXPECT_EQ(oom.error, "out of memory: tried to allocate 8 GiB");
  EXPECT_TRUE(sec.has_comm);
  EXPECT_FALSE(sec.environment.empty());
}

TEST_F(ReportDb, StackedAndScalingTables) {
  stacked_sweep();
  const SectionReport sec = build_report(*db_, {"stacked", "", {}}).sections[0];
  ASSERT_EQ(sec.stacks.size(), 2u);  // world sizes 1 and 2
  const StackTable* ws1 = nullptr;
  for (const StackTable& t : sec.stacks)
    if (t.world_size == 1 && t.group.find("local_batch_size=2") != std::string::npos) ws1 = &t;
  ASSERT_NE(ws1, nullptr);
  ASSERT_EQ(ws1->rows.size(), 3u);
  EXPECT_EQ(sec.points[ws1->rows[0]].stack_name, "FSDP");
  EXPECT_EQ(sec.points[ws1->rows[2]].stack_name, "+Float8");

  const std::string md = render_markdown({"db", "now", "test", {sec}});
  // Incremental 1.50x then 1.20x, cumulative 1.80x; memory −5.0 % then −21.1 %, cumulative −25.0 %.
  EXPECT_NE(md.find("| 2 | +compile | 1,500 (1,470\u20131,530) | 1.50\u00d7 | 1.50\u00d7 | 362.4 MiB | \u22125.0% | "
                    "\u22125.0% |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 3 | +Float8 | 1,800 (1,764\u20131,836) | 1.20\u00d7 | 1.80\u00d7 | 286.1 MiB | \u221221.1% | "
                    "\u221225.0% |"),
            std::string::npos)
      << md;
  // Scaling: per-device throughput at 2 ranks over 1 rank.
  ASSERT_EQ(sec.scaling.size(), 3u);
  EXPECT_NE(md.find("| b2 FSDP | 2 | 900 (882\u2013918) | 90.0% |"), std::string::npos) << md;
  EXPECT_NE(md.find("| b2 +Float8 | 2 | 1,530 (1,499\u20131,561) | 85.0% |"), std::string::npos);
}

TEST_F(ReportDb, BaselineLabelSetsTheSpeedupReference) {
  stacked_sweep();
  const SectionReport sec = build_report(*db_, {"stacked", "stack=2:+compile", {}}).sections[0];
  EXPECT_TRUE(find(sec, "stack=2:+compile", 1).baseline);
  EXPECT_NEAR(*find(sec, "stack=1:FSDP", 1).speedup, 1000.0 / 1500, 1e-9);
  EXPECT_NEAR(*find(sec, "stack=3:+Float8", 2).speedup, 1530.0 / 1350, 1e-9);
  EXPECT_THROW(build_report(*db_, {"stacked", "compile.enable=maybe", {}}), InputError);
}

TEST_F(ReportDb, RenderersAgreeOnThePoints) {
  stacked_sweep();
  const Report r = build_report(*db_, {});
  const std::string md = render_markdown(r);
  // Each point named by what varies (its alias tokens and stack row), then the numbers.
  EXPECT_NE(md.find("| # | point | ws | tps/device (p10\u2013p90) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 | b2 FSDP | 1 | 1,000 (980\u20131,020) | 10 | 0.0010 | 1.00% | 381.5 MiB | 3.0000 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("1.00\u00d7 (baseline)"), std::string::npos);
  EXPECT_NE(md.find("comm/step"), std::string::npos);
  EXPECT_NE(md.find("1 point not ok"), std::string::npos);
  EXPECT_NE(md.find("out of memory: tried to allocate 8 GiB"), std::string::npos);

  const std::string csv = render_csv(r);
  std::istringstream lines(csv);
  std::string header, line;
  std::getline(lines, header);
  EXPECT_EQ(header.rfind("sweep,label,recipe,world_size,", 0), 0u);
  int rows = 0;
  while (std::getline(lines, line)) ++rows;
  EXPECT_EQ(rows, 7);
  EXPECT_NE(csv.find(",oom,"), std::string::npos);

  const nlohmann::json j = render_json(r);
  EXPECT_EQ(j["format"], "ctitan-report-v1");
  EXPECT_EQ(j["sections"][0]["points"].size(), 7u);
  EXPECT_EQ(j["sections"][0]["stacks"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["sections"][0]["points"][0]["tps"]["median"].get<double>(), 1000);

  const std::string html = render_html(r);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  // One inline script (sort, filter, the column toggle), nothing loaded.
  EXPECT_EQ(html.find("<script"), html.rfind("<script>"));
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  // Self-contained: the only URL is the SVG namespace name, which is never fetched.
  std::string rest = html;
  for (size_t at; (at = rest.find("http://www.w3.org/2000/svg")) != std::string::npos;) rest.erase(at, 26);
  EXPECT_EQ(rest.find("http"), std::string::npos);
  EXPECT_EQ(rest.find("src="), std::string::npos);
  size_t charts = 0;
  for (size_t at = 0; (at = html.find("<svg", at)) != std::string::npos; ++at) ++charts;
  // Per world size (1, 2): the Pareto scatter, throughput and memory; one
  // loss panel (one numerics group: b2); scaling.
  EXPECT_EQ(charts, 8u);
  EXPECT_NE(html.find("World size 2: tokens/s per device (median, p10\u2013p90)"), std::string::npos);
  EXPECT_NE(html.find("id=\"s1-table\" class=\"sortable compact\""), std::string::npos);
}

// The planner's prediction the sweep stored with each run sits beside the
// measured tps and peak memory, with its error (predicted / measured - 1)
// and the spec it was predicted on; points keep the spec's order (the
// stored plan index) although the sweep ran the fastest predicted first.
TEST_F(ReportDb, PredictedColumnsBesideTheMeasuredOnesInSpecOrder) {
  const int64_t s = db_->upsert_sweep("predicted", "");
  const auto predicted = [&](int64_t run, int plan_index, std::optional<double> tps, std::optional<int64_t> mem) {
    PredictionRow p;
    p.run_id = run;
    p.hardware = tps ? "cpu" : "";
    p.calibration = tps ? "uncalibrated: maker's figures, default efficiencies" : "";
    p.tps = tps;
    p.mem_peak_bytes = mem;
    p.plan_index = plan_index;
    db_->put_prediction(p);
  };
  // Run order (predicted fastest first): a=2, a=1, a=3; spec order a=1, a=2, a=3.
  predicted(add(s, FakeRun("a=2", 1, 0, 2000)), 1, 1800, 400000000);
  predicted(add(s, FakeRun("a=1", 1, 0, 1000)), 0, 1100, 200000000);
  predicted(add(s, FakeRun("a=3", 1, 0, 500)), 2, std::nullopt, std::nullopt);  // the planner rejected its layout
  const Report r = build_report(*db_, {"predicted", "", {}});
  const SectionReport& sec = r.sections.at(0);
  ASSERT_EQ(sec.points.size(), 3u);
  EXPECT_EQ(sec.points[0].label, "a=1");
  EXPECT_EQ(sec.points[1].label, "a=2");
  EXPECT_EQ(sec.points[2].label, "a=3");
  EXPECT_TRUE(sec.points[0].baseline);  // the spec's first point, not the first one run
  EXPECT_EQ(sec.points[0].predicted_on, "cpu, uncalibrated");
  EXPECT_NEAR(*sec.points[0].pred_tps_error(), 0.1, 1e-12);
  EXPECT_NEAR(*sec.points[1].pred_tps_error(), -0.1, 1e-12);
  EXPECT_NEAR(*sec.points[0].pred_mem_error(), -0.5, 1e-12);
  EXPECT_FALSE(sec.points[2].pred_tps);

  const std::string md = render_markdown(r);
  EXPECT_NE(md.find("| ws | tps/device (p10\u2013p90) | n | pred. tps | err | TFLOPs | MFU | peak mem/rank | pred. mem | "
                    "err | final loss |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 1 | a=1 | 1 | 1,000 (984\u20131,016) | 5 | 1,100 | +10.0% | 0.0010 | 1.00% | 381.5 MiB | "
                    "190.7 MiB | \u221250.0% | 3.0000 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 2,000 (1,968\u20132,032) | 5 | 1,800 | \u221210.0% |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 500 (492\u2013508) | 5 | - | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("predicted (cpu, uncalibrated)"), std::string::npos) << md;
  // The HTML draws the predictions against the measurements, the exact line dashed.
  const std::string html = render_html(r);
  EXPECT_NE(html.find("Predicted against measured tokens/s"), std::string::npos);
  EXPECT_NE(html.find("class=\"diagonal\""), std::string::npos);
  EXPECT_NE(html.find("<title>#1 a=1: measured 1,000, predicted 1,100, error +10.0%</title>"), std::string::npos) << html;
  EXPECT_NE(render_html(r).find("<th class=\"r opt\" title=\"sort by pred. tps\">pred. tps</th>"
                                "<th class=\"r opt\" title=\"sort by err\">err</th>"),
            std::string::npos);

  const std::string csv = render_csv(r);
  EXPECT_NE(csv.find(",pred_tps,pred_tps_err_pct,pred_mem_peak_bytes,pred_mem_err_pct,predicted_on,name,layout,wall_s,goodput,time_to_1b_tokens_s,straggler_rank,straggler_share,straggler_marked,mfu_by_dtype_pct,useful_mfu_pct,peak_flops_source\n"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find(",1100,10.0000000000000"), std::string::npos) << csv;
  const nlohmann::json j = render_json(r);
  const nlohmann::json& p0 = j["sections"][0]["points"][0]["predicted"];
  EXPECT_EQ(p0["on"], "cpu, uncalibrated");
  EXPECT_EQ(p0["tps"], 1100.0);
  EXPECT_NEAR(p0["tps_error"].get<double>(), 0.1, 1e-12);
  EXPECT_EQ(p0["mem_peak_bytes"], 2e8);
  EXPECT_TRUE(j["sections"][0]["points"][2]["predicted"].is_null());

  // Runs without predictions (recorded before schema v6): no predicted columns.
  stacked_sweep();
  const std::string plain = render_markdown(build_report(*db_, {"stacked", "", {}}));
  EXPECT_EQ(plain.find("pred. tps"), std::string::npos) << plain;
}

TEST_F(ReportDb, NewestRowPerRepeatAndSharedRunsOnce) {
  const int64_t a = db_->upsert_sweep("a", "");
  add(a, FakeRun("x=1").failed("failed", "boom"));
  const int64_t ok = add(a, FakeRun("x=1", 1, 0, 1200));  // the retry of repeat 0
  const std::vector<PointData> pts = load_points(*db_, parse_selection("sweep:a"));
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_EQ(pts[0].runs.size(), 1u);
  EXPECT_EQ(pts[0].status(), "ok");

  // Sweep b reuses sweep a's run: a row of its own pointing at the same directory.
  const int64_t b = db_->upsert_sweep("b", "");
  const auto shared = db_->run(ok)->run_dir;
  const int64_t copy = add(b, FakeRun("x=1", 1, 0, 1200).failed("failed"), shared);
  RunRow row = *db_->run(copy);
  row.status = "ok";
  db_->update_run(row);
  db_->ingest_run_dir(copy, shared);
  EXPECT_EQ(load_points(*db_, parse_selection("sweep:b"))[0].runs.size(), 1u);
  const std::vector<PointData> all = load_points(*db_, parse_selection("all"));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].runs.size(), 1u);  // one measurement, counted once
}

TEST_F(ReportDb, SelectionsBySweepShaAndLabel) {
  const int64_t a = db_->upsert_sweep("main", "");
  const int64_t b = db_->upsert_sweep("pr", "");
  add(a, FakeRun("compile.enable=false", 1, 0, 1000).at_sha("aaaaaaaaaaaa"));
  add(a, FakeRun("compile.enable=true", 1, 0, 1500).at_sha("aaaaaaaaaaaa"));
  add(b, FakeRun("compile.enable=false", 1, 0, 990).at_sha("bbbbbbbbbbbb"));
  add(0, FakeRun("adhoc", 1, 0, 10));
  EXPECT_EQ(load_points(*db_, parse_selection("main")).size(), 2u);
  EXPECT_EQ(load_points(*db_, parse_selection("sha:bbbbbb")).size(), 1u);
  EXPECT_EQ(load_points(*db_, parse_selection("sha:aaaaaaaaaaaa0000")).size(), 2u);  // a longer sha matches too
  // One label in two sweeps of two builds: two points (keys include the build).
  const auto by_label = load_points(*db_, parse_selection("label:compile.enable=false"));
  ASSERT_EQ(by_label.size(), 2u);
  EXPECT_EQ(by_label[0].runs.size(), 1u);
  const auto outside = load_points(*db_, {Selection::Kind::outside_sweeps, ""});
  ASSERT_EQ(outside.size(), 1u);
  EXPECT_EQ(outside[0].label, "adhoc");
  EXPECT_THROW(load_points(*db_, parse_selection("sweep:nope")), InputError);
  EXPECT_THROW(parse_selection("sha:"), InputError);

  // Every sweep is a section; runs outside sweeps get their own.
  const Report r = build_report(*db_, {});
  ASSERT_EQ(r.sections.size(), 3u);
  EXPECT_EQ(r.sections[2].title, "runs outside any sweep");

  // The gate over two shas in one database.
  const GateResult g = run_gate(gate_side(load_points(*db_, parse_selection("sha:aaaa")), "main"),
                                gate_side(load_points(*db_, parse_selection("sha:bbbb")), "pr"), {});
  EXPECT_EQ(g.exit_code, kGateExitNeedsAction);  // compile.enable=true was not run by the candidate
  bool saw_pass = false;
  for (const PointCheck& p : g.points)
    saw_pass = saw_pass || (p.label == "compile.enable=false" && p.verdict == Verdict::pass);
  EXPECT_TRUE(saw_pass);
}

// A sweep run in pairs with a baseline (`gate --run` records paired_with):
// its section shows the median of the pairs' tps ratios with the sign
// test's interval. The baseline drifts from pair to pair; the ratios do not
// see it.
TEST_F(ReportDb, PairedSweepShowsPairedSpeedupsWithTheirInterval) {
  const int64_t base = db_->upsert_sweep("gate-baseline", "");
  const int64_t cand = db_->upsert_sweep("gate-candidate", "");
  const double base_tps[] = {1000, 1200, 900, 1100, 1300, 950};
  const double ratio[] = {0.86, 0.80, 0.90, 0.85, 0.82, 0.88};
  for (int r = 0; r < 6; ++r) {
    add(base, FakeRun("activation_checkpoint.mode=none", 1, r, base_tps[r]));
    add(cand, FakeRun("activation_checkpoint.mode=none", 1, r, base_tps[r] * ratio[r]));
  }
  // A second point whose candidate lost a repeat: five pairs.
  for (int r = 0; r < 6; ++r) {
    add(base, FakeRun("training.local_batch_size=2", 1, r, 500));
    add(cand, r == 3 ? FakeRun("training.local_batch_size=2", 1, r).failed("timeout")
                     : FakeRun("training.local_batch_size=2", 1, r, 550));
  }
  EXPECT_TRUE(build_report(*db_, {}).sections[1].paired.empty()) << "not paired until the database says so";
  db_->set_paired_with("gate-candidate", "gate-baseline");
  EXPECT_EQ(db_->sweep("gate-candidate")->paired_with, "gate-baseline");

  const Report r = build_report(*db_, {});
  ASSERT_EQ(r.sections.size(), 2u);
  EXPECT_TRUE(r.sections[0].paired.empty());
  const SectionReport& sec = r.sections[1];
  EXPECT_EQ(sec.paired_with, "gate-baseline");
  ASSERT_EQ(sec.paired.size(), 2u);
  const PairedSpeedup& ac = sec.paired[0];
  EXPECT_EQ(ac.pairs, 6u);
  EXPECT_NEAR(ac.speedup, std::sqrt(0.85 * 0.86), 1e-9);  // the median of six log-ratios
  EXPECT_NEAR(ac.lo, 0.80, 1e-9);  // six pairs: [min, max], coverage 1 − 2/64
  EXPECT_NEAR(ac.hi, 0.90, 1e-9);
  EXPECT_DOUBLE_EQ(ac.level, 1 - 2.0 / 64);
  EXPECT_EQ(sec.paired[1].pairs, 5u);
  EXPECT_NEAR(sec.paired[1].speedup, 1.1, 1e-9);
  EXPECT_DOUBLE_EQ(sec.paired[1].level, 1 - 2.0 / 32);

  const std::string md = render_markdown(r);
  EXPECT_NE(md.find("#### Paired speedup vs sweep gate-baseline"), std::string::npos) << md;
  EXPECT_NE(md.find("| 6 | 0.85\u00d7 | 0.80\u00d7\u20130.90\u00d7 | 96.9% |"), std::string::npos) << md;
  EXPECT_NE(render_html(r).find("Paired speedup vs sweep gate-baseline"), std::string::npos);
  EXPECT_EQ(render_json(r)["sections"][1]["paired"][0]["pairs"], 6);
  // --sweep of the candidate alone still pairs it.
  EXPECT_EQ(build_report(*db_, {"gate-candidate", "", {}}).sections[0].paired.size(), 2u);
}

// A sweep resumed by a second build holds both builds' points: the table
// names the build of each, instead of two rows that look the same.
TEST_F(ReportDb, TwoBuildsInOneSweepAreTwoNamedRows) {
  const int64_t s = db_->upsert_sweep("resumed", "");
  add(s, FakeRun("compile.enable=false", 1, 0, 1000).at_sha("aaaaaaaaaaaa"));
  add(s, FakeRun("compile.enable=true", 1, 0, 1500).at_sha("aaaaaaaaaaaa"));
  add(s, FakeRun("compile.enable=false", 1, 0, 900).at_sha("bbbbbbbbbbbb"));
  const SectionReport sec = build_report(*db_, {}).sections[0];
  ASSERT_EQ(sec.points.size(), 3u);
  EXPECT_EQ(sec.varying_keys, (std::vector<std::string>{"compile.enable", "build"}));
  EXPECT_EQ(sec.points[0].display_label, "compile.enable=false build=aaaaaaaaaaaa");
  EXPECT_EQ(sec.points[2].display_label, "compile.enable=false build=bbbbbbbbbbbb");
  // One build: no build column.
  const int64_t one = db_->upsert_sweep("one", "");
  add(one, FakeRun("compile.enable=false", 1, 0, 1000));
  add(one, FakeRun("compile.enable=true", 1, 0, 1000));
  EXPECT_EQ(build_report(*db_, {"one", "", {}}).sections[0].varying_keys, (std::vector<std::string>{"compile.enable"}));
}

// A [quality] sweep: four seeds of a baseline, of a recipe that trains the
// same at twice the speed, and of one whose loss ends 0.5 higher. Losses
// 5 − 0.0004 · tokens (floored at 2) plus 0.01 per seed; target 3.0, met
// at 5,000 tokens plus 25 per seed (1,000 tokens/s: a second per 1,000).
TEST_F(ReportDb, QualitySectionBandsTimeToTargetAndVerdicts) {
  const int64_t s = db_->upsert_sweep("quality", "");
  for (int seed = 0; seed < 4; ++seed)
    for (const auto& [label, tps, shift] : {std::tuple{"recipe=base", 1000.0, 0.0}, std::tuple{"recipe=fast", 2000.0, 0.0},
                                            std::tuple{"recipe=worse", 1000.0, 0.5}}) {
      FakeRun f(label, 1, seed, tps);
      f.target = 3.0;
      for (int i = 1; i <= 10; ++i) {
        const double tokens = 1000.0 * i;
        f.validation.emplace_back(tokens, std::max(2.0, 5 - 0.0004 * tokens) + 0.01 * seed + shift * i / 10);
      }
      add(s, f);
    }
  const Report r = build_report(*db_, {});
  ASSERT_EQ(r.sections.size(), 1u);
  const SectionReport& sec = r.sections[0];
  ASSERT_EQ(sec.quality.size(), 3u);
  const QualityRow& base = sec.quality[0];
  EXPECT_FALSE(base.baseline);
  EXPECT_EQ(base.seeds.seeds.size(), 4u);
  ASSERT_EQ(base.seeds.reached, 4u);
  // Crossing 3.0 between 5,000 and 6,000 tokens: 5,000 + 25 · seed (0.01 per seed / 0.0004 per token).
  EXPECT_NEAR(base.seeds.tokens.mean, 5000 + 25 * 1.5, 1e-6);
  // Seed 0 meets 3.0 exactly at the evaluation of 5,000 tokens (5 s), the others at 6,000 (6 s).
  EXPECT_NEAR(base.seeds.seconds.mean, (5.0 + 6 + 6 + 6) / 4, 1e-9);
  const auto by_label = [&](const std::string& l) -> const QualityRow& {
    for (const QualityRow& q : sec.quality)
      if (sec.points[q.point].label == l) return q;
    throw std::runtime_error("no quality row " + l);
  };
  ASSERT_TRUE(by_label("recipe=fast").vs);
  EXPECT_EQ(by_label("recipe=fast").vs->verdict, QualityVerdict::inside);
  EXPECT_NEAR(*by_label("recipe=fast").tps_ratio, 2.0, 1e-9);
  EXPECT_NEAR(*by_label("recipe=fast").vs->speedup_at_quality, 2.0, 1e-9);  // the same tokens in half the time
  const QualityRow& worse = by_label("recipe=worse");
  ASSERT_TRUE(worse.vs);
  EXPECT_EQ(worse.vs->verdict, QualityVerdict::outside);
  EXPECT_TRUE(worse.vs->final_worse);
  EXPECT_NEAR(worse.vs->final_diff.mean, 0.5, 1e-9);

  const std::string md = render_markdown(r);
  EXPECT_NE(md.find("#### Quality: time to validation loss 3.00"), std::string::npos) << md;
  EXPECT_NE(md.find("outside the band"), std::string::npos) << md;
  EXPECT_NE(md.find("5,038 [4,986, 5,089]"), std::string::npos) << md;  // 5,037.5 ± t_3(0.975) · 32.27 / 2
  const std::string html = render_html(r);
  EXPECT_NE(html.find("id=\"s1-quality\""), std::string::npos);
  EXPECT_NE(html.find("fill-opacity=\"0.18\""), std::string::npos) << "the seeds' band is shaded";
  EXPECT_NE(render_csv(r).find("speedup_at_equal_quality"), std::string::npos);
  const nlohmann::json j = render_json(r);
  ASSERT_EQ(j["sections"][0]["quality"].size(), 3u);
  EXPECT_EQ(j["sections"][0]["quality"][2]["vs_baseline"]["verdict"], "outside the band");
}

// Issue 59: where each point's wall clock went, the ranks of a multi-rank
// point with a marked straggler, and a point whose device had no known peak
// (summary.json as the trainer writes them; numbers worked by hand).
TEST_F(ReportDb, WallClockRanksAndUnknownPeaks) {
  const int64_t s = db_->upsert_sweep("timing", "");
  FakeRun a("training.local_batch_size=1");
  a.timing = {{"peak_flops_source", "measured"},
              {"mfu_by_dtype", 1.0},
              {"goodput",
               {{"wall_s", 10.0}, {"init_s", 2.0}, {"warmup_steps_s", 1.0}, {"steady_steps_s", 6.0}, {"data_s", 0.5},
                {"logging_s", 0.5}, {"teardown_s", 0.0}, {"steady_tokens", 1000}, {"goodput", 0.6}}}};
  add(s, a);
  FakeRun b("training.local_batch_size=1", 4);
  nlohmann::json by_step = nlohmann::json::array();
  for (int step : {3, 4, 5})
    by_step.push_back({{"step", step}, {"busy_s", {0.10, 0.11, 0.30, 0.10}}, {"data_s", {0, 0, 0, 0}},
                       {"exposed_comm_s", {0.2, 0.19, 0.0, 0.2}}});
  b.timing = {{"stragglers",
               {{"slowest_rank", 2}, {"persistence", 1.0}, {"share", 0.62}, {"spread_s", 0.2}, {"marked", true},
                {"by_step", by_step}}}};
  add(s, b);
  FakeRun c("training.local_batch_size=2");
  c.no_peak = true;
  c.timing = {{"peak_flops_source", "unknown"}, {"peak_flops", 0}};
  add(s, c);
  const Report r = build_report(*db_, ReportOptions{"timing", "", {}});
  const SectionReport& sec = r.sections.at(0);
  const PointStats& pa = find(sec, "local_batch_size=1", 1);
  ASSERT_TRUE(pa.time_to_tokens_s(1e9));
  EXPECT_DOUBLE_EQ(*pa.time_to_tokens_s(1e9), 3.0 + 1e9 * 7.0 / 1000);  // fixed 2+1+0 s, then 7 s per 1000 tokens
  const render::Table g = render::goodput_table(sec);
  ASSERT_EQ(g.rows.size(), 1u);
  const auto cell = [](const render::Table& t, size_t row, const std::string& col) {
    const size_t i = std::find(t.header.begin(), t.header.end(), col) - t.header.begin();
    return i < t.header.size() ? t.rows.at(row).at(i) : std::string("(no column " + col + ")");
  };
  EXPECT_EQ(cell(g, 0, "goodput"), "60.0%");
  EXPECT_EQ(cell(g, 0, "init"), "20.0%");
  EXPECT_EQ(cell(g, 0, "data"), "5.0%");
  EXPECT_EQ(cell(g, 0, "time to 1B tokens"), "1944.4 h");
  EXPECT_EQ(std::find(g.header.begin(), g.header.end(), "validation"), g.header.end()) << "no run validated";
  const render::Table ranks = render::ranks_table(sec);
  ASSERT_EQ(ranks.rows.size(), 1u);
  EXPECT_EQ(cell(ranks, 0, "slowest rank"), "2");
  EXPECT_EQ(cell(ranks, 0, "slowest in"), "100% of steps");
  EXPECT_EQ(cell(ranks, 0, "marked"), "yes");
  const std::vector<std::string> flags = render::straggler_flags(sec);
  ASSERT_EQ(flags.size(), 1u);
  EXPECT_NE(flags[0].find("rank 2 was the slowest in 100% of the steps"), std::string::npos) << flags[0];
  const PointStats& pb = find(sec, "local_batch_size=1", 4);
  ASSERT_EQ(pb.rank_busy.size(), 3u);
  EXPECT_EQ(pb.rank_busy[1][2], 0.30);
  const render::Table points = render::points_table(sec);
  bool unknown = false;
  for (size_t i = 0; i < points.rows.size(); ++i)
    if (sec.points[points.points[i]].label == "training.local_batch_size=2")
      unknown = cell(points, i, "MFU") == "unknown peak";
  EXPECT_TRUE(unknown);
  const std::string html = render_html(r), md = render_markdown(r);
  EXPECT_NE(html.find("busy time, \u00d7 the step&#39;s median (marked)"), std::string::npos);
  EXPECT_NE(html.find("rank 2, step 4: 2.86\u00d7"), std::string::npos);  // 0.30 / 0.105
  EXPECT_NE(html.find("Where the wall clock went: each run"), std::string::npos);
  EXPECT_NE(md.find("\u26a0\ufe0f #2"), std::string::npos) << md;
  const nlohmann::json j = render_json(r);
  bool projected = false;
  for (const auto& p : j["sections"][0]["points"])
    if (p["wall_clock"].is_object()) projected = p["wall_clock"]["time_to_1b_tokens_s"].get<double>() > 7e6;
  EXPECT_TRUE(projected);
  EXPECT_NE(render_csv(r).find(",unknown"), std::string::npos);

  // --exclude-marked: the marked run counts as not ok, and says why.
  ReportOptions excluding{"timing", "", {}};
  excluding.exclude_marked = true;
  const Report x = build_report(*db_, excluding);
  const PointStats& xb = find(x.sections.at(0), "local_batch_size=1", 4);
  EXPECT_EQ(xb.status, "straggler");
  EXPECT_EQ(xb.tps.n, 0u);
  EXPECT_EQ(xb.error, "excluded (--exclude-marked): rank 2 was the slowest in 100% of the steps and the others "
                      "waited 62% of a step for it");
  EXPECT_EQ(find(x.sections.at(0), "local_batch_size=1", 1).status, "ok");
}

TEST_F(ReportDb, EmptyDatabaseOrUnknownSweepIsBadInput) {
  EXPECT_THROW(build_report(*db_, {}), InputError);
  EXPECT_THROW(build_report(*db_, {"nope", "", {}}), InputError);
}

TEST(Svg, NiceTicksAndChartsWithoutData) {
  EXPECT_EQ(svg::nice_ticks(0, 1234), (std::vector<double>{0, 500, 1000, 1500}));
  const std::vector<double> fine = svg::nice_ticks(2.1, 2.9);  // step 0.2 from 2.0 to 3.0
  ASSERT_EQ(fine.size(), 6u);
  EXPECT_NEAR(fine.front(), 2.0, 1e-12);
  EXPECT_NEAR(fine.back(), 3.0, 1e-12);
  EXPECT_NE(svg::bar_chart("t", "x", {}).find("no data"), std::string::npos);
  EXPECT_NE(svg::line_chart("t", {}, {}).find("no data"), std::string::npos);
  const std::string bars = svg::bar_chart("tps <&>", "tokens/s", {{"a<b", 10, 8.0, 12.0, "10", false}});
  EXPECT_NE(bars.find("tps &lt;&amp;&gt;"), std::string::npos);
  EXPECT_NE(bars.find("a&lt;b"), std::string::npos);
}

}  // namespace

namespace ctitan {
namespace {

// The Pareto front against brute force on random points (ties and repeats
// included): a point is on it exactly when no other point is at least as
// light and as fast and strictly better in one (of equal points, the first).
TEST(ReportSummary, ParetoFrontEqualsBruteForce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = static_cast<int>(rng() % 30);
    std::vector<std::pair<double, double>> pts;
    for (int i = 0; i < n; ++i) pts.emplace_back(static_cast<double>(rng() % 8), static_cast<double>(rng() % 8));
    std::vector<size_t> want;
    for (size_t i = 0; i < pts.size(); ++i) {
      bool dominated = false;
      for (size_t j = 0; j < pts.size() && !dominated; ++j) {
        const bool no_worse = pts[j].first <= pts[i].first && pts[j].second >= pts[i].second;
        const bool better = pts[j].first < pts[i].first || pts[j].second > pts[i].second;
        dominated = j != i && no_worse && (better || j < i);
      }
      if (!dominated) want.push_back(i);
    }
    std::sort(want.begin(), want.end(), [&](size_t a, size_t b) { return pts[a].first < pts[b].first; });
    EXPECT_EQ(pareto_front(pts), want) << "trial " << trial;
  }
}

}  // namespace
}  // namespace ctitan
