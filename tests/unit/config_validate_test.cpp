// Config validation: each impossible or unsupported value is an InputError
// naming the key; boundary values pass.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/config_registry.h"
#include "trainer/models/registry.h"

namespace ctitan {
namespace {

std::string validation_error(const JobConfig& c) {
  try {
    validate(c);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

struct BadValue {
  std::string key, value, expected;
};

TEST(ConfigValidate, RejectsImpossibleValues) {
  const std::vector<BadValue> cases = {
      {"training.steps", "-5", "training.steps must be > 0, got -5"},
      {"model.name", "no_such_family", "model.name \"no_such_family\" is not a model family; ctitan's families: \"llama3\", \"qwen3\", \"deepseek_v3\", \"gpt_oss\""},
      {"model.name", "llama4", "model.name \"llama4\" is TorchTitan v0.2.2's Llama 4, which TorchTitan's later main removed"},
      {"model.n_layers", "-1", "model.n_layers must be in [0, 4096] (0 = the flavor's count), got -1"},
      {"model.n_layers", "5000", "model.n_layers must be in [0, 4096]"},
      {"training.seq_len", "0", "training.seq_len must be > 0, got 0"},
      {"training.local_batch_size", "0", "training.local_batch_size must be > 0"},
      {"training.global_batch_size", "12",
       "training.global_batch_size must be -1 or a positive "
       "multiple of training.local_batch_size (8), got 12"},
      {"training.global_batch_size", "0", "training.global_batch_size must be -1"},
      {"optimizer.lr", "-0.1", "optimizer.lr must be >= 0, got -0.1"},
      {"optimizer.beta1", "1", "optimizer.beta1 must be in [0, 1), got 1.0"},
      {"optimizer.beta2", "-0.5", "optimizer.beta2 must be in [0, 1)"},
      {"optimizer.eps", "0", "optimizer.eps must be > 0"},
      {"optimizer.name", "SGD", "optimizer.name must be one of AdamW|Adam, got \"SGD\""},
      {"optimizer.implementation", "vector",
       "optimizer.implementation must be one of "
       "for_loop|foreach|fused"},
      {"lr_scheduler.warmup_steps", "-1", "lr_scheduler.warmup_steps must be >= 0"},
      {"lr_scheduler.decay_ratio", "1.5", "lr_scheduler.decay_ratio must be in [0, 1], got 1.5"},
      {"lr_scheduler.decay_type", "exp",
       "lr_scheduler.decay_type must be one of "
       "linear|sqrt|cosine"},
      {"lr_scheduler.min_lr_factor", "2", "lr_scheduler.min_lr_factor must be in [0, 1]"},
      {"training.mixed_precision_param", "float16", "training.mixed_precision_param must be"},
      {"training.mixed_precision_reduce", "float16", "training.mixed_precision_reduce must be"},
      {"activation_checkpoint.mode", "partial",
       "activation_checkpoint.mode must be one of "
       "none|full|selective"},
      {"activation_checkpoint.selective_ac_option", "0", "must be \"op\" or a positive integer"},
      {"activation_checkpoint.selective_ac_option", "every", "selective_ac_option"},
      {"metrics.log_freq", "0", "metrics.log_freq must be > 0"},
      {"checkpoint.interval", "0", "checkpoint.interval must be > 0"},
      {"checkpoint.keep_latest_k", "-1", "checkpoint.keep_latest_k must be >= 0"},
      {"training.dataset", "fineweb", "training.dataset must be one of synthetic|markov|text|bin|c4|c4_test|c4_validation"},
      {"training.dataset", "text",
       "training.dataset_path is required when training.dataset is "
       "\"text\""},
      {"training.dataset", "bin", "training.dataset_path is required"},
      {"parallelism.data_parallel_replicate_degree", "0", "must be >= 1, got 0"},
      {"parallelism.data_parallel_shard_degree", "-2", "must be >= 1 or -1, got -2"},
      {"parallelism.tensor_parallel_degree", "0", "parallelism.tensor_parallel_degree"},
      {"parallelism.pipeline_parallel_degree", "-1", "parallelism.pipeline_parallel_degree"},
      {"parallelism.context_parallel_degree", "0", "parallelism.context_parallel_degree"},
      {"quantize.linear.float8.recipe_name", "fp8",
       "quantize.linear.float8.recipe_name must be "
       "one of tensorwise|rowwise|rowwise_with_gw_hp"},
      {"fault_tolerance.enable", "true", "fault_tolerance.enable is not supported by ctitan"},
      {"memory_estimation.enable", "true", "memory_estimation.enable is not supported by ctitan"},
      {"model.tokenizer_path", "t.model", "model.tokenizer_path is not supported by ctitan"},
      {"training.dtype", "bfloat16",
       "config error: training.dtype is not supported by ctitan: full-bf16 training (no float32 master weights) is "
       "not implemented: parameters, gradients and AdamW state stay float32; training.mixed_precision_param = "
       "\"bfloat16\" (the default) runs forward and backward in bf16; only the default \"float32\" is accepted, "
       "got \"bfloat16\""},
      {"training.mixed_precision_reduce", "bfloat16",
       "training.mixed_precision_reduce must be one of float32, got \"bfloat16\""},
      {"lr_scheduler.total_steps", "0", "lr_scheduler.total_steps must be > 0, got 0"},
      {"validation.target_loss", "2.5",
       "validation.target_loss is reached by validation passes: set validation.enable = true"},
  };
  for (const BadValue& b : cases) {
    JobConfig c;
    apply_override(c, b.key, b.value);
    const std::string msg = validation_error(c);
    EXPECT_EQ(msg.rfind("config error: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(b.expected), std::string::npos) << b.key << "=" << b.value << ": " << msg;
  }
}

TEST(ConfigValidate, AcceptsBoundaryValues) {
  JobConfig c;
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"parallelism.data_parallel_shard_degree", "-1"},
           {"training.global_batch_size", "32"},
           {"activation_checkpoint.selective_ac_option", "op"},
           {"lr_scheduler.decay_ratio", "1"},
           {"optimizer.beta1", "0"},
           {"lr_scheduler.warmup_steps", "0"},
           {"training.dataset", "text"},
           {"training.dataset_path", "data.jsonl"},
           {"model.flavor", "no-such-flavor"}}) {  // flavors are the model registry's job
    apply_override(c, k, v);
  }
  EXPECT_NO_THROW(validate(c));
}

// config/ sits below the model families and asks their registry about
// model.name (config_registry.h set_model_name_check, installed by
// trainer/models/registry.cpp): every family passes, anything else is the
// registry's line, prefixed with where the name was set.
TEST(ModelRegistry, ConfigChecksModelNameAgainstTheRegistry) {
  std::string known;
  for (const std::string& name : model_family_names()) {
    JobConfig c;
    c.model.name = name;
    EXPECT_EQ(validation_error(c), "(no InputError)") << name;
    known += (known.empty() ? "\"" : ", \"") + name + "\"";
  }
  std::string error;
  try {
    parse_job_config({"--model.name", "no_such_family"});
  } catch (const InputError& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "config error: command line (--model.name): model.name \"no_such_family\" is not a model family; "
                   "ctitan's families: " + known);
}

// Fails closed: a program whose model.name check never got installed (the
// registry's object dropped at link time, or a validation before static
// initialization) must not accept every name, "nosuch" included.
TEST(ModelRegistry, ValidationRefusesWithoutAModelNameCheck) {
  const config::ModelNameCheck installed = config::set_model_name_check(nullptr);
  ASSERT_NE(installed, nullptr) << "trainer/models/registry.cpp installs the check before main";
  JobConfig c;
  c.model.name = "nosuch";
  std::string error = "(validate accepted model.name \"nosuch\")";
  try {
    validate(c);
  } catch (const std::logic_error& e) {
    error = e.what();
  } catch (const InputError& e) {
    error = std::string("InputError: ") + e.what();
  }
  config::set_model_name_check(installed);
  EXPECT_NE(error.find("config validation has no model.name check installed"), std::string::npos) << error;
  EXPECT_EQ(validation_error(c).rfind("config error: model.name \"nosuch\" is not a model family", 0), 0u)
      << "the registry's check is back";
}

}  // namespace
}  // namespace ctitan
