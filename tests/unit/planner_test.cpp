// The planner's pieces against values computed here independently: the
// state a layout holds (parameter shapes and FSDP's ceil-division padding),
// the pipeline bubble of the classic schedules (closed forms), parameter
// counts of published models, calibration recovering a known spec, and the
// one-line errors.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "common/errors.h"
#include "planner/calibrate.h"
#include "planner/plan.h"
#include "tests/unit/planner_specs.h"
#include "planner/plan_internal.h"
#include "trainer/kernels/documents.h"
#include "trainer/models/registry.h"
#include "trainer/models/llama3.h"
#include "trainer/config/config_loader.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/metrics.h"

namespace ctitan {
namespace {

HardwareSpec gpu_spec() { return testing_specs::test_gpu_spec(); }

PlanRequest request(const std::string& flavor, int ws, std::vector<std::pair<std::string, std::string>> sets) {
  PlanRequest q;
  q.cfg.model.flavor = flavor;
  q.cfg.training.seq_len = 256;
  q.cfg.training.local_batch_size = 2;
  for (const auto& [k, v] : sets) apply_override(q.cfg, k, v);
  q.model = model_from_flavor(q.cfg.model.flavor);
  q.world_size = ws;
  return q;
}

// Σ over parameters of ceil(rows / n) · cols: FSDP2's padded shard, from
// the Llama 3 parameter shapes written out here.
int64_t padded_shard_elems(const ModelDesc& m, int64_t n) {
  const auto rows = [&](int64_t r, int64_t c) { return (r + n - 1) / n * c; };
  const int64_t D = m.dim, Dh = m.head_dim();
  int64_t total = rows(m.vocab_size, D) + rows(D, 1) + rows(m.vocab_size, D);
  const int64_t per_layer = rows(m.n_heads * Dh, D) + 2 * rows(m.n_kv_heads * Dh, D) + rows(D, m.n_heads * Dh) +
                            2 * rows(m.ffn_hidden, D) + rows(D, m.ffn_hidden) + 2 * rows(D, 1);
  return total + m.n_layers * per_layer;
}

TEST(Planner, StateComesFromTheTrainersLayoutWithFsdpPadding) {
  for (int n : {1, 3, 4}) {
    const PlanRequest q = request("debugmodel", n, {});
    const Prediction p = predict(q, gpu_spec());
    const double elems = static_cast<double>(padded_shard_elems(q.model, n));
    EXPECT_DOUBLE_EQ(p.memory.gradients, elems * 4) << "FSDP " << n;
    EXPECT_DOUBLE_EQ(p.memory.optimizer, elems * 8) << "FSDP " << n;
    EXPECT_NE(p.memory.layout_source.find("dry-run"), std::string::npos);
  }
}

// A spec whose calibration held out runs gives every prediction an 80 %
// interval: tps·exp(mean ∓ t90(n-1)·sd·√(1+1/n)), here n 5, mean 0.1,
// sd 0.05: half-width 1.5332·0.05·√1.2 = 0.083977 (t from the table).
TEST(Planner, CalibrationSpreadGivesThePredictionAnInterval) {
  const PlanRequest q = request("debugmodel", 1, {});
  HardwareSpec hw = gpu_spec();
  const Prediction plain = predict(q, hw);
  EXPECT_EQ(plain.tps_low, 0);
  EXPECT_EQ(plain.tps_high, 0);
  EXPECT_EQ(render_prediction(plain).find("80 % interval"), std::string::npos);
  EXPECT_TRUE(to_json(plain)["tps_low"].is_null());
  hw.tps_error = LogSpread{5, 0.1, 0.05};
  const Prediction p = predict(q, hw);
  EXPECT_DOUBLE_EQ(p.tps_per_device, plain.tps_per_device) << "the interval does not move the prediction";
  EXPECT_NEAR(p.tps_low, p.tps_per_device * std::exp(0.1 - 0.083977), 1e-4 * p.tps_per_device);
  EXPECT_NEAR(p.tps_high, p.tps_per_device * std::exp(0.1 + 0.083977), 1e-4 * p.tps_per_device);
  EXPECT_NE(render_prediction(p).find("80 % interval"), std::string::npos) << render_prediction(p);
  EXPECT_DOUBLE_EQ(to_json(p)["tps_high"].get<double>(), p.tps_high);
}

TEST(Planner, TensorParallelSplitsTheLayersState) {
  const Prediction one = predict(request("debugmodel", 1, {}), gpu_spec());
  const Prediction tp = predict(request("debugmodel", 2, {{"parallelism.tensor_parallel_degree", "2"}}), gpu_spec());
  const ModelDesc m = model_from_flavor("debugmodel");
  // TP shards every matrix (embedding and output too); the norms stay whole.
  const double norms = static_cast<double>(m.n_layers * 2 * m.dim + m.dim);
  EXPECT_DOUBLE_EQ(tp.memory.gradients, ((one.memory.gradients / 4 - norms) / 2 + norms) * 4);
}

TEST(Planner, PipelineBubbleMatchesTheClosedForms) {
  // Equal stages of forward f and backward b per micro-batch: GPipe and
  // 1F1B take (m + p - 1)(f + b); interleaved 1F1B with v stages per rank
  // cuts the bubble by v: m(f + b) + (p - 1)(f + b)/v.
  const double f = 1.0, b = 2.0;
  const int64_t p = 4, m = 8;
  for (const std::string name : {"GPipe", "1F1B"}) {
    JobConfig cfg;
    cfg.parallelism.pipeline_parallel_schedule = name;
    MeshShape shape;
    shape.pp = p;
    const auto sim = planner_detail::simulate_pipeline(cfg, shape, 1, m, std::vector<double>(p, f),
                                                       std::vector<double>(p, b), 0.0);
    EXPECT_DOUBLE_EQ(sim.step_s, (m + p - 1) * (f + b)) << name;
    EXPECT_DOUBLE_EQ(sim.busy_s, m * (f + b)) << name;
  }
  JobConfig cfg;
  cfg.parallelism.pipeline_parallel_schedule = "Interleaved1F1B";
  MeshShape shape;
  shape.pp = p;
  const int64_t v = 2;
  const auto sim = planner_detail::simulate_pipeline(cfg, shape, v, m, std::vector<double>(p * v, f / v),
                                                     std::vector<double>(p * v, b / v), 0.0);
  EXPECT_NEAR(sim.step_s, m * (f + b) + (p - 1) * (f + b) / v, 1e-9);
}

TEST(Planner, RanksOutnumberingTheCoresShareThemWhileOthersWait) {
  // Costs planned at a share of the cores (cores / ranks); the ranks running
  // at a moment share every core, at most one each. GPipe, 4 ranks on 2
  // cores, one micro-batch, f = b = 1: one action runs at a time, on a whole
  // core, twice its planned speed: 8 actions in 4 s (8 s on a core each).
  const auto step = [](const std::string& name, int64_t p, int64_t m, double f, double b, double share) {
    JobConfig cfg;
    cfg.parallelism.pipeline_parallel_schedule = name;
    MeshShape shape;
    shape.pp = p;
    return planner_detail::simulate_pipeline(cfg, shape, 1, m, std::vector<double>(p, f), std::vector<double>(p, b),
                                             0.0, share)
        .step_s;
  };
  EXPECT_NEAR(step("GPipe", 4, 1, 1, 1, 0.5), 4.0, 1e-9);
  EXPECT_DOUBLE_EQ(step("GPipe", 4, 1, 1, 1, 1.0), 8.0);
  // 1F1B, 2 ranks on 1 core, m = 4, f = 1, b = 2: some action is always
  // ready, so the core never idles: the step is the work, 2 x 4 x 3 planned
  // seconds at half a core = 12 s, where a core each takes (m + p - 1)(f + b) = 15.
  EXPECT_NEAR(step("1F1B", 2, 4, 1, 2, 0.5), 12.0, 1e-9);
  EXPECT_DOUBLE_EQ(step("1F1B", 2, 4, 1, 2, 1.0), 15.0);
}

TEST(Planner, NLayersReplacesTheFlavorsLayerCountOnly) {
  // 8B's shapes (dim 4096, 32 heads / 8 kv of 128, ffn 1.3 x 2/3 x 4d rounded
  // up to 1024 = 14336, vocab 128256) with 4 layers, counted by hand:
  // embedding + head, per layer wq/wo 4096², wk/wv 4096x1024, w1/w2/w3
  // 4096x14336, two norms, and the final norm.
  const int64_t d = 4096, kv = 1024, f = 14336, v = 128256;
  const int64_t layer = 2 * d * d + 2 * d * kv + 3 * d * f + 2 * d;
  EXPECT_EQ(model_from_flavor("8B", 4).params(), 2 * v * d + 4 * layer + d);
  EXPECT_EQ(model_from_flavor("8B", 4).n_layers, 4);
  EXPECT_EQ(model_from_flavor("8B", 0).params(), 8030261248);  // 0: the flavor's 32 layers
  const ModelArgs a = llama3_flavor("8B", 4), b = llama3_flavor("8B");
  EXPECT_EQ(a.n_layers, 4);
  EXPECT_EQ(std::tie(a.dim, a.n_heads, a.n_kv_heads, a.vocab_size), std::tie(b.dim, b.n_heads, b.n_kv_heads, b.vocab_size));
}

// block_causal: the attention time is causal's times the assumed C4-like
// density at the sequence length (documents of mean 427 tokens: at 8192
// about an eighth), the rest of the step unchanged, and the plan says so.
TEST(Planner, BlockCausalAttentionScalesWithTheAssumedDocuments) {
  const auto request = [](const std::string& flavor) {
    PlanRequest q;
    q.cfg.model.flavor = flavor;
    q.cfg.training.seq_len = 8192;
    q.cfg.training.local_batch_size = 1;
    q.model = model_from_config(q.cfg.model);
    q.world_size = 8;
    return q;
  };
  const Prediction causal = predict(request("8B"), gpu_spec()), docs = predict(request("8B_flex"), gpu_spec());
  const double density = c4_like_attention_density(8192);
  EXPECT_GT(density, 0.05);
  EXPECT_LT(density, 0.25);
  EXPECT_NEAR(docs.time.attention, density * causal.time.attention, 1e-9 * causal.time.attention);
  EXPECT_DOUBLE_EQ(docs.time.gemm, causal.time.gemm);
  bool noted = false;
  for (const auto& n : docs.notes) noted = noted || n.find("block_causal: attention does") != std::string::npos;
  EXPECT_TRUE(noted);
}

// GPT-OSS's sliding window: at seq 4096 a layer with window 128 sees
// 128·129/2 + 3968·128 = 516,160 pairs, a causal one 4096·4097/2 =
// 8,390,656; half the layers of each, so attention does (516,160 +
// 8,390,656) / (2 · 8,390,656) of the windowless model's work, the GEMMs
// unchanged, and the plan says so.
TEST(Planner, SlidingWindowAttentionFollowsTheVisiblePairs) {
  const double share = (516160.0 + 8390656.0) / (2 * 8390656.0);
  const ModelArgs args = model_flavor("gpt_oss", "20b");
  EXPECT_NEAR(window_attention_share(args, 4096), share, 1e-12);
  ModelArgs full = args;
  full.sliding_window = 0;
  EXPECT_EQ(window_attention_share(full, 4096), 1.0);
  EXPECT_EQ(window_attention_share(args, 128), 1.0);  // the window covers the sequence
  const auto request = [](bool windowed) {
    PlanRequest q;
    q.cfg.model.name = "gpt_oss";
    q.cfg.model.flavor = "20b";
    q.cfg.training.seq_len = 4096;
    q.cfg.training.local_batch_size = 1;
    q.cfg.parallelism.expert_parallel_degree = 8;
    q.model = model_from_config(q.cfg.model);
    if (!windowed) q.model.flavor_args->sliding_window = 0;
    q.world_size = 8;
    return q;
  };
  const Prediction w = predict(request(true), gpu_spec()), f = predict(request(false), gpu_spec());
  EXPECT_NEAR(w.time.attention, share * f.time.attention, 1e-9 * f.time.attention);
  EXPECT_DOUBLE_EQ(w.time.gemm, f.time.gemm);
  bool noted = false;
  for (const auto& n : w.notes) noted = noted || n.find("sliding window 128 on every other layer") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Planner, PublishedModelSizes) {
  // Llama 3 facts (shared/published) and GPT-3 175B (Brown et al. 2020: 96
  // layers, d 12288, 96 heads, vocab 50257, context 2048; 175 B with a tied
  // head, ~0.6 B more untied).
  EXPECT_EQ(model_from_flavor("8B").params(), 8030261248);
  EXPECT_EQ(model_from_flavor("70B").params(), 70553706496);
  ModelDesc gpt3 = model_from_flavor("8B");
  override_model(gpt3, "family", "gpt");
  override_model(gpt3, "dim", "12288");
  override_model(gpt3, "n_layers", "96");
  override_model(gpt3, "n_heads", "96");
  override_model(gpt3, "vocab_size", "50257");
  const double tied = static_cast<double>(gpt3.params() - gpt3.embedding_params());
  EXPECT_NEAR(tied / 175e9, 1.0, 0.01);
  EXPECT_EQ(gpt3.ffn_hidden, 4 * 12288);
}

// The registry's other families (model_from_config): the parameter count
// and the MFU numerator are the trainer's own (active parameters, MLA's
// head dims); the state comes from the trainer's layout, so every expert is
// stored while only top_k of them compute; more experts per token cost
// GEMM time and activations, more experts per layer cost state; a dense
// shape option on an MoE flavor is one line.
TEST(Planner, MoeAndMlaModelsThroughTheRegistry) {
  const auto moe_request = [](const std::string& name, const std::string& flavor, int64_t experts, int64_t top_k) {
    PlanRequest q;
    q.cfg.model.name = name;
    q.cfg.model.flavor = flavor;
    q.cfg.model.moe_num_experts = experts;
    q.cfg.model.moe_top_k = top_k;
    q.cfg.training.seq_len = 256;
    q.cfg.training.local_batch_size = 2;
    q.model = model_from_config(q.cfg.model);
    q.world_size = 1;
    return q;
  };
  for (const auto& [name, flavor] : {std::pair<std::string, std::string>{"qwen3", "debugmodel_moe"}, {"deepseek_v3", "debugmodel"}}) {
    SCOPED_TRACE(name);
    const PlanRequest q = moe_request(name, flavor, 0, 0);
    const ModelArgs a = model_flavor(name, flavor);
    EXPECT_EQ(q.model.params(), count_params(a).total);
    EXPECT_EQ(q.model.flavor_args->mla.kv_lora_rank, a.mla.kv_lora_rank);
    EXPECT_DOUBLE_EQ(q.model.flops_per_token(256), flops_per_token(a, 256));
    EXPECT_LT(count_params(a).active, count_params(a).total);
    const Prediction p = predict(q, gpu_spec());
    EXPECT_DOUBLE_EQ(p.memory.gradients, static_cast<double>(count_params(a).total) * 4) << "every expert's gradient";
    bool noted = false;
    for (const auto& n : p.notes) noted = noted || n.find("grouped GEMMs") != std::string::npos;
    EXPECT_TRUE(noted);
  }
  const Prediction k2 = predict(moe_request("qwen3", "debugmodel_moe", 16, 2), gpu_spec());
  const Prediction k8 = predict(moe_request("qwen3", "debugmodel_moe", 16, 8), gpu_spec());
  const Prediction e64 = predict(moe_request("qwen3", "debugmodel_moe", 64, 2), gpu_spec());
  // 4x the experts' FLOPs, but each expert's GEMM is then 4x taller (64 →
  // 256 rows of 512 tokens), nearer the spec's efficient size.
  EXPECT_GT(k8.time.gemm, 1.2 * k2.time.gemm);
  EXPECT_GT(k8.memory.activations, k2.memory.activations);
  EXPECT_DOUBLE_EQ(k2.time.attention, k8.time.attention);
  EXPECT_GT(e64.memory.optimizer, 3 * k2.memory.optimizer) << "4x the experts' state";
  ModelDesc m = model_from_config(moe_request("qwen3", "debugmodel_moe", 0, 0).cfg.model);
  try {
    override_model(m, "dim", "512");
    ADD_FAILURE() << "--model.dim on an MoE flavor was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("described by its flavors and model keys"), std::string::npos) << e.what();
  }
}

// Expert parallelism: the state per rank is the trainer's EP layout (each
// rank's experts, FSDP'd over dp_shard_mod_ep), each unit gathers only
// this rank's experts, and the all-to-all moves, per MoE layer and
// micro-batch, (ep−1)/ep of the k routed copies of each token, four times
// (dispatch and combine, forward and backward) — six with full AC —
// computed here from the shapes; across 16 ranks of 8-GPU nodes it is
// priced on the inter-node link.
TEST(Planner, ExpertParallelAllToAllAndState) {
  const auto req = [](int64_t ep, int ws, const char* ac = "none") {
    PlanRequest q;
    q.cfg.model.name = "qwen3";
    q.cfg.model.flavor = "debugmodel_moe";  // 64 experts, top 8, 8 layers
    q.cfg.training.seq_len = 256;
    q.cfg.training.local_batch_size = 2;
    q.cfg.activation_checkpoint.mode = ac;
    q.cfg.parallelism.data_parallel_shard_degree = ws;
    q.cfg.parallelism.expert_parallel_degree = ep;
    q.model = model_from_config(q.cfg.model);
    q.world_size = ws;
    return q;
  };
  const auto comm = [](const Prediction& p, const std::string& dim) {
    for (const CommDim& c : p.time.comm)
      if (c.dim == dim) return c;
    return CommDim{};
  };
  const ModelArgs a = model_flavor("qwen3", "debugmodel_moe");
  const Prediction fsdp = predict(req(1, 4), gpu_spec()), ep4 = predict(req(4, 4), gpu_spec());
  EXPECT_EQ(comm(fsdp, "ep").dim, "") << "no EP, no all-to-all";
  const double rows = 2.0 * 256 * a.moe.top_k * a.dim * 2;  // bf16 rows a rank routes per layer
  const CommDim c = comm(ep4, "ep");
  EXPECT_EQ(c.link, "nvlink");
  EXPECT_DOUBLE_EQ(c.bytes, 4 * rows * 3 / 4 * static_cast<double>(a.n_moe_layers()));
  EXPECT_DOUBLE_EQ(c.exposed_s, c.seconds) << "the all-to-alls block";
  EXPECT_DOUBLE_EQ(comm(predict(req(4, 4, "full"), gpu_spec()), "ep").bytes, 1.5 * c.bytes) << "recomputed";
  // The same quarter of every expert's state either way (no padding: 64 rows / 4, 16 experts / 4).
  EXPECT_DOUBLE_EQ(ep4.memory.parameters, fsdp.memory.parameters);
  EXPECT_LT(ep4.memory.total, fsdp.memory.total) << "a block gathers 16 experts, not 64";
  EXPECT_LT(comm(ep4, "dp_shard").bytes, 0.5 * comm(fsdp, "dp_shard").bytes) << "16 experts gathered, not 64";
  EXPECT_EQ(comm(predict(req(16, 16), gpu_spec()), "ep").link, "ib");
}

TEST(Planner, MoreOfEachCostCostsMoreTime) {
  const HardwareSpec h = gpu_spec();
  const auto step = [&](std::vector<std::pair<std::string, std::string>> sets) {
    return predict(request("8B", 8, sets), h).time.step;
  };
  const double base = step({});
  EXPECT_GT(step({{"activation_checkpoint.mode", "full"}}), base);  // recomputation
  EXPECT_LT(step({{"compile.enable", "true"}}), base);               // fused element-wise traffic
  // fp8 GEMMs win on large shapes once compile fuses their casts.
  EXPECT_LT(step({{"model.converters", "quantize.linear.float8"}, {"compile.enable", "true"}, {"training.seq_len", "8192"}}),
            step({{"compile.enable", "true"}, {"training.seq_len", "8192"}}));
  EXPECT_GT(step({{"training.local_batch_size", "4"}}), base);
}

// Issue 33, item 6: at any world size (up to the one cap) and layout, no
// dimension's exposed communication exceeds its time on the wire, the step's
// exposed total is the sum of them, and MFU stays under 100 %.
TEST(Planner, ExposedCommunicationNeverExceedsTheTotal) {
  const HardwareSpec h = gpu_spec();
  for (int ws : {1, 2, 8, 64, 4096, 65536}) {
    for (const auto& sets : std::vector<std::vector<std::pair<std::string, std::string>>>{
             {}, {{"parallelism.tensor_parallel_degree", "8"}}, {{"parallelism.data_parallel_replicate_degree", "2"}}}) {
      if (ws < 16 && !sets.empty()) continue;
      const Prediction p = predict(request("debugmodel", ws, sets), h);
      SCOPED_TRACE("world size " + std::to_string(ws) + (sets.empty() ? "" : " " + sets[0].first));
      double exposed = 0, total = 0;
      for (const CommDim& c : p.time.comm) {
        EXPECT_LE(c.exposed_s, c.seconds * (1 + 1e-12)) << c.dim;
        exposed += c.exposed_s;
        total += c.seconds;
      }
      EXPECT_NEAR(p.time.comm_exposed, exposed, 1e-12 + 1e-9 * exposed);
      EXPECT_LE(p.time.comm_exposed, total * (1 + 1e-12));
      EXPECT_LT(p.mfu, 100.0);
    }
  }
}

// Issue 33 item 14: on a CPU without AVX-512 a bf16 GEMM runs on fp32
// copies of its input and weight into an fp32 output (trainer/model/gemm.cpp).
// For debugmodel (D 256, V 2048) at 2 x 256 tokens the widest is the output
// head: 512·2048·4 + 512·256·4 + 2048·256·4 bytes, counted once at the peak;
// fp32 runs and AVX-512 machines have none.
TEST(Planner, WidenedBf16GemmsAddTheOutputHeadsFp32Copies) {
  HardwareSpec h = gpu_spec();
  h.kind = "cpu";
  h.cores = 2;
  PlanRequest native = request("debugmodel", 1, {{"training.mixed_precision_param", "bfloat16"}});
  native.bf16_gemm_widened = 0;
  PlanRequest widened = native;
  widened.bf16_gemm_widened = 1;
  const MemoryBreakdown a = predict(native, h).memory, b = predict(widened, h).memory;
  const double head = 512.0 * 2048 * 4 + 512.0 * 256 * 4 + 2048.0 * 256 * 4;
  EXPECT_DOUBLE_EQ(b.logits - a.logits, head);
  EXPECT_DOUBLE_EQ(b.activations, a.activations);
  EXPECT_NEAR(b.total - a.total, head * (1 + h.eff.memory_overhead), 1e-6 * head);
  // Left at -1, the request is this machine's path.
  widened.bf16_gemm_widened = -1;
  EXPECT_DOUBLE_EQ(predict(widened, h).memory.logits, aten_cpu_is_avx512() ? a.logits : b.logits);
  // fp32 GEMMs are never widened.
  PlanRequest fp32 = request("debugmodel", 1, {{"training.mixed_precision_param", "float32"}});
  fp32.bf16_gemm_widened = 1;
  PlanRequest fp32_native = fp32;
  fp32_native.bf16_gemm_widened = 0;
  EXPECT_DOUBLE_EQ(predict(fp32, h).memory.total, predict(fp32_native, h).memory.total);
}

TEST(Planner, CompiledLossKeepsNoFp32CopyOfTheLogits) {
  // TorchTitan's eager loss upcasts the logits to fp32 and keeps an fp32
  // gradient (2 + 4 + 4 bytes per logit); torch.compile of the loss fuses
  // the upcast into the reduction and writes the gradient in bf16 (2 + 2).
  // T = 512 tokens, V = 2048 on debugmodel: the difference is T·V·6 bytes.
  const HardwareSpec h = gpu_spec();
  const PlanRequest eager = request("debugmodel", 1, {{"training.mixed_precision_param", "bfloat16"}});
  PlanRequest compiled = eager;
  compiled.cfg.compile.enable = true;
  const MemoryBreakdown a = predict(eager, h).memory, b = predict(compiled, h).memory;
  EXPECT_DOUBLE_EQ(a.logits, 512.0 * 2048 * 10);
  EXPECT_DOUBLE_EQ(b.logits, 512.0 * 2048 * 4);
  EXPECT_DOUBLE_EQ(b.activations, a.activations);
  // Compiling the model alone leaves the loss eager.
  compiled.cfg.compile.components = {"model"};
  EXPECT_DOUBLE_EQ(predict(compiled, h).memory.logits, a.logits);
}

TEST(Planner, TorchTitansOpCheckpointingKeepsEveryOtherOfItsUnfusedProjections) {
  // debugmodel: dim 256, 16 heads of 16 (kv 16), FFN 768; 2 x 256 tokens, 6
  // layers, bf16. Per token and layer, ctitan keeps qkv (768) and gate|up
  // (1536); TorchTitan keeps wq (256), wv (256), w1 (768) and w2's output
  // (256): 768 values fewer, 2 bytes each.
  const HardwareSpec h = gpu_spec();
  PlanRequest q = request("debugmodel", 1, {{"activation_checkpoint.mode", "selective"},
                                            {"activation_checkpoint.selective_ac_option", "op"},
                                            {"training.mixed_precision_param", "bfloat16"}});
  const Prediction ctitan = predict(q, h);
  q.framework = "torchtitan";
  const Prediction torchtitan = predict(q, h);
  EXPECT_DOUBLE_EQ(ctitan.memory.activations - torchtitan.memory.activations, 768.0 * 2 * 512 * 6);
  // Other modes keep the same tensors in both.
  PlanRequest full = request("debugmodel", 1, {{"activation_checkpoint.mode", "full"}});
  const double a = predict(full, h).memory.activations;
  full.framework = "torchtitan";
  EXPECT_DOUBLE_EQ(predict(full, h).memory.activations, a);
}

TEST(Planner, TorchTitanPipelinesUnderFsdpKeepTheStageGatheredAndAccumulateItsGradientsUnsharded) {
  // PP 2 x FSDP 2 on debugmodel: a stage is the embedding (2048 x 256) or
  // the norm and output head (256 + 2048 x 256) and three blocks of 852,480
  // (four 256 x 256 projections, three 256 x 768 FFN matrices, two norms):
  // 3,081,728 or 3,081,984 values. Both keep them gathered in bf16 from
  // forward to backward (beside the fp32 master shard and its bf16 copy: 5
  // bytes per value of the stage in all); TorchTitan also accumulates their
  // fp32 gradients over the 4 micro-batches, where ctitan's pipeline
  // reduce-scatters each micro-batch's.
  const HardwareSpec h = gpu_spec();
  const auto plan = [&](const std::string& framework, int64_t batch) {
    PlanRequest q = request("debugmodel", 4, {{"parallelism.pipeline_parallel_degree", "2"},
                                              {"parallelism.pipeline_parallel_schedule", "1F1B"},
                                              {"training.local_batch_size", std::to_string(batch)},
                                              {"training.mixed_precision_param", "bfloat16"}});
    q.framework = framework;
    return predict(q, h).memory;
  };
  const MemoryBreakdown ct = plan("ctitan", 4), tt = plan("torchtitan", 4);
  const double stage = (tt.gradients - ct.gradients) / 4;
  EXPECT_TRUE(stage == 3081728 || stage == 3081984) << stage;
  EXPECT_DOUBLE_EQ(ct.parameters, 5 * stage);
  EXPECT_DOUBLE_EQ(tt.parameters, ct.parameters);
  // One micro-batch syncs at once.
  EXPECT_DOUBLE_EQ(plan("torchtitan", 1).gradients, plan("ctitan", 1).gradients);
}

// One rank's memory beyond its state (activation_memory alone: no
// parameters, FSDP units or TP buffers), `layers` blocks, no head unless
// asked; `pipe` replays a pipeline rank.
MemoryBreakdown rank_memory(const JobConfig& cfg, const MeshShape& shape, int64_t layers,
                            const planner_detail::RankPipeline* pipe, const std::string& framework = "torchtitan",
                            bool head = false, const std::string& flavor = "debugmodel", double T = 256) {
  planner_detail::RankLayout rank;
  rank.layers = layers;
  rank.head = head;
  const ActivationCheckpointPolicy ac =
      ActivationCheckpointPolicy::parse(cfg.activation_checkpoint.mode, cfg.activation_checkpoint.selective_ac_option);
  return planner_detail::activation_memory(model_from_flavor(flavor), cfg, shape, gpu_spec(), rank, T, ac, 2.0, false,
                                           framework, pipe, MemoryBreakdown{});
}

// Rank `r` of `sched` with one block per stage (`layers` for every stage),
// each stage holding `grad_bytes` of unsharded gradients from its first
// backward.
planner_detail::RankPipeline rank_pipe(const PipelineSchedule& sched, int64_t r, int64_t layers, double grad_bytes,
                                       bool release) {
  planner_detail::RankPipeline pipe;
  pipe.actions = sched.actions[static_cast<size_t>(r)];
  pipe.microbatches = sched.microbatches;
  for (int64_t st : sched.stages_of(r)) {
    ModelPart part;
    part.embedding = false, part.head = false, part.first_layer = st * layers, part.n_layers = layers;
    pipe.stages.emplace_back(st, part);
    pipe.gathered_bytes.push_back(0);
    pipe.unsharded_grad_bytes.push_back(grad_bytes);
  }
  pipe.release_after_last_backward = release;
  return pipe;
}

TEST(Planner, InterleavedScheduleHoldsItsWarmupChunks) {
  // PP 2, two one-block stages per rank, no checkpointing. torch's
  // interleaved 1F1B (and ctitan's) runs (v - 1)·(m / rounds) + 2·(p - 1 - r)
  // forward chunks, rounds = max(1, m / p), at most all v·m, then one
  // forward before each backward: rank 0 holds 2 + 2 + 1 = 5 chunks at
  // m = 8 and all 4 at m = 2; rank 1 holds 2 + 0 + 1 = 3 at m = 8.
  JobConfig cfg;
  cfg.activation_checkpoint.mode = "none";
  MeshShape shape;
  shape.pp = 2;
  const double one = rank_memory(cfg, shape, 1, nullptr).activations;  // one block of one micro-batch
  ASSERT_GT(one, 0);
  const auto held = [&](int64_t m, int64_t r) {
    const PipelineSchedule sched = build_pipeline_schedule("Interleaved1F1B", 2, 2, m);
    const planner_detail::RankPipeline pipe = rank_pipe(sched, r, 1, 0, true);
    return rank_memory(cfg, shape, 2, &pipe).activations / one;
  };
  EXPECT_NEAR(held(8, 0), 5, 1e-12);
  EXPECT_NEAR(held(2, 0), 4, 1e-12);
  EXPECT_NEAR(held(8, 1), 3, 1e-12);
}

TEST(Planner, UnshardedGradientsAppearAtAStagesFirstBackwardAndGoAtItsLast) {
  // PP 2, m = 2, rank 0, A = one block of one micro-batch, g a stage's
  // unsharded gradients (10 A). 1F1B, one stage of two blocks: F F, then at
  // the first backward's end 2A + 2g. Interleaved, two one-block stages:
  // all four forwards (4A), then stage 2's backwards: 3A + g after the
  // first, and its last frees g (TorchTitan reduce-scatters and reshards
  // there); stage 0's: A + g. Peaks 2A + 2g and 3A + g. Kept to the step's
  // end instead, stage 0's first backward would hold A + 2g.
  JobConfig cfg;
  cfg.activation_checkpoint.mode = "none";
  MeshShape shape;
  shape.pp = 2;
  const double A = rank_memory(cfg, shape, 1, nullptr).activations, g = 10 * A;
  const auto peak = [&](const std::string& schedule, int64_t v, bool release) {
    const PipelineSchedule sched = build_pipeline_schedule(schedule, 2, v, 2);
    const planner_detail::RankPipeline pipe = rank_pipe(sched, 0, 2 / v, g * (2 / v), release);
    const MemoryBreakdown mem = rank_memory(cfg, shape, 2, &pipe);
    return std::make_pair(mem.activations / A, mem.gradients / A);
  };
  EXPECT_EQ(peak("1F1B", 1, true), std::make_pair(2.0, 20.0));
  EXPECT_EQ(peak("Interleaved1F1B", 2, true), std::make_pair(3.0, 10.0));
  EXPECT_EQ(peak("Interleaved1F1B", 2, false), std::make_pair(1.0, 20.0));
}

TEST(Planner, ContextParallelAttentionBuffersPerFrameworkAndNeverBesideTheLogits) {
  // 125M (12 heads of 64, 4 KV heads), T tokens per rank, bf16.
  // TorchTitan repeats K/V to all 12 heads before SDPA; torch's ring
  // backward holds the K/V blocks (allgather: cp of them, the ring: 2),
  // fp32 dQ, dK, dV (3·768·4), the fp32 dK/dV passed and received
  // (4·768·4) and one call's bf16 dQ, dK, dV (3·768·2): 3072·blocks + 26112
  // bytes per token. ctitan moves the 4 KV heads: allgather cp blocks and
  // their gradients (2048·cp); its ring the block, the fp32 sums, both
  // received anew, fp32 dQ (4·256·6 + 768·4 = 9216).
  const double T = 512;
  const auto comm = [&](const std::string& framework, const std::string& method, int64_t cp, bool head = false) {
    JobConfig cfg;
    cfg.parallelism.context_parallel_rotate_method = method;
    MeshShape shape;
    shape.cp = cp;
    return rank_memory(cfg, shape, 1, nullptr, framework, head, "125M", T);
  };
  EXPECT_DOUBLE_EQ(comm("torchtitan", "allgather", 4).communication, T * (3072 * 4 + 26112));
  EXPECT_DOUBLE_EQ(comm("torchtitan", "allgather", 8).communication, T * (3072 * 8 + 26112));
  EXPECT_DOUBLE_EQ(comm("torchtitan", "alltoall", 8).communication, T * (3072 * 2 + 26112));
  EXPECT_DOUBLE_EQ(comm("ctitan", "allgather", 8).communication, T * 2048 * 8);
  EXPECT_DOUBLE_EQ(comm("ctitan", "alltoall", 8).communication, T * 9216);
  // The head's logits (32000 x (2 + 4 + 4) bytes a token) are gone before
  // any block's backward: only what the buffers exceed them by counts.
  const MemoryBreakdown h = comm("torchtitan", "allgather", 8, true);
  EXPECT_DOUBLE_EQ(h.logits, T * 320000);
  EXPECT_DOUBLE_EQ(h.communication, 0);
}

TEST(Planner, AllGatherContextParallelBlocksAndTheRingOverlapsAttention) {
  // allgather gathers K/V before the attention and reduce-scatters their
  // gradients after it: all of its time is exposed. The ring (alltoall)
  // passes the next block while the current one is attended.
  const HardwareSpec h = gpu_spec();
  const auto cp = [&](const std::string& method) {
    const Prediction p = predict(request("debugmodel", 4, {{"parallelism.context_parallel_degree", "4"},
                                                            {"parallelism.data_parallel_shard_degree", "1"},
                                                            {"parallelism.context_parallel_rotate_method", method},
                                                            {"training.seq_len", "4096"}}),
                                 h);
    for (const CommDim& c : p.time.comm)
      if (c.dim == "cp") return c;
    ADD_FAILURE() << "no cp communication planned";
    return CommDim{};
  };
  const CommDim gather = cp("allgather"), ring = cp("alltoall");
  EXPECT_GT(gather.seconds, 0);
  EXPECT_DOUBLE_EQ(gather.exposed_s, gather.seconds);
  EXPECT_LT(ring.exposed_s, ring.seconds);
}

// The communication of one mesh dimension whose description starts with `what`.
CommDim comm_of(const Prediction& p, const std::string& dim, const std::string& what = "") {
  for (const CommDim& c : p.time.comm)
    if (c.dim == dim && c.what.rfind(what, 0) == 0) return c;
  ADD_FAILURE() << "no " << dim << " communication '" << what << "' planned";
  return CommDim{};
}

TEST(Planner, FullCheckpointingRunsTheForwardsTensorParallelCollectivesAgain) {
  // A recomputed block repeats its forward, its two TP all-reduces (or
  // gathers and scatters) with it: 4 + 2 per block under full AC, 4 + 2 on
  // every second of debugmodel's 6 layers under selective layer AC "2".
  const HardwareSpec h = gpu_spec();
  const auto tp = [&](const std::string& mode, bool sp) {
    return comm_of(predict(request("debugmodel", 2, {{"parallelism.tensor_parallel_degree", "2"},
                                                     {"parallelism.data_parallel_shard_degree", "1"},
                                                     {"parallelism.enable_sequence_parallel", sp ? "true" : "false"},
                                                     {"activation_checkpoint.mode", mode},
                                                     {"activation_checkpoint.selective_ac_option", "2"}}),
                           h),
                   "tp");
  };
  for (bool sp : {false, true}) {
    const CommDim none = tp("none", sp), full = tp("full", sp), every2 = tp("selective", sp);
    EXPECT_GT(none.bytes, 0);
    EXPECT_NEAR(full.bytes / none.bytes, 1.5, 1e-12);
    EXPECT_NEAR(full.seconds / none.seconds, 1.5, 1e-12);
    EXPECT_NEAR(every2.bytes / none.bytes, 1.25, 1e-12);
  }
}

TEST(Planner, MegatronsAttentionIsUnfusedOverEveryKey) {
  // Megatron-LM (2021) multiplies QKᵀ and PV over all S keys (twice causal
  // flash attention's average S/2) and its backward is their gradients
  // (2x, where flash recomputes the scores: 2.5x): 2 + 4 against 1 + 2.5.
  // Its T x S scores per head pass through memory: 12 bytes each forward,
  // 24 backward, on top of element-wise ops fused as compile fuses them.
  const HardwareSpec h = gpu_spec();
  const auto plan = [&](const std::string& framework, bool compiled) {
    PlanRequest q = request("debugmodel", 1, {{"activation_checkpoint.mode", "none"}});
    q.cfg.compile.enable = compiled;
    q.cfg.compile.components = {"model"};
    q.framework = framework;
    return predict(q, h).time;
  };
  const TimeBreakdown mg = plan("megatron", false), ct = plan("ctitan", false), fused = plan("ctitan", true);
  EXPECT_GT(ct.attention, 0);
  EXPECT_NEAR(mg.attention / ct.attention, 6.0 / 3.5, 1e-12);
  const ModelDesc m = model_from_flavor("debugmodel");
  const double T = 2 * 256, S = 256;  // request(): local batch 2, seq 256
  const double scores = 3 * T * S * static_cast<double>(m.n_heads) * 4 / h.memory_bandwidth * 3 * static_cast<double>(m.n_layers);
  EXPECT_NEAR(mg.elementwise - fused.elementwise, scores, 1e-9 * scores);
}

TEST(Planner, MegatronAllReducesItsGradientsOnceAfterTheLastMicroBatch) {
  // Its local DDP reduces the bf16/fp16 gradient buffer after the backward
  // of the last micro-batch: half the bytes of an fp32 reduction, none of
  // it hidden.
  const HardwareSpec h = gpu_spec();
  const auto dp = [&](const std::string& framework) {
    PlanRequest q = request("debugmodel", 2, {{"parallelism.data_parallel_replicate_degree", "2"},
                                              {"parallelism.data_parallel_shard_degree", "1"}});
    q.framework = framework;
    return comm_of(predict(q, h), "dp_replicate");
  };
  const CommDim mg = dp("megatron"), ct = dp("ctitan");
  EXPECT_DOUBLE_EQ(mg.bytes, ct.bytes / 2);
  EXPECT_DOUBLE_EQ(mg.exposed_s, mg.seconds);
  EXPECT_LT(ct.exposed_s, ct.seconds);
}

TEST(Planner, MegatronAllReducesTheTiedEmbeddingBetweenFirstAndLastStage) {
  // GPT's word embedding is the output layer's weight too: under PP the
  // first and last stage all-reduce its gradient, V x D in bf16 (2048 x 256
  // for debugmodel), exposed. Without PP, or in TorchTitan's untied Llama,
  // there is no such reduction.
  const HardwareSpec h = gpu_spec();
  const auto plan = [&](const std::string& framework, const std::string& pp) {
    PlanRequest q = request("debugmodel", 2, {{"parallelism.pipeline_parallel_degree", pp},
                                              {"parallelism.data_parallel_shard_degree", pp == "2" ? "1" : "2"},
                                              {"parallelism.pipeline_parallel_schedule", "1F1B"}});
    q.framework = framework;
    return predict(q, h);
  };
  const CommDim tied = comm_of(plan("megatron", "2"), "pp", "tied embedding");
  EXPECT_DOUBLE_EQ(tied.bytes, 2048.0 * 256 * 2);
  EXPECT_DOUBLE_EQ(tied.exposed_s, tied.seconds);
  EXPECT_NEAR(tied.seconds, 2 * (0.5 * tied.bytes / (h.intra_node.bandwidth * h.eff.comm) + h.intra_node.latency_s), 1e-15);
  for (const Prediction& p : {plan("ctitan", "2"), plan("megatron", "1")})
    for (const CommDim& c : p.time.comm) EXPECT_EQ(c.what.find("tied embedding"), std::string::npos) << c.what;
}

TEST(Planner, MegatronScattersPipelineSendsOverTheTensorParallelRanksAcrossNodes) {
  // TP 8 x PP 2 on two 8-GPU nodes: each of the 8 TP ranks sends 1/8 of the
  // (TP-replicated) activation over InfiniBand and the receivers all-gather
  // it over NVLink — at 8192 tokens (4 MiB) a gain, at 256 (128 KiB) the
  // seven NVLink latencies of the gather cost more than the bytes saved.
  const HardwareSpec h = gpu_spec();
  const auto pp = [&](const std::string& framework, int64_t seq) {
    PlanRequest q = request("debugmodel", 16, {{"parallelism.pipeline_parallel_degree", "2"},
                                               {"parallelism.tensor_parallel_degree", "8"},
                                               {"parallelism.data_parallel_shard_degree", "1"},
                                               {"parallelism.pipeline_parallel_schedule", "1F1B"},
                                               {"parallelism.pipeline_parallel_microbatch_size", "1"},
                                               {"training.seq_len", std::to_string(seq)}});
    q.framework = framework;
    return comm_of(predict(q, h), "pp", "send/recv");
  };
  const double ib = h.inter_node.bandwidth * h.eff.comm, nvl = h.intra_node.bandwidth * h.eff.comm;
  for (const int64_t seq : {8192, 256}) {
    const double act = static_cast<double>(seq) * 256 * 2;  // one sequence x dim 256 in bf16
    const double whole = act / ib + h.inter_node.latency_s;
    const double scattered =
        act / 8 / ib + h.inter_node.latency_s + (7.0 / 8 * act / nvl + 7 * h.intra_node.latency_s);
    const CommDim ct = pp("ctitan", seq), mg = pp("megatron", seq);
    EXPECT_NEAR(mg.seconds / ct.seconds, scattered / whole, 1e-12) << seq;
    EXPECT_EQ(mg.seconds < ct.seconds, seq == 8192) << seq;
  }
}

TEST(Planner, CollectivesAcrossNodesCrossAtEveryNicOfTheirMembers) {
  // NCCL runs a ring channel per NIC: TP 16 over two 8-GPU nodes crosses at
  // 8 NICs' bandwidth (up to NVLink's), FSDP under TP 8 at one NIC's (one
  // member per node), and EP 16's all-to-all sends half of each rank's rows
  // through its own NIC while 7/16 take NVLink. Latencies 0: bytes only.
  HardwareSpec h = gpu_spec();
  h.inter_node = {"ib", 2.5e10, 0};
  h.intra_node.latency_s = 0;
  const double eff = h.eff.comm;
  const Prediction tp16 = predict(request("debugmodel", 16, {{"parallelism.tensor_parallel_degree", "16"},
                                                             {"parallelism.data_parallel_shard_degree", "1"}}),
                                  h);
  const CommDim tp = comm_of(tp16, "tp", "");
  EXPECT_EQ(tp.link, "ib (8 NICs per node)");
  // sequence parallel (the default): all-gathers and reduce-scatters of
  // (g-1)/g of their bytes each, at 8 x 25 GB/s
  EXPECT_NEAR(tp.seconds, 15.0 / 16 * tp.bytes / (8 * 2.5e10 * eff), 1e-9 * tp.seconds);
  h.inter_node.bandwidth = 1e11;  // 8 NICs would beat NVLink (4e11): NVLink bounds it
  const CommDim capped = comm_of(predict(request("debugmodel", 16, {{"parallelism.tensor_parallel_degree", "16"},
                                                                    {"parallelism.data_parallel_shard_degree", "1"}}),
                                         h),
                                 "tp", "");
  EXPECT_NEAR(capped.seconds, 15.0 / 16 * capped.bytes / (4e11 * eff), 1e-9 * capped.seconds);
  h.inter_node.bandwidth = 2.5e10;
  const CommDim fsdp = comm_of(predict(request("debugmodel", 16, {{"parallelism.tensor_parallel_degree", "8"},
                                                                  {"parallelism.data_parallel_shard_degree", "2"}}),
                                       h),
                               "dp_shard", "");
  EXPECT_EQ(fsdp.link, "ib") << "one FSDP member per node: one NIC";
  PlanRequest moe;
  moe.cfg.model.name = "qwen3";
  moe.cfg.model.flavor = "debugmodel_moe";
  moe.cfg.training.seq_len = 256;
  moe.cfg.training.local_batch_size = 2;
  moe.cfg.parallelism.data_parallel_shard_degree = 16;
  moe.cfg.parallelism.expert_parallel_degree = 16;
  moe.model = model_from_config(moe.cfg.model);
  moe.world_size = 16;
  const CommDim ep = comm_of(predict(moe, h), "ep", "");
  // bytes counts 15/16 of the rows leaving; the NIC carries 8/16 of them.
  EXPECT_NEAR(ep.seconds, ep.bytes * 8.0 / 15 / (2.5e10 * eff), 1e-9 * ep.seconds);
}

TEST(Planner, OnACpuWhoseRanksOutnumberItsCoresCollectivesHideOnlyInProportion) {
  // 8 ranks on 2 cores: a collective needs a core the other ranks' compute
  // holds, so at most 2/8 of FSDP's gathers and reduce-scatters hide behind
  // compute. At 2 ranks (and on a GPU) they may hide entirely.
  HardwareSpec cpu = load_hardware("cpu");
  cpu.cores = 2;
  const auto fsdp = [](const Prediction& p) {
    for (const CommDim& c : p.time.comm)
      if (c.dim == "dp_shard") return c;
    ADD_FAILURE() << "no FSDP communication planned";
    return CommDim{};
  };
  const CommDim eight = fsdp(predict(request("debugmodel", 8, {}), cpu));
  EXPECT_GT(eight.seconds, 0);
  EXPECT_NEAR(eight.exposed_s, 0.75 * eight.seconds, 1e-12 * eight.seconds);
  const CommDim two = fsdp(predict(request("debugmodel", 2, {}), cpu));
  EXPECT_LT(two.exposed_s, 0.5 * two.seconds);
  const CommDim gpu = fsdp(predict(request("debugmodel", 8, {}), gpu_spec()));
  EXPECT_LT(gpu.exposed_s, 0.75 * gpu.seconds);
}

TEST(Planner, LayoutsTheTrainerRefusesAreOneLineInputErrors) {
  try {
    predict(request("debugmodel", 3, {{"parallelism.tensor_parallel_degree", "3"}}), gpu_spec());
    FAIL() << "TP 3 of 16 heads planned";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_NE(what.find("3"), std::string::npos) << what;
  }
  EXPECT_THROW(predict(request("debugmodel", 4, {{"parallelism.data_parallel_shard_degree", "3"}}), gpu_spec()),
               InputError);
  ModelDesc m = model_from_flavor("8B");
  EXPECT_THROW(override_model(m, "dimm", "4"), InputError);
  EXPECT_THROW(override_model(m, "dim", "-4"), InputError);
  // The shape is checked once every key is applied, so their order is free.
  ModelDesc heads_first = model_from_flavor("8B");
  override_model(heads_first, "n_heads", "24");
  EXPECT_THROW(check_model_shape(heads_first), InputError);  // 4096 / 24
  override_model(heads_first, "n_kv_heads", "24");
  override_model(heads_first, "dim", "2304");
  EXPECT_NO_THROW(check_model_shape(heads_first));
  override_model(m, "n_heads", "7");
  EXPECT_THROW(check_model_shape(m), InputError);
}

TEST(Planner, EveryPrintedFigureIsLabelledPredictedWithItsSpec) {
  const Prediction p = predict(request("8B", 8, {}), gpu_spec());
  const std::string text = render_prediction(p);
  size_t lines = 0, from = 0;
  while ((from = text.find("predicted", from)) != std::string::npos) ++lines, ++from;
  EXPECT_GE(lines, 3u);
  EXPECT_NE(text.find("test_gpu"), std::string::npos);
  EXPECT_NE(text.find("test values"), std::string::npos);  // the calibration source
  EXPECT_EQ(to_json(p)["kind"], "predicted");
}

TEST(Calibration, RecoversTheStepTimesOfAKnownSpec) {
  // "Measured" step times made by a hidden spec; fitting from a spec whose
  // efficiencies are all off must predict runs it did not see.
  HardwareSpec hidden = gpu_spec();
  hidden.eff.gemm = 0.5, hidden.eff.attention = 0.3, hidden.eff.memory = 0.6, hidden.eff.comm = 0.5;
  hidden.eff.kernel_overhead_s = 2e-5, hidden.eff.overlap = 0.6, hidden.eff.step_overhead_s = 0.01;
  hidden.eff.activation_factor = 1.6, hidden.eff.memory_overhead = 0.1;
  std::vector<MeasuredRun> runs;
  const std::vector<std::vector<std::pair<std::string, std::string>>> points = {
      {}, {{"activation_checkpoint.mode", "full"}}, {{"training.local_batch_size", "4"}},
      {{"parallelism.tensor_parallel_degree", "2"}}, {{"compile.enable", "true"}}, {{"training.seq_len", "1024"}},
      {{"parallelism.data_parallel_replicate_degree", "2"}}, {{"parallelism.pipeline_parallel_degree", "2"}},
      {{"training.local_batch_size", "8"}}};
  for (const auto& sets : points) {
    MeasuredRun r;
    const PlanRequest q = request("debugmodel", 4, sets);
    r.cfg = q.cfg;
    r.world_size = 4;
    const Prediction p = predict(q, hidden);
    r.step_time_s = p.time.step;
    r.mem_peak_bytes = p.memory.total;
    r.run_id = static_cast<int64_t>(runs.size()) + 1;
    runs.push_back(r);
  }
  const CalibrationResult res = calibrate(gpu_spec(), runs, "synthetic");
  EXPECT_LT(res.holdout_time_median_abs, 0.03);
  EXPECT_LT(res.holdout_mem_median_abs, 0.03);
  EXPECT_NE(res.spec.calibration.find("synthetic"), std::string::npos);
  // The uncalibrated spec is far off: the test has something to fix.
  EXPECT_GT(std::fabs(run_errors(gpu_spec(), runs[0]).step), 0.2);
}

}  // namespace
}  // namespace ctitan
