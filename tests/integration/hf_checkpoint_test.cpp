// Hugging Face checkpoints against the real thing: transformers'
// LlamaForCausalLM (tests/tools/hf_logits.py, run with the project's
// .venv python; skipped where `import transformers` fails).
//
//   export: `ctitan train --checkpoint.last_save_in_hf` (1 process and FSDP 2)
//           → transformers loads step-<N> → its logits on a fixed batch equal
//           ctitan's on the same export;
//   import: a random LlamaForCausalLM saved by save_pretrained → ctitan's
//           logits equal transformers'; `ctitan train --checkpoint.initial_load_in_hf`
//           in FSDP 2 and TP 2 has the 1-process run's step-1 loss;
//   bad input: a lying safetensors header, a checkpoint of another size →
//           one line, exit 2.
//
// Logits agree when max|ctitan − transformers| ≤ 1e-4 · max|transformers|
// (fp32 both; the two sum in different orders, a wrong weight or rotation
// moves them by O(1)).
#include "trainer/models/llama3.h"
#include "trainer/checkpoint/hf_checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "tests/integration/process.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/models/registry.h"
#include "trainer/model/transformer.h"

namespace fs = std::filesystem;
using ctitan::testing::expect_one_line_exit2;
using ctitan::testing::fresh_dir;
using ctitan::testing::read_jsonl;
using ctitan::testing::run_ctitan;
using ctitan::testing::source_dir;

namespace ctitan {
namespace {

constexpr int kBatch = 2, kSeq = 16;

// Runs the helper script; returns its exit code, `out` gets stdout+stderr.
int run_tool(const std::vector<std::string>& args, std::string& out) {
  const auto r = ctitan::testing::run_python_tool("hf_logits.py", args);
  out += r.out + r.err;
  return r.exit_code;
}

bool have_transformers() {
  static const bool ok = ctitan::testing::python_has("transformers, safetensors");
  return ok;
}

#define SKIP_WITHOUT_TRANSFORMERS() \
  if (!have_transformers()) GTEST_SKIP() << "no transformers in " << ctitan::testing::venv_python()

// transformers' logits (and the token batch) for the model in `dir`.
std::pair<at::Tensor, at::Tensor> transformers_logits(const fs::path& dir, int64_t seq) {
  const fs::path out = dir.parent_path() / (dir.filename().string() + ".logits.safetensors");
  std::string log;
  const int rc = run_tool({"logits", dir.string(), out.string(), std::to_string(kBatch), std::to_string(seq)}, log);
  if (rc != 0) throw std::runtime_error("hf_logits.py logits failed: " + log);
  SafetensorsFile f(out.string());
  return {f.tensor("tokens").clone(), f.tensor("logits").clone()};
}

// ctitan's logits for `tokens` with the model loaded from the HF folder.
// `flavor`: a llama3 flavor, or "<family>:<flavor>" (hf_logits.py's names).
at::Tensor ctitan_logits(const std::string& flavor, const fs::path& dir, const at::Tensor& tokens) {
  const size_t colon = flavor.find(':');
  const ModelArgs args = colon == std::string::npos ? llama3_flavor(flavor)
                                                    : model_flavor(flavor.substr(0, colon), flavor.substr(colon + 1));
  Transformer model(args, torch::kFloat, tokens.size(1));
  TensorPieces pieces;
  for (const auto& s : model.slots()) pieces.push_back({"model." + s.name, model.store().param(s.name), s.shape, {}});
  for (int64_t l : model.moe_layers())  // DeepSeek-V3's e_score_correction_bias (as the trainer's pieces)
    pieces.push_back({"model.layers." + std::to_string(l) + ".moe.expert_bias", model.moe_layer(l).bias(), {args.moe.num_experts}, {0}});
  load_hf_checkpoint(dir.string(), args, pieces);
  torch::NoGradGuard no_grad;
  return model.forward_logits(tokens).to(torch::kFloat);
}

void expect_same_logits(const std::string& flavor, const fs::path& dir, int64_t seq = kSeq) {
  const auto [tokens, want] = transformers_logits(dir, seq);
  const at::Tensor got = ctitan_logits(flavor, dir, tokens);
  ASSERT_EQ(got.sizes(), want.sizes());
  const double scale = want.abs().max().item<double>(), diff = (got - want).abs().max().item<double>();
  EXPECT_GT(scale, 1e-2) << "logits too small to compare";
  EXPECT_LE(diff, 1e-4 * scale) << dir << ": max |ctitan - transformers| " << diff << " of max |logit| " << scale;
}

// A debugmodel (or `flavor`) run of global batch 4 over `dp` data-parallel
// ranks of `nproc`.
std::vector<std::string> train_args(const fs::path& dump, int nproc, int dp, int steps,
                                    const std::vector<std::string>& more, const std::string& flavor = "debugmodel") {
  std::vector<std::string> a = {"train"};
  if (nproc > 1) a.insert(a.end(), {"--nproc", std::to_string(nproc)});
  const std::vector<std::string> rest = {"--model.flavor",
                                         flavor,
                                         "--training.mixed_precision_param",
                                         "float32",
                                         "--training.dataset",
                                         "markov",
                                         "--training.seq_len",
                                         "32",
                                         "--training.local_batch_size",
                                         std::to_string(4 / dp),
                                         "--training.steps",
                                         std::to_string(steps),
                                         "--metrics.log_freq",
                                         "1",
                                         "--metrics.peak_tflops",
                                         "1",
                                         "--checkpoint.enable",
                                         "--job.dump_folder",
                                         dump.string()};
  a.insert(a.end(), rest.begin(), rest.end());
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

double step1_loss(const fs::path& dump) {
  for (const auto& row : read_jsonl(dump / "metrics.jsonl"))
    if (row.at("step") == 1) return row.at("loss").get<double>();
  return std::nan("");
}

class HfCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override { setenv("OMP_NUM_THREADS", "1", 1); }
  void TearDown() override { unsetenv("OMP_NUM_THREADS"); }
};

// (a) ctitan's export loads into transformers with ctitan's logits: one
// process, and FSDP 2 (each rank's rows gathered into whole tensors).
TEST_F(HfCheckpoint, ExportFromOneProcessAndFsdp2LoadsInTransformers) {
  SKIP_WITHOUT_TRANSFORMERS();
  const fs::path root = fresh_dir("hf_export");
  for (const int nproc : {1, 2}) {
    SCOPED_TRACE("nproc " + std::to_string(nproc));
    const fs::path dump = root / ("n" + std::to_string(nproc));
    std::vector<std::string> more = {"--checkpoint.last_save_in_hf", "--checkpoint.interval", "2"};
    if (nproc == 2) more.insert(more.end(), {"--parallelism.data_parallel_shard_degree", "2"});
    const auto r = run_ctitan(train_args(dump, nproc, nproc, 3, more));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const fs::path step = dump / "checkpoint" / "step-3";
    ASSERT_TRUE(fs::exists(step / "model.safetensors")) << r.out;
    EXPECT_TRUE(fs::exists(step / "config.json"));
    EXPECT_TRUE(fs::exists(dump / "checkpoint" / "step-2" / "metadata.json"));  // earlier saves stay ctitan's
    for (const auto& e : fs::directory_iterator(dump / "checkpoint"))
      EXPECT_NE(e.path().filename().string()[0], '.') << "left behind: " << e.path();
    expect_same_logits("debugmodel", step);
  }
  // The same training in both layouts: the same weights (to rounding).
  SafetensorsFile a((root / "n1/checkpoint/step-3/model.safetensors").string());
  SafetensorsFile b((root / "n2/checkpoint/step-3/model.safetensors").string());
  for (const auto& [name, _] : a.entries())
    EXPECT_TRUE(torch::allclose(a.tensor(name), b.tensor(name), 1e-4, 1e-5)) << name;
}

// (b) A checkpoint transformers saves loads into ctitan with transformers'
// logits: GQA (tiny: 4 heads, 2 KV heads) and debugmodel.
TEST_F(HfCheckpoint, TransformersCheckpointLoadsWithEqualLogits) {
  SKIP_WITHOUT_TRANSFORMERS();
  const fs::path root = fresh_dir("hf_import");
  for (const std::string flavor : {"tiny", "debugmodel"}) {
    std::string log;
    ASSERT_EQ(run_tool({"random", flavor, (root / flavor).string(), "11"}, log), 0) << log;
    expect_same_logits(flavor, root / flavor);
  }
}

// (c) `ctitan train` from a transformers checkpoint: FSDP 2 and TP 2 start
// from the same weights as one process (step-1 loss), and not from ctitan's init.
TEST_F(HfCheckpoint, InitialLoadInAnyLayoutGivesTheSameFirstLoss) {
  SKIP_WITHOUT_TRANSFORMERS();
  const fs::path root = fresh_dir("hf_initial");
  std::string log;
  ASSERT_EQ(run_tool({"random", "debugmodel", (root / "hf").string(), "12"}, log), 0) << log;
  const std::vector<std::string> load = {"--checkpoint.initial_load_in_hf", "--checkpoint.initial_load_path",
                                         (root / "hf").string()};
  const auto single = run_ctitan(train_args(root / "single", 1, 1, 1, load));
  ASSERT_EQ(single.exit_code, 0) << single.out << single.err;
  EXPECT_NE(single.out.find("loaded the model from Hugging Face checkpoint"), std::string::npos) << single.out;
  const double want = step1_loss(root / "single");
  const auto fresh = run_ctitan(train_args(root / "fresh", 1, 1, 1, {}));
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_GT(std::abs(step1_loss(root / "fresh") - want), 1e-2) << "the load changed nothing";

  const std::map<std::string, std::pair<int, std::vector<std::string>>> layouts = {
      {"fsdp2", {2, {"--parallelism.data_parallel_shard_degree", "2"}}},
      {"tp2", {1, {"--parallelism.tensor_parallel_degree", "2"}}}};
  for (const auto& [name, layout] : layouts) {
    std::vector<std::string> more = load;
    more.insert(more.end(), layout.second.begin(), layout.second.end());
    const auto r = run_ctitan(train_args(root / name, 2, layout.first, 1, more));
    ASSERT_EQ(r.exit_code, 0) << name << r.out << r.err;
    EXPECT_NEAR(step1_loss(root / name), want, 1e-5 * std::abs(want)) << name;
  }
}

// Qwen3 both ways: transformers' Qwen3ForCausalLM (untied tiny; debugmodel,
// tied) and Qwen3MoeForCausalLM (tiny_moe: per-expert tensors) load into
// ctitan with transformers' logits; ctitan's export of a tiny_moe run under
// FSDP 2 with expert parallelism 2 (each rank holding 2 of the 4 experts:
// gathered from both ranks, split per expert) loads into
// transformers with ctitan's logits; a Qwen3-MoE checkpoint is refused by a
// llama3 and by a dense qwen3 run in one line.
TEST_F(HfCheckpoint, Qwen3AndQwen3MoeBothWaysWithTransformersLogits) {
  SKIP_WITHOUT_TRANSFORMERS();
  const fs::path root = fresh_dir("hf_qwen3");
  for (const std::string flavor : {"qwen3:tiny", "qwen3:tiny_moe", "qwen3:debugmodel"}) {
    SCOPED_TRACE(flavor);
    std::string log;
    const fs::path dir = root / flavor.substr(6);
    ASSERT_EQ(run_tool({"random", flavor, dir.string(), "21"}, log), 0) << log;
    expect_same_logits(flavor, dir);
  }
  const fs::path dump = root / "export";
  const auto r = run_ctitan(train_args(dump, 2, 2, 3,
                                       {"--model.name", "qwen3", "--checkpoint.last_save_in_hf",
                                        "--parallelism.data_parallel_shard_degree", "2",
                                        "--parallelism.expert_parallel_degree", "2"},
                                       "tiny_moe"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const fs::path step = dump / "checkpoint" / "step-3";
  SafetensorsFile f((step / "model.safetensors").string());
  EXPECT_TRUE(f.find("model.layers.1.mlp.experts.3.down_proj.weight")) << "per-expert tensors";
  expect_same_logits("qwen3:tiny_moe", step);

  const std::vector<std::string> load = {"--checkpoint.initial_load_in_hf", "--checkpoint.initial_load_path",
                                         (root / "tiny_moe").string()};
  expect_one_line_exit2(run_ctitan(train_args(root / "into_llama", 1, 1, 1, load, "tiny")),
                        "model_type = \"qwen3_moe\" but model.name \"llama3\"");
  std::vector<std::string> dense = load;
  dense.insert(dense.end(), {"--model.name", "qwen3"});
  expect_one_line_exit2(run_ctitan(train_args(root / "into_dense", 1, 1, 1, dense, "tiny")),
                        "reads Hugging Face \"qwen3\" checkpoints");
  EXPECT_FALSE(fs::exists(root / "into_dense" / "metrics.jsonl"));
}

// DeepSeek-V3 (ctitan's tiny flavor: low-rank q, YaRN, sigmoid routing in
// groups with route_scale, a shared expert, a dense first layer) both ways:
// a random DeepseekV3ForCausalLM (with a random e_score_correction_bias, so
// the bias steers the expert choice) loads into ctitan with transformers'
// logits over 48 tokens, where YaRN is on in both; ctitan's export of an
// FSDP 2 run of 32 tokens (YaRN off: config.json names plain RoPE) loads
// into transformers with ctitan's logits, its trained expert biases in fp32.
// A softmax-routed flavor (transformers routes by sigmoid only) and a
// DeepSeek-V3 checkpoint for a qwen3 run are one line each.
TEST_F(HfCheckpoint, DeepSeekV3BothWaysWithTransformersLogits) {
  SKIP_WITHOUT_TRANSFORMERS();
  const fs::path root = fresh_dir("hf_deepseek_v3");
  std::string log;
  ASSERT_EQ(run_tool({"random", "deepseek_v3:tiny", (root / "tiny").string(), "23"}, log), 0) << log;
  expect_same_logits("deepseek_v3:tiny", root / "tiny", 48);

  const fs::path dump = root / "export";
  const auto r = run_ctitan(train_args(dump, 2, 2, 3,
                                       {"--model.name", "deepseek_v3", "--checkpoint.last_save_in_hf",
                                        "--parallelism.data_parallel_shard_degree", "2"},
                                       "tiny"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const fs::path step = dump / "checkpoint" / "step-3";
  {
    SafetensorsFile f((step / "model.safetensors").string());
    const auto* bias = f.find("model.layers.2.mlp.gate.e_score_correction_bias");
    ASSERT_TRUE(bias);
    EXPECT_EQ(bias->dtype, at::kFloat);
    EXPECT_GT(f.tensor("model.layers.2.mlp.gate.e_score_correction_bias").abs().max().item<double>(), 0.0)
        << "three steps of load balancing moved the bias";
    EXPECT_TRUE(f.find("model.layers.1.mlp.experts.3.down_proj.weight")) << "per-expert tensors";
    const auto config = nlohmann::json::parse(std::ifstream(step / "config.json"));
    EXPECT_EQ(config["rope_parameters"]["rope_type"], "default") << "32 tokens: the run did not apply YaRN";
  }
  expect_same_logits("deepseek_v3:tiny", step);

  expect_one_line_exit2(run_ctitan(train_args(root / "softmax", 1, 1, 1,
                                              {"--model.name", "deepseek_v3", "--checkpoint.last_save_in_hf"})),
                        "transformers' DeepseekV3 always routes by sigmoid");
  EXPECT_FALSE(fs::exists(root / "softmax" / "metrics.jsonl"));
  expect_one_line_exit2(
      run_ctitan(train_args(root / "into_qwen3", 1, 1, 1,
                            {"--model.name", "qwen3", "--checkpoint.initial_load_in_hf",
                             "--checkpoint.initial_load_path", (root / "tiny").string()},
                            "tiny_moe")),
      "model_type = \"deepseek_v3\" but model.name \"qwen3\"");
}

// GPT-OSS (transformers' GptOssForCausalLM): a random transformers model
// loads into ctitan with transformers' logits over 48 tokens — past the
// window (8, layer 0), with the sinks, the q/k/v/o and router biases, the
// stacked experts with their biases and the clamped SwiGLU, YaRN at every
// length; ctitan's export of an FSDP 2 run loads into transformers with
// ctitan's logits (stacked experts, gate_up_proj interleaving gate and up).
// Load balancing is off in the run: transformers routes without the
// aux-loss-free bias, which the export drops (as TorchTitan's adapter).
TEST_F(HfCheckpoint, GptOssBothWaysWithTransformersLogits) {
  SKIP_WITHOUT_TRANSFORMERS();
  const fs::path root = fresh_dir("hf_gpt_oss");
  std::string log;
  ASSERT_EQ(run_tool({"random", "gpt_oss:tiny", (root / "tiny").string(), "23"}, log), 0) << log;
  expect_same_logits("gpt_oss:tiny", root / "tiny", 48);

  const fs::path dump = root / "export";
  const auto r = run_ctitan(train_args(dump, 2, 2, 3,
                                       {"--model.name", "gpt_oss", "--checkpoint.last_save_in_hf",
                                        "--parallelism.data_parallel_shard_degree", "2",
                                        "--model.moe_load_balance_coeff", "0"},
                                       "tiny"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const fs::path step = dump / "checkpoint" / "step-3";
  {
    SafetensorsFile f((step / "model.safetensors").string());
    const auto* gate_up = f.find("model.layers.1.mlp.experts.gate_up_proj");
    ASSERT_TRUE(gate_up);
    EXPECT_EQ(gate_up->shape, (std::vector<int64_t>{4, 48, 32}));
    EXPECT_FALSE(f.find("model.layers.1.mlp.experts.3.down_proj.weight")) << "stacked, not per expert";
    EXPECT_TRUE(f.find("model.layers.0.self_attn.sinks"));
    const auto config = nlohmann::json::parse(std::ifstream(step / "config.json"));
    EXPECT_EQ(config["layer_types"], nlohmann::json({"sliding_attention", "full_attention"}));
    EXPECT_EQ(config["rope_parameters"]["rope_type"], "yarn");
  }
  expect_same_logits("gpt_oss:tiny", step);
  expect_one_line_exit2(
      run_ctitan(train_args(root / "into_qwen3", 1, 1, 1,
                            {"--model.name", "qwen3", "--checkpoint.initial_load_in_hf",
                             "--checkpoint.initial_load_path", (root / "tiny").string()},
                            "tiny_moe")),
      "model_type = \"gpt_oss\" but model.name \"qwen3\"");
}

// (d) Bad input: one line naming the problem, exit 2.
TEST_F(HfCheckpoint, LyingHeaderAndAnotherModelSizeAreOneLineExit2) {
  SKIP_WITHOUT_TRANSFORMERS();
  const fs::path root = fresh_dir("hf_bad");
  std::string log;
  ASSERT_EQ(run_tool({"random", "tiny", (root / "tiny").string(), "13"}, log), 0) << log;
  const auto load_into_debugmodel = [&](const fs::path& dir, const std::string& dump) {
    return run_ctitan(train_args(root / dump, 1, 1, 1,
                                 {"--checkpoint.initial_load_in_hf", "--checkpoint.initial_load_path", dir.string()}));
  };
  expect_one_line_exit2(load_into_debugmodel(root / "tiny", "size"),
                        "config.json: num_hidden_layers = 2 but the model has 6; the checkpoint is for another model");

  // The header claims one more element for the first tensor than its bytes hold.
  fs::copy(root / "tiny", root / "lying");
  const fs::path file = root / "lying" / "model.safetensors";
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string from = "\"shape\":[64,32]", to = "\"shape\":[65,32]";
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, from.size(), to);  // same length: the header length stays true
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  const auto r = run_ctitan(train_args(
      root / "lie", 1, 1, 1,
      {"--checkpoint.initial_load_in_hf", "--checkpoint.initial_load_path", (root / "lying").string()}, "tiny"));
  expect_one_line_exit2(r, file.string());
  EXPECT_NE(r.err.find("needs 8320"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(root / "lie" / "metrics.jsonl"));
}

}  // namespace
}  // namespace ctitan
