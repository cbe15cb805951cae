// Names and effects in reports: the aliases every renderer uses
// (reports/aliases.h), what each setting buys (knob_effects: median paired
// ratio with the sign test's interval) and the stacked chain of the spec's
// [report] stack — checked on synthetic sweeps with known multiplicative
// effects and noise.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/errors.h"
#include "reports/aliases.h"
#include "reports/render_common.h"
#include "reports/report.h"

namespace ctitan {
namespace {

TEST(ReportAliases, TokensReadLikeATorchTitanTable) {
  EXPECT_EQ(alias::token("compile.enable", "true"), "compile");
  EXPECT_EQ(alias::token("compile.enable", "false"), "");
  EXPECT_EQ(alias::value_name("compile.enable", "false"), "eager");
  EXPECT_EQ(alias::token("model.converters", "quantize.linear.float8"), "f8");
  EXPECT_EQ(alias::token("model.converters", "[]"), "");
  EXPECT_EQ(alias::value_name("model.converters", "[]"), "no converter");
  EXPECT_EQ(alias::token("activation_checkpoint.mode", "full"), "ac=full");
  EXPECT_EQ(alias::value_name("activation_checkpoint.mode", "none"), "ac=none");
  EXPECT_EQ(alias::token("training.local_batch_size", "2"), "b2");
  EXPECT_EQ(alias::token("training.mixed_precision_param", "bfloat16"), "param=bf16");
  EXPECT_EQ(alias::token("parallelism.tensor_parallel_degree", "2"), "tp2");
  EXPECT_EQ(alias::token("model.moe_top_k", "8"), "top8");
  EXPECT_EQ(alias::token("model.moe_load_balance_coeff", "0.0"), "");
  EXPECT_EQ(alias::value_name("model.moe_load_balance_coeff", "0.0"), "lb=0");
  EXPECT_EQ(alias::token("model.moe_score_func", "sigmoid"), "moe_score_func=sigmoid");  // no alias: the last part
  EXPECT_EQ(alias::key_name("activation_checkpoint.mode"), "AC");
  EXPECT_TRUE(alias::is_layout_key("parallelism.pipeline_parallel_schedule"));
  EXPECT_FALSE(alias::is_layout_key("compile.enable"));
}

TEST(ReportAliases, LayoutFromTheResolvedDegrees) {
  // data_parallel_shard_degree = -1 takes the ranks the other degrees leave.
  EXPECT_EQ(alias::layout("", 1), "single");
  EXPECT_EQ(alias::layout("[parallelism]\ndata_parallel_shard_degree = -1\n", 2), "fsdp2");
  EXPECT_EQ(alias::layout("[parallelism]\ndata_parallel_replicate_degree = 2\n", 2), "ddp2");
  EXPECT_EQ(alias::layout("[parallelism]\ndata_parallel_replicate_degree = 2\n", 8), "hsdp2x4");
  EXPECT_EQ(alias::layout("[parallelism]\ntensor_parallel_degree = 2\n", 4), "fsdp2 tp2");
  EXPECT_EQ(alias::layout("[parallelism]\ntensor_parallel_degree = 2\nenable_async_tensor_parallel = true\n", 2),
            "async tp2");
  EXPECT_EQ(alias::layout("[parallelism]\npipeline_parallel_degree = 2\ntensor_parallel_degree = 2\n"
                          "pipeline_parallel_schedule = \"GPipe\"\n",
                          4),
            "tp2 pp2 GPipe");
  EXPECT_EQ(alias::layout("[parallelism]\ncontext_parallel_degree = 2\ndata_parallel_shard_degree = 2\n", 4),
            "fsdp2 cp2");
  EXPECT_EQ(alias::layout("not = [toml", 2), "");
  EXPECT_EQ(alias::layout_from_settings({{"parallelism.tensor_parallel_degree", "2"},
                                         {"compile.enable", "true"},
                                         {"parallelism.pipeline_parallel_degree", "2"}}),
            "tp2 pp2");
}

// A synthetic crossed sweep: compile x Float8 x AC x batch at world sizes 1
// and 2, tokens/s = base · Π(effect of each setting) · point noise
// (log-normal, sigma), memory likewise with its own effects.
struct Truth {
  const char* key;
  const char* from;
  const char* to;
  double tps, mem;
};
constexpr Truth kTruth[] = {{"compile.enable", "false", "true", 1.30, 1.00},
                            {"model.converters", "[]", "quantize.linear.float8", 0.80, 0.95},
                            {"activation_checkpoint.mode", "none", "full", 0.85, 0.70},
                            {"training.local_batch_size", "1", "2", 1.50, 1.40}};

std::vector<PointData> synthetic_sweep(uint64_t seed, double sigma) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, sigma);
  std::vector<PointData> out;
  for (int64_t ws : {1, 2})
    for (int bits = 0; bits < 16; ++bits) {
      PointData p;
      p.sweep = "synthetic";
      p.world_size = ws;
      double tps = ws == 1 ? 1000 : 800, mem = 1e8;
      for (int k = 0; k < 4; ++k) {
        const bool on = (bits >> (3 - k)) & 1;
        p.label += std::string(p.label.empty() ? "" : " ") + kTruth[k].key + "=" + (on ? kTruth[k].to : kTruth[k].from);
        if (on) tps *= kTruth[k].tps, mem *= kTruth[k].mem;
      }
      p.point_key = p.label + " ws" + std::to_string(ws);
      tps *= std::exp(noise(rng));
      mem *= std::exp(noise(rng) / 4);
      RunData r;
      r.run.status = "ok";
      r.run.world_size = ws;
      r.run.config_toml = "[training]\nsteps = 8\n";  // the resolved config: default degrees
      r.tps = {tps * 0.99, tps, tps * 1.01};
      SummaryRow s;
      s.tps_median = tps;
      s.mem_peak_bytes = static_cast<int64_t>(mem);
      r.summary = s;
      p.runs.push_back(r);
      out.push_back(std::move(p));
    }
  return out;
}

const KnobEffect& effect_of(const SectionReport& sec, const std::string& key) {
  for (const KnobEffect& e : sec.effects)
    if (e.key == key) return e;
  throw std::runtime_error("no effect of " + key);
}

TEST(ReportEffects, KnownEffectsInsideTheirIntervalsAtTheStatedCoverage) {
  // 16 pairs per setting (8 contexts x 2 world sizes): the sign test's
  // interval covers 97.9 %; over 200 seeds each true effect must be inside
  // in at least 90 % of them — and the intervals must be narrow enough to
  // say something (an interval of everything would also "cover").
  constexpr int kSeeds = 200;
  int covered[4] = {}, mem_covered[4] = {};
  double width[4] = {};
  for (int seed = 0; seed < kSeeds; ++seed) {
    const SectionReport sec = build_section("synthetic", synthetic_sweep(seed, 0.05), "");
    ASSERT_EQ(sec.effects.size(), 4u);
    for (int k = 0; k < 4; ++k) {
      const KnobEffect& e = effect_of(sec, kTruth[k].key);
      ASSERT_EQ(e.pairs.size(), 16u);
      ASSERT_EQ(e.tps.n, 16u);
      EXPECT_NEAR(e.tps.level, 0.9787, 1e-3);  // 1 − 2·P(B ≤ 3), B ~ Binomial(16, 1/2)
      covered[k] += e.tps.lo <= kTruth[k].tps && kTruth[k].tps <= e.tps.hi;
      mem_covered[k] += e.mem.lo <= kTruth[k].mem && kTruth[k].mem <= e.mem.hi;
      width[k] += std::log(e.tps.hi / e.tps.lo) / kSeeds;
    }
  }
  for (int k = 0; k < 4; ++k) {
    EXPECT_GE(covered[k], kSeeds * 9 / 10) << kTruth[k].key;
    EXPECT_GE(mem_covered[k], kSeeds * 9 / 10) << kTruth[k].key;
    // Pair noise is sigma·√2 ≈ 7 %: the interval of the median spans a few percent, not the whole range.
    EXPECT_LT(width[k], 0.12) << kTruth[k].key;
    EXPECT_GT(width[k], 0.005) << kTruth[k].key;
  }
}

TEST(ReportEffects, NoiselessEffectsAreExactAndNamedByTheirAliases) {
  const SectionReport sec = build_section("synthetic", synthetic_sweep(1, 0.0), "");
  for (const Truth& t : kTruth) {
    const KnobEffect& e = effect_of(sec, t.key);
    EXPECT_NEAR(e.tps.median, t.tps, 1e-9) << t.key;
    EXPECT_NEAR(e.tps.lo, t.tps, 1e-9) << t.key;
    EXPECT_NEAR(e.mem.median, t.mem, 1e-6) << t.key;
    EXPECT_EQ(e.from, t.from);
    EXPECT_EQ(e.to, t.to);
  }
  EXPECT_EQ(effect_of(sec, "compile.enable").label, "compile");
  EXPECT_EQ(effect_of(sec, "compile.enable").versus, "eager");
  EXPECT_EQ(effect_of(sec, "activation_checkpoint.mode").label, "ac=full");
  // Points are named by their aliases; the world size is a column, not a name.
  EXPECT_EQ(sec.points[15].short_label, "compile f8 ac=full b2");
  EXPECT_EQ(sec.points[0].short_label, "b1");
}

TEST(ReportEffects, AMissingPartnerIsCountedNotGuessed) {
  std::vector<PointData> points = synthetic_sweep(3, 0.0);
  // ws 2, compile=false f8 ac=full b2 (bits 0b0111) ran out of memory: its
  // compile=true partner has no match; the 15 other pairs stand.
  PointData& lost = points[16 + 7];
  ASSERT_EQ(lost.label.find("compile.enable=false"), 0u);
  lost.runs[0].run.status = "oom";
  const SectionReport sec = build_section("synthetic", points, "");
  const KnobEffect& compile = effect_of(sec, "compile.enable");
  EXPECT_EQ(compile.pairs.size(), 15u);
  EXPECT_EQ(compile.candidates, 16u);
  EXPECT_EQ(compile.tps.n, 15u);
  EXPECT_NEAR(compile.tps.median, 1.30, 1e-9);
  const render::Table t = render::effects_table(sec);
  ASSERT_EQ(t.rows.size(), 4u);
  EXPECT_EQ(t.rows[0][0], "compile");
  EXPECT_EQ(t.rows[0][1], "eager");
  EXPECT_EQ(t.rows[0][2], "15 of 16");
  EXPECT_EQ(t.rows[0][3], "1.30\u00d7");
  // A point whose partner is the lost one is no pair for any setting it differs in.
  for (const KnobEffect& e : sec.effects) EXPECT_EQ(e.pairs.size(), 15u) << e.key;
}

TEST(ReportEffects, StackedChainMultipliesItsSteps) {
  const SectionReport sec = build_section("synthetic", synthetic_sweep(5, 0.0), "");
  const std::vector<ChainStep> chain =
      stack_chain(sec, {{"compile.enable", ""}, {"model.converters", "quantize.linear.float8"}});
  ASSERT_EQ(chain.size(), 2u);
  // Step 1: compile with Float8 off (AC x batch x ws: 8 pairs); step 2: Float8 with compile on.
  EXPECT_EQ(chain[0].effect.pairs.size(), 8u);
  EXPECT_EQ(chain[1].effect.pairs.size(), 8u);
  EXPECT_NEAR(chain[0].effect.tps.median, 1.30, 1e-9);
  EXPECT_NEAR(chain[1].effect.tps.median, 0.80, 1e-9);
  EXPECT_NEAR(chain[1].cumulative_tps, 1.30 * 0.80, 1e-9);
  EXPECT_NEAR(chain[1].cumulative_mem, 0.95, 1e-6);
  for (const auto& [a, b] : chain[1].effect.pairs) {
    EXPECT_NE(sec.points[a].label.find("compile.enable=true"), std::string::npos);
    EXPECT_NE(sec.points[b].label.find("compile.enable=true"), std::string::npos);
  }
  EXPECT_THROW(stack_chain(sec, {{"parallelism.tensor_parallel_degree", ""}}), InputError);
  EXPECT_THROW(stack_chain(sec, {{"compile.enable", "maybe"}}), InputError);
  EXPECT_EQ(report_stack_of("[report]\nstack = [\"compile.enable\", \"training.local_batch_size=2\"]\n"),
            (std::vector<std::pair<std::string, std::string>>{{"compile.enable", ""},
                                                              {"training.local_batch_size", "2"}}));
  EXPECT_TRUE(report_stack_of("[sweep]\nname = \"x\"\n").empty());
}

TEST(ReportSummary, MemoryBudgetNamesTheFastestPointThatFits) {
  const std::vector<double> budgets = {parse_memory_budget("100MB"), parse_memory_budget("0.07GiB"),
                                       parse_memory_budget("1MiB")};
  const SectionReport sec = build_section("synthetic", synthetic_sweep(4, 0.05), "", budgets);
  ASSERT_EQ(sec.summary.size(), 2u);
  for (const WorldSummary& s : sec.summary) {
    ASSERT_EQ(s.budgets.size(), 3u);
    for (size_t b = 0; b < 3; ++b) {
      std::optional<size_t> want;  // brute force over every point at this world size
      for (size_t i = 0; i < sec.points.size(); ++i) {
        const PointStats& p = sec.points[i];
        if (p.world_size == s.world_size && *p.mem_peak_bytes <= budgets[b] &&
            (!want || p.tps.median > sec.points[*want].tps.median))
          want = i;
      }
      EXPECT_EQ(s.budgets[b].second, want) << "budget " << budgets[b] << " at ws " << s.world_size;
    }
    EXPECT_FALSE(s.budgets[2].second);  // 1 MiB: nothing fits
  }
  const render::Table t = render::summary_table(sec, sec.summary[0]);
  EXPECT_EQ(t.rows.back()[1], "nothing fits");
  EXPECT_EQ(t.rows.back()[5], "fastest within 1.0 MiB (--memory-budget)");
  EXPECT_DOUBLE_EQ(parse_memory_budget("80GiB"), 80.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(parse_memory_budget("24"), 24.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(parse_memory_budget("512 MiB"), 512.0 * (1 << 20));
  EXPECT_THROW(parse_memory_budget("lots"), InputError);
  EXPECT_THROW(parse_memory_budget("-3GiB"), InputError);
  EXPECT_THROW(parse_memory_budget("3 parsecs"), InputError);
}

TEST(ReportEffects, CsvAndJsonCarryTheNamesAndTheEffectRows) {
  Report r;
  r.sections.push_back(build_section("synthetic", synthetic_sweep(2, 0.0), ""));
  r.sections[0].chain = stack_chain(r.sections[0], {{"compile.enable", ""}});
  const std::string csv = render_csv(r);
  EXPECT_NE(csv.find(",predicted_on,name,layout,wall_s,goodput,time_to_1b_tokens_s,straggler_rank,straggler_share,straggler_marked,mfu_by_dtype_pct,useful_mfu_pct,peak_flops_source\n"), std::string::npos);
  EXPECT_NE(csv.find(",compile f8 ac=full b2,fsdp2,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nsynthetic,0,compile.enable,false,true,compile,eager,16,16,1.3"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nsynthetic,1,compile.enable,false,true,compile,eager,16,16,1.3,1.3,1.3,1,1,1,0.97872924804687489,1.3,1\n"), std::string::npos) << csv;
  const nlohmann::json j = render_json(r);
  const nlohmann::json& sec = j["sections"][0];
  ASSERT_EQ(sec["effects"].size(), 4u);
  EXPECT_EQ(sec["effects"][2]["setting"], "ac=full");
  EXPECT_EQ(sec["effects"][2]["pairs"].size(), 16u);
  EXPECT_NEAR(sec["effects"][2]["tps"]["median"].get<double>(), 0.85, 1e-9);
  EXPECT_NEAR(sec["chain"][0]["cumulative_tps"].get<double>(), 1.30, 1e-9);
  EXPECT_EQ(sec["points"][31]["name"], "compile f8 ac=full b2");
  EXPECT_EQ(sec["points"][31]["layout"], "fsdp2");
}

}  // namespace
}  // namespace ctitan
