// `ctitan gate --losses --bands` on real runs: Llama 3 debugmodel learning
// the Markov chain, three seeds per recipe, each recipe its own sweep. The
// layouts and techniques that must not change the optimisation — FSDP over
// 2 ranks at the same global batch, the fused kernels ("compile"), full
// activation checkpointing — stay inside the single process's bands; a
// learning rate ten times too high leaves them and is slower to target; a
// learning rate ten times too low, as the baseline, makes the single
// process "suspiciously fast"; two seeds are too few for a band. Each of
// the gate's decisions (0, 1, 3) is seen here, on the same real runs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <tuple>
#include <vector>

#include "tests/integration/process.h"

namespace fs = std::filesystem;
using ctitan::testing::expect_one_line_exit2;
using ctitan::testing::fresh_dir;
using ctitan::testing::run_ctitan;
using ctitan::testing::source_dir;

namespace {

// One recipe, one point, `seeds` seeds: 80 steps of 4 × 64 tokens,
// validated every 10 steps against a loss of 4.0.
fs::path spec(const fs::path& dir, const std::string& name, const std::string& settings, int world_size, int seeds,
              int batch) {
  const fs::path p = dir / (name + ".toml");
  std::ofstream(p) << "[sweep]\nname = \"" << name << "\"\nbase = \""
                   << (fs::absolute(source_dir()) / "recipes/llama3_debugmodel_markov.toml").string() << "\"\n"
                   << "world_sizes = [" << world_size << "]\ntimeout_s = 300\nwarmup_steps = 2\n"
                   << "[quality]\nseeds = " << seeds << "\ntarget_loss = 4.0\neval_every = 10\nsteps = 80\n"
                   << "eval_batches = 2\n"
                   << "[overrides]\ntraining.seq_len = 64\ntraining.local_batch_size = " << batch << "\nmetrics.log_freq = 10\n"
                   << "lr_scheduler.warmup_steps = 5\nvalidation.dataset = \"markov\"\nvalidation.seq_len = 64\nvalidation.local_batch_size = 4\n"
                   << settings;
  return p;
}

ctitan::testing::ProcessResult bands(const std::string& db, const std::string& baseline, const std::string& candidate,
                                     const std::vector<std::string>& more = {}) {
  std::vector<std::string> args = {"gate", "--losses", "--bands", "--db", db, "--baseline", "sweep:" + baseline,
                                   "--candidate", "sweep:" + candidate};
  args.insert(args.end(), more.begin(), more.end());
  return run_ctitan(args);
}

// One test, one set of runs: CTest runs each test of a file in a process of
// its own, and these runs take minutes.
TEST(QualityBands, EachDecisionOnRealRuns) {
  setenv("OMP_NUM_THREADS", "1", 1);
  const fs::path dir = fresh_dir("quality_bands");
  const std::string db = (dir / "q.db").string();
  // name, settings, world size, seeds, local batch
  const std::vector<std::tuple<std::string, std::string, int, int, int>> recipes = {
      {"single", "", 1, 3, 4},
      {"fsdp2", "", 2, 3, 2},  // the single process's global batch
      {"compile", "compile.enable = true\n", 1, 3, 4},
      {"ac", "activation_checkpoint.mode = \"full\"\n", 1, 3, 4},
      {"lr_x10", "optimizer.lr = 3e-2\n", 1, 3, 4},
      {"lr_div10", "optimizer.lr = 3e-4\n", 1, 3, 4},
      {"two_seeds", "", 1, 2, 4},
  };
  std::map<std::string, std::string> outputs;
  for (const auto& [name, settings, ws, seeds, batch] : recipes) {
    const auto r = run_ctitan({"sweep", spec(dir, name, settings, ws, seeds, batch).string(), "--db", db});
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.out << r.err;
    outputs[name] = r.out;
  }

  // Layouts and techniques that keep the optimisation stay inside: exit 0.
  // The fused kernels need AVX-512 on the CPU; without it that point is infeasible.
  for (const char* cand : {"fsdp2", "ac", "compile"}) {
    SCOPED_TRACE(cand);
    if (std::string(cand) == "compile" && outputs["compile"].find("sweep compile: 3 ok") == std::string::npos) {
      std::cout << "compile.enable is infeasible on this CPU (no AVX-512): not compared\n";
      continue;
    }
    const auto r = bands(db, "single", cand);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("| inside |"), std::string::npos) << r.out;
  }

  {  // A tenfold learning rate is outside the band and slower to target: exit 1.
    const auto r = bands(db, "single", "lr_x10", {"--format", "json"});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    const nlohmann::json v = nlohmann::json::parse(r.out);
    EXPECT_EQ(v["verdict"], "regression");
    const auto& p = v["points"][0];
    EXPECT_EQ(p["verdict"], "outside the band") << p.dump(1);
    EXPECT_FALSE(p["outside"].empty());
    EXPECT_TRUE(p["final_loss_worse"].get<bool>()) << p.dump(1);
    // Slower to target: more tokens on average, or some seeds never reached it.
    const auto& base = p["baseline"];
    const auto& cand = p["candidate"];
    ASSERT_EQ(base["reached"], 3) << base.dump(1);
    EXPECT_TRUE(cand["reached"].get<int>() < 3 ||
                cand["tokens_to_target"]["mean"].get<double>() > base["tokens_to_target"]["mean"].get<double>())
        << p.dump(1);
  }

  {  // Against a baseline that learns ten times too slowly the recipe is suspiciously fast: exit 3.
    const auto r = bands(db, "lr_div10", "single");
    EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
    EXPECT_NE(r.out.find("suspiciously fast"), std::string::npos) << r.out;
  }

  {  // Two baseline seeds are too few for a band: exit 3.
    const auto r = bands(db, "two_seeds", "single");
    EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
    EXPECT_NE(r.out.find("too few seeds"), std::string::npos) << r.out;
  }
  expect_one_line_exit2(
      run_ctitan({"gate", "--bands", "--db", db, "--baseline", "sweep:single", "--candidate", "sweep:ac"}),
      "--bands goes with --losses");
}

}  // namespace
