// A TorchTitan user's files, run by the real `ctitan train`: recipes shaped
// like TorchTitan v0.2.2's own (tests/recipes/torchtitan) on C4-format
// .json.gz shards, the [validation] pass (its loss against the training
// loss of the same batch, its whole-set length, several layouts), and bad
// C4 input.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/integration/process.h"
#include "trainer/data/tokenizer.h"

namespace fs = std::filesystem;
using ctitan::testing::fresh_dir;
using ctitan::testing::read_jsonl;
using ctitan::testing::run_ctitan;
using ctitan::testing::source_dir;

namespace {

void write_file(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

// gzip by zlib's deflate (the reader under test is inflate).
std::string gzip(const std::string& text) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, text.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// C4's line format: {"text", "timestamp", "url"}.
std::string c4_lines(const std::vector<std::string>& docs) {
  std::string out;
  for (size_t i = 0; i < docs.size(); ++i)
    out += nlohmann::json({{"text", docs[i]},
                           {"timestamp", "2019-04-25T12:57:54Z"},
                           {"url", "https://example.com/" + std::to_string(i)}})
               .dump() +
           "\n";
  return out;
}

std::vector<std::string> prose(int n, int seed) {
  const char* words[] = {"the", "model", "reads", "a", "long", "page", "of", "text", "about", "rivers", "and",
                         "mountains", "while", "training", "on", "many", "tokens", "every", "day"};
  std::vector<std::string> docs;
  uint64_t x = static_cast<uint64_t>(seed) * 2654435761u + 1;
  for (int d = 0; d < n; ++d) {
    std::string doc;
    const int len = 20 + static_cast<int>(x % 40);
    for (int w = 0; w < len; ++w) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      doc += std::string(w ? " " : "") + words[(x >> 33) % std::size(words)];
    }
    docs.push_back(doc + ".");
  }
  return docs;
}

// Byte-level: ids 0..255 are the bytes (one id per byte of ASCII text),
// then Llama 3's BOS and EOS.
std::string byte_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[ctitan::byte_level_alphabet()[b]] = b;
  nlohmann::json added = nlohmann::json::array();
  int next = 256;
  for (const char* special : {"<|begin_of_text|>", "<|end_of_text|>"}) {
    added.push_back({{"id", next}, {"content", special}, {"special", true}});
    vocab[special] = next++;
  }
  return nlohmann::json({{"added_tokens", added},
                         {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                         {"decoder", {{"type", "ByteLevel"}}},
                         {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}})
      .dump();
}

std::map<int64_t, double> column(const fs::path& metrics, const char* key) {
  std::map<int64_t, double> out;
  for (const auto& row : read_jsonl(metrics))
    if (row.contains(key) && row.at(key).is_number()) out[row.at("step").get<int64_t>()] = row.at(key).get<double>();
  return out;
}

// ---------------------------------------------------------------------------
// TorchTitan's recipe files, unchanged but for TorchTitan's own test overrides.

struct Recipe {
  std::string file;
  int nproc;
  bool tensorboard;
  std::string flavor = "debugmodel";  // TorchTitan's test override (an MoE recipe keeps its debug flavor)
  std::string layout = "";            // a piece of the start-up layout line the recipe must give
};

class TorchTitanRecipe : public ::testing::TestWithParam<Recipe> {};

TEST_P(TorchTitanRecipe, RunsUnchangedForThreeStepsOnC4) {
  const Recipe& r = GetParam();
  // The scratch folder holds what the recipe's relative paths name.
  const fs::path scratch = fresh_dir("tt_" + r.file.substr(0, r.file.find('.')));
  for (const char* assets : {"tests/assets/tokenizer", "assets/hf/Llama-3.1-8B", "assets/hf/Llama-3.1-70B",
                             "assets/hf/Llama-3.1-405B", "assets/hf/Qwen3-0.6B", "assets/hf/deepseek-moe-16b-base"})
    write_file(scratch / assets / "tokenizer.json", byte_tokenizer_json());
  write_file(scratch / "c4" / "c4-train.00000-of-01024.json.gz", gzip(c4_lines(prose(300, 1))));
  std::vector<std::string> args = {"train"};
  if (r.nproc > 1) args.insert(args.end(), {"--nproc", std::to_string(r.nproc)});
  const std::vector<std::string> overrides = {
      "--job.config_file", (fs::path(source_dir()) / "tests/recipes/torchtitan" / r.file).string(),
      "--model.flavor", r.flavor, "--training.steps", "3", "--training.seq_len", "256",
      "--training.dataset_path", "c4/c4-train.00000-of-01024.json.gz"};
  args.insert(args.end(), overrides.begin(), overrides.end());
  const auto res = run_ctitan(args, {}, scratch.string());
  ASSERT_EQ(res.exit_code, 0) << res.out << res.err;
  const auto loss = column(scratch / "outputs" / "metrics.jsonl", "loss");
  ASSERT_TRUE(loss.count(3)) << res.out;
  EXPECT_TRUE(std::isfinite(loss.at(3)));
  EXPECT_NE(res.out.find("c4-train.00000-of-01024.json.gz"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find(r.layout), std::string::npos) << res.out;
  size_t event_files = 0;
  if (fs::exists(scratch / "outputs" / "tb"))
    for (const auto& e : fs::recursive_directory_iterator(scratch / "outputs" / "tb"))
      if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) ++event_files;
  EXPECT_EQ(event_files, r.tensorboard ? 1u : 0u) << "metrics.enable_tensorboard = " << r.tensorboard;
  fs::remove_all(scratch);
}

INSTANTIATE_TEST_SUITE_P(V022, TorchTitanRecipe,
                         ::testing::Values(Recipe{"debug_model.toml", 1, false}, Recipe{"base_config.toml", 1, false},
                                           Recipe{"llama3_8b.toml", 1, true}, Recipe{"llama3_70b.toml", 8, true},
                                           Recipe{"llama3_405b.toml", 8, true}, Recipe{"qwen3_0.6b.toml", 1, false},
                                           Recipe{"qwen3_moe_debug.toml", 1, false, "debugmodel_moe"},
                                           Recipe{"deepseek_v3_debug_model.toml", 1, false},
                                           Recipe{"deepseek_v3_16b.toml", 8, false, "debugmodel",
                                                  "FSDP 8 (reshard after forward: all but the last unit), EP 8, "
                                                  "mesh dp_shard 8 x (ep 8, etp 1)"},
                                           // TorchTitan's document-masked flavors on C4 documents
                                           // (BOS + text + EOS each, packed): block_causal.
                                           Recipe{"debug_model.toml", 1, false, "debugmodel_flex_attn"},
                                           Recipe{"debug_model.toml", 2, false, "debugmodel_varlen_attn"},
                                           Recipe{"deepseek_v3_debug_model.toml", 1, false, "debugmodel_flex_attn"},
                                           // GPT-OSS (sinks, the window on layers 0 and 2, biased
                                           // experts, YaRN): its vocabulary of 201,088 at dim 256.
                                           Recipe{"gpt_oss_debug_model.toml", 1, false}),
                         [](const auto& info) {
                           std::string n = info.param.file.substr(0, info.param.file.rfind('.'));
                           if (info.param.flavor != "debugmodel" && info.param.flavor != "debugmodel_moe")
                             n += "_" + info.param.flavor;
                           for (char& c : n)
                             if (c == '_' || c == '.') c = 'X';
                           return n;
                         });

// ---------------------------------------------------------------------------
// [validation]

class Validation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("OMP_NUM_THREADS", "1", 1);
    root_ = new fs::path(fresh_dir("validation"));
    write_file(*root_ / "tok" / "tokenizer.json", byte_tokenizer_json());
    // Exactly one batch of 2 x (64 + 1) tokens: BOS + 128 bytes + EOS. Every
    // training batch is then this batch, and so is the whole validation set.
    std::string doc;
    for (int i = 0; doc.size() < 128; ++i) doc += "abcdefghij klmnopqrstu vwxyz "[i % 30];
    write_file(*root_ / "one_batch" / "c4-train.00000-of-01024.json.gz", gzip(c4_lines({doc})));
    // A validation set of several batches for the whole-set count.
    write_file(*root_ / "val" / "c4-validation.00000-of-00008.json.gz", gzip(c4_lines(prose(40, 7))));
    write_file(*root_ / "val" / "c4-validation.00001-of-00008.json.gz", gzip(c4_lines(prose(25, 8))));
  }
  static void TearDownTestSuite() {
    unsetenv("OMP_NUM_THREADS");
    fs::remove_all(*root_);
  }
  static std::vector<std::string> args(const std::string& name, int dp, const std::vector<std::string>& extra) {
    std::vector<std::string> a = {"train"};
    std::vector<std::string> rest = {
        "--model.flavor", "debugmodel", "--training.mixed_precision_param", "float32", "--training.dataset", "c4",
        "--training.dataset_path", (*root_ / "one_batch").string(), "--model.hf_assets_path", (*root_ / "tok").string(),
        "--training.seq_len", "64", "--training.local_batch_size", std::to_string(2 / dp), "--training.steps", "3",
        "--metrics.log_freq", "1", "--validation.enable", "--validation.freq", "1", "--validation.seq_len", "64",
        "--job.dump_folder", (*root_ / name).string()};
    a.insert(a.end(), rest.begin(), rest.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  static fs::path* root_;
};
fs::path* Validation::root_ = nullptr;

// Validation after step k runs the weights that step k+1 trains from; on the
// same batch its loss is step k+1's training loss — computed by the
// training forward, not by the validation pass — in every layout.
TEST_F(Validation, LossEqualsTheTrainingLossOfTheSameBatchInEveryLayout) {
  struct L {
    std::string name;
    int dp;
    std::vector<std::string> flags;
  };
  const std::vector<L> layouts = {
      {"single", 1, {}},
      {"fsdp2", 2, {"--nproc", "2"}},
      {"tp2", 1, {"--nproc", "2", "--parallelism.tensor_parallel_degree", "2"}},
      {"pp2", 1, {"--nproc", "2", "--parallelism.pipeline_parallel_degree", "2", "--parallelism.pipeline_parallel_schedule", "1F1B"}},
      {"cp2", 1, {"--nproc", "2", "--parallelism.context_parallel_degree", "2"}},
  };
  for (const L& l : layouts) {
    std::vector<std::string> a = args(l.name, l.dp, {"--validation.dataset", "c4_validation", "--validation.dataset_path",
                                                     (*root_ / "one_batch").string(), "--validation.steps", "-1",
                                                     "--validation.local_batch_size", std::to_string(2 / l.dp)});
    a.insert(a.begin() + 1, l.flags.begin(), l.flags.end());
    const auto r = run_ctitan(a);
    ASSERT_EQ(r.exit_code, 0) << l.name << r.out << r.err;
    const fs::path metrics = *root_ / l.name / "metrics.jsonl";
    const auto train = column(metrics, "loss"), val = column(metrics, "validation_loss");
    const auto tokens = column(metrics, "validation_tokens");
    ASSERT_EQ(val.size(), 3u) << l.name << ": validation at steps 1, 2, 3";
    for (int64_t k : {1, 2}) {
      EXPECT_NEAR(val.at(k), train.at(k + 1), 1e-6 * train.at(k + 1)) << l.name << " after step " << k;
    }
    // The whole set is one batch of 2 x 64 tokens over the data-parallel ranks.
    // (per device: the tokens a rank reads over the ranks that share them)
    EXPECT_EQ(tokens.at(1), 128 / (l.flags.empty() ? 1 : 2)) << l.name;
    EXPECT_NEAR(column(metrics, "validation_perplexity").at(3), std::exp(val.at(3)), 1e-9 * std::exp(val.at(3)));
    EXPECT_NE(r.out.find("validate step 2"), std::string::npos) << r.out;
  }
}

// validation.steps = -1 reads the set once: every full batch before the
// first that would wrap around (counted here from the documents' lengths).
TEST_F(Validation, WholeSetIsEveryFullBatchOnce) {
  int64_t tokens = 0;
  for (const auto& docs : {prose(40, 7), prose(25, 8)})
    for (const std::string& d : docs) tokens += static_cast<int64_t>(d.size()) + 2;  // BOS, bytes, EOS
  const int64_t S = 64, B = 3, windows = tokens / (S + 1), batches = windows / B;
  ASSERT_GE(batches, 3);
  for (int dp : {1, 3}) {
    const std::string name = "whole_set_dp" + std::to_string(dp);
    std::vector<std::string> a = args(name, 1, {"--validation.dataset_path", (*root_ / "val").string(),
                                                "--validation.steps", "-1", "--validation.local_batch_size",
                                                std::to_string(B / dp), "--training.steps", "1"});
    if (dp > 1) a.insert(a.begin() + 1, {"--nproc", std::to_string(dp)});
    const auto r = run_ctitan(a);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const auto got = column(*root_ / name / "metrics.jsonl", "validation_tokens");
    ASSERT_TRUE(got.count(1)) << r.out;
    EXPECT_EQ(static_cast<int64_t>(got.at(1)), batches * (B / dp) * S) << name;
  }
  // The same windows in both layouts: the same loss.
  const double one = column(*root_ / "whole_set_dp1" / "metrics.jsonl", "validation_loss").at(1);
  const double three = column(*root_ / "whole_set_dp3" / "metrics.jsonl", "validation_loss").at(1);
  EXPECT_NEAR(three, one, 1e-5 * one);
}

// ---------------------------------------------------------------------------
// Bad C4 input: one line, exit 2, no run directory.

TEST(C4Input, MissingPathCorruptShardAndBadValidationAreOneLine) {
  const fs::path root = fresh_dir("c4_bad");
  write_file(root / "tok" / "tokenizer.json", byte_tokenizer_json());
  std::string gz = gzip(c4_lines(prose(50, 3)));
  for (size_t i = 20; i < 40; ++i) gz[i] = static_cast<char>(gz[i] ^ 0x33);
  write_file(root / "bad" / "c4-train.00000-of-01024.json.gz", gz);
  const std::vector<std::string> base = {"train", "--model.flavor", "debugmodel", "--training.seq_len", "64",
                                         "--training.local_batch_size", "2", "--training.steps", "2",
                                         "--model.hf_assets_path", (root / "tok").string(), "--job.dump_folder",
                                         (root / "out").string()};
  struct Case {
    std::vector<std::string> extra;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {{"--training.dataset", "c4"},
       {"dataset \"c4\" is read from disk and training.dataset_path is not set",
        "en/c4-train.00000-of-01024.json.gz", "https://huggingface.co/datasets/allenai/c4"}},
      {{"--training.dataset", "c4", "--training.dataset_path", (root / "bad").string()},
       {(root / "bad" / "c4-train.00000-of-01024.json.gz").string() + ": corrupt gzip data at compressed byte ",
        "download it again"}},
      {{"--training.dataset", "markov", "--validation.enable"},
       {"dataset \"c4_validation\" is read from disk and validation.dataset_path is not set",
        "c4-validation.00000-of-00008.json.gz"}},
      {{"--training.dataset", "markov", "--validation.enable", "--validation.dataset", "markov", "--validation.steps",
        "-1"},
       {"validation.steps = -1 (the whole set) needs data that ends"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> a = base;
    a.insert(a.end(), c.extra.begin(), c.extra.end());
    const auto r = run_ctitan(a);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    for (const std::string& w : c.want) EXPECT_NE(r.err.find(w), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(root / "out")) << "a run directory for bad input";
  }
  fs::remove_all(root);
}

}  // namespace
