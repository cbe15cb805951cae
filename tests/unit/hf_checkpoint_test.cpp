// Hugging Face checkpoints without Python: the safetensors reader's checks on
// lying headers, names, the rotary q/k permutation against Hugging Face's
// rotate_half RoPE written out here, shard/index files, and export → import
// through whole tensors and through the boxes of parallel layouts.
// transformers itself is the reference in tests/integration/hf_checkpoint_test.cpp.
#include "trainer/models/llama3.h"
#include "trainer/checkpoint/hf_checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sys/stat.h>

#include <barrier>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/errors.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/config/config_loader.h"
#include "trainer/models/registry.h"
#include "trainer/model/transformer.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

fs::path fresh(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("ctitan_hf_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// The whole model's parameters, random, by TorchTitan FQN.
std::map<std::string, at::Tensor> random_model(const ModelArgs& args, uint64_t seed) {
  torch::manual_seed(seed);
  std::map<std::string, at::Tensor> m;
  for (const auto& s : model_param_specs(args, ModelPart{})) m[s.name] = torch::randn(s.global_shape);
  return m;
}

void export_model(const fs::path& dir, const ModelArgs& args, const std::map<std::string, at::Tensor>& m,
                  HfExportOptions opts = {}) {
  write_hf_checkpoint(
      dir.string(), args, [&](const std::string& fqn) { return m.at(fqn); }, opts);
}

// Writes a safetensors file with an arbitrary header and `data_bytes` zero bytes.
void write_raw(const fs::path& path, const std::string& header, size_t data_bytes, int64_t claimed_len = -1) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = claimed_len >= 0 ? static_cast<uint64_t>(claimed_len) : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(len >> (8 * i)));
  out << header << std::string(data_bytes, '\0');
}

bool expert_of_hf_name_empty(const std::string& fqn) { return fqn.find("moe.experts.") == std::string::npos; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(HfNames, MapTorchTitanFqnsBothWays) {
  const ModelArgs llama = llama3_flavor("debugmodel");
  EXPECT_EQ(hf_name_of("tok_embeddings.weight", llama), "model.embed_tokens.weight");
  EXPECT_EQ(hf_name_of("layers.12.attention.wk.weight", llama), "model.layers.12.self_attn.k_proj.weight");
  EXPECT_EQ(hf_name_of("layers.0.feed_forward.w1.weight", llama), "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(hf_name_of("layers.0.feed_forward.w3.weight", llama), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(hf_name_of("layers.3.ffn_norm.weight", llama), "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(hf_name_of("output.weight", llama), "lm_head.weight");
  EXPECT_EQ(hf_name_of("layers.x.attention.wq.weight", llama), "");
  for (const auto& s : model_param_specs(llama, ModelPart{}))
    EXPECT_EQ(fqn_of_hf(hf_name_of(s.name, llama), llama), s.name);
  EXPECT_EQ(fqn_of_hf("model.layers.0.self_attn.rotary_emb.inv_freq", llama), "");
}

// ctitan rotates (x[2i], x[2i+1]) as complex pairs; Hugging Face computes
// x·cos + rotate_half(x)·sin over halves. With wq/wk permuted the attention
// scores q·k of every head must be the same.
TEST(HfPermutation, AttentionScoresEqualHuggingFaceRotateHalf) {
  const ModelArgs args = llama3_flavor("tiny");  // 4 heads, 2 KV heads (GQA), Dh 8
  const int64_t S = 6, Dh = args.head_dim(), D = args.dim;
  torch::manual_seed(3);
  const at::Tensor x = torch::randn({S, D}, torch::kDouble);
  const at::Tensor wq = torch::randn({args.n_heads * Dh, D}, torch::kDouble);
  const at::Tensor wk = torch::randn({args.kv_dim(), D}, torch::kDouble);
  const at::Tensor freqs = precompute_freqs_cis(Dh, S, args.rope_theta, args.rope_scaling);  // complex [S, Dh/2]

  auto ctitan_rope = [&](const at::Tensor& w, int64_t n) {  // [S, n, Dh]
    at::Tensor y = torch::matmul(x, w.t()).view({S, n, Dh / 2, 2}).to(torch::kFloat).contiguous();
    at::Tensor c = torch::view_as_complex(y) * freqs.view({S, 1, Dh / 2});
    return torch::view_as_real(c).reshape({S, n, Dh}).to(torch::kDouble);
  };
  auto hf_rope = [&](const at::Tensor& w, int64_t n) {  // transformers' apply_rotary_pos_emb
    at::Tensor y = torch::matmul(x, w.t()).view({S, n, Dh});
    at::Tensor angle = torch::angle(freqs).to(torch::kDouble);
    at::Tensor emb = torch::cat({angle, angle}, -1).view({S, 1, Dh});
    at::Tensor rot = torch::cat({-y.narrow(-1, Dh / 2, Dh / 2), y.narrow(-1, 0, Dh / 2)}, -1);
    return y * emb.cos() + rot * emb.sin();
  };
  const at::Tensor q_ct = ctitan_rope(wq, args.n_heads), k_ct = ctitan_rope(wk, args.n_kv_heads);
  const at::Tensor q_hf = hf_rope(to_hf_layout("layers.0.attention.wq.weight", wq, args), args.n_heads);
  const at::Tensor k_hf = hf_rope(to_hf_layout("layers.0.attention.wk.weight", wk, args), args.n_kv_heads);
  const int64_t group = args.n_heads / args.n_kv_heads;
  for (int64_t h = 0; h < args.n_heads; ++h) {
    const at::Tensor s_ct = torch::matmul(q_ct.select(1, h), k_ct.select(1, h / group).t());
    const at::Tensor s_hf = torch::matmul(q_hf.select(1, h), k_hf.select(1, h / group).t());
    EXPECT_TRUE(torch::allclose(s_ct, s_hf, 1e-4, 1e-4)) << "head " << h;
  }
  // Without the permutation the scores differ: the test can see a missing one.
  const at::Tensor q_raw = hf_rope(wq, args.n_heads), k_raw = hf_rope(wk, args.n_kv_heads);
  EXPECT_FALSE(torch::allclose(torch::matmul(q_ct.select(1, 0), k_ct.select(1, 0).t()),
                               torch::matmul(q_raw.select(1, 0), k_raw.select(1, 0).t()), 1e-3, 1e-3));
  EXPECT_TRUE(torch::equal(
      from_hf_layout("layers.1.attention.wq.weight", to_hf_layout("layers.1.attention.wq.weight", wq, args), args),
      wq));
}

TEST(HfExport, SingleFileWithConfigAndImportRoundTrip) {
  const ModelArgs args = llama3_flavor("tiny");
  const auto m = random_model(args, 1);
  const fs::path dir = fresh("single") / "step-3";
  export_model(dir, args, m);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir.parent_path() / ".step-3.hf.tmp"));
  std::ifstream in(dir / "config.json");
  const auto c = nlohmann::json::parse(in);
  EXPECT_EQ(c.at("architectures"), nlohmann::json({"LlamaForCausalLM"}));
  EXPECT_EQ(c.at("hidden_size"), 32);
  EXPECT_EQ(c.at("intermediate_size"), args.ffn_hidden_dim());
  EXPECT_EQ(c.at("num_key_value_heads"), 2);
  EXPECT_EQ(c.at("rope_scaling").at("rope_type"), "llama3");
  EXPECT_EQ(c.at("tie_word_embeddings"), false);
  EXPECT_EQ(c.at("torch_dtype"), "float32");

  SafetensorsFile f((dir / "model.safetensors").string());
  EXPECT_EQ(f.entries().size(), m.size());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  // Names and the permutation as written, checked against the adapter's formula directly.
  const at::Tensor wq = m.at("layers.1.attention.wq.weight");
  EXPECT_TRUE(torch::equal(f.tensor("model.layers.1.self_attn.q_proj.weight"),
                           wq.view({4, 4, 2, 32}).transpose(1, 2).reshape({32, 32})));
  EXPECT_TRUE(torch::equal(f.tensor("lm_head.weight"), m.at("output.weight")));

  Transformer model(args, torch::kFloat, 8);
  TensorPieces pieces;
  for (const auto& s : model.slots()) pieces.push_back({"model." + s.name, model.store().param(s.name), s.shape, {}});
  load_hf_checkpoint(dir.string(), args, pieces);
  for (const auto& [fqn, t] : m) EXPECT_TRUE(torch::equal(model.store().param(fqn), t)) << fqn;
}

// Shards above the size limit with an index; bf16 on disk.
TEST(HfExport, ShardsWithIndexInBfloat16) {
  const ModelArgs args = llama3_flavor("tiny");
  const auto m = random_model(args, 2);
  const fs::path dir = fresh("shards") / "out";
  HfExportOptions o;
  o.dtype = at::kBFloat16;
  o.max_shard_bytes = 4096;  // the embedding (64 x 32 x 2 bytes) fills one; w1 (96 x 32 x 2) is alone in one
  export_model(dir, args, m, o);
  std::ifstream in(dir / "model.safetensors.index.json");
  const auto index = nlohmann::json::parse(in);
  int64_t total = 0, files = 0;
  for (const auto& [fqn, t] : m) total += t.numel() * 2;
  EXPECT_EQ(index.at("metadata").at("total_size"), total);
  EXPECT_EQ(index.at("weight_map").size(), m.size());
  for (const auto& e : fs::directory_iterator(dir)) files += e.path().extension() == ".safetensors";
  EXPECT_GT(files, 2);
  const std::string first = index.at("weight_map").at("model.embed_tokens.weight");
  EXPECT_EQ(first, "model-00001-of-" + std::string(5 - std::to_string(files).size(), '0') + std::to_string(files) +
                       ".safetensors");
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    int64_t bytes = 0;
    const SafetensorsFile shard(e.path().string());
    for (const auto& [name, entry] : shard.entries()) bytes += entry.end - entry.begin;
    EXPECT_TRUE(bytes <= 4096 || shard.entries().size() == 1) << e.path() << " holds " << bytes << " bytes";
  }
  SafetensorsFile f((dir / first).string());
  EXPECT_EQ(f.find("model.embed_tokens.weight")->dtype, at::kBFloat16);

  std::map<std::string, at::Tensor> back;
  TensorPieces pieces;
  for (const auto& [fqn, t] : m) {
    back[fqn] = torch::zeros_like(t);
    pieces.push_back({"model." + fqn, back[fqn], t.sizes().vec(), {}});
  }
  load_hf_checkpoint(dir.string(), args, pieces);
  for (const auto& [fqn, t] : m) EXPECT_TRUE(torch::equal(back[fqn], t.to(torch::kBFloat16).to(torch::kFloat))) << fqn;
}

// Each rank's boxes of a layout — FSDP rows that cut heads in half, TP
// column blocks, both — hold exactly the whole import's values there.
// (Llama 3's permuted wq/wk; Qwen3-MoE's experts, one Hugging Face tensor
// each, in boxes that cut the expert dimension and the rows.)
TEST(HfImport, BoxesOfAnyLayoutEqualTheWholeTensors) {
  for (const ModelArgs& args : {llama3_flavor("tiny"), model_flavor("qwen3", "tiny_moe")}) {
  SCOPED_TRACE(args.family);
  const auto m = random_model(args, 4);
  const fs::path dir = fresh("boxes_" + args.family) / "hf";
  export_model(dir, args, m);
  for (const auto& [rows, cols] : std::vector<std::pair<int, int>>{{3, 1}, {1, 2}, {5, 2}}) {
    TensorPieces pieces;
    for (const auto& [fqn, t] : m) {
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < (t.dim() >= 2 ? cols : 1); ++c) {
          std::vector<int64_t> off(t.dim(), 0), ext = t.sizes().vec();
          const int64_t rc = (t.size(0) + rows - 1) / rows;
          off[0] = std::min<int64_t>(t.size(0), r * rc);
          ext[0] = std::min<int64_t>(t.size(0), off[0] + rc) - off[0];
          if (t.dim() >= 2) {
            off[1] = c * (t.size(1) / cols);
            ext[1] = t.size(1) / cols;
          }
          if (ext[0] > 0) pieces.push_back({"model." + fqn, torch::zeros(ext), t.sizes().vec(), off});
        }
      }
    }
    pieces.push_back({"optimizer.step", torch::zeros({}), {}, {}});  // not the model's: left alone
    // An MoE layer's expert biases have no Hugging Face tensor: left alone too.
    pieces.push_back({"model.layers.0.moe.expert_bias", torch::full({4}, 7.0), {4}, {}});
    load_hf_checkpoint(dir.string(), args, pieces);
    for (const auto& p : pieces) {
      if (p.name == "optimizer.step") continue;
      if (p.name == "model.layers.0.moe.expert_bias") {
        EXPECT_TRUE(torch::equal(p.tensor, torch::full({4}, 7.0)));
        continue;
      }
      at::Tensor want = m.at(p.name.substr(6));
      for (int64_t d = 0; d < want.dim(); ++d) want = want.narrow(d, p.offsets[d], p.tensor.size(d));
      EXPECT_TRUE(torch::equal(p.tensor, want)) << p.name << " rows " << rows << " cols " << cols;
    }
  }
  }
}

// Qwen3's names (TorchTitan's Qwen3StateDictAdapter): QK-norms, the router,
// one tensor per expert; no q/k permutation (its RoPE is rotate_half).
TEST(HfNames, Qwen3AndItsExpertsMapBothWays) {
  const ModelArgs args = model_flavor("qwen3", "tiny_moe");
  EXPECT_EQ(hf_name_of("layers.1.attention.q_norm.weight", args), "model.layers.1.self_attn.q_norm.weight");
  EXPECT_EQ(hf_name_of("layers.1.moe.router.gate.weight", args), "model.layers.1.mlp.gate.weight");
  EXPECT_EQ(fqn_of_hf("model.layers.1.mlp.experts.3.down_proj.weight", args), "layers.1.moe.experts.w2");
  EXPECT_EQ(fqn_of_hf("model.layers.1.mlp.experts.0.gate_proj.weight", args), "layers.1.moe.experts.w1");
  EXPECT_EQ(fqn_of_hf("model.layers.1.mlp.experts.x.up_proj.weight", args), "");
  const auto m = random_model(args, 5);
  const fs::path dir = fresh("qwen3_names") / "hf";
  export_model(dir, args, m);
  SafetensorsFile f((dir / "model.safetensors").string());
  // Expert 2 of layer 1's w1 [4, 16, 32] is gate_proj [16, 32], byte for byte.
  EXPECT_TRUE(torch::equal(f.tensor("model.layers.1.mlp.experts.2.gate_proj.weight"), m.at("layers.1.moe.experts.w1")[2]));
  EXPECT_TRUE(torch::equal(f.tensor("model.layers.0.self_attn.q_proj.weight"), m.at("layers.0.attention.wq.weight")));
  EXPECT_EQ(f.entries().size(), m.size() - 6 + 2 * 3 * 4);  // 3 expert tensors per layer → 4 each
  const auto config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  EXPECT_EQ(config["model_type"], "qwen3_moe");
  EXPECT_EQ(config["num_experts"], 4);
}

// DeepSeek-V3's names (TorchTitan's DeepSeekV3StateDictAdapter): every
// tensor maps both ways, the expert biases travel as the router's fp32
// e_score_correction_bias, RoPE rows are not permuted (rope_interleave), and
// a load of the export gives back every tensor and bias bit for bit.
// config.json names YaRN only for a run longer than its original length.
TEST(HfNames, DeepSeekV3MapsBothWaysWithItsExpertBias) {
  const ModelArgs args = model_flavor("deepseek_v3", "tiny");
  EXPECT_EQ(hf_name_of("layers.1.attention.q_norm.weight", args), "model.layers.1.self_attn.q_a_layernorm.weight");
  EXPECT_EQ(hf_name_of("layers.1.attention.wkv_a.weight", args), "model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
  EXPECT_EQ(hf_name_of("layers.2.moe.shared_experts.w2.weight", args),
            "model.layers.2.mlp.shared_experts.down_proj.weight");
  EXPECT_EQ(fqn_of_hf("model.layers.2.mlp.gate.e_score_correction_bias", args), "layers.2.moe.expert_bias");
  EXPECT_EQ(fqn_of_hf("model.layers.1.self_attn.q_norm.weight", args), "") << "Qwen3's QK-norm is no MLA name";
  auto m = random_model(args, 9);
  for (const auto& [fqn, t] : m) {
    if (expert_of_hf_name_empty(fqn)) {
      EXPECT_EQ(fqn_of_hf(hf_name_of(fqn, args), args), fqn) << fqn;
    }
  }
  for (int64_t l : {1, 2}) m["layers." + std::to_string(l) + ".moe.expert_bias"] = torch::randn({4}) * 1e-3;
  const fs::path dir = fresh("deepseek_v3_names") / "hf";
  HfExportOptions opts;
  opts.seq_len = 32;  // = the flavor's original length: no YaRN
  export_model(dir, args, m, opts);
  SafetensorsFile f((dir / "model.safetensors").string());
  EXPECT_TRUE(torch::equal(f.tensor("model.layers.0.self_attn.q_b_proj.weight"), m.at("layers.0.attention.wq_b.weight")))
      << "no RoPE permutation";
  EXPECT_EQ(f.find("model.layers.2.mlp.gate.e_score_correction_bias")->dtype, at::kFloat);
  auto config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  EXPECT_EQ(config["model_type"], "deepseek_v3");
  EXPECT_EQ(config["rope_parameters"]["rope_type"], "default");
  EXPECT_EQ(config["n_group"], 2);
  EXPECT_EQ(config["topk_group"], 1);
  EXPECT_FALSE(config.contains("head_dim"));
  TensorPieces pieces;
  std::map<std::string, at::Tensor> back;
  for (const auto& [fqn, t] : m) {
    back[fqn] = torch::zeros_like(t);
    pieces.push_back({"model." + fqn, back[fqn], t.sizes().vec(), {}});
  }
  load_hf_checkpoint(dir.string(), args, pieces);
  for (const auto& [fqn, t] : m) EXPECT_TRUE(torch::equal(back.at(fqn), t)) << fqn;

  opts.seq_len = 48;
  export_model(dir, args, m, opts);
  config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  EXPECT_EQ(config["rope_parameters"]["rope_type"], "yarn");
  EXPECT_EQ(config["rope_parameters"]["factor"], 4.0);
  EXPECT_EQ(config["rope_parameters"]["original_max_position_embeddings"], 32);
  // A checkpoint whose YaRN or routing differs from the flavor is one line.
  config["rope_parameters"]["factor"] = 40.0;
  std::ofstream(dir / "config.json") << config.dump();
  EXPECT_NE(error_of([&] { load_hf_checkpoint(dir.string(), args, pieces); }).find("rope_parameters.factor = 40.0"),
            std::string::npos);
  config["rope_parameters"]["factor"] = 4.0;
  config["routed_scaling_factor"] = 1.0;
  std::ofstream(dir / "config.json") << config.dump();
  EXPECT_NE(error_of([&] { load_hf_checkpoint(dir.string(), args, pieces); }).find("routed_scaling_factor = 1.0"),
            std::string::npos);
  // transformers routes by sigmoid only: a softmax-routed flavor is one line.
  EXPECT_NE(error_of([] { check_hf_checkpoint_family(model_flavor("deepseek_v3", "debugmodel")); })
                .find("always routes by sigmoid"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { check_hf_checkpoint_family(args); }), "");
}

// Every family of the registry reads back what it writes through its own
// adapter: for its smallest flavor that transformers reads alike, every
// parameter has a Hugging Face name that maps back, and an export loads bit
// for bit through the family's config.json check. A new family is covered
// without an edit here.
TEST(HfAdapter, EveryFamilyRoundTripsItsCheckpoint) {
  for (const std::string& family : model_family_names()) {
    std::optional<ModelArgs> smallest;
    for (const std::string& flavor : model_family(family).flavor_names()) {
      const ModelArgs a = model_flavor(family, flavor);
      if (!error_of([&] { check_hf_checkpoint_family(a); }).empty()) continue;  // e.g. softmax-routed DeepSeek-V3
      if (!smallest || count_params(a).total < count_params(*smallest).total) smallest = a;
    }
    ASSERT_TRUE(smallest) << family << ": no flavor has Hugging Face checkpoints";
    const ModelArgs& args = *smallest;
    auto m = random_model(args, 11);
    for (const auto& [fqn, t] : m) {
      if (!expert_of_hf_name_empty(fqn)) continue;  // one Hugging Face tensor per expert
      EXPECT_FALSE(hf_name_of(fqn, args).empty()) << family << " " << fqn;
      EXPECT_EQ(fqn_of_hf(hf_name_of(fqn, args), args), fqn) << family;
    }
    if (model_family(family).hf.expert_bias)
      for (int64_t l = args.n_dense_layers; l < args.n_layers && args.moe.num_experts > 0; ++l)
        m["layers." + std::to_string(l) + ".moe.expert_bias"] = torch::randn({args.moe.num_experts});
    const fs::path dir = fresh("every_family_" + family) / "hf";
    export_model(dir, args, m);
    TensorPieces pieces;
    std::map<std::string, at::Tensor> back;
    for (const auto& [fqn, t] : m) {
      back[fqn] = torch::zeros_like(t);
      pieces.push_back({"model." + fqn, back[fqn], t.sizes().vec(), {}});
    }
    ASSERT_EQ(error_of([&] { load_hf_checkpoint(dir.string(), args, pieces); }), "") << family;
    for (const auto& [fqn, t] : m) EXPECT_TRUE(torch::equal(back.at(fqn), t)) << family << " " << fqn;
  }
}

// Two ranks (threads) each save half the rows of every tensor; rank 0 writes
// whole tensors.
TEST(HfExport, GathersTheRanksBoxes) {
  const ModelArgs args = llama3_flavor("tiny");
  const auto m = random_model(args, 5);
  const fs::path folder = fresh("gather") / "checkpoint";
  std::barrier sync(2);
  std::vector<std::thread> ranks;
  std::vector<std::string> errors(2);
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        TensorPieces pieces;
        for (const auto& [fqn, t] : m) {
          const int64_t half = (t.size(0) + 1) / 2, lo = r * half, n = std::min(t.size(0), lo + half) - lo;
          std::vector<int64_t> off(t.dim(), 0);
          off[0] = lo;
          pieces.push_back({"model." + fqn, t.narrow(0, lo, n), t.sizes().vec(), off});
          pieces.push_back({"optimizer.exp_avg." + fqn, t.narrow(0, lo, n), t.sizes().vec(), off});
        }
        export_hf_checkpoint(folder.string(), 7, pieces, args, {}, SaveGroup{r, 2, [&] { sync.arrive_and_wait(); }});
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  ASSERT_EQ(errors, std::vector<std::string>(2)) << errors[0] << errors[1];
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(folder)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"step-7"});  // no staging folder left behind
  SafetensorsFile f((folder / "step-7" / "model.safetensors").string());
  EXPECT_EQ(f.entries().size(), m.size());
  for (const auto& [fqn, t] : m)
    EXPECT_TRUE(torch::equal(f.tensor(hf_name_of(fqn, args)), to_hf_layout(fqn, t, args))) << fqn;
}

TEST(HfImport, AnotherModelSizeNamesTheFirstMismatchedTensor) {
  ModelArgs bigger = llama3_flavor("tiny");
  bigger.vocab_size = 96;
  const fs::path dir = fresh("size") / "hf";
  export_model(dir, bigger, random_model(bigger, 6));
  const ModelArgs tiny = llama3_flavor("tiny");
  Transformer model(tiny, torch::kFloat, 8);
  TensorPieces pieces;
  for (const auto& s : model.slots()) pieces.push_back({"model." + s.name, model.store().param(s.name), s.shape, {}});
  // config.json is checked first; without one (a bare safetensors folder) the tensors' shapes are.
  const auto load = [&] { return error_of([&] { load_hf_checkpoint(dir.string(), tiny, pieces); }); };
  EXPECT_NE(load().find("config.json: vocab_size = 96 but the model has 64"), std::string::npos) << load();
  fs::remove(dir / "config.json");
  const std::string e = load();
  EXPECT_NE(e.find("'model.embed_tokens.weight' has shape [96,32] but the model expects [64,32]"), std::string::npos)
      << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);

  ModelArgs deeper = tiny;
  deeper.n_layers = 3;
  export_model(dir, deeper, random_model(deeper, 6));
  EXPECT_NE(load().find("config.json: num_hidden_layers = 3 but the model has 2"), std::string::npos) << load();
  fs::remove(dir / "config.json");
  const std::string extra = load();
  EXPECT_NE(extra.find("'model.layers.2."), std::string::npos) << extra;

  ModelArgs mha = tiny;
  mha.n_kv_heads = 4;  // same hidden size, different K/V shapes
  export_model(dir, mha, random_model(mha, 6));
  EXPECT_NE(load().find("config.json: num_key_value_heads = 4 but the model has 2"), std::string::npos) << load();
  fs::remove(dir / "config.json");
  const std::string heads = load();
  EXPECT_NE(heads.find("'model.layers.0.self_attn.k_proj.weight' has shape [32,32] but the model expects [16,32]"),
            std::string::npos)
      << heads;
}

// Rewrites dir/model.safetensors through `edit`, which may change or drop
// (return an undefined tensor) each tensor by its Hugging Face name.
void rewrite_tensors(const fs::path& dir, const std::function<at::Tensor(const std::string&, at::Tensor)>& edit) {
  std::vector<std::pair<std::string, at::Tensor>> kept;
  {
    SafetensorsFile f((dir / "model.safetensors").string());
    for (const auto& [name, e] : f.entries()) {
      at::Tensor t = edit(name, f.tensor(name).clone());
      if (t.defined()) kept.emplace_back(name, t);
    }
  }
  std::vector<SafetensorsWriter::Spec> specs;
  for (const auto& [name, t] : kept) specs.push_back({name, t.scalar_type(), t.sizes().vec()});
  SafetensorsWriter w((dir / "model.safetensors").string(), specs);
  for (const auto& [name, t] : kept) w.add(t);
  w.finish();
}

void edit_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(dir / "config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  in.close();
  edit(c);
  std::ofstream(dir / "config.json") << c.dump(1);
}

// Issue 33, item 3 and 11: what shapes cannot show is checked before a
// weight loads — config.json's family, sizes, theta and tying; every
// tensor's dtype and presence; finite values — and config.json is read as a
// bounded regular file (a FIFO used to hang the import for ever).
TEST(HfImport, ConfigDtypesTyingAndValuesAreCheckedBeforeLoading) {
  const ModelArgs tiny = llama3_flavor("tiny");
  const auto m = random_model(tiny, 9);
  Transformer model(tiny, torch::kFloat, 8);
  TensorPieces pieces;
  for (const auto& s : model.slots()) pieces.push_back({"model." + s.name, model.store().param(s.name), s.shape, {}});
  const fs::path dir = fresh("checks") / "hf";
  const auto load = [&] { return error_of([&] { load_hf_checkpoint(dir.string(), tiny, pieces); }); };
  const auto config_case = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& expect) {
    export_model(dir, tiny, m);
    edit_config(dir, edit);
    const std::string e = load();
    EXPECT_NE(e.find(expect), std::string::npos) << expect << "\n  got: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  };
  config_case([](nlohmann::json& c) { c["model_type"] = "mistral"; }, "model_type = \"mistral\" but model.name");
  config_case([](nlohmann::json& c) { c["rope_theta"] = 1e6; }, "rope_theta = 1000000.0 but the model has 500000");
  config_case([](nlohmann::json& c) { c["rope_parameters"]["rope_theta"] = 1e4; }, "rope_parameters.rope_theta = 10000.0");
  config_case([](nlohmann::json& c) { c["hidden_size"] = 64; }, "hidden_size = 64 but the model has 32");
  config_case([](nlohmann::json& c) { c["intermediate_size"] = 1; }, "intermediate_size = 1 but the model has");
  config_case([](nlohmann::json& c) { c["tie_word_embeddings"] = "yes"; }, "tie_word_embeddings = \"yes\" is not");

  // lm_head.weight missing: an error unless config.json ties the embeddings.
  export_model(dir, tiny, m);
  rewrite_tensors(dir, [](const std::string& n, at::Tensor t) { return n == "lm_head.weight" ? at::Tensor() : t; });
  EXPECT_NE(load().find("has no tensor 'lm_head.weight' (the model's output.weight) and its config.json does not say "
                        "tie_word_embeddings = true"),
            std::string::npos)
      << load();
  edit_config(dir, [](nlohmann::json& c) { c["tie_word_embeddings"] = true; });
  EXPECT_EQ(load(), "");
  EXPECT_TRUE(torch::equal(model.store().param("output.weight"), m.at("tok_embeddings.weight")));

  // An integer tensor is not converted; a NaN is not loaded.
  export_model(dir, tiny, m);
  rewrite_tensors(dir, [](const std::string& n, at::Tensor t) {
    return n == "model.norm.weight" ? t.to(torch::kLong) : t;
  });
  EXPECT_NE(load().find("tensor 'model.norm.weight' is I64, not a floating-point type"), std::string::npos) << load();
  export_model(dir, tiny, m);
  rewrite_tensors(dir, [](const std::string& n, at::Tensor t) {
    if (n == "model.layers.1.mlp.up_proj.weight") t[0][0] = std::nan("");
    return t;
  });
  EXPECT_NE(load().find("tensor 'model.layers.1.mlp.up_proj.weight' holds NaN or infinite values"), std::string::npos)
      << load();

  // config.json as a FIFO or a folder: one line, no hang, no "internal error".
  export_model(dir, tiny, m);
  fs::remove(dir / "config.json");
  ASSERT_EQ(::mkfifo((dir / "config.json").c_str(), 0644), 0);
  EXPECT_NE(load().find("is a FIFO"), std::string::npos) << load();
  fs::remove(dir / "config.json");
  fs::create_directory(dir / "config.json");
  EXPECT_NE(load().find("is a directory"), std::string::npos) << load();
}

TEST(Safetensors, LyingHeadersAreOneLineNamingFileAndTensor) {
  const fs::path dir = fresh("lies");
  const fs::path p = dir / "model.safetensors";
  auto header = [](const std::string& dtype, const std::string& shape, int64_t b, int64_t e) {
    return "{\"w\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(b) + "," +
           std::to_string(e) + "]}}";
  };
  struct Case {
    std::string name, header;
    size_t data;
    int64_t claimed_len;
    std::string expect;
  };
  const std::string two = header("F32", "[2,2]", 0, 16);
  const std::vector<Case> cases = {
      {"past end", header("F32", "[2,2]", 0, 16), 8, -1, "tensor 'w': data_offsets [0, 16] run past the end"},
      {"wrong extent", header("F32", "[2,2]", 0, 12), 16, -1,
       "data_offsets hold 12 bytes but shape [2,2] x F32 needs 16"},
      {"overlap",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
       "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
       16, -1, "tensor 'w': data_offsets overlap tensor 'a'"},
      {"header length", two, 16, 1 << 20, "header length 1048576 runs past the end"},
      {"not json", "{\"w\": [", 16, -1, "the header is not JSON"},
      {"unknown dtype", header("F8", "[2]", 0, 2), 16, -1, "tensor 'w': unknown dtype 'F8'"},
  };
  for (const auto& c : cases) {
    write_raw(p, c.header, c.data, c.claimed_len);
    const std::string e = error_of([&] { SafetensorsFile f(p.string()); });
    EXPECT_NE(e.find(p.string()), std::string::npos) << c.name << ": " << e;
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.name << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << c.name;
  }
  write_raw(p, two, 16);
  SafetensorsFile ok(p.string());
  EXPECT_EQ(ok.tensor("w").sizes(), (std::vector<int64_t>{2, 2}));
}

TEST(HfImport, MissingFilesAreInputErrors) {
  const fs::path dir = fresh("missing");
  EXPECT_NE(error_of([&] {
              load_hf_checkpoint(dir.string(), llama3_flavor("tiny"), {});
            }).find("holds neither model.safetensors nor model.safetensors.index.json"),
            std::string::npos);
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}})";
  EXPECT_NE(error_of([&] {
              load_hf_checkpoint(dir.string(), llama3_flavor("tiny"), {});
            }).find("shard model-00002-of-00002.safetensors named by model.safetensors.index.json is missing"),
            std::string::npos);
}

// The keys' requirements, TorchTitan's asserts as one-line errors.
TEST(HfConfig, KeysNeedCheckpointingAndWeightsOnly) {
  auto error = [](const std::function<void(JobConfig&)>& set) {
    JobConfig c;
    set(c);
    return error_of([&] { validate(c); });
  };
  EXPECT_NE(error([](JobConfig& c) {
              c.checkpoint.last_save_in_hf = true;
            }).find("checkpoint.last_save_in_hf needs checkpoint.enable = true"),
            std::string::npos);
  EXPECT_NE(error([](JobConfig& c) {
              c.checkpoint.enable = c.checkpoint.last_save_in_hf = true;
              c.checkpoint.last_save_model_only = false;
            }).find("needs checkpoint.last_save_model_only = true"),
            std::string::npos);
  EXPECT_NE(error([](JobConfig& c) {
              c.checkpoint.enable = c.checkpoint.initial_load_in_hf = true;
            }).find("checkpoint.initial_load_in_hf needs checkpoint.initial_load_path"),
            std::string::npos);
  EXPECT_NE(error([](JobConfig& c) {
              c.checkpoint.enable = c.checkpoint.initial_load_in_hf = true;
              c.checkpoint.initial_load_path = "hf";
              c.checkpoint.initial_load_model_only = false;
            }).find("needs checkpoint.initial_load_model_only = true"),
            std::string::npos);
  EXPECT_EQ(error([](JobConfig& c) {
              c.checkpoint.enable = c.checkpoint.initial_load_in_hf = c.checkpoint.last_save_in_hf = true;
              c.checkpoint.initial_load_path = "hf";
              c.checkpoint.export_dtype = "bfloat16";
            }),
            "");
  EXPECT_EQ(export_dtype("float16"), at::kHalf);
  EXPECT_EQ(export_dtype_name(at::kBFloat16), "bfloat16");
}

}  // namespace
}  // namespace ctitan
