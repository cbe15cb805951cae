// Published reproductions: the shipped tables (recipes/published/*.toml)
// load, every row resolves to one feasible point with the publication's
// settings and is predicted; [published] errors are one line with file and
// line; `ctitan plan --validate` prints one labelled line per row and the
// medians; `ctitan report --published` shows published, predicted and
// measured side by side, measured only from runs of the point on a GPU of
// the row's hardware spec.
#include "harness/published.h"

#include <gtest/gtest.h>

#include "tests/unit/input_error.h"
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/errors.h"
#include "harness/report_command.h"
#include "harness/sweep_command.h"
#include "harness/sweep_spec.h"
#include "planner/hardware.h"
#include "reports/published.h"
#include "results/results_db.h"
#include "trainer/distributed/mesh.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;

fs::path source_dir() {
  const char* src = std::getenv("CTITAN_SOURCE_DIR");
  return fs::absolute(src ? src : ".");
}
fs::path published_folder() { return source_dir() / "recipes" / "published"; }

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("ctitan_published_" + std::to_string(getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path dir_;
};

// A published spec on the 8B recipe at 8 GPUs with two stack rows.
std::string spec_text(const std::string& published) {
  return "[sweep]\nname = \"t\"\nbase = \"" + (source_dir() / "recipes" / "llama3_8b.toml").string() +
         "\"\nworld_sizes = [8]\n\n"
         "[overrides]\ntraining.local_batch_size = 2\n\n"
         "[[stack]]\nname = \"FSDP\"\nparallelism.data_parallel_shard_degree = -1\n"
         "[[stack]]\nname = \"+compile\"\ncompile.enable = true\n\n" +
         published;
}

// Lines 16-26 of spec_text(kGoodPublished); rows appended start at line 27.
const std::string kGoodPublished =
    "[published]\n"                   // 16
    "source = \"a table\"\n"          // 17
    "hardware = \"h100_sxm_500w\"\n"  // 18
    "gpus = 8\n"                      // 19
    "[[published.rows]]\n"            // 20
    "stack = \"FSDP\"\n"              // 21
    "tps = 5000\n"                    // 22
    "mem_gib = 80\n"                  // 23
    "[[published.rows]]\n"            // 24
    "stack = \"+compile\"\n"          // 25
    "tps = 6000\n";                   // 26

TEST(PublishedTables, ShippedTablesLoadAndEveryRowIsOneFeasiblePoint) {
  const std::vector<PublishedRow> rows = load_published(published_folder().string());
  // Rows per table, as the sources publish them (recipes/published/README.md).
  std::map<std::string, int> per_table;
  for (const PublishedRow& r : rows) ++per_table[r.table];
  EXPECT_EQ(per_table, (std::map<std::string, int>{{"llama3_405b_h100_128gpu_2d", 3},
                                                   {"llama3_405b_h100_512gpu_3d", 2},
                                                   {"llama3_405b_h100_512gpu_4d_cp", 4},
                                                   {"llama3_70b_a100_64gpu_fsdp", 1},
                                                   {"llama3_70b_h100_256gpu_2d", 2},
                                                   {"llama3_70b_h100_256gpu_async_tp", 6},
                                                   {"llama3_8b_a100_64gpu_fsdp", 2},
                                                   {"llama3_8b_h100_128gpu_fsdp", 3},
                                                   {"llama3_8b_h100_64gpu_async_tp", 6},
                                                   {"llama3_8b_h100_8gpu_cp", 4},
                                                   {"llama3_8b_h100_8gpu_fsdp", 3},
                                                   {"llama3_8b_h200_fsdp_float8", 2},
                                                   {"megatron_gpt_a100_weak_scaling", 10}}));
  std::set<std::string> hashes;
  for (const PublishedRow& r : rows) {
    SCOPED_TRACE(r.where + " " + r.label);
    // One spec per hardware, each a real file; the point runs on that many of its GPUs.
    EXPECT_TRUE(r.hardware == "h100_sxm_500w" || r.hardware == "a100_80gb" || r.hardware == "h200") << r.hardware;
    EXPECT_NO_THROW(load_hardware(r.hardware));
    // Another framework's GPT is predicted, never run: ctitan's trainer has no such model.
    EXPECT_EQ(r.infeasible.empty(), !r.own_model) << r.infeasible;
    EXPECT_EQ(r.own_model, r.framework == "megatron");
    EXPECT_FALSE(r.source.empty());
    EXPECT_GT(r.tps, 0);
    // The mesh multiplies to the world size by the trainer's own rule.
    const MeshShape m = resolve_mesh_shape(r.cfg.parallelism, r.world_size);
    EXPECT_EQ(m.dp_replicate * m.dp_shard * m.cp * m.tp * m.pp, r.world_size);
    EXPECT_TRUE(hashes.insert(r.config_hash + "@" + std::to_string(r.world_size)).second) << "two rows, one point";
  }
}

const PublishedRow& row_of(const std::vector<PublishedRow>& rows, const std::string& table, const std::string& label) {
  for (const PublishedRow& r : rows)
    if (r.table == table && r.label == label) return r;
  throw std::runtime_error("no row " + table + " / " + label);
}

TEST(PublishedTables, RowsCarryThePublishedSettings) {
  const std::vector<PublishedRow> rows = load_published(published_folder().string());
  {  // Table 1, the last stack row: FSDP 8, compile and Float8 on top, local batch 2, per-op SAC, seq 8192.
    const PublishedRow& r = row_of(rows, "llama3_8b_h100_8gpu_fsdp", "FSDP + torch.compile + Float8");
    EXPECT_EQ(r.world_size, 8);
    EXPECT_EQ(r.cfg.model.flavor, "8B");
    EXPECT_TRUE(r.cfg.compile.enable);
    EXPECT_EQ(r.cfg.model.converters, std::vector<std::string>{"quantize.linear.float8"});
    EXPECT_EQ(r.cfg.training.local_batch_size, 2);
    EXPECT_EQ(r.cfg.training.global_batch_size, 16);
    EXPECT_EQ(r.cfg.training.seq_len, 8192);
    EXPECT_EQ(r.cfg.activation_checkpoint.mode, "selective");
    EXPECT_EQ(r.cfg.activation_checkpoint.selective_ac_option, "op");
    EXPECT_DOUBLE_EQ(r.tps, 8532);
    EXPECT_DOUBLE_EQ(r.mem_gib.value_or(0), 76.8);
    EXPECT_EQ(resolve_mesh_shape(r.cfg.parallelism, 8).dp_shard, 8);
  }
  {  // Its first row has neither compile nor Float8.
    const PublishedRow& r = row_of(rows, "llama3_8b_h100_8gpu_fsdp", "FSDP");
    EXPECT_FALSE(r.cfg.compile.enable);
    EXPECT_TRUE(r.cfg.model.converters.empty());
    EXPECT_DOUBLE_EQ(r.tps, 5762);
  }
  {  // Table 4 with async TP: FSDP 32 x TP 8, local batch 16, full AC.
    const PublishedRow& r = row_of(rows, "llama3_70b_h100_256gpu_2d", "2D + AsyncTP");
    const MeshShape m = resolve_mesh_shape(r.cfg.parallelism, 256);
    EXPECT_EQ(m.dp_shard, 32);
    EXPECT_EQ(m.tp, 8);
    EXPECT_TRUE(r.cfg.parallelism.enable_async_tensor_parallel);
    EXPECT_EQ(r.cfg.training.local_batch_size, 16);
    EXPECT_EQ(r.cfg.activation_checkpoint.mode, "full");
    EXPECT_DOUBLE_EQ(r.tps, 876);
  }
  {  // Table 5, interleaved: FSDP 8 x TP 8 x PP 8, one micro-batch (of 4) per
     // pipeline rank, as TorchTitan's build_pipeline_schedule at 9dec370.
    const PublishedRow& r = row_of(rows, "llama3_405b_h100_512gpu_3d", "Interleaved 1F1B");
    const MeshShape m = resolve_mesh_shape(r.cfg.parallelism, 512);
    EXPECT_EQ(m.dp_shard, 8);
    EXPECT_EQ(m.tp, 8);
    EXPECT_EQ(m.pp, 8);
    EXPECT_EQ(r.cfg.parallelism.pipeline_parallel_schedule, "Interleaved1F1B");
    EXPECT_EQ(r.cfg.parallelism.pipeline_parallel_microbatch_size, 4);
    EXPECT_EQ(r.cfg.training.local_batch_size, 32);
  }
  {  // Table 2's last row: CP 8 over the whole node at 262144 tokens.
    const PublishedRow& r = row_of(rows, "llama3_8b_h100_8gpu_cp", "FSDP 1, CP 8, seq 262144");
    const MeshShape m = resolve_mesh_shape(r.cfg.parallelism, 8);
    EXPECT_EQ(m.cp, 8);
    EXPECT_EQ(m.dp_shard, 1);
    EXPECT_EQ(r.cfg.training.seq_len, 262144);
    EXPECT_DOUBLE_EQ(r.tps, 548);
  }
  {  // A100, selective per-layer AC = every other layer; no Float8 on an A100.
    const PublishedRow& r = row_of(rows, "llama3_8b_a100_64gpu_fsdp", "8B, selective layer AC");
    EXPECT_EQ(r.cfg.activation_checkpoint.selective_ac_option, "2");
    EXPECT_TRUE(r.cfg.model.converters.empty());
    EXPECT_EQ(r.hardware, "a100_80gb");
    EXPECT_DOUBLE_EQ(r.mfu_pct.value_or(0), 56.8);
  }
  {  // Megatron-LM's 1 T row: GPT with h = 25600, 160 heads, 128 layers, TP 8 x PP 64 x DP 6,
     // batch 3072 in one-sequence micro-batches; 163 teraFLOP/s per GPU by Eq. 3, i.e.
     // 163e12 / (96·128·25600²·(1 + 2048/153600 + 51200/52428800)) tokens/s, worked out by hand:
     // 96·128·25600² = 8.05306368e12; 1 + 0.0133333… + 0.0009765625 = 1.0143099…; 19.955… tokens/s.
    const PublishedRow& r = row_of(rows, "megatron_gpt_a100_weak_scaling", "GPT 1008 B, TP 8 x PP 64, 3072 GPUs");
    EXPECT_EQ(r.framework, "megatron");
    EXPECT_EQ(r.model.family, "gpt");
    EXPECT_EQ(r.model.dim, 25600);
    EXPECT_EQ(r.model.n_heads, 160);
    EXPECT_EQ(r.model.n_kv_heads, 160);
    EXPECT_EQ(r.model.ffn_hidden, 4 * 25600);
    EXPECT_EQ(r.model.n_layers, 128);
    EXPECT_EQ(r.model.vocab_size, 51200);
    EXPECT_NEAR(static_cast<double>(r.model.params()) / 1e9, 1008, 2);  // the table's 1008.0 B
    const MeshShape m = resolve_mesh_shape(r.cfg.parallelism, 3072);
    EXPECT_EQ(m.tp, 8);
    EXPECT_EQ(m.pp, 64);
    EXPECT_EQ(m.dp_replicate, 6);
    EXPECT_EQ(r.cfg.training.local_batch_size, 512);
    EXPECT_EQ(r.cfg.parallelism.pipeline_parallel_microbatch_size, 1);
    EXPECT_FALSE(r.cfg.parallelism.enable_sequence_parallel);
    EXPECT_EQ(r.cfg.activation_checkpoint.mode, "full");
    EXPECT_NEAR(r.tps, 163e12 / (8.05306368e12 * (1 + 2048.0 / 153600 + 0.0009765625)), 1e-9);
    EXPECT_NEAR(r.tps, 19.955, 0.001);
  }
  {  // Its first row: 1.7 B, h = 2304, 24 layers, DP 32 alone, 137 teraFLOP/s.
    const PublishedRow& r = row_of(rows, "megatron_gpt_a100_weak_scaling", "GPT 1.7 B, TP 1 x PP 1, 32 GPUs");
    EXPECT_EQ(resolve_mesh_shape(r.cfg.parallelism, 32).dp_replicate, 32);
    EXPECT_EQ(r.cfg.training.global_batch_size, 512);
    EXPECT_EQ(r.model.n_layers, 24);
    // 96·24·2304² = 12,230,590,464; 1 + 2048/13824 + 51200/884736: 9,287.9 tokens/s.
    EXPECT_NEAR(r.tps, 137e12 / (12230590464.0 * (1 + 2048.0 / 13824 + 51200.0 / 884736)), 1e-9);
    EXPECT_NEAR(r.tps, 9287.9, 0.1);
  }
  {  // The async TP table's rowwise row.
    const PublishedRow& r = row_of(rows, "llama3_70b_h100_256gpu_async_tp", "float8 rowwise, async TP");
    EXPECT_EQ(r.cfg.float8.recipe_name, "rowwise");
    EXPECT_TRUE(r.cfg.parallelism.enable_async_tensor_parallel);
    EXPECT_DOUBLE_EQ(r.tps, 624.8);
  }
}

TEST(PublishedTables, EveryShippedRowIsPredicted) {
  const PublishedReport rep = predict_published(load_published(published_folder().string()));
  ASSERT_EQ(rep.rows.size(), 48u);
  for (const PublishedPoint& p : rep.rows) {
    SCOPED_TRACE(p.where + " " + p.label);
    EXPECT_EQ(p.not_predicted, "");
    EXPECT_GT(p.predicted_tps.value_or(0), 0);
    EXPECT_GT(p.predicted_mem_gib.value_or(0), 0);
  }
  // Megatron-LM's table, out of sample on the A100 spec fitted to TorchTitan's rows:
  // docs/planner.md's median (7.2 %) stays within the issue's 10 %.
  std::vector<double> megatron;
  for (const PublishedPoint& p : rep.rows)
    if (p.table == "megatron_gpt_a100_weak_scaling")
      megatron.push_back(std::abs(p.predicted_tps.value_or(0) / p.published_tps - 1));
  ASSERT_EQ(megatron.size(), 10u);
  std::sort(megatron.begin(), megatron.end());
  EXPECT_LE((megatron[4] + megatron[5]) / 2, 0.10);
  // The header names each spec once, with its calibration source.
  ASSERT_EQ(rep.hardware.size(), 3u);
  for (const PublishedHardware& h : rep.hardware) EXPECT_FALSE(h.calibration.empty()) << h.name;
}

struct BadPublished {
  std::string name, published, message;
};
class BadPublishedSpecs : public ::testing::TestWithParam<BadPublished> {};

TEST_P(BadPublishedSpecs, OneLineNamingFileAndLine) {
  const std::string what = error_of([&] { parse_sweep_spec(spec_text(GetParam().published), "t.toml"); });
  EXPECT_NE(what.find(GetParam().message), std::string::npos) << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
}

INSTANTIATE_TEST_SUITE_P(
    Published, BadPublishedSpecs,
    ::testing::Values(
        BadPublished{"UnknownTableKey", "[published]\nsource = \"s\"\nhardware = \"h\"\nsorce = \"x\"\n",
                     "t.toml:19: unknown [published] key 'sorce'; [published] takes source, hardware, gpus"},
        BadPublished{"UnknownRowKey", kGoodPublished + "[[published.rows]]\nstack = \"FSDP\"\ntps = 1\ntokens = 2\n",
                     "t.toml:30: unknown [[published.rows]] key 'tokens'"},
        BadPublished{"RowWithoutTps", kGoodPublished + "[[published.rows]]\nstack = \"FSDP\"\n",
                     "t.toml:27: a [[published.rows]] row needs tps"},
        BadPublished{"NegativeTps", kGoodPublished + "[[published.rows]]\nstack = \"FSDP\"\ntps = -3\n",
                     "t.toml:29: tps (tokens/s per GPU) must be a number from 0 to 1e+09, got -3"},
        BadPublished{
            "PointKeyNotAConfigKey",
            kGoodPublished + "[[published.rows]]\nstack = \"FSDP\"\ntps = 1\npoint = { training.seqlen = 4 }\n",
            "t.toml:30: published point key 'training.seqlen' is not a config key; did you mean "
            "'training.seq_len'?"},
        BadPublished{"StackNotARow", kGoodPublished + "[[published.rows]]\nstack = \"+Float8\"\ntps = 1\n",
                     "t.toml:27: [[published.rows]] stack = '+Float8' names no [[stack]] row; the rows are "
                     "'FSDP', '+compile'"},
        BadPublished{"GpusNotAWorldSize", kGoodPublished + "[[published.rows]]\nstack = \"FSDP\"\ngpus = 16\ntps = 1\n",
                     "t.toml:27: the row's gpus = 16 is not in [sweep] world_sizes"},
        BadPublished{"NoSource",
                     "[published]\nhardware = \"h\"\ngpus = 8\n[[published.rows]]\nstack = \"FSDP\"\ntps = 1\n",
                     "t.toml:16: [published] needs source"},
        BadPublished{"FrameworkNotModelled",
                     "[published]\nsource = \"s\"\nhardware = \"h\"\nframework = \"deepspeed\"\n[[published.rows]]\n"
                     "stack = \"FSDP\"\ntps = 1\n",
                     "t.toml:19: [published] framework 'deepspeed' is not one the planner models"},
        BadPublished{"TflopsWithoutFormula", kGoodPublished + "[[published.rows]]\nstack = \"FSDP\"\ntflops = 140\n",
                     "t.toml:27: the row gives tflops but [published] has no flops_formula"},
        BadPublished{"TpsAndTflops",
                     "[published]\nsource = \"s\"\nhardware = \"h\"\nflops_formula = \"megatron\"\n"
                     "[[published.rows]]\nstack = \"FSDP\"\ntps = 1\ntflops = 140\n",
                     "t.toml:20: a [[published.rows]] row needs tps (tokens/s per GPU) or tflops"},
        BadPublished{"FormulaNotKnown",
                     "[published]\nsource = \"s\"\nhardware = \"h\"\nflops_formula = \"6N\"\n[[published.rows]]\n"
                     "stack = \"FSDP\"\ntps = 1\n",
                     "t.toml:19: [published] flops_formula '6N' is not known"},
        BadPublished{"ModelKeyNotAShapeKey",
                     kGoodPublished + "[[published.rows]]\nstack = \"FSDP\"\ntps = 1\nmodel = { hidden = 4096 }\n",
                     "t.toml:30: [[published.rows]] model: --model.hidden is not a model option of ctitan plan"},
        BadPublished{"ModelLayersAreTheTrainerKey",
                     kGoodPublished + "[[published.rows]]\nstack = \"FSDP\"\ntps = 1\nmodel = { n_layers = 4 }\n",
                     "t.toml:30: [[published.rows]] model: n_layers is the point's model.n_layers"},
        BadPublished{"ModelFamilyUnknown",
                     "[published]\nsource = \"s\"\nhardware = \"h\"\nmodel = { family = \"bert\" }\n"
                     "[[published.rows]]\nstack = \"FSDP\"\ntps = 1\n",
                     "t.toml:19: [published] model: --model.family 'bert' is unknown"},
        BadPublished{"NoRows", "[published]\nsource = \"s\"\nhardware = \"h\"\ngpus = 8\n",
                     "t.toml:16: [published] has no [[published.rows]]"}),
    [](const auto& info) { return info.param.name; });

TEST(PublishedSpec, ParsedButNotSwept) {
  const SweepSpec with = parse_sweep_spec(spec_text(kGoodPublished), "t.toml");
  const SweepSpec without = parse_sweep_spec(spec_text(""), "t.toml");
  ASSERT_TRUE(with.published.has_value());
  EXPECT_FALSE(without.published.has_value());
  EXPECT_EQ(with.published->source, "a table");
  EXPECT_EQ(with.published->hardware, "h100_sxm_500w");
  ASSERT_EQ(with.published->rows.size(), 2u);
  EXPECT_EQ(with.published->rows[0].where, "t.toml:20");
  EXPECT_EQ(with.published->rows[0].gpus, 8);  // the table's
  EXPECT_DOUBLE_EQ(with.published->rows[0].mem_gib.value_or(0), 80);
  EXPECT_FALSE(with.published->rows[1].mem_gib.has_value());
  DeviceBudget b;
  b.memory_bytes = int64_t{1} << 50;
  b.gpus = 8;
  b.gpu_memory_bytes = int64_t{1} << 40;
  const auto a = plan_sweep(with, b, "build"), c = plan_sweep(without, b, "build");
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].key, c[i].key);
}

TEST(PublishedTables, AnotherFrameworksModelIsPredictedButNeverSwept) {
  // Megatron-LM's GPT rows name a model ctitan's trainer does not build: a
  // sweep of the file is refused in one line before anything is planned or
  // stored (no database is created).
  const fs::path spec = published_folder() / "megatron_gpt_a100_weak_scaling.toml";
  const fs::path db = fs::temp_directory_path() / ("ctitan_megatron_sweep_" + std::to_string(getpid()) + ".db");
  const std::string what = error_of([&] { sweep_command({spec.string(), "--db", db.string()}); });
  EXPECT_NE(what.find("another framework's measurements of a model ctitan's trainer does not build"), std::string::npos)
      << what;
  EXPECT_NE(what.find("ctitan plan --validate"), std::string::npos) << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  EXPECT_FALSE(fs::exists(db));
  // Predicted, and marked as never run by ctitan.
  const PublishedReport rep = predict_published(load_published(spec.string()));
  ASSERT_EQ(rep.rows.size(), 10u);
  for (const PublishedPoint& p : rep.rows) {
    EXPECT_EQ(p.not_run, "not run (ctitan's trainer builds no gpt)");
    EXPECT_GT(p.predicted_tps.value_or(0), 0);
  }
}

class PublishedFiles : public TempDir {};

TEST_F(PublishedFiles, RowsThatMatchNoPointOrSeveralAreOneLineErrors) {
  const std::string none =
      write("none.toml", spec_text(kGoodPublished + "[[published.rows]]\nstack = \"FSDP\"\n"
                                                    "point = { training.seq_len = 4096 }\ntps = 1\n"));
  std::string what = error_of([&] { load_published(none); });
  EXPECT_NE(what.find("none.toml:27: the published row (stack 'FSDP', gpus 8, training.seq_len = 4096) matches no "
                      "point of the sweep"),
            std::string::npos)
      << what;
  // Without stack rows, a grid's two points both match a row that names no setting.
  const std::string grid = "[sweep]\nname = \"g\"\nbase = \"" + (source_dir() / "recipes" / "llama3_8b.toml").string() +
                           "\"\nworld_sizes = [8]\n[grid]\ncompile.enable = [false, true]\n"
                           "[published]\nsource = \"s\"\nhardware = \"h100_sxm_500w\"\ngpus = 8\n"
                           "[[published.rows]]\ntps = 1\n";
  what = error_of([&] { load_published(write("two.toml", grid)); });
  EXPECT_NE(what.find("two.toml:11: the published row (gpus 8) matches 2 points (compile.enable=false; "
                      "compile.enable=true); add settings to its point = {...}"),
            std::string::npos)
      << what;
  EXPECT_EQ(what.find('\n'), std::string::npos);
  const std::string plain = write("plain.toml", spec_text(""));
  what = error_of([&] { load_published(plain); });
  EXPECT_NE(what.find("has no [published] table"), std::string::npos) << what;
  what = error_of([&] {
    load_published(write("hw.toml", spec_text("[published]\nsource = \"s\"\nhardware = \"h999\"\ngpus = 8\n"
                                              "[[published.rows]]\nstack = \"FSDP\"\ntps = 1\n")));
  });
  EXPECT_NE(what.find("hw.toml:16: [published] hardware: "), std::string::npos) << what;
  EXPECT_NE(what.find("h999"), std::string::npos) << what;
}

TEST_F(PublishedFiles, RowsPickTheirPointByStackAndSettings) {
  const std::vector<PublishedRow> rows = load_published(write("ok.toml", spec_text(kGoodPublished)));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].label, "stack=1:FSDP");  // no label: the point's
  EXPECT_FALSE(rows[0].cfg.compile.enable);
  EXPECT_TRUE(rows[1].cfg.compile.enable);
  EXPECT_EQ(rows[1].table, "ok");
  EXPECT_EQ(rows[1].where, dir_.string() + "/ok.toml:24");
  EXPECT_NE(rows[0].config_hash, rows[1].config_hash);
}

TEST_F(PublishedFiles, ARowsOwnModelIsCheckedAsAWholeInAnyKeyOrder) {
  // n_heads before dim: 24 heads do not divide the 8B's 4096, but do divide
  // the row's 2304 — the shape is checked once every key is applied.
  const std::string table = "[published]\nsource = \"s\"\nhardware = \"h100_sxm_500w\"\ngpus = 8\n"
                            "model = { family = \"gpt\" }\n[[published.rows]]\nstack = \"FSDP\"\ntps = 1\n";
  const std::vector<PublishedRow> rows =
      load_published(write("ok.toml", spec_text(table + "model = { n_heads = 24, dim = 2304 }\n")));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].model.dim, 2304);
  EXPECT_EQ(rows[0].model.n_heads, 24);
  EXPECT_TRUE(rows[0].own_model);
  const std::string bad = write("bad.toml", spec_text(table + "model = { n_heads = 24, dim = 2300 }\n"));
  const std::string what = error_of([&] { load_published(bad); });
  EXPECT_NE(what.find(bad + ":21: the row's model: --model.dim 2300 is not divisible by n_heads 24"), std::string::npos)
      << what;
}

// A report of three rows with known numbers: errors and medians by hand.
PublishedReport hand_made() {
  PublishedReport r;
  r.hardware = {{"h100_sxm_500w", "Grand Teton H100", "uncalibrated: test"}};
  const auto row = [](std::string label, double pub, std::optional<double> pred, std::optional<double> pub_mem,
                      std::optional<double> pred_mem) {
    PublishedPoint p;
    p.table = "t";
    p.source = "a source";
    p.label = std::move(label);
    p.hardware = "h100_sxm_500w";
    p.gpu_match = "h100";
    p.world_size = 8;
    p.config_hash = "hash-" + p.label;
    p.published_tps = pub;
    p.predicted_tps = pred;
    p.published_mem_gib = pub_mem;
    p.predicted_mem_gib = pred_mem;
    return p;
  };
  r.rows.push_back(row("a", 100, 110, 80, 60));          // +10 %, mem -25 %
  r.rows.push_back(row("b", 200, 150, 40, 42));          // -25 %, mem +5 %
  r.rows.push_back(row("c", 50, 55, std::nullopt, 30));  // +10 %, no published memory
  r.rows.push_back(row("d", 70, std::nullopt, 10, std::nullopt));
  r.rows.back().not_predicted = "the planner cannot";
  return r;
}

TEST(PublishedReportData, ErrorsAndMediansOverRowsWithBothNumbers) {
  const PublishedReport r = hand_made();
  EXPECT_NEAR(*error_pct(r.rows[1].predicted_tps, r.rows[1].published_tps), -25.0, 1e-12);
  EXPECT_FALSE(error_pct(std::nullopt, 10).has_value());
  const ErrorSummary tps = tps_errors(r), mem = mem_errors(r);
  EXPECT_EQ(tps.n, 3u);
  EXPECT_NEAR(tps.median_abs_pct, 10.0, 1e-9);
  EXPECT_EQ(mem.n, 2u);
  EXPECT_NEAR(mem.median_abs_pct, 15.0, 1e-9);  // |−25| and |+5|
  const std::string text = render_published_text(r);
  EXPECT_NE(text.find("median |error| of predicted vs published: tokens/s per GPU 10.0% over 3 rows; memory per "
                      "GPU 15.0% over 2 rows"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[not predicted for h100_sxm_500w: the planner cannot]"), std::string::npos) << text;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(ValidatePublished, OneLabelledLinePerRowAndTheMedians) {
  const std::string spec = (published_folder() / "llama3_8b_h100_8gpu_fsdp.toml").string();
  std::ostringstream out;
  EXPECT_EQ(validate_published(spec, false, out), 0);
  const std::vector<std::string> lines = lines_of(out.str());
  ASSERT_GE(lines.size(), 7u) << out.str();
  // The header names the spec and its calibration source, and the predicted columns say so.
  EXPECT_NE(lines[0].find("predicted"), std::string::npos);
  const HardwareSpec hw = load_hardware("h100_sxm_500w");
  EXPECT_NE(out.str().find("h100_sxm_500w (" + hw.title + "), calibration: " + hw.calibration), std::string::npos)
      << out.str();
  size_t header = 0;
  while (header < lines.size() && lines[header].rfind("table", 0) != 0) ++header;
  ASSERT_LT(header + 4, lines.size()) << out.str();
  EXPECT_NE(lines[header].find("predicted tps"), std::string::npos);
  EXPECT_NE(lines[header].find("predicted mem"), std::string::npos);
  const char* published[] = {"5,762", "6,667", "8,532"};
  for (int i = 0; i < 3; ++i) {
    const std::string& l = lines[header + 1 + i];
    EXPECT_NE(l.find("llama3_8b_h100_8gpu_fsdp"), std::string::npos) << l;
    EXPECT_NE(l.find(published[i]), std::string::npos) << l;
    EXPECT_NE(l.find("[predicted: h100_sxm_500w"), std::string::npos) << l;
  }
  EXPECT_EQ(lines[header + 4].rfind("median |error| of predicted vs published:", 0), 0u) << lines[header + 4];
  EXPECT_NE(lines[header + 4].find("over 3 rows; memory per GPU"), std::string::npos) << lines[header + 4];

  // --json: the same numbers, and a median that is the median of the rows' errors.
  std::ostringstream js;
  EXPECT_EQ(validate_published(spec, true, js), 0);
  const nlohmann::json j = nlohmann::json::parse(js.str());
  ASSERT_EQ(j["rows"].size(), 3u);
  std::vector<double> errs;
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["predicted"]["hardware"], "h100_sxm_500w");
    EXPECT_EQ(row["predicted"]["calibration"], hw.calibration);
    const double pub = row["published"]["tps"], pred = row["predicted"]["tps"];
    EXPECT_NEAR(row["predicted"]["tps_error_pct"].get<double>(), (pred - pub) / pub * 100, 1e-9);
    errs.push_back(std::fabs((pred - pub) / pub * 100));
  }
  std::sort(errs.begin(), errs.end());
  EXPECT_NEAR(j["median_abs_error_pct"]["tps"].get<double>(), errs[1], 1e-9);
  EXPECT_EQ(j["median_abs_error_pct"]["tps_rows"], 3);
  EXPECT_FALSE(j.contains("db"));  // validate measures nothing
}

class PublishedMeasured : public TempDir {
 protected:
  // A finished run of a point, with the GPU it ran on.
  void add_run(ResultsDb& db, const std::string& hash, int64_t ws, const std::string& status, const std::string& gpu,
               double tps, double mem_gib) {
    const fs::path run_dir = dir_ / ("run" + std::to_string(++runs_));
    fs::create_directories(run_dir);
    std::ofstream(run_dir / "summary.json")
        << nlohmann::json{{"status", "ok"}, {"tps_median", tps}, {"mem_peak_bytes", int64_t(mem_gib * (1 << 30))}}
               .dump();
    nlohmann::json env = {{"cpu_model", "Test CPU"}};
    if (!gpu.empty()) env["gpu_name"] = gpu;
    std::ofstream(run_dir / "env.json") << env.dump();
    RunRow r;
    r.point_key = "k" + std::to_string(runs_);
    r.config_hash = hash;
    r.world_size = ws;
    r.status = status;
    r.run_dir = run_dir.string();
    r.id = db.insert_run(r);
    db.ingest_run_dir(r.id, r.run_dir);
  }
  int runs_ = 0;
};

TEST_F(PublishedMeasured, OnlyOkRunsOfThePointOnTheSpecsGpuCount) {
  const std::string db_path = (dir_ / "r.db").string();
  {
    ResultsDb db(db_path);
    add_run(db, "hash-a", 8, "ok", "NVIDIA H100 80GB HBM3", 6000, 70);
    add_run(db, "hash-a", 8, "ok", "NVIDIA H100 80GB HBM3", 6200, 72);
    add_run(db, "hash-a", 8, "ok", "NVIDIA H100 80GB HBM3", 9000, 74);
    add_run(db, "hash-a", 8, "failed", "NVIDIA H100 80GB HBM3", 1, 1);  // not ok
    add_run(db, "hash-a", 4, "ok", "NVIDIA H100 80GB HBM3", 1, 1);      // another world size
    add_run(db, "hash-b", 8, "ok", "NVIDIA A100-SXM4-80GB", 3000, 60);  // another GPU
    add_run(db, "hash-b", 8, "ok", "", 10, 1);                          // a CPU
  }
  PublishedReport r = hand_made();
  const ResultsDb db(db_path);
  measure_published(db, r);
  EXPECT_EQ(r.db_path, db_path);
  EXPECT_EQ(r.rows[0].measured_runs, 3u);
  EXPECT_DOUBLE_EQ(r.rows[0].measured_tps.value_or(0), 6200);
  EXPECT_NEAR(r.rows[0].measured_mem_gib.value_or(0), 72, 1e-6);
  EXPECT_EQ(r.rows[0].measured_on, "NVIDIA H100 80GB HBM3");
  EXPECT_FALSE(r.rows[1].measured_tps.has_value());
  EXPECT_EQ(r.rows[1].measured_note,
            "not measured (ok runs of this point on NVIDIA A100-SXM4-80GB, a CPU, not a h100_sxm_500w GPU)");
  EXPECT_EQ(r.rows[2].measured_note, "not measured");
  {  // Another framework's row is never ctitan's measurement, even where a run has its point's config.
    PublishedReport other = hand_made();
    other.rows[0].not_run = "not run (ctitan's trainer builds no gpt)";
    measure_published(db, other);
    EXPECT_EQ(other.rows[0].measured_runs, 0u);
    EXPECT_FALSE(other.rows[0].measured_tps.has_value());
    EXPECT_EQ(other.rows[0].measured_note, "not run (ctitan's trainer builds no gpt)");
  }

  const std::string md = render_published_markdown(r);
  for (const char* column : {"| published tps/GPU |", "| predicted tps/GPU |", "| measured tps/GPU |",
                             "| published mem GiB |", "| predicted mem GiB |", "| measured mem GiB |"})
    EXPECT_NE(md.find(column), std::string::npos) << column << "\n" << md;
  EXPECT_NE(md.find("| 6,200 |"), std::string::npos) << md;
  EXPECT_NE(md.find("predicted for h100_sxm_500w (Grand Teton H100), calibration: uncalibrated: test"),
            std::string::npos)
      << md;
  const std::string html = render_published_html_section(r);
  for (const char* column : {"<th>published tps/GPU</th>", "<th>predicted tps/GPU</th>", "<th>measured tps/GPU</th>"})
    EXPECT_NE(html.find(column), std::string::npos) << column;
  EXPECT_NE(html.find("not measured"), std::string::npos);
  // One figure per published table: published | predicted | measured per row, side by side.
  size_t figures = 0;
  for (size_t at = 0; (at = html.find("<figure><svg", at)) != std::string::npos; ++at) ++figures;
  std::set<std::string> tables;
  for (const PublishedPoint& p : r.rows) tables.insert(p.table);
  EXPECT_GE(figures, tables.size());
  for (const char* legend : {">published</text>", ">predicted</text>", ">measured</text>"})
    EXPECT_NE(html.find(legend), std::string::npos) << legend;
  EXPECT_NE(html.find("<title>" + r.rows[0].label), std::string::npos);
  const nlohmann::json j = render_published_json(r);
  EXPECT_EQ(j["rows"][0]["measured"]["runs"], 3);
  EXPECT_EQ(j["rows"][2]["measured"]["note"], "not measured");
}

TEST_F(PublishedMeasured, ReportCommandAddsTheLabelledSection) {
  const std::string spec = (published_folder() / "llama3_8b_h100_8gpu_fsdp.toml").string();
  const std::vector<PublishedRow> rows = load_published(spec);
  const std::string db_path = (dir_ / "r.db").string();
  {
    ResultsDb db(db_path);
    add_run(db, rows[1].config_hash, 8, "ok", "NVIDIA H100 80GB HBM3", 6500, 75);  // "+compile" measured
  }
  const std::string md = (dir_ / "r.md").string(), html = (dir_ / "r.html").string();
  EXPECT_EQ(report_command({"--db", db_path, "--published", spec, "--out", md}), 0);
  std::ifstream in(md);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("## ctitan report"), std::string::npos);  // the usual report first
  EXPECT_NE(text.find("### Published reproductions"), std::string::npos);
  for (const char* column : {"| published tps/GPU |", "| predicted tps/GPU |", "| measured tps/GPU |"})
    EXPECT_NE(text.find(column), std::string::npos) << column;
  EXPECT_NE(text.find("| 6,500 |"), std::string::npos) << text;
  EXPECT_NE(text.find("| not measured |"), std::string::npos) << text;  // the other two rows

  EXPECT_EQ(report_command({"--published=" + spec, "--db", db_path, "--out", html}), 0);
  std::ifstream hin(html);
  const std::string h((std::istreambuf_iterator<char>(hin)), std::istreambuf_iterator<char>());
  const size_t section = h.find("<h2>Published reproductions");
  ASSERT_NE(section, std::string::npos);
  EXPECT_LT(section, h.find("</body>"));  // inside the document

  // Without --db: published and predicted only.
  EXPECT_EQ(report_command({"--published", spec, "--format", "md", "--out", md}), 0);
  std::ifstream in2(md);
  const std::string alone((std::istreambuf_iterator<char>(in2)), std::istreambuf_iterator<char>());
  EXPECT_NE(alone.find("No results database: nothing measured."), std::string::npos);
  EXPECT_NE(alone.find("| predicted tps/GPU |"), std::string::npos);
  EXPECT_EQ(error_of([] {
              report_command({"--format", "md"});
            }),
            "ctitan report needs --db FILE (the results database a sweep wrote), or --published");
}

}  // namespace
}  // namespace ctitan
