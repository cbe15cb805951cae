// Sweep specs: parsing and its one-line errors, expansion (grid, exclude,
// include, stack, world sizes), the pruning rules with their reasons, the
// point key, outcome classification and the child supervisor.
#include <gtest/gtest.h>

#include "tests/unit/input_error.h"
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "common/errors.h"
#include "common/build_identity.h"
#include "trainer/kernels/fused_ops.h"
#include "harness/sweep.h"
#include "harness/sweep_spec.h"
#include "planner/plan.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/config_registry.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;

std::string base_recipe() {
  const char* src = std::getenv("CTITAN_SOURCE_DIR");
  return fs::absolute(fs::path(src ? src : ".") / "recipes" / "llama3_debugmodel_markov.toml").string();
}

// A spec text with the [sweep] table pointing at the debugmodel recipe.
std::string spec(const std::string& body, const std::string& sweep_extra = "world_sizes = [1, 2]\n") {
  return "[sweep]\nname = \"t\"\nbase = \"" + base_recipe() + "\"\n" + sweep_extra + body;
}

DeviceBudget host_budget(int64_t bytes) {
  DeviceBudget b;
  b.memory_bytes = bytes;
  b.source = "test";
  return b;
}

std::vector<SweepPoint> plan(const std::string& text, int64_t budget = int64_t{1} << 40) {
  return plan_sweep(parse_sweep_spec(text, "t.toml"), host_budget(budget));
}

std::vector<std::string> labels(const std::vector<SweepPoint>& pts) {
  std::vector<std::string> out;
  for (const auto& p : pts) out.push_back(std::to_string(p.world_size) + " " + p.label);
  return out;
}

TEST(SweepSpec, GridCrossesAxesInFileOrderWithWorldSizesOutermost) {
  // The second axis is alphabetically first: file order must still win.
  auto pts = plan(spec("[grid]\ntraining.local_batch_size = [1, 2]\ncompile.enable = [false, true]\n"));
  ASSERT_EQ(pts.size(), 8u);
  EXPECT_EQ(labels(pts), (std::vector<std::string>{
                             "1 training.local_batch_size=1 compile.enable=false",
                             "1 training.local_batch_size=1 compile.enable=true",
                             "1 training.local_batch_size=2 compile.enable=false",
                             "1 training.local_batch_size=2 compile.enable=true",
                             "2 training.local_batch_size=1 compile.enable=false",
                             "2 training.local_batch_size=1 compile.enable=true",
                             "2 training.local_batch_size=2 compile.enable=false",
                             "2 training.local_batch_size=2 compile.enable=true",
                         }));
  EXPECT_EQ(pts[3].config.training.local_batch_size, 2);
  EXPECT_TRUE(pts[3].config.compile.enable);
  // compile points are pruned on a CPU without AVX-512 (the fused kernels
  // would not run), with that reason; every other point is feasible.
  for (const auto& p : pts) {
    if (p.config.compile.enable && !fused_kernels_available()) {
      EXPECT_NE(p.infeasible.find("AVX-512"), std::string::npos) << p.label << ": " << p.infeasible;
    } else {
      EXPECT_TRUE(p.infeasible.empty()) << p.label << ": " << p.infeasible;
    }
  }
}

TEST(SweepSpec, OverridesAndWarmupMeasureStepsApplyToEveryPoint) {
  auto pts = plan(spec("[overrides]\ntraining.seq_len = 64\n[grid]\ncompile.enable = [false, true]\n",
                       "world_sizes = [1]\nwarmup_steps = 3\nmeasure_steps = 5\n"));
  ASSERT_EQ(pts.size(), 2u);
  for (const auto& p : pts) {
    EXPECT_EQ(p.config.training.seq_len, 64);
    EXPECT_EQ(p.config.training.steps, 8);
    EXPECT_EQ(p.config.metrics.warmup_steps, 3);
    EXPECT_EQ(p.config.training.dataset, "markov");  // from the base recipe
  }
}

TEST(SweepSpec, QualitySeedsAreThePointsRunsAndItsSettingsTheirValidation) {
  const SweepSpec s = parse_sweep_spec(
      spec("[quality]\nseeds = 3\ntarget_loss = 2.5\neval_every = 4\nsteps = 40\neval_batches = 2\n"
           "[grid]\ncompile.enable = [false, true]\n",
           "world_sizes = [1]\nwarmup_steps = 3\n"),
      "t.toml");
  ASSERT_TRUE(s.quality.has_value());
  EXPECT_EQ(s.repeats, 3) << "a point runs once per seed";
  const auto pts = plan_sweep(s, host_budget(int64_t{1} << 40));
  ASSERT_EQ(pts.size(), 2u);
  for (const auto& p : pts) {
    EXPECT_TRUE(p.config.validation.enable);
    EXPECT_EQ(p.config.validation.freq, 4);
    EXPECT_DOUBLE_EQ(p.config.validation.target_loss, 2.5);
    EXPECT_EQ(p.config.validation.steps, 2);
    EXPECT_EQ(p.config.training.steps, 40) << "[quality] steps is the budget";
    EXPECT_EQ(p.config.metrics.warmup_steps, 3);
  }
  // Bad input: one line naming the file and what to do.
  const auto bad = [](const std::string& body, const std::string& sweep_extra = "world_sizes = [1]\n") {
    return error_of([&] { parse_sweep_spec(spec(body, sweep_extra), "t.toml"); });
  };
  EXPECT_NE(bad("[quality]\nseeds = 2\n").find("needs eval_every"), std::string::npos);
  EXPECT_NE(bad("[quality]\neval_every = 2\nseed = 3\n").find("unknown [quality] key 'seed'"), std::string::npos);
  EXPECT_NE(bad("[quality]\neval_every = 2\nseeds = 0\n").find("seeds must be an integer in 1..1000"),
            std::string::npos);
  EXPECT_NE(bad("[quality]\neval_every = 2\ntarget_loss = -1\n").find("target_loss"), std::string::npos);
  EXPECT_NE(bad("[quality]\neval_every = 2\nseeds = 2\n", "world_sizes = [1]\nrepeats = 3\n")
                .find("give seeds only"),
            std::string::npos);
  EXPECT_NE(bad("[quality]\neval_every = 2\nsteps = 10\n", "world_sizes = [1]\nwarmup_steps = 1\nmeasure_steps = 4\n")
                .find("both set training.steps"),
            std::string::npos);
  for (const std::string& what : {bad("[quality]\nseeds = 2\n"), bad("[quality]\neval_every = 2\nseed = 3\n")}) {
    EXPECT_NE(what.find("t.toml"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(SweepSpec, ListValuedAxesTakeArraysOrCommaStrings) {
  auto pts = plan(spec("[grid]\nmodel.converters = [[], [\"quantize.linear.float8\"], \"float8\"]\n",
                       "world_sizes = [1]\n"));
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_TRUE(pts[0].config.model.converters.empty());
  EXPECT_EQ(pts[1].config.model.converters, std::vector<std::string>{"quantize.linear.float8"});
  EXPECT_EQ(pts[0].label, "model.converters=[]");
}

TEST(SweepSpec, ReportStackNamesGridAxesInOrder) {
  const SweepSpec s = parse_sweep_spec(
      spec("[grid]\ncompile.enable = [false, true]\ntraining.local_batch_size = [1, 2, 4]\n"
           "[report]\nstack = [\"compile.enable\", \"training.local_batch_size=4\"]\n"),
      "t.toml");
  ASSERT_EQ(s.report_stack.size(), 2u);
  EXPECT_EQ(s.report_stack[0].first, "compile.enable");
  EXPECT_EQ(s.report_stack[1].first, "training.local_batch_size=4");
  EXPECT_EQ(s.report_stack[1].second, "t.toml:9");
}

TEST(SweepSpec, ExcludeDropsMatchingPointsIncludeAddsPoints) {
  auto pts = plan(spec("[grid]\ncompile.enable = [false, true]\nactivation_checkpoint.mode = [\"none\", \"full\"]\n"
                       "[[exclude]]\ncompile.enable = true\nactivation_checkpoint.mode = \"full\"\n"
                       "[[exclude]]\nworld_size = 2\ncompile.enable = false\n"
                       "[[include]]\nworld_size = 2\ncompile.enable = false\ntraining.local_batch_size = 3\n"));
  EXPECT_EQ(labels(pts), (std::vector<std::string>{
                             "1 compile.enable=false activation_checkpoint.mode=none",
                             "1 compile.enable=false activation_checkpoint.mode=full",
                             "1 compile.enable=true activation_checkpoint.mode=none",
                             "2 compile.enable=true activation_checkpoint.mode=none",
                             "2 compile.enable=false training.local_batch_size=3",  // include beats exclude
                         }));
}

TEST(SweepSpec, StackRowsAreCumulativeOnEveryGridPoint) {
  auto pts = plan(spec("[grid]\ntraining.local_batch_size = [1, 2]\n"
                       "[[stack]]\nname = \"FSDP\"\nparallelism.data_parallel_shard_degree = -1\n"
                       "[[stack]]\nname = \"+compile\"\ncompile.enable = true\n"
                       "[[stack]]\nname = \"+Float8\"\nmodel.converters = [\"quantize.linear.float8\"]\n",
                       "world_sizes = [2]\n"));
  ASSERT_EQ(pts.size(), 6u);
  EXPECT_EQ(pts[0].label, "training.local_batch_size=1 stack=1:FSDP");
  EXPECT_EQ(pts[2].label, "training.local_batch_size=1 stack=3:+Float8");
  EXPECT_EQ(pts[1].stack_index, 2);
  EXPECT_FALSE(pts[0].config.compile.enable);
  EXPECT_TRUE(pts[1].config.compile.enable);
  EXPECT_TRUE(pts[2].config.compile.enable);  // row 2 stays on under row 3
  EXPECT_EQ(pts[2].config.model.converters.size(), 1u);
  EXPECT_TRUE(pts[1].config.model.converters.empty());
}

TEST(SweepSpec, DuplicatePointsAreKeptOnce) {
  auto pts = plan(spec("[grid]\ncompile.enable = [false, true]\n[[include]]\ncompile.enable = true\n",
                       "world_sizes = [1]\n"));
  EXPECT_EQ(pts.size(), 2u);
}

// --- pruning ----------------------------------------------------------------

std::string reason(const std::string& overrides, int world_size, int64_t budget = int64_t{1} << 40) {
  auto pts = plan(spec("[overrides]\n" + overrides, "world_sizes = [" + std::to_string(world_size) + "]\n"), budget);
  EXPECT_EQ(pts.size(), 1u);
  return pts.empty() ? "" : pts[0].infeasible;
}

TEST(SweepPruning, DegreesMustMultiplyToTheWorldSize) {
  EXPECT_NE(reason("parallelism.data_parallel_replicate_degree = 2\n", 1).find("do not divide the world size 1"),
            std::string::npos);
  EXPECT_NE(reason("parallelism.data_parallel_replicate_degree = 2\nparallelism.data_parallel_shard_degree = 2\n", 2)
                .find("do not match the world size 2"),
            std::string::npos);
  EXPECT_EQ(reason("parallelism.data_parallel_replicate_degree = 2\nparallelism.data_parallel_shard_degree = 2\n", 4),
            "");  // HSDP 2 x 2
}

// A layout the model family refuses is pruned with the family's own line
// (DeepSeek-V3's flex flavors no CP, as in TorchTitan; Qwen3's tied
// flavors no FSDP).
TEST(SweepPruning, ALayoutTheFamilyRefusesIsInfeasibleWithItsReason) {
  const std::string ds = reason("model.name = \"deepseek_v3\"\nmodel.flavor = \"debugmodel_flex_attn\"\n"
                                "parallelism.context_parallel_degree = 2\n",
                                2);
  EXPECT_NE(ds.find("context parallelism does not run flex attention"), std::string::npos) << ds;
  EXPECT_EQ(reason("model.name = \"deepseek_v3\"\nmodel.flavor = \"debugmodel_flex_attn\"\n", 2), "");
  // Llama 3 runs CP under flex (document masks too), not under varlen.
  EXPECT_EQ(reason("model.flavor = \"debugmodel_flex_attn\"\nparallelism.context_parallel_degree = 2\n", 2), "");
  EXPECT_EQ(reason("model.flavor = \"debugmodel_varlen_attn\"\nparallelism.context_parallel_degree = 2\n", 2),
            "model llama3: context parallelism does not run varlen attention (TorchTitan refuses it too); set "
            "parallelism.context_parallel_degree = 1, or model.attn_type = \"flex\"");
  EXPECT_EQ(reason("model.name = \"deepseek_v3\"\nmodel.flavor = \"tiny\"\n"
                   "model.converters = [\"quantize.linear.float8\"]\n",
                   2),
            "");  // float8 on MLA's head-sharded GEMMs runs
  EXPECT_EQ(reason("model.name = \"deepseek_v3\"\nmodel.flavor = \"tiny\"\nparallelism.tensor_parallel_degree = 2\n", 2),
            "");  // TP 2 runs
  EXPECT_EQ(reason("model.name = \"deepseek_v3\"\nmodel.flavor = \"tiny\"\n", 2), "");  // FSDP 2 runs
  const std::string tied = reason("model.name = \"qwen3\"\nmodel.flavor = \"debugmodel\"\n", 2);
  EXPECT_NE(tied.find("tied output"), std::string::npos) << tied;
  // An MoE axis value the flavor cannot take is pruned, not a spec error.
  const std::string topk = reason("model.name = \"qwen3\"\nmodel.flavor = \"tiny_moe\"\nmodel.moe_top_k = 8\n", 1);
  EXPECT_NE(topk.find("model.moe_top_k 8 exceeds the 4 experts"), std::string::npos) << topk;
}

TEST(SweepPruning, TensorPipelineContextParallelNeedDivisibility) {
  // debugmodel: 16 heads, 16 KV heads, 6 layers.
  const std::string tp3 = reason("parallelism.tensor_parallel_degree = 3\n", 3);
  EXPECT_NE(tp3.find("n_heads 16 is not divisible by tp 3"), std::string::npos) << tp3;
  EXPECT_NE(tp3.find("n_kv_heads 16 is not divisible by tp 3"), std::string::npos) << tp3;
  EXPECT_EQ(tp3.find("not implemented"), std::string::npos) << tp3;
  EXPECT_EQ(reason("parallelism.tensor_parallel_degree = 2\n", 2), "");  // TP runs
  EXPECT_EQ(reason("parallelism.tensor_parallel_degree = 2\nparallelism.data_parallel_shard_degree = 2\n", 4), "");
  EXPECT_NE(reason("parallelism.tensor_parallel_degree = 2\ntraining.seq_len = 127\n", 2)
                .find("seq_len 127 is not divisible by tp 2 (sequence parallelism)"),
            std::string::npos);
  EXPECT_EQ(reason("parallelism.tensor_parallel_degree = 2\ntraining.seq_len = 127\n"
                   "parallelism.enable_sequence_parallel = false\n",
                   2),
            "");
  EXPECT_EQ(reason("parallelism.pipeline_parallel_degree = 2\n", 2), "");  // PP runs
  EXPECT_EQ(reason("parallelism.pipeline_parallel_degree = 4\n", 4), "");  // 6 + 2 effective layers over 4 stages
  EXPECT_NE(reason("parallelism.pipeline_parallel_degree = 16\n", 16)
                .find("pipeline split: 6 layers (+1 for the embedding, +1 for norm and output) do not fill 16 stages"),
            std::string::npos);
  // Multi-stage schedules: 2 stages per rank, 4 stages of debugmodel's 8
  // effective layers; PP 8 would need 16 stages; 8 micro-batches at PP 4
  // make 2 rounds, 6 do not divide into them.
  EXPECT_EQ(reason("parallelism.pipeline_parallel_degree = 2\nparallelism.pipeline_parallel_schedule = \"Interleaved1F1B\"\n", 2),
            "");
  EXPECT_EQ(reason("parallelism.pipeline_parallel_degree = 4\nparallelism.pipeline_parallel_schedule = \"ZBVZeroBubble\"\n", 4),
            "");
  EXPECT_NE(reason("parallelism.pipeline_parallel_degree = 8\nparallelism.pipeline_parallel_schedule = \"LoopedBFS\"\n", 8)
                .find("do not fill 16 stages"),
            std::string::npos);
  EXPECT_NE(reason("parallelism.pipeline_parallel_degree = 4\nparallelism.pipeline_parallel_schedule = \"Interleaved1F1B\"\n"
                   "training.local_batch_size = 9\n",
                   4)
                .find("is not a multiple of 2"),
            std::string::npos);
  EXPECT_NE(reason("parallelism.pipeline_parallel_degree = 2\nparallelism.pipeline_parallel_schedule = \"1F1B\"\n"
                   "parallelism.pipeline_parallel_layers_per_stage = 2\n",
                   2)
                .find("1F1B runs one stage per rank"),
            std::string::npos);
  EXPECT_NE(reason("parallelism.pipeline_parallel_degree = 2\nparallelism.pipeline_parallel_schedule = \"2F2B\"\n", 2)
                .find("'2F2B' is not one of TorchTitan's schedules"),
            std::string::npos);
  EXPECT_EQ(reason("parallelism.pipeline_parallel_degree = 2\n", 4), "");  // PP 2 x FSDP 2
  EXPECT_NE(reason("parallelism.pipeline_parallel_degree = 2\ntraining.local_batch_size = 3\n"
                   "parallelism.pipeline_parallel_microbatch_size = 2\n",
                   2)
                .find("local_batch_size 3 is not divisible by the pipeline microbatch size 2"),
            std::string::npos);
  EXPECT_NE(reason("parallelism.context_parallel_degree = 2\ntraining.seq_len = 126\n", 2)
                .find("training.seq_len 126 is not divisible by 2 x context_parallel_degree 2 = 4"),
            std::string::npos);
  EXPECT_EQ(reason("parallelism.context_parallel_degree = 2\n", 2), "");  // CP runs
  EXPECT_EQ(reason("parallelism.context_parallel_degree = 2\nparallelism.tensor_parallel_degree = 2\n", 8), "");
  EXPECT_NE(reason("parallelism.context_parallel_degree = 2\nparallelism.tensor_parallel_degree = 4\n"
                   "training.seq_len = 12\n",
                   8)
                .find("seq_len / cp = 6 is not divisible by tp 4 (sequence parallelism)"),
            std::string::npos);
  EXPECT_EQ(reason("parallelism.context_parallel_degree = 2\ntraining.seq_len = 126\n"
                   "parallelism.context_parallel_load_balancer = \"none\"\n",
                   2),
            "");
}

TEST(SweepPruning, GlobalBatchMustDivideByLocalBatchTimesDataParallel) {
  const std::string r = reason("training.local_batch_size = 2\ntraining.global_batch_size = 6\n", 2);
  EXPECT_NE(r.find("global_batch_size 6 is not a multiple of local_batch_size x dp = 2 x 2"), std::string::npos) << r;
  EXPECT_EQ(reason("training.local_batch_size = 2\ntraining.global_batch_size = 8\n", 2), "");
}

TEST(SweepPruning, Float8AllGatherNeedsTensorwiseUnderFsdp) {
  const std::string f8 = "model.converters = [\"quantize.linear.float8\"]\n"
                         "quantize.linear.float8.enable_fsdp_float8_all_gather = true\n"
                         "quantize.linear.float8.recipe_name = \"rowwise\"\n";
  EXPECT_NE(reason(f8, 2).find("needs recipe_name \"tensorwise\""), std::string::npos);
  EXPECT_EQ(reason(f8, 1), "");  // no sharding, no all-gather
}

// The memory rule prunes with the planner's figure (planner/plan.h) and
// names the spec it was predicted on.
TEST(SweepPruning, PredictedMemoryOverTheBudget) {
  const std::string r = reason("model.flavor = \"8B\"\n", 1, int64_t{24} << 30);
  JobConfig cfg = load_toml_file(base_recipe());
  cfg.model.flavor = "8B";
  const Prediction p = predict_point(cfg, 1, host_budget(int64_t{24} << 30));
  EXPECT_EQ(p.hardware, "cpu");
  char figure[160];
  std::snprintf(figure, sizeof figure, "predicted memory %.1f GiB per rank x 1 > 24.0 GiB (test) [predicted on cpu, ",
                p.memory.total / (1 << 30));
  EXPECT_NE(r.find(figure), std::string::npos) << r << "\nwanted: " << figure;
  EXPECT_GT(p.memory.total, 100.0 * (1 << 30));  // 8.03 B parameters x 16 B of weights, gradients and Adam state
  EXPECT_EQ(reason("", 1, int64_t{24} << 30), "");
  // Per rank x world size on the CPU: two ranks of the debug model need twice one's.
  auto pts = plan(spec("", "world_sizes = [2]\n"));
  ASSERT_TRUE(pts[0].prediction);
  const int64_t one = static_cast<int64_t>(std::ceil(pts[0].prediction->memory.total));
  EXPECT_EQ(plan(spec("", "world_sizes = [2]\n"), 2 * one + 1)[0].infeasible, "");
  EXPECT_NE(plan(spec("", "world_sizes = [2]\n"), 2 * one - (int64_t{1} << 20))[0].infeasible.find("per rank x 2 >"),
            std::string::npos);
}

// A layout the planner rejects is infeasible with its message, unless a
// rule of the sweep's own already said why.
TEST(SweepPruning, ThePlannersRejectionIsTheReasonWhenNoRuleFired) {
  JobConfig cfg = load_toml_file(base_recipe());
  const DeviceBudget b = host_budget(int64_t{1} << 40);
  EXPECT_EQ(infeasibility(cfg, 1, b, nullptr, "the planner says no"), "the planner says no");
  cfg.parallelism.data_parallel_replicate_degree = 2;  // a rule fires: degrees vs world size 1
  const std::string r = infeasibility(cfg, 1, b, nullptr, "the planner says no");
  EXPECT_NE(r.find("do not divide the world size 1"), std::string::npos) << r;
  EXPECT_EQ(r.find("the planner says no"), std::string::npos) << r;
}

// Expert parallelism prunes with TorchTitan's mesh rule and the trainer's
// own lines against the model: an ep that divides dp_shard but not the
// experts, an ep on a dense model, an ep spanning tp without SP.
TEST(SweepPruning, ExpertParallelDegreesTheTrainerRefuses) {
  JobConfig cfg = load_toml_file(base_recipe());
  const DeviceBudget b = host_budget(int64_t{1} << 40);
  cfg.model.name = "qwen3";
  cfg.model.flavor = "debugmodel_moe";  // 64 experts
  cfg.parallelism.data_parallel_shard_degree = 6;
  cfg.parallelism.expert_parallel_degree = 3;
  EXPECT_EQ(infeasibility(cfg, 6, b, nullptr, ""),
            "parallelism.expert_parallel_degree 3 does not divide the 64 routed experts per layer; choose a divisor "
            "of 64");
  cfg.parallelism.expert_parallel_degree = 4;
  EXPECT_NE(infeasibility(cfg, 6, b, nullptr, "").find("must be a multiple of cp (1) dividing dp_shard x cp (6)"),
            std::string::npos);
  cfg.parallelism.data_parallel_shard_degree = 1;
  cfg.parallelism.tensor_parallel_degree = 2;
  cfg.parallelism.expert_parallel_degree = 2;
  EXPECT_EQ(infeasibility(cfg, 2, b, nullptr, ""), "");
  cfg.parallelism.enable_sequence_parallel = false;
  EXPECT_NE(infeasibility(cfg, 2, b, nullptr, "").find("it needs parallelism.enable_sequence_parallel = true"),
            std::string::npos);
  cfg.model.name = "llama3";
  cfg.model.flavor = "debugmodel";
  cfg.parallelism.enable_sequence_parallel = true;
  EXPECT_NE(infeasibility(cfg, 2, b, nullptr, "").find("this model has none"), std::string::npos);
}

// Points are predicted on this machine's spec: cpu here, the GPU's spec on
// a GPU node, a stand-in with the GPU's memory (memory only) for a GPU no
// spec describes, or the one [sweep] hardware names.
TEST(SweepPlan, PredictionsUseTheMachinesHardwareSpec) {
  EXPECT_EQ(gpu_spec_name("NVIDIA H100 80GB HBM3", int64_t{80} << 30), "h100_sxm");
  EXPECT_EQ(gpu_spec_name("NVIDIA H100 PCIe", int64_t{80} << 30), "h100_pcie");
  EXPECT_EQ(gpu_spec_name("NVIDIA H200", int64_t{141} << 30), "h200");
  EXPECT_EQ(gpu_spec_name("NVIDIA A100-SXM4-40GB", int64_t{40} << 30), "a100_40gb");
  EXPECT_EQ(gpu_spec_name("NVIDIA A100-SXM4-80GB", int64_t{80} << 30), "a100_80gb");
  EXPECT_EQ(gpu_spec_name("NVIDIA A100-PCIE", int64_t{40} << 30), "a100_40gb");
  EXPECT_EQ(gpu_spec_name("NVIDIA B200", int64_t{180} << 30), "b200");
  EXPECT_EQ(gpu_spec_name("AMD Instinct MI300X", int64_t{192} << 30), "mi300x");
  EXPECT_EQ(gpu_spec_name("NVIDIA L40S", int64_t{48} << 30), "");

  DeviceBudget node = host_budget(int64_t{1} << 40);
  EXPECT_EQ(point_hardware(node, false).name, "cpu");
  node.gpus = 8;
  node.gpu_name = "NVIDIA H200";
  node.gpu_memory_bytes = int64_t{141} << 30;
  EXPECT_EQ(point_hardware(node, true).name, "h200");
  const std::string cuda = spec("[overrides]\ntraining.device = \"cuda\"\n", "world_sizes = [2]\n");
  auto pts = plan_sweep(parse_sweep_spec(cuda, "t.toml"), node);
  ASSERT_TRUE(pts[0].prediction);
  EXPECT_EQ(pts[0].prediction->hardware, "h200");
  EXPECT_GT(pts[0].prediction->tps_per_device, 0);
  node.gpu_name = "NVIDIA L40S";
  node.gpu_memory_bytes = int64_t{46} << 30;
  const HardwareSpec stand_in = point_hardware(node, true);
  EXPECT_EQ(stand_in.name, "h100_sxm as a stand-in for NVIDIA L40S");
  EXPECT_EQ(stand_in.memory_bytes, static_cast<double>(int64_t{46} << 30));
  pts = plan_sweep(parse_sweep_spec(cuda, "t.toml"), node);
  ASSERT_TRUE(pts[0].prediction);
  EXPECT_GT(pts[0].prediction->memory.total, 0);
  EXPECT_EQ(pts[0].prediction->tps_per_device, 0);  // another GPU's speed predicts nothing here
  node.gpu_memory_bytes = 1 << 20;
  pts = plan_sweep(parse_sweep_spec(cuda, "t.toml"), node);
  EXPECT_NE(pts[0].infeasible.find("per GPU (NVIDIA L40S) [predicted on h100_sxm as a stand-in for NVIDIA L40S"),
            std::string::npos)
      << pts[0].infeasible;
  // [sweep] hardware: that spec, whatever the machine.
  const SweepSpec named = parse_sweep_spec(spec("", "world_sizes = [1]\nhardware = \"a100_80gb\"\n"), "t.toml");
  EXPECT_EQ(named.hardware, "a100_80gb");
  DeviceBudget host = host_budget(int64_t{1} << 40);
  host.hardware = named.hardware;
  pts = plan_sweep(named, host);
  ASSERT_TRUE(pts[0].prediction);
  EXPECT_EQ(pts[0].prediction->hardware, "a100_80gb");
  const std::string bad = error_of([&] {
    parse_sweep_spec(spec("", "world_sizes = [1]\nhardware = \"h900\"\n"), "t.toml");
  });
  EXPECT_NE(bad.find("t.toml:5: "), std::string::npos) << bad;
  EXPECT_NE(bad.find("h900"), std::string::npos) << bad;
}

// `ctitan sweep` runs the fastest predicted points first: descending
// tps_per_device x world size, points without a predicted throughput last,
// ties in spec order.
TEST(SweepPlan, OrderFollowsThePredictedThroughput) {
  // A bigger batch is faster per device; replicate 2 on one rank is infeasible (no prediction).
  auto pts = plan(spec("[grid]\ntraining.local_batch_size = [1, 8]\n"
                       "parallelism.data_parallel_replicate_degree = [1, 2]\n",
                       "world_sizes = [1]\n"));
  ASSERT_EQ(pts.size(), 4u);
  const auto speed = [](const SweepPoint& p) { return p.prediction ? p.prediction->tps_per_device * p.world_size : 0; };
  ASSERT_TRUE(pts[0].prediction && pts[2].prediction);
  EXPECT_FALSE(pts[1].prediction);
  ASSERT_LT(speed(pts[0]), speed(pts[2]));  // spec order is not the predicted order
  for (size_t i = 0; i < pts.size(); ++i) EXPECT_EQ(pts[i].plan_index, static_cast<int>(i));
  std::vector<SweepPoint> ordered = pts;
  order_by_prediction(ordered);
  std::vector<int> order;
  for (const auto& p : ordered) order.push_back(p.plan_index);
  EXPECT_EQ(order, (std::vector<int>{2, 0, 1, 3}));
  // Equal predictions keep spec order (a rerun visits the points alike).
  std::vector<SweepPoint> same = {pts[0], pts[0], pts[0]};
  for (int i = 0; i < 3; ++i) same[i].plan_index = 10 - i;
  order_by_prediction(same);
  EXPECT_EQ(same[0].plan_index, 10);
  EXPECT_EQ(same[2].plan_index, 8);
}

TEST(SweepPruning, ACombinationTheTrainerRejectsIsInfeasibleNotAnError) {
  // local 3 fits global -1 but not global 8; global 8 fits local 2.
  auto pts = plan(spec("[grid]\ntraining.local_batch_size = [2, 3]\ntraining.global_batch_size = [-1, 8]\n",
                       "world_sizes = [1]\n"));
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(pts[1].infeasible, "");
  EXPECT_NE(pts[3].infeasible.find("the trainer rejects it"), std::string::npos) << pts[3].infeasible;
}

// --- point key -----------------------------------------------------------------

// On GPUs a world size is a GPU count of this node and a rank must fit in
// one GPU's memory; training.device = cuda without a GPU is infeasible. The
// budgets are given, as device_budget() reads them on a GPU node.
TEST(SweepPlan, GpuPointsNeedThatManyGpusAndFitInOne) {
  const std::string text = spec("[overrides]\ntraining.device = \"cuda\"\n", "world_sizes = [1, 2, 4]\n");
  DeviceBudget node = host_budget(int64_t{1} << 40);
  node.gpus = 2;
  node.gpu_memory_bytes = int64_t{80} << 30;
  node.gpu_name = "NVIDIA H200";
  auto pts = plan_sweep(parse_sweep_spec(text, "t.toml"), node);
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_EQ(pts[0].infeasible, "");
  EXPECT_EQ(pts[1].infeasible, "");
  EXPECT_EQ(pts[2].infeasible, "needs 4 GPUs; this node has 2 (NVIDIA H200)");
  node.gpu_memory_bytes = 1 << 20;  // a rank no longer fits in one GPU
  pts = plan_sweep(parse_sweep_spec(text, "t.toml"), node);
  EXPECT_NE(pts[0].infeasible.find("per rank > 0.0 GiB per GPU (NVIDIA H200)"), std::string::npos) << pts[0].infeasible;
  node.gpus = 0;  // no GPU at all
  pts = plan_sweep(parse_sweep_spec(text, "t.toml"), node);
  for (const auto& p : pts) EXPECT_EQ(p.infeasible, "training.device = cuda but LibTorch sees no GPU on this node");
  // device auto: GPUs when there are some, else the CPU's budget (host memory).
  const std::string auto_text = spec("", "world_sizes = [1, 4]\n");
  node.gpus = 2;
  node.gpu_memory_bytes = int64_t{80} << 30;
  EXPECT_EQ(plan_sweep(parse_sweep_spec(auto_text, "t.toml"), node)[1].infeasible,
            "needs 4 GPUs; this node has 2 (NVIDIA H200)");
  node.gpus = 0;
  EXPECT_EQ(plan_sweep(parse_sweep_spec(auto_text, "t.toml"), node)[1].infeasible, "");
}

TEST(PointKey, SameConfigSameKeyAcrossPathsLabelsAndDumpFolders) {
  JobConfig a = load_toml_file(base_recipe());
  JobConfig b = a;
  b.job.dump_folder = "/elsewhere";
  b.job.config_file = "other.toml";
  b.job.description = "another label";
  b.comm.train_timeout_seconds = 999;
  EXPECT_EQ(point_key(a, 2, "0.1.0"), point_key(b, 2, "0.1.0"));
  EXPECT_EQ(point_key(a, 2, "0.1.0").size(), 16u);
  // Setting a key to its default is the same config as leaving it out.
  JobConfig c = a;
  c.compile.enable = false;
  EXPECT_EQ(point_key(a, 1, "0.1.0"), point_key(c, 1, "0.1.0"));
  // Golden: the key must not drift between builds (same version, same config).
  EXPECT_EQ(point_key(JobConfig{}, 1, "0.1.0"), point_key(JobConfig{}, 1, "0.1.0"));
  EXPECT_EQ(canonical_config(JobConfig{}), "");
}

TEST(PointKey, WorldSizeAndVersionAreInTheKey) {
  JobConfig a;
  EXPECT_NE(point_key(a, 1, "0.1.0"), point_key(a, 2, "0.1.0"));
  EXPECT_NE(point_key(a, 1, "0.1.0"), point_key(a, 1, "0.2.0"));
  EXPECT_EQ(config_hash(a), config_hash(a));
}

// Every key that can change the measurement changes the key.
TEST(PointKey, EveryOtherKeyChangesTheKey) {
  const JobConfig base;
  const auto& outside = keys_outside_the_key();
  std::set<std::string> keys{point_key(base, 1, this_build().id)};
  int changed = 0;
  for (const config::FieldSpec& f : config::registry()) {
    if (std::find(outside.begin(), outside.end(), f.key) != outside.end()) continue;
    JobConfig cfg = base;
    config::Value v = f.get(cfg);
    if (auto* b = std::get_if<bool>(&v)) v = !*b;
    else if (auto* i = std::get_if<int64_t>(&v)) v = *i + 7;
    else if (auto* d = std::get_if<double>(&v)) v = *d == -1 ? 0.5 : *d * 2 + 1;  // (2d + 1 keeps -1)
    else if (auto* s = std::get_if<std::string>(&v)) v = *s + "x";
    else if (auto* l = std::get_if<std::vector<std::string>>(&v)) l->push_back("x"), v = *l;
    else if (std::holds_alternative<std::optional<int64_t>>(v)) v = std::optional<int64_t>(7);
    else v = std::optional<double>(0.25);
    f.set(cfg, v);
    EXPECT_TRUE(keys.insert(point_key(cfg, 1, this_build().id)).second) << f.key << " did not change the key";
    ++changed;
  }
  EXPECT_GT(changed, 100);
}

// Results belong to a build: another build (another commit, another
// uncommitted change, LibTorch or build type — all in the id) gets other
// keys, so it reuses none of this build's runs; the planner keys with the
// identity of this binary, the trainer it launches.
TEST(PointKey, AnotherBuildGetsAnotherKey) {
  const JobConfig cfg;
  EXPECT_NE(point_key(cfg, 1, "00acf3688d6c3933"), point_key(cfg, 1, "00acf3688d6c3934"));
  EXPECT_EQ(point_key(cfg, 2, "00acf3688d6c3933"), point_key(cfg, 2, "00acf3688d6c3933"));
  const auto points = plan(spec(""));
  ASSERT_FALSE(points.empty());
  EXPECT_EQ(points[0].key, point_key(points[0].config, points[0].world_size, this_build().id));
}

TEST(PointKey, PlannedPointsOfOneSpecAreStableAcrossPlans) {
  const std::string text = spec("[grid]\ncompile.enable = [false, true]\n");
  auto a = plan(text), b = plan(text);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].key, b[i].key);
  std::set<std::string> unique;
  for (const auto& p : a) unique.insert(p.key);
  EXPECT_EQ(unique.size(), a.size());
}

// --- bad specs: one line, naming the file and line -------------------------------

struct BadSpec {
  std::string name, text, expect;
};
void PrintTo(const BadSpec& c, std::ostream* os) { *os << c.name; }

class BadSpecs : public ::testing::TestWithParam<BadSpec> {};

TEST_P(BadSpecs, OneLineNamingTheProblem) {
  const std::string msg = error_of([&] { plan(GetParam().text); });
  EXPECT_NE(msg.find(GetParam().expect), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(
    SweepSpec, BadSpecs,
    ::testing::Values(
        BadSpec{"UnknownAxisKey", spec("[grid]\ntraining.stepz = [1, 2]\n"),
                "t.toml:6: grid key 'training.stepz' is not a config key; did you mean 'training.steps'?"},
        BadSpec{"EmptyGrid", spec("[grid]\n"), "[grid] is empty"},
        BadSpec{"EmptyAxis", spec("[grid]\ncompile.enable = []\n"), "grid axis 'compile.enable' has no values"},
        BadSpec{"ScalarAxis", spec("[grid]\ncompile.enable = true\n"), "needs an array of values"},
        BadSpec{"WorldSizeZero", spec("", "world_sizes = [0, 1]\n"), "world_sizes entries must be an integer in 1..65536, got 0"},
        BadSpec{"NoWorldSizes", spec("", "world_sizes = []\n"), "world_sizes is empty"},
        BadSpec{"WrongType", spec("[grid]\ncompile.enable = [1, 2]\n"), "'compile.enable' expects a boolean"},
        BadSpec{"ValueRejectedEverywhere", spec("[grid]\nactivation_checkpoint.mode = [\"none\", \"fulll\"]\n"),
                "activation_checkpoint.mode = fulll is rejected in every point"},
        BadSpec{"UnknownFlavor", spec("[grid]\nmodel.flavor = [\"debugmodel\", \"huge\"]\n"),
                "unknown model.flavor 'huge'"},
        BadSpec{"UnknownTable", spec("[grdi]\n"), "unknown table '[grdi]'"},
        BadSpec{"UnknownSweepKey", spec("", "repeat = 2\n"), "unknown [sweep] key 'repeat'"},
        BadSpec{"MissingBase", "[sweep]\nname = \"t\"\n", "[sweep] base is missing"},
        BadSpec{"BaseNotAFile", "[sweep]\nbase = \"nope.toml\"\n", "is not a file"},
        BadSpec{"LineBreakInBase", "[sweep]\nbase = \"no\\npe.toml\"\n", "no\\npe.toml' is not a file"},  // fuzz.sweep_spec's find
        BadSpec{"SweepOwnedKey", spec("[grid]\njob.dump_folder = [\"a\"]\n"), "is set by the sweep itself"},
        BadSpec{"InvalidToml", spec("[grid\n"), "invalid TOML"},
        BadSpec{"MeasureWithoutWarmup", spec("", "measure_steps = 4\n"), "measure_steps needs warmup_steps"},
        BadSpec{"StackRowWithoutName", spec("[[stack]]\ncompile.enable = true\n"), "needs name"},
        BadSpec{"BadInclude", spec("[[include]]\nactivation_checkpoint.mode = \"sometimes\"\n"),
                "[[include]] row"},
        BadSpec{"ZeroRepeats", spec("", "repeats = 0\n"), "repeats must be an integer in 1..1000, got 0"},
        BadSpec{"ReportStackNotAnAxis",
                spec("[grid]\ncompile.enable = [false, true]\n[report]\nstack = [\"model.converters\"]\n"),
                "t.toml:8: [report] stack entry 'model.converters' is not a [grid] axis"},
        BadSpec{"ReportStackAmbiguous",
                spec("[grid]\ntraining.local_batch_size = [1, 2, 4]\n[report]\nstack = [\"training.local_batch_size\"]\n"),
                "has 3 values in [grid]; name the one to stack: 'training.local_batch_size=4'"},
        BadSpec{"ReportStackUnknownValue",
                spec("[grid]\ncompile.enable = [false, true]\n[report]\nstack = [\"compile.enable=maybe\"]\n"),
                "'maybe' is not one of the axis's values after its first"},
        BadSpec{"ReportUnknownKey", spec("[report]\nstak = [\"compile.enable\"]\n"), "unknown [report] key 'stak'"}),
    [](const auto& info) { return info.param.name; });

// --- classification -------------------------------------------------------------

ChildExit exited(int code, const std::string& tail = "") {
  ChildExit e;
  e.exit_code = code;
  e.stderr_tail = tail;
  e.seconds = 2;
  return e;
}

TEST(SweepClassify, Rules) {
  EXPECT_EQ(classify(exited(0), 60).status, "ok");
  ChildExit t = exited(143);
  t.timed_out = true;
  EXPECT_EQ(classify(t, 60).status, "timeout");
  EXPECT_NE(classify(t, 60).error.find("timed out"), std::string::npos);
  ChildExit c = exited(143);
  c.cancelled = true;
  EXPECT_EQ(classify(c, 60).status, "cancelled");
  EXPECT_EQ(classify(exited(1, "ctitan: internal error: DefaultCPUAllocator: can't allocate memory"), 60).status, "oom");
  ChildExit k = exited(137);
  k.term_signal = 9;
  EXPECT_EQ(classify(k, 60).status, "oom");
  EXPECT_EQ(classify(exited(137, "ctitan launch: rank 1 (pid 5) was killed by signal 9 (SIGKILL)"), 60).status, "oom");
  const Outcome bad = classify(exited(2, "[rank0]: ctitan: unknown model.flavor 'x'\nctitan launch: rank 0 exited"), 60);
  EXPECT_EQ(bad.status, "failed");  // bad input met at run time; infeasible is the planner's word only
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.error.substr(0, bad.error.find('\n')),
            "the trainer rejected its input (exit code 2): unknown model.flavor 'x'");
  EXPECT_EQ(classify(exited(130), 60).status, "cancelled");
  const Outcome f = classify(exited(1, "line a\nctitan: internal error: boom"), 60);
  EXPECT_EQ(f.status, "failed");
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_NE(f.error.find("exited with code 1\nline a\nctitan: internal error: boom"), std::string::npos) << f.error;
  ChildExit seg = exited(139);
  seg.term_signal = SIGSEGV;
  EXPECT_NE(classify(seg, 60).error.find("killed by signal 11 (SEGV)"), std::string::npos);
}

// --- the supervisor -----------------------------------------------------------------

class Supervise : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("ctitan_supervise_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  ChildExit run(const std::string& script, double timeout_s, int grace_s = 1) {
    return supervise({"/bin/sh", "-c", script}, (dir_ / "out").string(), (dir_ / "err").string(), timeout_s,
                     std::chrono::seconds(grace_s));
  }
  fs::path dir_;
};

TEST_F(Supervise, ExitCodeAndStderrTail) {
  const ChildExit e = run("echo hello; for i in $(seq 1 30); do echo line$i >&2; done; exit 3", 30);
  EXPECT_EQ(e.exit_code, 3);
  EXPECT_FALSE(e.timed_out);
  EXPECT_EQ(e.stderr_tail.substr(0, 7), "line11\n");  // the last 20 lines
  EXPECT_EQ(e.stderr_tail.substr(e.stderr_tail.size() - 6), "line30");
  std::ifstream out(dir_ / "out");
  std::string line;
  std::getline(out, line);
  EXPECT_EQ(line, "hello");
}

// The deadline stops the whole process group, including a child that
// ignores SIGTERM (SIGKILL after the grace period) and a grandchild.
TEST_F(Supervise, TimeoutKillsTheWholeGroup) {
  const fs::path pidfile = dir_ / "grandchild.pid";
  const auto t0 = std::chrono::steady_clock::now();
  const ChildExit e = run("sleep 300 & echo $! > " + pidfile.string() + "; trap '' TERM; while :; do sleep 0.05; done", 0.5);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(e.timed_out);
  EXPECT_EQ(e.term_signal, SIGKILL);
  EXPECT_LT(took, 5.0);
  EXPECT_GE(took, 1.4);  // 0.5 s deadline + 1 s grace
  std::ifstream in(pidfile);
  pid_t grandchild = 0;
  in >> grandchild;
  ASSERT_GT(grandchild, 0);
  usleep(100000);
  EXPECT_NE(kill(grandchild, 0), 0) << "the grandchild outlived the run";
  EXPECT_EQ(classify(e, 0.5).status, "timeout");
}

TEST_F(Supervise, GracefulStopWithinTheGracePeriod) {
  const ChildExit e = run("trap 'exit 130' TERM; while :; do sleep 0.05; done", 0.3, 10);
  EXPECT_TRUE(e.timed_out);
  EXPECT_EQ(e.exit_code, 130);
  EXPECT_LT(e.seconds, 5.0);
}

}  // namespace
}  // namespace ctitan
