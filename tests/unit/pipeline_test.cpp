// Pipeline parallelism's plan: TorchTitan's stage split, the schedules'
// action lists (checked by simulating every rank with blocking receives),
// and bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/errors.h"
#include "trainer/parallel/pipeline.h"

namespace ctitan {
namespace {

std::string split(const LlamaArgs& a, int64_t stages, int64_t per_stage = -1) {
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
  LlamaArgs a = llama3_flavor("debugmodel");  // 6 layers
  EXPECT_EQ(split(a, 2), "emb 0+3 | 3+3 head");
  EXPECT_EQ(split(a, 4), "emb 0+1 | 1+2 | 3+2 | 5+1 head");
  EXPECT_EQ(split(a, 2, 4), "emb 0+3 | 3+3 head");  // layers_per_stage 4: ceil(8 / 4) = 2 stages
  a.n_layers = 32;
  EXPECT_EQ(split(a, 8), "emb 0+4 | 4+5 | 9+4 | 13+4 | 17+4 | 21+4 | 25+4 | 29+3 head");
}

TEST(PipelineSplit, ImpossibleSplitsAreOneLine) {
  const LlamaArgs a = llama3_flavor("debugmodel");
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

std::string actions(const std::string& schedule, int64_t p, int64_t r, int64_t m) {
  std::string out;
  for (const auto& a : pipeline_schedule(schedule, p, r, m)) {
    if (!out.empty()) out += ' ';
    out += a.str();
  }
  return out;
}

TEST(PipelineSchedule, GPipeAndOneFOneBInTheirOrder) {
  EXPECT_EQ(actions("GPipe", 2, 0, 3), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(actions("1F1B", 4, 0, 6), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(actions("1F1B", 4, 3, 6), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  EXPECT_EQ(actions("1F1B", 4, 1, 2), "F0 F1 B0 B1");  // fewer micro-batches than the warm-up
}

// Runs every rank's actions as the trainer does — a forward waits for the
// previous stage's forward of that micro-batch, a backward for the next
// stage's backward; sends never block — and checks that all finish (no
// deadlock), each micro-batch once forward then backward per rank, and
// 1F1B's memory bound: at most p − r micro-batches alive on rank r.
TEST(PipelineSchedule, EveryScheduleRunsToTheEndWithoutDeadlock) {
  for (const std::string name : {"GPipe", "1F1B"}) {
    for (int64_t p : {2, 4}) {
      for (int64_t m : {1, 4, 8}) {
        std::vector<std::vector<PipelineAction>> ranks;
        for (int64_t r = 0; r < p; ++r) ranks.push_back(pipeline_schedule(name, p, r, m));
        std::vector<size_t> next(p, 0);
        std::set<std::pair<int64_t, int64_t>> fwd_done, bwd_done;  // (rank, micro-batch)
        std::vector<int64_t> alive(p, 0), peak(p, 0);
        bool progress = true;
        while (progress) {
          progress = false;
          for (int64_t r = 0; r < p; ++r) {
            if (next[r] == ranks[r].size()) continue;
            const PipelineAction& a = ranks[r][next[r]];
            const bool fwd = a.kind == PipelineAction::Kind::kForward;
            const bool ready = fwd ? (r == 0 || fwd_done.count({r - 1, a.microbatch}))
                                   : (fwd_done.count({r, a.microbatch}) &&
                                      (r == p - 1 || bwd_done.count({r + 1, a.microbatch})));
            if (!ready) continue;
            (fwd ? fwd_done : bwd_done).insert({r, a.microbatch});
            alive[r] += fwd ? 1 : -1;
            peak[r] = std::max(peak[r], alive[r]);
            ++next[r];
            progress = true;
          }
        }
        const std::string at = name + " p " + std::to_string(p) + " m " + std::to_string(m);
        for (int64_t r = 0; r < p; ++r) {
          EXPECT_EQ(next[r], ranks[r].size()) << at << ": rank " << r << " stuck at action " << next[r];
          EXPECT_EQ(ranks[r].size(), static_cast<size_t>(2 * m)) << at;
          if (name == "1F1B") {
            EXPECT_LE(peak[r], std::min(p - r, m)) << at << ": rank " << r;
          } else {
            EXPECT_EQ(peak[r], m) << at;
          }
        }
        EXPECT_EQ(fwd_done.size(), static_cast<size_t>(p * m)) << at;
        EXPECT_EQ(bwd_done.size(), static_cast<size_t>(p * m)) << at;
      }
    }
  }
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
  EXPECT_THROW(check_pipeline_schedule("ZBVZeroBubble"), InputError);
  EXPECT_DOUBLE_EQ(pipeline_bubble_theory("1F1B", 4, 8), 3.0 / 11.0);
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

std::string csv_error(const std::string& name, const std::string& text, int64_t stages = 2, int64_t m = 2) {
  const std::string path = write_csv(name, text);
  try {
    load_pipeline_csv(path, stages, m);
  } catch (const InputError& e) {
    const std::string what = e.what();
    return what.substr(0, path.size()) == path ? what.substr(path.size()) : what;
  }
  return "accepted";
}

// TorchTitan's CSV: one row per rank, "<stage><F|B|I|W><micro-batch>"
// cells, empty cells idle; checked before anything runs.
TEST(PipelineCsv, ReadsTorchTitansFormatAndChecksTheScheduleBeforeRunning) {
  const auto rows = load_pipeline_csv(write_csv("ok", "0F0,0F1,,0B0,0B1\n1F0, 1B0 ,1F1,1B1\r\n\n"), 2, 2);
  ASSERT_EQ(rows.size(), 2u);
  std::string got;
  for (const auto& row : rows) {
    for (const auto& a : row) got += a.str() + " ";
    got += "| ";
  }
  EXPECT_EQ(got, "F0 F1 B0 B1 | F0 B0 F1 B1 | ");
  EXPECT_EQ(csv_error("bad", "0F0,0X1,0B0,0B1\n1F0,1B0,1F1,1B1\n"),
            ": row 0, action '0X1': 'X' is not F, B, I or W");
  EXPECT_EQ(csv_error("shape", "0F0,F1\n"), ": row 0, action 'F1' is not <stage><F|B|I|W><micro-batch>, e.g. 0F3");
  EXPECT_EQ(csv_error("iw", "0F0,0I0\n"),
            ": row 0, action '0I0': split backwards (I, W: the zero-bubble schedules) are not in this ctitan build "
            "yet; use F and B");
  EXPECT_EQ(csv_error("stage", "1F0,1F1,1B0,1B1\n1F0,1B0,1F1,1B1\n"),
            ": row 0, action '1F0': stage 1 on row 0; this build runs one stage per rank (stage = row)");
  EXPECT_EQ(csv_error("rows", "0F0,0F1,0B0,0B1\n"), ": 1 rows for 2 pipeline ranks; give one row per rank");
  EXPECT_EQ(csv_error("order", "0F0,0B1,0F1,0B0\n1F0,1B0,1F1,1B1\n"),
            ": row 0, action B1: backward before the micro-batch's forward");
  EXPECT_EQ(csv_error("missing", "0F0,0B0\n1F0,1B0\n"), ": row 0 runs 1 forwards and 1 backwards of 2 micro-batches");
  EXPECT_EQ(csv_error("range", "0F0,0F2,0B0,0B2\n1F0,1B0,1F2,1B2\n"),
            ": row 0, action F2: micro-batch 2 is not in 0..1 (local_batch_size / pipeline_parallel_microbatch_size "
            "= 2)");
  // Row 1 wants micro-batch 1 first; row 0 sends it only after micro-batch
  // 0's backward, which needs row 1's: neither moves.
  EXPECT_EQ(csv_error("deadlock", "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n"),
            ": row 0 waits for ever at action B0 (its gradient comes from an action the other rows never reach): "
            "the schedule deadlocks");
  EXPECT_THROW(load_pipeline_csv("/nonexistent/schedule.csv", 2, 2), InputError);
  EXPECT_THROW(check_pipeline_schedule("1F1B", /*csv=*/true), InputError);
  EXPECT_NO_THROW(check_pipeline_schedule("PipelineScheduleSingle", /*csv=*/true));
  EXPECT_THROW(check_pipeline_schedule("PipelineScheduleSingle"), InputError);
}

}  // namespace
}  // namespace ctitan
