// A report never ranks different models on tokens/s (reports/models.h):
// on a real SQLite results database holding points of several models
// (Qwen3's MoE debug flavor at two top-k values and at its own, DeepSeek-V3's
// debugmodel), each model has its own summary (fastest, Pareto front,
// memory budgets), its own speedup baseline and its own effects and chain,
// in every renderer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/errors.h"
#include "reports/models.h"
#include "reports/report.h"
#include "results/results_db.h"

namespace fs = std::filesystem;
using namespace ctitan;

namespace {

constexpr int kWarmup = 2;

// The [model] table a sweep stores with each run (the resolved config).
std::string qwen(int top_k) {
  return "[model]\nname = \"qwen3\"\nflavor = \"debugmodel_moe\"\nn_layers = 1\nmoe_num_experts = 0\nmoe_top_k = " +
         std::to_string(top_k) + "\n";
}
const std::string kDeepSeek = "[model]\nname = \"deepseek_v3\"\nflavor = \"debugmodel\"\nn_layers = 2\n";

class ReportModels : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("ctitan_report_models_" + std::to_string(getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = std::make_unique<ResultsDb>((dir_ / "results.db").string());
  }
  void TearDown() override {
    db_.reset();
    fs::remove_all(dir_);
  }

  // An ok run directory as `ctitan train` leaves it (steady-state tps =
  // `tps` x 0.99, 1.00, 1.01 after two slow warmup steps), inserted and ingested.
  void add(int64_t sweep, const std::string& label, int64_t ws, const std::string& model_toml, double tps,
           double mem) {
    const fs::path run_dir = dir_ / ("run" + std::to_string(++count_));
    fs::create_directories(run_dir);
    std::ofstream metrics(run_dir / "metrics.jsonl");
    const double factors[] = {0.99, 1.00, 1.01};
    for (int step = 1; step <= kWarmup + 3; ++step) {
      const double t = step <= kWarmup ? tps / 10 : tps * factors[step - kWarmup - 1];
      metrics << nlohmann::json{{"step", step}, {"loss", 5.0 - 0.25 * step}, {"tps", t}, {"tflops", t * 1e-6},
                                {"mfu", t * 1e-3}, {"step_time_s", 2048 / t}, {"mem_peak_bytes", mem}}
                     .dump()
              << "\n";
    }
    std::ofstream(run_dir / "summary.json") << nlohmann::json{{"status", "ok"}, {"tps_median", tps},
                                                              {"mem_peak_bytes", mem}, {"loss_final", 3.0},
                                                              {"tflops", tps * 1e-6}, {"mfu", tps * 1e-3}}
                                                   .dump();
    std::ofstream(run_dir / "env.json") << nlohmann::json{{"git_sha", "0123456789ab"}, {"cpu_model", "Test CPU"}}.dump();
    RunRow r;
    r.sweep_id = sweep;
    r.point_key = "key-" + label + "-ws" + std::to_string(ws);
    r.label = label;
    r.config_toml = "[metrics]\nwarmup_steps = " + std::to_string(kWarmup) + "\n\n" + model_toml;
    r.world_size = ws;
    r.status = "ok";
    r.run_dir = run_dir.string();
    r.id = db_->insert_run(r);
    db_->ingest_run_dir(r.id, r.run_dir);
  }

  // As recipes/sweeps/moe_debug.toml crosses them: at world size 1 Qwen3
  // top 2 and top 8 (two models: top-k is a shape key), each eager and
  // compiled; at world size 2 Qwen3 at the flavor's own top-k under FSDP 2,
  // and DeepSeek-V3's debugmodel — faster and lighter than every Qwen3
  // point, so that any cross-model ranking shows.
  void mixed_sweep(const std::string& spec = "") {
    const int64_t s = db_->upsert_sweep("mixed", spec);
    add(s, "model.moe_top_k=2 compile.enable=false", 1, qwen(2), 1000, 4e8);
    add(s, "model.moe_top_k=2 compile.enable=true", 1, qwen(2), 1300, 4e8);
    add(s, "model.moe_top_k=8 compile.enable=false", 1, qwen(8), 600, 5e8);
    add(s, "model.moe_top_k=8 compile.enable=true", 1, qwen(8), 720, 5e8);
    add(s, "parallelism.data_parallel_shard_degree=2", 2, qwen(0), 900, 4e8);
    add(s, "model.name=deepseek_v3 model.flavor=debugmodel model.n_layers=2", 2, kDeepSeek, 3000, 2e8);
  }

  const PointStats& point(const SectionReport& sec, const std::string& label) {
    for (const PointStats& p : sec.points)
      if (p.label == label) return p;
    throw std::runtime_error("no point " + label);
  }

  fs::path dir_;
  std::unique_ptr<ResultsDb> db_;
  int count_ = 0;
};

TEST(ReportModelNames, IdentityAndShortNames) {
  const ModelIdentity q2 = *model_of_config(qwen(2)), q8 = *model_of_config(qwen(8)), q0 = *model_of_config(qwen(0));
  const ModelIdentity ds = *model_of_config(kDeepSeek);
  EXPECT_NE(q2.key(), q8.key());
  EXPECT_EQ(q2.key(), model_of_config(qwen(2))->key());
  // The flavor's name and the shape tokens that tell its models apart; the
  // layers every Qwen3 point shares say nothing.
  EXPECT_EQ(model_labels({q2, q8, q0, ds}),
            (std::vector<std::string>{"qwen3 debugmodel_moe top2", "qwen3 debugmodel_moe top8", "qwen3 debugmodel_moe",
                                      "deepseek_v3 debugmodel"}));
  EXPECT_EQ(model_labels({ds}), std::vector<std::string>{"deepseek_v3 debugmodel"});
  // Without a stored config, from the label's settings over the defaults.
  EXPECT_EQ(model_of_label("model.name=deepseek_v3 model.flavor=debugmodel model.n_layers=2 compile.enable=true").key(),
            ds.key());
  EXPECT_EQ(model_of_label("compile.enable=true").key(), "llama3|debugmodel");
  EXPECT_FALSE(model_of_config(""));
  EXPECT_FALSE(model_of_config("[model\n"));
  EXPECT_TRUE(is_model_key("model.moe_top_k"));
  EXPECT_FALSE(is_model_key("model.moe_load_balance_coeff"));
  EXPECT_FALSE(is_model_key("model.converters"));
}

TEST_F(ReportModels, EachModelHasItsOwnFastestAndNoCrossModelSpeedup) {
  mixed_sweep();
  const Report r = build_report(*db_, {"mixed", "", {1024.0 * 1024 * 1024}});
  ASSERT_EQ(r.sections.size(), 1u);
  const SectionReport& sec = r.sections[0];
  EXPECT_EQ(sec.models, (std::vector<std::string>{"qwen3 debugmodel_moe top2", "qwen3 debugmodel_moe top8",
                                                  "qwen3 debugmodel_moe", "deepseek_v3 debugmodel"}));
  // One summary per world size and model, each ranking its own points only.
  ASSERT_EQ(sec.summary.size(), 4u);
  const auto fastest = [&](size_t i) { return sec.points[sec.summary[i].fastest].label; };
  EXPECT_EQ(sec.summary[0].world_size, 1);
  EXPECT_EQ(sec.summary[0].model, "qwen3 debugmodel_moe top2");
  EXPECT_EQ(fastest(0), "model.moe_top_k=2 compile.enable=true");
  EXPECT_EQ(sec.summary[1].model, "qwen3 debugmodel_moe top8");
  EXPECT_EQ(fastest(1), "model.moe_top_k=8 compile.enable=true");
  EXPECT_EQ(sec.summary[2].world_size, 2);
  EXPECT_EQ(sec.summary[2].model, "qwen3 debugmodel_moe");
  EXPECT_EQ(fastest(2), "parallelism.data_parallel_shard_degree=2");  // not DeepSeek's faster point
  EXPECT_EQ(sec.summary[3].model, "deepseek_v3 debugmodel");
  EXPECT_EQ(fastest(3), "model.name=deepseek_v3 model.flavor=debugmodel model.n_layers=2");
  for (const WorldSummary& s : sec.summary) {
    for (size_t i : s.front) EXPECT_EQ(sec.points[i].model, s.model);
    ASSERT_EQ(s.budgets.size(), 1u);
    EXPECT_EQ(sec.points[*s.budgets[0].second].model, s.model);
  }
  // Speedups against a baseline of the same model: each model's first point.
  EXPECT_TRUE(point(sec, "model.moe_top_k=8 compile.enable=false").baseline);
  EXPECT_NEAR(*point(sec, "model.moe_top_k=8 compile.enable=true").speedup, 1.2, 1e-9);
  EXPECT_NEAR(*point(sec, "model.moe_top_k=2 compile.enable=true").speedup, 1.3, 1e-9);
  const PointStats& deepseek = point(sec, "model.name=deepseek_v3 model.flavor=debugmodel model.n_layers=2");
  EXPECT_TRUE(deepseek.baseline);
  EXPECT_NEAR(*deepseek.speedup, 1.0, 1e-12);
  // Effects pair points of one model: compile per model; no "top8 vs top2".
  ASSERT_EQ(sec.effects.size(), 2u);
  EXPECT_EQ(sec.effects[0].model, "qwen3 debugmodel_moe top2");
  EXPECT_EQ(sec.effects[0].key, "compile.enable");
  EXPECT_NEAR(sec.effects[0].tps.median, 1.3, 1e-9);
  EXPECT_EQ(sec.effects[1].model, "qwen3 debugmodel_moe top8");
  EXPECT_NEAR(sec.effects[1].tps.median, 1.2, 1e-9);
}

TEST_F(ReportModels, RenderersGiveEachModelItsOwnSummary) {
  mixed_sweep();
  const Report r = build_report(*db_, {"mixed", "", {}});
  const std::string md = render_markdown(r);
  EXPECT_NE(md.find("#### Summary \u2014 world size 2, qwen3 debugmodel_moe: the fastest point"), std::string::npos) << md;
  EXPECT_NE(md.find("#### Summary \u2014 world size 2, deepseek_v3 debugmodel: the fastest point"), std::string::npos);
  EXPECT_EQ(md.find("#### Summary \u2014 world size 2: "), std::string::npos) << md;
  EXPECT_NE(md.find("tokens/s of two models is not a comparison"), std::string::npos);
  EXPECT_NE(md.find("| model | setting | vs | pairs |"), std::string::npos) << md;
  EXPECT_NE(md.find("| qwen3 debugmodel_moe top8 | compile | eager | 1 | 1.20\u00d7 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| # | point | model | ws |"), std::string::npos) << md;
  EXPECT_NE(md.find("Speedup vs the baseline row of the same model"), std::string::npos);

  const std::string html = render_html(r);
  EXPECT_NE(html.find("<li>World size 2, deepseek_v3 debugmodel: fastest <b>"), std::string::npos);
  EXPECT_NE(html.find("<li>World size 2, qwen3 debugmodel_moe: fastest <b>"), std::string::npos);
  EXPECT_NE(html.find("World size 2, deepseek_v3 debugmodel: tokens/s per device (median"), std::string::npos);
  EXPECT_EQ(html.find("World size 2: "), std::string::npos);

  const std::string csv = render_csv(r);
  EXPECT_NE(csv.find(",name,layout,wall_s,goodput,time_to_1b_tokens_s,straggler_rank,straggler_share,straggler_marked,mfu_by_dtype_pct,useful_mfu_pct,peak_flops_source,model\n"), std::string::npos) << csv;
  // DeepSeek's row: its own baseline (speedup 1), named by its model.
  EXPECT_NE(csv.find(",1,true,0,,key-model.name=deepseek_v3"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",deepseek_v3 debugmodel\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("mem_hi,level,cumulative_tps,cumulative_mem,model\n"), std::string::npos) << csv;

  const nlohmann::json j = render_json(r);
  const nlohmann::json& s = j["sections"][0];
  EXPECT_EQ(s["models"].size(), 4u);
  ASSERT_EQ(s["summary"].size(), 4u);
  EXPECT_EQ(s["summary"][3]["model"], "deepseek_v3 debugmodel");
  EXPECT_EQ(s["points"][s["summary"][3]["fastest"].get<size_t>()]["model"], "deepseek_v3 debugmodel");
  EXPECT_EQ(s["effects"][1]["model"], "qwen3 debugmodel_moe top8");
}

// The spec's [report] stack forms one chain per model, each from its own
// points; a stack entry that changes the model is no chain at all.
TEST_F(ReportModels, StackedChainPerModel) {
  mixed_sweep("[report]\nstack = [\"compile.enable\"]\n");
  const SectionReport sec = build_report(*db_, {"mixed", "", {}}).sections.at(0);
  EXPECT_EQ(sec.chain_note, "");
  ASSERT_EQ(sec.chain.size(), 2u);  // the two models with both compile values
  EXPECT_EQ(sec.chain[0].effect.model, "qwen3 debugmodel_moe top2");
  EXPECT_NEAR(sec.chain[0].cumulative_tps, 1.3, 1e-9);
  EXPECT_EQ(sec.chain[1].effect.model, "qwen3 debugmodel_moe top8");
  EXPECT_NEAR(sec.chain[1].cumulative_tps, 1.2, 1e-9);
  const std::string md = render_markdown({"db", "now", "test", {sec}});
  EXPECT_NE(md.find("Stacked: compile (the spec's [report] stack)"), std::string::npos) << md;
  EXPECT_NE(md.find("| qwen3 debugmodel_moe top8 | 1 | +compile (from eager) | 1 | 1.20\u00d7 |"), std::string::npos)
      << md;

  db_.reset();
  fs::remove(dir_ / "results.db");
  db_ = std::make_unique<ResultsDb>((dir_ / "results.db").string());
  mixed_sweep("[report]\nstack = [\"model.moe_top_k=8\"]\n");
  const SectionReport by_model = build_report(*db_, {"mixed", "", {}}).sections.at(0);
  EXPECT_TRUE(by_model.chain.empty());
  EXPECT_NE(by_model.chain_note.find("changes the model"), std::string::npos) << by_model.chain_note;
}

// A section of one model reads as it did: no model column, no model in a
// title, the first point of each world size as the baseline.
TEST_F(ReportModels, OneModelReadsAsBefore) {
  const int64_t s = db_->upsert_sweep("one", "");
  add(s, "compile.enable=false", 1, qwen(2), 1000, 4e8);
  add(s, "compile.enable=true", 1, qwen(2), 1300, 4e8);
  const Report r = build_report(*db_, {"one", "", {}});
  const SectionReport& sec = r.sections.at(0);
  EXPECT_EQ(sec.models, std::vector<std::string>{"qwen3 debugmodel_moe"});
  ASSERT_EQ(sec.summary.size(), 1u);
  EXPECT_EQ(sec.summary[0].model, "");
  const std::string md = render_markdown(r);
  EXPECT_NE(md.find("#### Summary \u2014 world size 1: the fastest point"), std::string::npos) << md;
  EXPECT_NE(md.find("| # | point | ws |"), std::string::npos) << md;
  EXPECT_NE(md.find("| setting | vs | pairs |"), std::string::npos) << md;
  EXPECT_EQ(md.find("| model |"), std::string::npos) << md;
  EXPECT_EQ(md.find("of the same model"), std::string::npos) << md;
  EXPECT_EQ(md.find("debugmodel_moe"), std::string::npos) << md;
  EXPECT_NE(render_csv(r).find(",name,layout,wall_s,goodput,time_to_1b_tokens_s,straggler_rank,straggler_share,straggler_marked,mfu_by_dtype_pct,useful_mfu_pct,peak_flops_source\n"), std::string::npos);
}

}  // namespace
