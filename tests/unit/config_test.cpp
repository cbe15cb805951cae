// Config loader: defaults, TOML, CLI, round trip, validation, error messages.
#include <gtest/gtest.h>

#include "tests/unit/input_error.h"
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/errors.h"
#include "trainer/config/config_loader.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;

// Each test writes its TOML files into its own folder under TempDir().
class ConfigFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("ctitan_config_" + std::to_string(getpid()) + "_" + info->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  fs::path dir_;
};

TEST(ConfigDefaults, MatchTorchTitan) {
  const JobConfig c;
  EXPECT_EQ(c.model.name + "/" + c.model.flavor + "/" + c.optimizer.name,
            "llama3/debugmodel/AdamW");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 8e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.optimizer.implementation, "fused");
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 200);
  EXPECT_FALSE(c.lr_scheduler.decay_ratio.has_value());
  EXPECT_EQ(c.lr_scheduler.decay_type, "linear");
  EXPECT_DOUBLE_EQ(c.lr_scheduler.min_lr_factor, 0.0);
  EXPECT_EQ(c.training.local_batch_size, 8);
  EXPECT_EQ(c.training.global_batch_size, -1);
  EXPECT_EQ(c.training.seq_len, 2048);
  EXPECT_DOUBLE_EQ(c.training.max_norm, 1.0);
  EXPECT_EQ(c.training.steps, 10000);
  EXPECT_EQ(c.training.mixed_precision_param + "/" + c.training.mixed_precision_reduce,
            "bfloat16/float32");
  EXPECT_EQ(c.parallelism.data_parallel_replicate_degree, 1);
  EXPECT_EQ(c.parallelism.data_parallel_shard_degree, -1);
  EXPECT_EQ(c.parallelism.tensor_parallel_degree, 1);
  EXPECT_EQ(c.parallelism.pipeline_parallel_degree, 1);
  EXPECT_EQ(c.parallelism.pipeline_parallel_schedule, "1F1B");
  EXPECT_EQ(c.parallelism.context_parallel_degree, 1);
  EXPECT_FALSE(c.checkpoint.enable);
  EXPECT_EQ(c.checkpoint.folder, "checkpoint");
  EXPECT_EQ(c.checkpoint.interval, 500);
  EXPECT_EQ(c.checkpoint.keep_latest_k, 10);
  EXPECT_EQ(c.checkpoint.load_step, -1);
  EXPECT_TRUE(c.checkpoint.initial_load_model_only);
  EXPECT_TRUE(c.checkpoint.last_save_model_only);
  EXPECT_EQ(c.checkpoint.async_mode, "disabled");
  EXPECT_EQ(c.activation_checkpoint.selective_ac_option, "2");
  EXPECT_FALSE(c.compile.enable);
  EXPECT_EQ(c.compile.components, (std::vector<std::string>{"model", "loss"}));
  EXPECT_EQ(c.metrics.log_freq, 10);
  EXPECT_EQ(c.profiling.profile_freq, 10);
  EXPECT_EQ(c.comm.init_timeout_seconds, 300);
  EXPECT_EQ(c.comm.train_timeout_seconds, 100);
  EXPECT_FALSE(c.validation.enable || c.fault_tolerance.enable || c.memory_estimation.enable);
  EXPECT_EQ(c.validation.freq, 10);
  EXPECT_EQ(c.validation.steps, -1);
  EXPECT_NO_THROW(validate(c));
}

TEST(ConfigDefaults, KeysAreUniqueAndDotted) {
  const std::vector<std::string> keys = config_keys();
  const std::set<std::string> unique(keys.begin(), keys.end());
  EXPECT_EQ(unique.size(), keys.size());
  EXPECT_GT(keys.size(), 120u);
  for (const char* k : {"training.steps", "quantize.linear.float8.recipe_name",
                        "lr_scheduler.decay_ratio", "validation.enable", "job.config_file"}) {
    EXPECT_EQ(unique.count(k), 1u) << k;
  }
  for (const std::string& k : keys) EXPECT_NE(k.find('.'), std::string::npos) << k;
}

TEST_F(ConfigFiles, ConfigTomlParsesEveryValueType) {
  const std::string path = write("a.toml", R"(
[training]
steps = 42
seq_len = 128
max_norm = 2          # integer where a float is expected converts
dataset = "markov"
[lr_scheduler]
decay_ratio = 0.5
[optimizer]
implementation = "for-loop"   # TorchTitan's spelling
[model]
converters = "quantize.linear.float8, other"   # comma string for a list
[checkpoint]
enable = true
[quantize.linear.float8]
recipe_name = "rowwise"
filter_fqns = ["output", "tok_embeddings"]
emulate = true
[parallelism]
module_fqns_per_model_part = [["tok_embeddings", "layers.0"], ["layers.1", "norm", "output"]]  # list[list[str]]
)");
  const JobConfig c = load_toml_file(path);
  EXPECT_EQ(c.training.steps, 42);
  EXPECT_EQ(c.training.seq_len, 128);
  EXPECT_DOUBLE_EQ(c.training.max_norm, 2.0);
  EXPECT_EQ(c.training.dataset, "markov");
  ASSERT_TRUE(c.lr_scheduler.decay_ratio.has_value());
  EXPECT_DOUBLE_EQ(*c.lr_scheduler.decay_ratio, 0.5);
  EXPECT_EQ(c.optimizer.implementation, "for_loop");
  EXPECT_EQ(c.model.converters, (std::vector<std::string>{"quantize.linear.float8", "other"}));
  EXPECT_TRUE(c.checkpoint.enable);
  EXPECT_EQ(c.float8.recipe_name, "rowwise");
  EXPECT_EQ(c.float8.filter_fqns, (std::vector<std::string>{"output", "tok_embeddings"}));
  EXPECT_TRUE(c.float8.emulate);
  EXPECT_EQ(c.parallelism.module_fqns_per_model_part,
            (std::vector<std::string>{"tok_embeddings layers.0", "layers.1 norm output"}));
  EXPECT_EQ(c.job.config_file, path);
  EXPECT_EQ(c.training.local_batch_size, 8);  // untouched keys keep defaults

  // Dotted keys and inline tables nest the same way as [a.b.c] headers.
  const JobConfig d = load_toml_file(write(
      "b.toml", "training = { steps = 5 }\n[quantize]\nlinear.float8.recipe_name = \"rowwise\"\n"));
  EXPECT_EQ(d.float8.recipe_name, "rowwise");
  EXPECT_EQ(d.training.steps, 5);
  const std::string inline_bad = write("c.toml", "training = { stepz = 5 }\n");
  EXPECT_NE(error_of([&] {
              load_toml_file(inline_bad);
            }).find(inline_bad + ":1: unknown key 'training.stepz'"),
            std::string::npos);
}

TEST_F(ConfigFiles, ConfigTomlUnknownKeyNamesFileLineAndNearestKey) {
  const std::string path = write("x.toml", "[training]\nsteps = 10\nstepz = 5\n");
  EXPECT_EQ(error_of([&] { load_toml_file(path); }),
            "config error: " + path +
                ":3: unknown key 'training.stepz'; did you mean "
                "'training.steps'?");
}

TEST_F(ConfigFiles, ConfigTomlSuggestsMovedAndRenamedKeys) {
  struct Case {
    std::string toml, key, suggestion;
  };
  const std::vector<Case> cases = {
      {"[trainin]\nsteps = 3\n", "trainin.steps", "training.steps"},
      {"[metrics]\nenable_profiling = true\n", "metrics.enable_profiling",
       "profiling.enable_profiling"},
      {"[training]\nwarmup_steps = 5\n", "training.warmup_steps", "lr_scheduler.warmup_steps"},
      {"[checkpoint]\nenable_checkpoint = true\n", "checkpoint.enable_checkpoint",
       "checkpoint.enable"},
      {"[float8]\nfilter_fqns = []\n", "float8.filter_fqns", "quantize.linear.float8.filter_fqns"},
  };
  for (const Case& c : cases) {
    const std::string path = write("r.toml", c.toml);
    const std::string msg = error_of([&] { load_toml_file(path); });
    EXPECT_NE(msg.find(path + ":2: unknown key '" + c.key + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("did you mean '" + c.suggestion + "'?"), std::string::npos) << msg;
  }
  const std::string empty = write("e.toml", "[trainingg]\n");
  EXPECT_NE(error_of([&] {
              load_toml_file(empty);
            }).find("unknown section '[trainingg]'; did you mean '[training]'?"),
            std::string::npos);
}

TEST_F(ConfigFiles, ConfigTomlWrongTypesNameExpectedAndGot) {
  struct Case {
    std::string toml, expected;
  };
  const std::vector<Case> cases = {
      {"[training]\nsteps = \"ten\"\n", "'training.steps' expects an integer, got string \"ten\""},
      {"[training]\nsteps = 2.5\n", "'training.steps' expects an integer, got float 2.5"},
      {"[checkpoint]\nenable = 1\n", "'checkpoint.enable' expects a boolean, got integer 1"},
      {"[optimizer]\nlr = \"fast\"\n", "'optimizer.lr' expects a float, got string \"fast\""},
      {"[model]\nconverters = [\"a\", 3]\n",
       "'model.converters' expects a list of strings, got an array whose element 1 is integer 3"},
      {"[model]\nflavor = 8\n", "'model.flavor' expects a string, got integer 8"},
      {"[training.steps]\nx = 1\n", "'training.steps' expects an integer, got table"},
  };
  for (const Case& c : cases) {
    const std::string path = write("t.toml", c.toml);
    const std::string msg = error_of([&] { load_toml_file(path); });
    EXPECT_NE(msg.find(path + ":"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST_F(ConfigFiles, ConfigTomlGarbledAndMissingFiles) {
  const std::string bad = write("bad.toml", "[training]\nsteps = = 3\n");
  std::string msg = error_of([&] { load_toml_file(bad); });
  EXPECT_EQ(msg.rfind("config error: " + bad + ":2:", 0), 0u) << msg;
  EXPECT_NE(msg.find("invalid TOML"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;

  const std::string unclosed = write("unclosed.toml", "[training\nsteps = 3\n");
  msg = error_of([&] { load_toml_file(unclosed); });
  EXPECT_EQ(msg.rfind("config error: " + unclosed + ":1:", 0), 0u) << msg;

  const std::string missing = (dir_ / "nope.toml").string();
  msg = error_of([&] { load_toml_file(missing); });
  EXPECT_NE(msg.find("cannot open config file '" + missing + "'"), std::string::npos) << msg;
  msg = error_of([&] { parse_job_config({"--job.config_file", missing}); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
}

TEST_F(ConfigFiles, ConfigTomlValidationErrorNamesFileLine) {
  const std::string path = write("v.toml", "[job]\n\n[training]\nsteps = -5\n");
  EXPECT_EQ(error_of([&] { load_toml_file(path); }),
            "config error: " + path + ":4: training.steps must be > 0, got -5");
}

TEST_F(ConfigFiles, ConfigTomlUnsupportedTorchTitanKeys) {
  // Sub-keys of a disabled feature are inert and accepted at any value.
  const JobConfig c = load_toml_file(write(
      "ok.toml", "[fault_tolerance]\nenable = false\nreplica_id = 3\n[compile]\nbackend = \"aot_eager\"\n"));
  EXPECT_EQ(c.fault_tolerance.replica_id, 3);
  EXPECT_EQ(c.compile.backend, "aot_eager");
  // Switching the feature on is refused with the key and its line.
  const std::string on = write("on.toml", "[fault_tolerance]\nreplica_id = 1\nenable = true\n");
  const std::string msg = error_of([&] { load_toml_file(on); });
  EXPECT_NE(msg.find(on + ":3: fault_tolerance.enable is not supported by ctitan"), std::string::npos)
      << msg;
  EXPECT_NE(error_of([&] {
              load_toml_file(write("d.toml", "[training]\ndtype = \"bfloat16\"\n"));
            }).find("training.dtype is not supported by ctitan"),
            std::string::npos);
}

TEST_F(ConfigFiles, ConfigCliOverridesBeatFile) {
  const std::string path =
      write("base.toml", "[training]\nsteps = 10\nseq_len = 64\n[checkpoint]\nenable = true\n");
  const JobConfig c = parse_job_config({"--job.config_file", path, "--training.steps", "20",
                                        "--optimizer.lr=0.01", "--checkpoint.no_enable"});
  EXPECT_EQ(c.training.steps, 20);
  EXPECT_EQ(c.training.seq_len, 64);  // from the file
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.01);
  EXPECT_FALSE(c.checkpoint.enable);
  EXPECT_EQ(c.job.config_file, path);
  // The file may come after the overrides on the command line.
  EXPECT_EQ(parse_job_config({"--training.steps=7", "--job.config_file=" + path}).training.steps,
            7);
}

TEST(ConfigCli, BooleanFlagForms) {
  EXPECT_TRUE(parse_job_config({"--checkpoint.enable"}).checkpoint.enable);
  EXPECT_FALSE(
      parse_job_config({"--checkpoint.enable", "--checkpoint.no_enable"}).checkpoint.enable);
  EXPECT_FALSE(parse_job_config({"--checkpoint.enable", "false"}).checkpoint.enable);
  EXPECT_TRUE(parse_job_config({"--checkpoint.enable", "true"}).checkpoint.enable);
  EXPECT_FALSE(parse_job_config({"--checkpoint.enable=false"}).checkpoint.enable);
  EXPECT_TRUE(parse_job_config({"--checkpoint.no_enable=false"}).checkpoint.enable);
  EXPECT_FALSE(parse_job_config({"--checkpoint.no_initial_load_model_only"})
                   .checkpoint.initial_load_model_only);
  EXPECT_TRUE(parse_job_config({"--job.print_config"}).job.print_config);
  // A flag followed by another option does not swallow it.
  const JobConfig c = parse_job_config({"--compile.enable", "--training.steps", "3"});
  EXPECT_TRUE(c.compile.enable);
  EXPECT_EQ(c.training.steps, 3);
  EXPECT_NE(error_of([] {
              parse_job_config({"--checkpoint.enable=yes"});
            }).find("'checkpoint.enable' expects a boolean, got 'yes'"),
            std::string::npos);
}

TEST(ConfigCli, ListsNegativeNumbersAndOptionals) {
  JobConfig c =
      parse_job_config({"--model.converters", "quantize.linear.float8,b",
                        "--compile.components=", "--parallelism.data_parallel_shard_degree", "-1",
                        "--lr_scheduler.decay_ratio", "0.25"});
  EXPECT_EQ(c.model.converters, (std::vector<std::string>{"quantize.linear.float8", "b"}));
  EXPECT_TRUE(c.compile.components.empty());
  EXPECT_EQ(c.parallelism.data_parallel_shard_degree, -1);
  ASSERT_TRUE(c.lr_scheduler.decay_ratio.has_value());
  EXPECT_DOUBLE_EQ(*c.lr_scheduler.decay_ratio, 0.25);
  c = parse_job_config({"--lr_scheduler.decay_ratio=0.5", "--lr_scheduler.decay_ratio", "none"});
  EXPECT_FALSE(c.lr_scheduler.decay_ratio.has_value());  // last one wins
}

TEST(ConfigCli, ErrorsNameTheOption) {
  EXPECT_EQ(error_of([] {
              parse_job_config({"--training.stepz", "5"});
            }),
            "config error: command line: unknown option '--training.stepz'; did you mean "
            "'--training.steps'?");
  EXPECT_NE(error_of([] {
              parse_job_config({"--training.steps", "5", "6"});
            }).find("unexpected argument '6'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_job_config({"-x"}); }).find("unknown option '-x'"),
            std::string::npos);
  // A bare "--" (as torchrun's separator) is an argument like any other:
  // one line, not an internal error.
  EXPECT_NE(error_of([] { parse_job_config({"--", "--training.steps", "3"}); }).find("unexpected argument '--'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_job_config({"--steps", "3"});
            }).find("did you mean '--training.steps'?"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_job_config({"--training.steps"});
            }).find("--training.steps needs a value"),
            std::string::npos);
  EXPECT_EQ(error_of([] {
              parse_job_config({"--training.steps", "ten"});
            }),
            "config error: command line (--training.steps): 'training.steps' expects an "
            "integer, got 'ten'");
  EXPECT_EQ(error_of([] {
              parse_job_config({"--training.steps", "-5"});
            }),
            "config error: command line (--training.steps): training.steps must be > 0, got -5");
}

TEST(ConfigCli, HelpListsKeysWithDefaults) {
  try {
    parse_job_config({"--training.steps", "3", "--help"});
    FAIL() << "expected HelpRequested";
  } catch (const HelpRequested& h) {
    const std::string text = h.what();
    EXPECT_NE(text.find("--training.steps integer = 10000"), std::string::npos);
    EXPECT_NE(text.find("--optimizer.lr float = 0.0008"), std::string::npos);
    EXPECT_NE(text.find("--quantize.linear.float8.recipe_name string = \"tensorwise\""),
              std::string::npos);
    for (const std::string& k : config_keys())
      EXPECT_NE(text.find("--" + k + " "), std::string::npos) << k;
  }
  EXPECT_THROW(parse_job_config({"-h"}), HelpRequested);
}

TEST(ConfigApplyOverride, SetsOneKeyAndRejectsUnknown) {
  JobConfig c;
  apply_override(c, "training.steps", "100");
  apply_override(c, "optimizer.implementation", "for-loop");
  apply_override(c, "checkpoint.exclude_from_loading", "optimizer, lr_scheduler");
  EXPECT_EQ(c.training.steps, 100);
  EXPECT_EQ(c.optimizer.implementation, "for_loop");
  EXPECT_EQ(c.checkpoint.exclude_from_loading,
            (std::vector<std::string>{"optimizer", "lr_scheduler"}));
  EXPECT_EQ(error_of([&] { apply_override(c, "optimizer.lrr", "1"); }),
            "config error: unknown key 'optimizer.lrr'; did you mean 'optimizer.lr'?");
  EXPECT_NE(error_of([&] {
              apply_override(c, "training.seq_len", "1.5");
            }).find("'training.seq_len' expects an integer, got '1.5'"),
            std::string::npos);
}

TEST_F(ConfigFiles, ConfigRoundTripEveryType) {
  JobConfig c;
  c.job.description = "quote \" backslash \\ tab \t newline \n unicode \xc3\xa9";
  c.checkpoint.enable = true;                    // bool
  c.checkpoint.initial_load_model_only = false;  // bool, default true
  c.training.steps = 123;                        // int64
  c.parallelism.data_parallel_shard_degree = 2;
  c.optimizer.lr = 3.3e-4;    // double
  c.training.max_norm = 0.1;  // not exactly representable
  c.metrics.peak_tflops = 1.5e-300;  // extreme exponents round-trip (1e300 is out of range)
  c.optimizer.weight_decay = 1.0 / 3.0;                            // needs all 17 digits
  c.model.converters = {"quantize.linear.float8", "with, comma"};  // list
  c.compile.components = {};
  c.lr_scheduler.decay_ratio = 0.25;  // optional<double>
  c.validation.freq = 500;            // inert key
  c.float8.recipe_name = "rowwise_with_gw_hp";
  c.job.config_file = "recipes/original.toml";
  const std::string text = to_toml(c);
  const JobConfig back = load_toml_file(write("rt.toml", text));
  EXPECT_TRUE(configs_equal(c, back)) << text;
  EXPECT_EQ(back.job.description, c.job.description);
  EXPECT_EQ(back.training.max_norm, 0.1);
  EXPECT_EQ(back.optimizer.lr, 3.3e-4);
  EXPECT_EQ(back.metrics.peak_tflops, 1.5e-300);
  EXPECT_EQ(back.optimizer.weight_decay, 1.0 / 3.0);
  EXPECT_EQ(back.model.converters, c.model.converters);
  EXPECT_TRUE(back.compile.components.empty());
  EXPECT_EQ(back.lr_scheduler.decay_ratio, std::optional<double>(0.25));
  EXPECT_FALSE(back.checkpoint.initial_load_model_only);
  EXPECT_EQ(back.job.config_file, "recipes/original.toml");
  EXPECT_EQ(to_toml(back), text);
  EXPECT_NE(text.find("[quantize.linear.float8]\n"), std::string::npos);
  EXPECT_NE(text.find("lr = 0.00033\n"), std::string::npos) << text;

  const JobConfig defaults_back = load_toml_file(write("d.toml", to_toml(JobConfig{})));
  // job.config_file = "" is written out, so even the file name round-trips.
  EXPECT_TRUE(configs_equal(defaults_back, JobConfig{}));
  EXPECT_FALSE(defaults_back.lr_scheduler.decay_ratio.has_value());
  JobConfig changed = back;
  changed.training.seq_len = 7;
  EXPECT_FALSE(configs_equal(changed, back));
}

TEST(ConfigRecipes, AllRecipesParse) {
  const char* src = std::getenv("CTITAN_SOURCE_DIR");
  if (!src) GTEST_SKIP() << "CTITAN_SOURCE_DIR is unset; cannot locate recipes/";
  const fs::path dir = fs::path(src) / "recipes";
  const JobConfig dbg = load_toml_file((dir / "llama3_debugmodel.toml").string());
  EXPECT_EQ(dbg.model.flavor, "debugmodel");
  EXPECT_EQ(dbg.training.seq_len, 256);
  EXPECT_EQ(dbg.training.local_batch_size, 8);
  EXPECT_EQ(dbg.training.steps, 30);
  EXPECT_EQ(dbg.lr_scheduler.warmup_steps, 2);
  EXPECT_EQ(dbg.metrics.log_freq, 1);
  EXPECT_EQ(dbg.training.dataset, "synthetic");
  EXPECT_EQ(dbg.training.mixed_precision_param, "bfloat16");
  EXPECT_FALSE(dbg.checkpoint.enable);
  EXPECT_EQ(dbg.activation_checkpoint.mode, "none");
  EXPECT_FALSE(dbg.compile.enable);

  const JobConfig markov = load_toml_file((dir / "llama3_debugmodel_markov.toml").string());
  EXPECT_EQ(markov.training.dataset, "markov");
  EXPECT_DOUBLE_EQ(markov.optimizer.lr, 3e-3);
  EXPECT_EQ(markov.training.steps, 200);
  EXPECT_EQ(markov.metrics.log_freq, 10);

  const JobConfig m125 = load_toml_file((dir / "llama3_125m.toml").string());
  EXPECT_EQ(m125.model.flavor, "125M");
  EXPECT_EQ(m125.training.seq_len, 256);
  EXPECT_EQ(m125.training.local_batch_size, 8);

  const JobConfig b8 = load_toml_file((dir / "llama3_8b.toml").string());
  EXPECT_EQ(b8.model.flavor, "8B");
  EXPECT_EQ(b8.training.seq_len, 8192);
  EXPECT_EQ(b8.training.local_batch_size, 1);
  EXPECT_DOUBLE_EQ(b8.optimizer.lr, 3e-4);
  EXPECT_EQ(b8.lr_scheduler.warmup_steps, 200);
  EXPECT_EQ(b8.training.steps, 1000);
  EXPECT_EQ(b8.activation_checkpoint.mode, "selective");
  EXPECT_EQ(b8.activation_checkpoint.selective_ac_option, "op");
  EXPECT_EQ(b8.validation.freq, 500);
}

}  // namespace
}  // namespace ctitan
