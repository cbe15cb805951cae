// Pipeline parallelism's plan: TorchTitan's stage split, the schedules'
// action lists (checked by simulating every rank with blocking receives),
// and bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/errors.h"
#include "trainer/models/llama3.h"
#include "trainer/model/transformer.h"
#include "trainer/parallel/pipeline.h"

namespace ctitan {
namespace {

std::string split(const ModelArgs& a, int64_t stages, int64_t per_stage = -1) {
  std::string out;
  for (const ModelPart& p : pipeline_stage_parts(a, stages, per_stage, 1, 1)) {
    if (!out.empty()) out += " | ";
    if (p.embedding) out += "emb ";
    out += std::to_string(p.first_layer);
    out += '+';
    out += std::to_string(p.n_layers);
    if (p.head) out += " head";
  }
  return out;
}

// TorchTitan's examples: 32 layers over 8 stages (34 effective, 4 or 5 per
// stage) and debugmodel's 6 layers over 2 and 4 stages.
TEST(PipelineSplit, TorchTitansEvenSplitCountsEmbeddingAndHeadAsLayers) {
  ModelArgs a = llama3_flavor("debugmodel");  // 6 layers
  EXPECT_EQ(split(a, 2), "emb 0+3 | 3+3 head");
  EXPECT_EQ(split(a, 4), "emb 0+1 | 1+2 | 3+2 | 5+1 head");
  EXPECT_EQ(split(a, 2, 4), "emb 0+3 | 3+3 head");  // layers_per_stage 4: ceil(8 / 4) = 2 stages
  a.n_layers = 32;
  EXPECT_EQ(split(a, 8), "emb 0+4 | 4+5 | 9+4 | 13+4 | 17+4 | 21+4 | 25+4 | 29+3 head");
}

TEST(PipelineSplit, ImpossibleSplitsAreOneLine) {
  const ModelArgs a = llama3_flavor("debugmodel");
  try {
    split(a, 16);
    FAIL() << "16 stages accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "pipeline split: 6 layers (+1 for the embedding, +1 for norm and output) do not fill 16 "
                           "stages (stage 8 would hold 0 layers); use fewer stages");
  }
  try {
    split(a, 2, 3);
    FAIL() << "layers_per_stage 3 accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "parallelism.pipeline_parallel_layers_per_stage 3 cuts 6 layers (+1 for the embedding, +1 "
                           "for norm and output) into 3 stages, but the pipeline has 2; choose layers_per_stage so "
                           "that the stages match, or -1");
  }
}

std::string actions(const std::string& schedule, int64_t p, int64_t r, int64_t m, int64_t v = 1) {
  std::string out;
  const PipelineSchedule s = build_pipeline_schedule(schedule, p, v, m);
  for (const auto& a : s.actions[r]) {
    if (!out.empty()) out += ' ';
    out += a.str();
  }
  return out;
}

TEST(PipelineSchedule, GPipeAndOneFOneBInTheirOrder) {
  EXPECT_EQ(actions("GPipe", 2, 0, 3), "0F0 0F1 0F2 0B0 0B1 0B2");
  EXPECT_EQ(actions("1F1B", 4, 0, 6), "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0B3 0B4 0B5");
  EXPECT_EQ(actions("1F1B", 4, 3, 6), "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5");
  EXPECT_EQ(actions("1F1B", 4, 1, 2), "1F0 1F1 1B0 1B1");  // fewer micro-batches than the warm-up
}

// A rank's transfers, group by group: "[send a1.0,recv g0.0]" is the
// activation for stage 1 of micro-batch 0 going out together with the
// gradient for stage 0 coming in.
std::string p2p_groups(const PipelineSchedule& s, int64_t r) {
  std::string out;
  for (const auto& g : plan_pipeline_p2p(s, r)) {
    out += out.empty() ? "[" : " [";
    for (size_t j = 0; j < g.size(); ++j) {  // appended piece by piece: GCC 12 misreads a + chain here
      if (j) out += ",";
      out += g[j].send ? "send " : "recv ";
      out += g[j].dir ? "g" : "a";
      out += std::to_string(g[j].stage);
      out += ".";
      out += std::to_string(g[j].microbatch);
    }
    out += "]";
  }
  return out;
}

// 1F1B's steady state: rank 0 sends F's activation and receives B's
// gradient, rank 1 sends B's gradient and receives F's activation — each
// side would post its send first, which deadlocks on NCCL once a message
// outgrows its buffers, unless the pair goes as one group.
TEST(PipelineP2P, OneFOneBPostsEachSendWithTheNextReceive) {
  const PipelineSchedule s = build_pipeline_schedule("1F1B", 2, 1, 3);
  EXPECT_EQ(p2p_groups(s, 0), "[] [send a1.0] [send a1.1,recv g0.0] [] [send a1.2,recv g0.1] [recv g0.2] []");
  EXPECT_EQ(p2p_groups(s, 1), "[recv a1.0] [] [send g0.0,recv a1.1] [] [send g0.1,recv a1.2] [] [send g0.2]");
}

// Every send meets one receive on its peer with the same tag, across the
// schedules; hand-overs between two stages of one rank are not transfers.
TEST(PipelineP2P, EverySendMeetsOneReceive) {
  for (auto [name, p, v, m] : {std::tuple{"1F1B", 4, 1, 8}, std::tuple{"GPipe", 2, 1, 4},
                               std::tuple{"Interleaved1F1B", 4, 2, 8}, std::tuple{"ZBVZeroBubble", 4, 2, 8}}) {
    const PipelineSchedule s = build_pipeline_schedule(name, p, v, m);
    std::map<std::tuple<int64_t, int64_t, int>, int> open;  // (from, to, tag) -> sends - receives
    for (int64_t r = 0; r < p; ++r)
      for (const auto& g : plan_pipeline_p2p(s, r)) {
        EXPECT_LE(g.size(), 2u) << name;
        for (const PipelineP2P& t : g) {
          EXPECT_NE(t.peer, r) << name;
          open[t.send ? std::tuple{r, t.peer, t.tag} : std::tuple{t.peer, r, t.tag}] += t.send ? 1 : -1;
        }
      }
    for (const auto& [key, n] : open) EXPECT_EQ(n, 0) << name << " tag " << std::get<2>(key);
  }
}

// The multi-stage schedules worked out by hand from their definitions
// (PyTorch's torch.distributed.pipelining orders) for p = 2, v = 2.
TEST(PipelineSchedule, MultiStageSchedulesInTheirOrder) {
  // Loop style: rank 0 holds stages 0 and 2, rank 1 stages 1 and 3.
  EXPECT_EQ(actions("LoopedBFS", 2, 0, 2, 2), "0F0 0F1 2F0 2F1 2B1 2B0 0B1 0B0");
  // Interleaved 1F1B, one round of 2: rank 0 warms up (v-1)·2 + 2·(p-1) = 4
  // forwards, rank 1 two; backwards from the last local stage down.
  EXPECT_EQ(actions("Interleaved1F1B", 2, 0, 2, 2), "0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1");
  EXPECT_EQ(actions("Interleaved1F1B", 2, 1, 2, 2), "1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1");
  // ZB1P: one hop of warm-up per rank, I instead of B, rank r's W from its
  // (r+1)-th steady step on, one per I, the rest at the end.
  EXPECT_EQ(actions("InterleavedZeroBubble", 2, 0, 2, 2), "0F0 0F1 2F0 2F1 2I0 2W0 2I1 2W1 0I0 0W0 0I1 0W1");
  EXPECT_EQ(actions("InterleavedZeroBubble", 2, 1, 2, 2), "1F0 1F1 3F0 3I0 3F1 3I1 3W0 1I0 3W1 1I1 1W0 1W1");
  // ZB-V: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2.
  EXPECT_EQ(actions("ZBVZeroBubble", 2, 0, 3, 2),
            "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0I0 0W0 3F2 3I2 3W2 0I1 0W1 0I2 0W2");
  EXPECT_EQ(actions("ZBVZeroBubble", 2, 1, 3, 2),
            "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1I1 2I2 1I2 1W1 2W2 1W2");
  const PipelineSchedule zbv = build_pipeline_schedule("ZBVZeroBubble", 4, 2, 8);
  EXPECT_EQ(zbv.stages_of(0), (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(zbv.stages_of(3), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(zbv.rank_of(5), 2);
  const PipelineSchedule looped = build_pipeline_schedule("Interleaved1F1B", 4, 2, 8);
  EXPECT_EQ(looped.stages_of(1), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(looped.rank_of(6), 2);
}

// Runs every rank's actions as the trainer does — a forward waits for the
// previous stage's forward of that micro-batch, a backward (B or I) for the
// next stage's; sends never block — independently of
// validate_pipeline_schedule, and checks that all finish (no deadlock),
// each (stage, micro-batch) once forward and once backward, W after its I,
// and 1F1B's memory bound: at most p − r micro-batches alive on rank r.
TEST(PipelineSchedule, EveryScheduleRunsToTheEndWithoutDeadlock) {
  using K = PipelineAction::Kind;
  for (const std::string name :
       {"GPipe", "1F1B", "LoopedBFS", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble"}) {
    const int64_t v = name == "GPipe" || name == "1F1B" ? 1 : 2;
    for (int64_t p : {2, 4}) {
      for (int64_t m : {1, 2, 4, 8}) {
        const std::string at = name + " p " + std::to_string(p) + " m " + std::to_string(m);
        const PipelineSchedule s = build_pipeline_schedule(name, p, v, m);
        const auto& ranks = s.actions;
        std::vector<size_t> next(p, 0);
        std::set<std::pair<int64_t, int64_t>> fwd_done, bwd_done, w_done;  // (stage, micro-batch)
        std::vector<int64_t> alive(p, 0), peak(p, 0);
        bool progress = true;
        while (progress) {
          progress = false;
          for (int64_t r = 0; r < p; ++r) {
            if (next[r] == ranks[r].size()) continue;
            const PipelineAction& a = ranks[r][next[r]];
            const std::pair<int64_t, int64_t> id{a.stage, a.microbatch}, prev{a.stage - 1, a.microbatch},
                after{a.stage + 1, a.microbatch};
            bool ready = false;
            if (a.kind == K::kForward) ready = a.stage == 0 || fwd_done.count(prev);
            if (a.kind == K::kBackward || a.kind == K::kBackwardInput)
              ready = fwd_done.count(id) && (a.stage == s.stages() - 1 || bwd_done.count(after));
            if (a.kind == K::kBackwardWeight) ready = bwd_done.count(id) > 0;
            if (!ready) continue;
            ASSERT_EQ(s.rank_of(a.stage), r) << at;
            const bool fresh = (a.kind == K::kForward ? fwd_done : a.kind == K::kBackwardWeight ? w_done : bwd_done)
                                   .insert(id)
                                   .second;
            ASSERT_TRUE(fresh) << at << ": " << a.str() << " twice";
            if (a.kind == K::kForward) alive[r] += 1;
            if (a.kind == K::kBackward || a.kind == K::kBackwardWeight) alive[r] -= 1;
            peak[r] = std::max(peak[r], alive[r]);
            ++next[r];
            progress = true;
          }
        }
        for (int64_t r = 0; r < p; ++r) {
          EXPECT_EQ(next[r], ranks[r].size()) << at << ": rank " << r << " stuck at action " << next[r];
          if (name == "1F1B") {
            EXPECT_LE(peak[r], std::min(p - r, m)) << at << ": rank " << r;
          } else if (name == "GPipe") {
            EXPECT_EQ(peak[r], m) << at;
          }
        }
        const size_t all = static_cast<size_t>(s.stages() * m);
        EXPECT_EQ(fwd_done.size(), all) << at;
        EXPECT_EQ(bwd_done.size(), all) << at;
        EXPECT_EQ(w_done.size(), s.splits_backward() ? all : 0u) << at;
        EXPECT_EQ(s.splits_backward(), name.find("ZeroBubble") != std::string::npos) << at;
      }
    }
  }
}

// The bubble with nominal action times, simulated: the closed forms where
// they are exact, and the zero-bubble schedules below 1F1B's.
TEST(PipelineSchedule, TheoreticalBubbleMatchesTheFormulas) {
  for (int64_t p : {2, 4})
    for (int64_t m : {1, 4, 8}) {
      const double formula = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
      EXPECT_NEAR(pipeline_bubble_theory(build_pipeline_schedule("1F1B", p, 1, m)), formula, 1e-12) << p << " " << m;
      EXPECT_NEAR(pipeline_bubble_theory(build_pipeline_schedule("GPipe", p, 1, m)), formula, 1e-12) << p << " " << m;
    }
  // Interleaving with whole rounds: (p-1)/(v·m+p-1).
  EXPECT_NEAR(pipeline_bubble_theory(build_pipeline_schedule("Interleaved1F1B", 4, 2, 8)), 3.0 / 19.0, 1e-12);
  const double one_f_one_b = pipeline_bubble_theory(build_pipeline_schedule("1F1B", 4, 1, 8));
  EXPECT_LT(pipeline_bubble_theory(build_pipeline_schedule("ZBVZeroBubble", 4, 2, 8)), one_f_one_b);
  EXPECT_LT(pipeline_bubble_theory(build_pipeline_schedule("InterleavedZeroBubble", 4, 2, 8)), one_f_one_b);
  EXPECT_EQ(pipeline_bubble_formula("1F1B"), "(p-1)/(m+p-1)");
}

TEST(PipelineSchedule, StagesPerRankFollowTorchTitan) {
  const ModelArgs a = llama3_flavor("debugmodel");  // 6 layers: 8 effective
  EXPECT_EQ(pipeline_stages_per_rank("1F1B", a, 2, -1, 1, 1), 1);
  EXPECT_EQ(pipeline_stages_per_rank("Interleaved1F1B", a, 2, -1, 1, 1), 2);
  EXPECT_EQ(pipeline_stages_per_rank("LoopedBFS", a, 2, 2, 1, 1), 2);  // ceil(8 / 2) = 4 stages over 2 ranks
  EXPECT_EQ(pipeline_stages_per_rank("LoopedBFS", a, 2, 1, 1, 1), 4);
  EXPECT_EQ(pipeline_stages_per_rank("PipelineScheduleMulti", a, 2, -1, 1, 1), 2);
  try {
    pipeline_stages_per_rank("1F1B", a, 2, 2, 1, 1);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "parallelism.pipeline_parallel_layers_per_stage 2 over 6 layers (+1 for the embedding, +1 "
                           "for norm and output) gives 4 stages = 2 per rank; 1F1B runs one stage per rank; use "
                           "Interleaved1F1B or fewer stages");
  }
  EXPECT_THROW(pipeline_stages_per_rank("Interleaved1F1B", a, 2, 4, 1, 1), InputError);  // 1 per rank
  EXPECT_THROW(pipeline_stages_per_rank("ZBVZeroBubble", a, 2, 1, 1, 1), InputError);    // 4 per rank
  EXPECT_THROW(pipeline_stages_per_rank("1F1B", a, 3, 2, 1, 1), InputError);  // 4 stages over 3 ranks
  try {
    build_pipeline_schedule("Interleaved1F1B", 4, 2, 6);  // rounds of 6 / 1: fine
    build_pipeline_schedule("Interleaved1F1B", 4, 2, 9);  // 2 rounds of 4.5
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a multiple of 2"), std::string::npos) << e.what();
  }
}

std::string planned(const ParallelismSection& p, int64_t pp) {
  const PipelineSplit split = plan_pipeline_split(llama3_flavor("debugmodel"), p, pp);
  std::string out = std::to_string(split.stages_per_rank) + " per rank:";
  for (const ModelPart& part : split.parts) {
    out += part.embedding ? " | emb " : " | ";
    out += std::to_string(part.first_layer) + "+" + std::to_string(part.n_layers);
    if (part.head) out += " head";
  }
  return out;
}

std::string plan_error(const ParallelismSection& p, int64_t pp) {
  try {
    planned(p, pp);
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

// TorchTitan's module_fqns_per_model_part (and the older split points) cut
// the model by name; the stages-per-rank rules apply to the part count.
TEST(PipelineSplit, ModuleNamesPerPartAndSplitPointsCutByName) {
  ParallelismSection p;
  p.module_fqns_per_model_part = {"tok_embeddings layers.0", "layers.1 layers.2 layers.3", "layers.4 layers.5 norm output"};
  p.pipeline_parallel_schedule = "GPipe";
  EXPECT_EQ(plan_error(p, 2), "parallelism.module_fqns_per_model_part gives 3 stages, not a multiple of "
                              "pipeline_parallel_degree 2; every rank holds the same number of stages");
  EXPECT_EQ(planned(p, 3), "1 per rank: | emb 0+1 | 1+3 | 4+2 head");
  p.module_fqns_per_model_part = {"tok_embeddings", "layers.0 layers.1", "layers.2 layers.3 layers.4",
                                  "layers.5 norm output"};
  p.pipeline_parallel_schedule = "Interleaved1F1B";
  EXPECT_EQ(planned(p, 2), "2 per rank: | emb 0+0 | 0+2 | 2+3 | 5+1 head");
  p.module_fqns_per_model_part = {"tok_embeddings layers.0 layers.2", "layers.1 layers.3 layers.4 layers.5 norm output"};
  p.pipeline_parallel_schedule = "1F1B";
  EXPECT_EQ(plan_error(p, 2), "parallelism.module_fqns_per_model_part: part 0 (tok_embeddings layers.0 layers.2): "
                              "layers.2 is out of order; the parts list layers.0 .. layers.5 once each, in order, norm "
                              "and output last");
  p.module_fqns_per_model_part = {"tok_embeddings layers.0 layers.1 layers.2", "layers.3 layers.4 layers.5 norm"};
  EXPECT_NE(plan_error(p, 2).find("norm and output run together"), std::string::npos);
  p.module_fqns_per_model_part = {"tok_embeddings layers.0 layers.1 layers.2", "layers.3 layers.4 norm output"};
  EXPECT_NE(plan_error(p, 2).find("they hold layers up to 4"), std::string::npos);
  p.module_fqns_per_model_part = {"tok_embeddings layers.0 layers.1 layers.2", "layers.3 mlp layers.4 norm output"};
  EXPECT_NE(plan_error(p, 2).find("'mlp' is not a module of Llama 3"), std::string::npos);
  p.module_fqns_per_model_part.clear();
  p.pipeline_parallel_split_points = {"layers.2", "layers.4"};
  EXPECT_EQ(planned(p, 3), "1 per rank: | emb 0+2 | 2+2 | 4+2 head");
  p.pipeline_parallel_split_points = {"layers.4", "layers.2"};
  EXPECT_NE(plan_error(p, 3).find("'layers.2' is not a layer after layers.4"), std::string::npos);
  p.pipeline_parallel_split_points.clear();
  EXPECT_EQ(planned(p, 2), "1 per rank: | emb 0+3 | 3+3 head");  // the even split
}

// A rank holding several stages is one model of several parts: its units
// in part order, each part's unit range, blocks by their global names; a
// float8 filter naming another stage's linear (TorchTitan's default
// "output" on a stage without the head) is no error, one naming nothing is.
TEST(PipelineSplit, SeveralPartsMakeOneModel) {
  const ModelArgs a = llama3_flavor("debugmodel");
  const std::vector<ModelPart> all = pipeline_stage_parts(a, 4, -1, 1, 1);  // emb 0+1 | 1+2 | 3+2 | 5+1 head
  Transformer v_rank0(a, torch::kFloat, 16, c10::Device(c10::kCPU), std::vector<ModelPart>{all[0], all[3]});
  EXPECT_TRUE(v_rank0.has_embedding());
  EXPECT_TRUE(v_rank0.has_head());
  EXPECT_FALSE(v_rank0.whole());
  std::string units;
  for (const auto& u : v_rank0.units()) units += u.name + " ";
  EXPECT_EQ(units, "tok_embeddings layers.0 layers.5 norm+output ");
  EXPECT_EQ(v_rank0.part_units(1), (std::pair<size_t, size_t>{2, 4}));
  // A Float8 filter entry may name a linear of another stage; one that
  // names no linear of the model is an InputError.
  const auto middle_with_filter = [&](const std::string& entry) {
    ModelTechniques techniques;
    techniques.float8 = Float8Options{Float8Recipe::kTensorwise, true, {entry}};
    return Transformer(a, torch::kFloat, 16, c10::Device(c10::kCPU), std::vector<ModelPart>{all[1]},
                       ParamStore::Storage::kFlat, {}, techniques);
  };
  EXPECT_NO_THROW(middle_with_filter("output"));
  EXPECT_THROW(middle_with_filter("nosuch"), InputError);
  EXPECT_THROW(Transformer(a, torch::kFloat, 16, c10::Device(c10::kCPU), std::vector<ModelPart>{all[1], all[1]}),
               InputError);  // a layer in two parts
}

TEST(PipelineSchedule, NamesAreTorchTitansAndUnbuiltOnesSaySo) {
  EXPECT_NO_THROW(check_pipeline_schedule("1F1B"));
  EXPECT_NO_THROW(check_pipeline_schedule("GPipe"));
  try {
    check_pipeline_schedule("1f1b");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "parallelism.pipeline_parallel_schedule '1f1b' is not one of TorchTitan's schedules (GPipe, "
                           "1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV)");
  }
  EXPECT_NO_THROW(check_pipeline_schedule("ZBVZeroBubble"));
  EXPECT_THROW(check_pipeline_schedule("DualPipeV"), InputError);  // mixture-of-experts overlap
}

}  // namespace
}  // namespace ctitan

namespace ctitan {
namespace {

std::string write_csv(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "ctitan_pp_" + name + ".csv";
  std::ofstream(path) << text;
  return path;
}

std::string csv_error(const std::string& name, const std::string& text, const std::string& runner = "PipelineScheduleSingle",
                      int64_t v = 1) {
  const std::string path = write_csv(name, text);
  try {
    load_pipeline_csv(path, runner, 2, v, 2);
  } catch (const InputError& e) {
    const std::string what = e.what();
    return what.substr(0, path.size()) == path ? what.substr(path.size()) : what;
  }
  return "accepted";
}

std::string rows_of(const PipelineSchedule& s) {
  std::string got;
  for (const auto& row : s.actions) {
    for (const auto& a : row) got += a.str() + " ";
    got += "| ";
  }
  return got;
}

// TorchTitan's CSV: one row per rank, "<stage><F|B|I|W><micro-batch>"
// cells, empty cells idle; checked before anything runs.
TEST(PipelineCsv, ReadsTorchTitansFormatAndChecksTheScheduleBeforeRunning) {
  const PipelineSchedule single = load_pipeline_csv(
      write_csv("ok", "0F0,0F1,,0B0,0B1\n1F0, 1B0 ,1F1,1B1\r\n\n"), "PipelineScheduleSingle", 2, 1, 2);
  EXPECT_EQ(rows_of(single), "0F0 0F1 0B0 0B1 | 1F0 1B0 1F1 1B1 | ");
  EXPECT_FALSE(single.splits_backward());
  // Several stages per rank (loop style) with split backwards: ZB1P's rows.
  const PipelineSchedule multi = load_pipeline_csv(
      write_csv("multi", "0F0,0F1,2F0,2F1,2I0,2W0,2I1,2W1,0I0,0W0,0I1,0W1\n"
                         "1F0,1F1,3F0,3I0,3F1,3I1,3W0,1I0,3W1,1I1,1W0,1W1\n"),
      "PipelineScheduleMulti", 2, 2, 2);
  EXPECT_EQ(multi.stages(), 4);
  EXPECT_TRUE(multi.splits_backward());
  EXPECT_EQ(rows_of(multi), rows_of(build_pipeline_schedule("InterleavedZeroBubble", 2, 2, 2)));
  EXPECT_EQ(csv_error("bad", "0F0,0X1,0B0,0B1\n1F0,1B0,1F1,1B1\n"),
            ": row 0, action '0X1': 'X' is not F, B, I or W");
  EXPECT_EQ(csv_error("shape", "0F0,F1\n"), ": row 0, action 'F1' is not <stage><F|B|I|W><micro-batch>, e.g. 0F3");
  EXPECT_EQ(csv_error("huge", "0F99999999999999999999\n"),
            ": row 0, action '0F99999999999999999999' is not <stage><F|B|I|W><micro-batch>, e.g. 0F3");
  EXPECT_EQ(csv_error("stage", "1F0,1F1,1B0,1B1\n1F0,1B0,1F1,1B1\n"),
            ": row 0, action 1F0: stage 1 is not on rank 0 (it holds stage 0 of 2)");
  EXPECT_EQ(csv_error("stage-multi", "0F0,1F0\n1F0\n", "PipelineScheduleMulti", 2),
            ": row 0, action 1F0: stage 1 is not on rank 0 (it holds stages 0, 2 of 4)");
  EXPECT_EQ(csv_error("rows", "0F0,0F1,0B0,0B1\n"), ": 1 rows for 2 pipeline ranks; give one row per rank");
  EXPECT_EQ(csv_error("order", "0F0,0B1,0F1,0B0\n1F0,1B0,1F1,1B1\n"),
            ": row 0, action 0B1: backward before the micro-batch's forward");
  EXPECT_EQ(csv_error("w-first", "0F0,0W0,0I0,0F1,0B1\n1F0,1B0,1F1,1B1\n"),
            ": row 0, action 0W0: W before the I it completes");
  EXPECT_EQ(csv_error("b-and-i", "0F0,0I0,0B0\n1F0\n"), ": row 0, action 0B0: both a whole backward (B) and a split one (I) of "
                                                   "one micro-batch");
  EXPECT_EQ(csv_error("no-w", "0F0,0F1,0I0,0B1\n1F0,1B0,1F1,1B1\n"),
            ": row 0 never runs 0W0 (every stage runs each of the 2 micro-batches forward and backward)");
  EXPECT_EQ(csv_error("missing", "0F0,0B0\n1F0,1B0\n"),
            ": row 0 never runs 0F1 (every stage runs each of the 2 micro-batches forward and backward)");
  EXPECT_EQ(csv_error("range", "0F0,0F2,0B0,0B2\n1F0,1B0,1F2,1B2\n"),
            ": row 0, action 0F2: micro-batch 2 is not in 0..1 (local_batch_size / pipeline_parallel_microbatch_size "
            "= 2)");
  // Row 1 wants micro-batch 1 first; row 0 sends it only after micro-batch
  // 0's backward, which needs row 1's: neither moves.
  EXPECT_EQ(csv_error("deadlock", "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n"),
            ": row 0 waits for ever at action 0B0 (its gradient comes from an action the other rows never reach): "
            "the schedule deadlocks");
  EXPECT_THROW(load_pipeline_csv("/nonexistent/schedule.csv", "PipelineScheduleSingle", 2, 1, 2), InputError);
  EXPECT_THROW(check_pipeline_schedule("1F1B", /*csv=*/true), InputError);
  EXPECT_NO_THROW(check_pipeline_schedule("PipelineScheduleSingle", /*csv=*/true));
  EXPECT_THROW(check_pipeline_schedule("PipelineScheduleSingle"), InputError);
}

}  // namespace
}  // namespace ctitan
