// Issue 33 (reliability, round 3) against the real binary: no run recorded
// under a name or a step it did not have, no export overwritten, every stop
// honoured. Each test failed on the binary before its fix (docs/reliability.md
// has the before → after table and the commands).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "tests/integration/process.h"
#include "tests/integration/small_fs.h"

namespace fs = std::filesystem;
using ctitan::testing::ProcessResult;
using ctitan::testing::SmallFs;
using ctitan::testing::expect_one_line_exit2;
using ctitan::testing::fresh_dir;
using ctitan::testing::read_json;
using ctitan::testing::read_jsonl;
using ctitan::testing::run_ctitan;
using ctitan::testing::run_program;
using ctitan::testing::source_dir;

namespace {

std::string recipe() { return (fs::absolute(source_dir()) / "recipes/llama3_debugmodel_markov.toml").string(); }

// `ctitan train` on the tiny model, under a time limit (a hang is a failure,
// not a stuck test; timeout(1) passes SIGTERM on to ctitan). limit_s 0: no
// limit, and the pid given to on_line is ctitan's own.
ProcessResult train(const std::vector<std::string>& extra, const std::function<void(const std::string&, pid_t)>& on_line = {},
                    int limit_s = 120) {
  std::vector<std::string> argv;
  if (limit_s > 0) argv = {"/usr/bin/timeout", "-s", "KILL", std::to_string(limit_s)};
  for (const std::string& a : {ctitan::testing::ctitan_bin(), std::string("train"), std::string("--job.config_file"),
                               recipe(), std::string("--model.flavor"), std::string("tiny"),
                               std::string("--training.seq_len"), std::string("32"),
                               std::string("--training.local_batch_size"), std::string("2"),
                               std::string("--lr_scheduler.warmup_steps"), std::string("0")})  // no warning line
    argv.push_back(a);
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_program(argv, on_line);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<int64_t> logged_steps(const fs::path& dump) {
  std::vector<int64_t> steps;
  for (const auto& row : read_jsonl(dump / "metrics.jsonl"))
    if (row.contains("loss")) steps.push_back(row.at("step").get<int64_t>());
  return steps;
}

}  // namespace

// Item 1: a TorchTitan recipe of another model family (deepseek_v3's
// debug_model.toml, when ctitan had no deepseek_v3) trained a Llama 3 and
// recorded its name; a family ctitan still lacks (llama4) is one line.
TEST(Reliability, ModelNameOfAnotherFamilyIsOneLineExit2) {
  const fs::path dir = fresh_dir("r3_name");
  std::ofstream(dir / "llama4.toml") << "[job]\ndump_folder = \"" << (dir / "out").string()
                                     << "\"\n[model]\nname = \"llama4\"\nflavor = \"debugmodel\"\n"
                                        "[training]\nsteps = 2\nseq_len = 32\nlocal_batch_size = 2\n"
                                        "dataset = \"markov\"\n";
  const ProcessResult r = run_ctitan({"train", "--job.config_file", (dir / "llama4.toml").string()});
  expect_one_line_exit2(r, "model.name \"llama4\" is TorchTitan v0.2.2's Llama 4, which TorchTitan's later main "
                           "removed; ctitan does not build it; ctitan's families: \"llama3\", \"qwen3\", "
                           "\"deepseek_v3\", \"gpt_oss\"");
  EXPECT_NE(r.err.find("llama4.toml"), std::string::npos) << "the line names where: " << r.err;
  expect_one_line_exit2(train({"--model.name", "no_such_family", "--job.dump_folder", (dir / "o2").string()}),
                        "model.name \"no_such_family\" is not a model family");
  EXPECT_FALSE(fs::exists(dir / "out"));
  EXPECT_FALSE(fs::exists(dir / "o2"));
}

// Issue 34's bad input for MoE: a top_k above the experts, an unknown
// flavor (one line each), a TP degree that does not divide MLA's heads —
// exit 2, nothing written.
TEST(Reliability, MoeBadInputIsOneLineExit2) {
  const fs::path dir = fresh_dir("r3_moe");
  expect_one_line_exit2(train({"--model.name", "qwen3", "--model.flavor", "tiny_moe", "--model.moe_top_k", "5",
                               "--job.dump_folder", (dir / "topk").string()}),
                        "model.moe_top_k 5 exceeds the 4 experts a token can reach");
  expect_one_line_exit2(train({"--model.name", "deepseek_v3", "--model.flavor", "debugmodel_moe", "--job.dump_folder",
                               (dir / "flavor").string()}),
                        "unknown model.flavor 'debugmodel_moe' for deepseek_v3; known flavors:");
  // Three ranks: the failing rank's line, then the launcher's.
  const ProcessResult tp = train({"--nproc", "3", "--model.name", "deepseek_v3", "--model.flavor", "debugmodel",
                                  "--parallelism.tensor_parallel_degree", "3", "--job.dump_folder", (dir / "tp").string()});
  EXPECT_EQ(tp.exit_code, 2) << tp.err;
  EXPECT_NE(tp.err.find("tensor_parallel_degree 3 does not divide n_heads 16"), std::string::npos) << tp.err;
  for (const char* sub : {"topk", "flavor", "tp"}) EXPECT_FALSE(fs::exists(dir / sub)) << sub;
}

// Item 2: extending a run finished under last_save_model_only (TorchTitan's
// default) restarted it from step 1 with a fresh optimizer and wrote every
// step number twice. Now refused in one line, with nothing written; a run
// saved in full extends from its real step; a run already at its last
// step says so in one line (item 7) and leaves its files alone.
TEST(Reliability, ExtendingARunResumesItsRealStepOrRefuses) {
  const fs::path dir = fresh_dir("r3_extend");
  const fs::path weights = dir / "weights", full = dir / "full";
  ASSERT_EQ(train({"--training.steps", "3", "--checkpoint.enable", "--checkpoint.last_save_model_only",
                   "--metrics.log_freq", "1", "--job.dump_folder", weights.string()})
                .exit_code,
            0);
  const std::string metrics_before = slurp(weights / "metrics.jsonl");
  const ProcessResult refused = train({"--training.steps", "6", "--checkpoint.enable", "--checkpoint.last_save_model_only",
                                       "--metrics.log_freq", "1", "--job.dump_folder", weights.string()});
  expect_one_line_exit2(refused, "holds the weights only");
  EXPECT_NE(refused.err.find("last_save_model_only"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("initial_load_path"), std::string::npos) << refused.err;
  EXPECT_EQ(slurp(weights / "metrics.jsonl"), metrics_before);
  EXPECT_FALSE(fs::exists(weights / "checkpoint" / "step-6"));

  ASSERT_EQ(train({"--training.steps", "3", "--checkpoint.enable", "--checkpoint.no_last_save_model_only",
                   "--metrics.log_freq", "1", "--job.dump_folder", full.string()})
                .exit_code,
            0);
  const ProcessResult extended = train({"--training.steps", "5", "--checkpoint.enable",
                                        "--checkpoint.no_last_save_model_only", "--metrics.log_freq", "1",
                                        "--job.dump_folder", full.string()});
  ASSERT_EQ(extended.exit_code, 0) << extended.err;
  EXPECT_EQ(logged_steps(full), (std::vector<int64_t>{1, 2, 3, 4, 5})) << "a step number written twice";

  const std::string summary = slurp(full / "summary.json");
  const ProcessResult nothing = train({"--training.steps", "5", "--checkpoint.enable",
                                       "--checkpoint.no_last_save_model_only", "--job.dump_folder", full.string()});
  EXPECT_EQ(nothing.exit_code, 0) << nothing.err;
  EXPECT_EQ(std::count(nothing.err.begin(), nothing.err.end(), '\n'), 1) << nothing.err;
  EXPECT_NE(nothing.err.find("nothing to train: the checkpoint is at step 5 and training.steps is 5"), std::string::npos)
      << nothing.err;
  EXPECT_EQ(slurp(full / "summary.json"), summary);
  EXPECT_EQ(logged_steps(full).size(), 5u);
}

// Item 7: a NaN loss trained to the end with status ok. Now the run stops at
// the step, summary.json says failed with the step, nothing is saved from it.
TEST(Reliability, NonFiniteLossEndsTheRunAsFailed) {
  const fs::path dump = fresh_dir("r3_nan") / "run";
  const ProcessResult r = train({"--training.steps", "20", "--optimizer.lr", "1e10", "--metrics.log_freq", "5",
                                 "--checkpoint.enable", "--checkpoint.interval", "1", "--job.dump_folder", dump.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("the loss is nan"), std::string::npos) << r.err;
  const nlohmann::json s = read_json(dump / "summary.json");
  EXPECT_EQ(s.at("status"), "failed");
  const int64_t step = s.at("final_step").get<int64_t>();
  EXPECT_LT(step, 20);
  EXPECT_NE(s.at("error").get<std::string>().find("step " + std::to_string(step) + ":"), std::string::npos);
  EXPECT_FALSE(fs::exists(dump / "checkpoint" / ("step-" + std::to_string(step)))) << "a NaN step was saved";
  EXPECT_TRUE(fs::exists(dump / "checkpoint" / ("step-" + std::to_string(step - 1))) || step == 1);
}

// Items 8 and 9: a step folder that is a Hugging Face export, or holds no
// metadata.json, was skipped: the run trained from scratch and its save of
// that step replaced the folder. Now one line, and the folder is untouched.
TEST(Reliability, ForeignStepFoldersAreNeverReplaced) {
  const fs::path dir = fresh_dir("r3_foreign");
  const fs::path exported = dir / "exported";
  ASSERT_EQ(train({"--training.steps", "2", "--checkpoint.enable", "--checkpoint.last_save_in_hf",
                   "--checkpoint.last_save_model_only", "--job.dump_folder", exported.string()})
                .exit_code,
            0);
  const std::string weights = slurp(exported / "checkpoint" / "step-2" / "model.safetensors");
  ASSERT_FALSE(weights.empty());
  expect_one_line_exit2(train({"--training.steps", "2", "--checkpoint.enable", "--job.dump_folder", exported.string()}),
                        "step-2 is a Hugging Face export (checkpoint.last_save_in_hf)");
  EXPECT_EQ(slurp(exported / "checkpoint" / "step-2" / "model.safetensors"), weights);
  EXPECT_FALSE(fs::exists(exported / "checkpoint" / "step-2" / "metadata.json"));

  const fs::path stray = dir / "stray";
  fs::create_directories(stray / "checkpoint" / "step-2");
  std::ofstream(stray / "checkpoint" / "step-2" / "notes.txt") << "mine\n";
  expect_one_line_exit2(train({"--training.steps", "2", "--checkpoint.enable", "--job.dump_folder", stray.string()}),
                        "step-2 has no metadata.json");
  EXPECT_EQ(slurp(stray / "checkpoint" / "step-2" / "notes.txt"), "mine\n");
  EXPECT_FALSE(fs::exists(stray / "metrics.jsonl"));
}

// Item 12: a read-only checkpoint folder was found after the last step
// ("internal error", exit 1), beside the previous run's summary.json. Now one
// line before step 1; and a new run never leaves another run's summary
// beside its config.
TEST(Reliability, ReadOnlyCheckpointFolderIsFoundBeforeStepOne) {
  SmallFs ro(1u << 20);
  if (!ro.ok()) GTEST_SKIP() << ro.skip_reason();
  const fs::path dump = fresh_dir("r3_readonly") / "run";
  fs::create_directories(dump);
  fs::create_directory_symlink(ro.dir(), dump / "checkpoint");
  ASSERT_EQ(::mount(nullptr, ro.dir().c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0) << std::strerror(errno);
  std::ofstream(dump / "summary.json") << "{\"status\": \"ok\", \"from\": \"an earlier run\"}\n";
  const ProcessResult r = train({"--training.steps", "3", "--checkpoint.enable", "--job.dump_folder", dump.string()});
  expect_one_line_exit2(r, "Read-only file system; the filesystem is read-only");
  EXPECT_EQ(r.out.find("step:"), std::string::npos) << "trained before finding the folder read-only:\n" << r.out;
  EXPECT_NE(slurp(dump / "summary.json").find("an earlier run"), std::string::npos)
      << "a refused run touched the folder";

  // A run that does start removes the stale summary before writing its config.
  const ProcessResult killed = train({"--training.steps", "100000", "--job.dump_folder", dump.string(),
                                      "--checkpoint.no_enable"},
                                     [](const std::string& line, pid_t pid) {
                                       if (line.rfind("step:", 0) == 0) ::kill(pid, SIGKILL);
                                     },
                                     0);
  EXPECT_EQ(killed.exit_code, 128 + SIGKILL);
  EXPECT_TRUE(fs::exists(dump / "config.toml"));
  EXPECT_FALSE(fs::exists(dump / "summary.json")) << "another run's summary beside this run's config";
}

// Item 4: validation.steps larger than the set wrapped around it silently
// (the same batches counted again). Now the pass stops at the end of the set,
// as TorchTitan's does, and says so once.
TEST(Reliability, ValidationStopsAtTheEndOfASmallSet) {
  const fs::path dir = fresh_dir("r3_valset");
  std::mt19937 rng(3);
  std::vector<uint16_t> tokens(3 * 2 * 33);  // 3 batches of 2 x (32 + 1) tokens
  for (auto& t : tokens) t = static_cast<uint16_t>(rng() % 64);
  std::ofstream(dir / "val.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  const ProcessResult r = train({"--training.steps", "2", "--validation.enable", "--validation.freq", "1",
                                 "--validation.steps", "1000", "--validation.dataset", "bin", "--validation.dataset_path",
                                 (dir / "val.bin").string(), "--validation.seq_len", "32",
                                 "--validation.local_batch_size", "2", "--job.dump_folder", (dir / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "said once:\n" << r.err;
  EXPECT_NE(r.err.find("the set holds 3 batches per rank, fewer than validation.steps = 1000"), std::string::npos)
      << r.err;
  int passes = 0;
  for (const auto& row : read_jsonl(dir / "run" / "metrics.jsonl")) {
    if (!row.contains("validation_tokens")) continue;
    ++passes;
    EXPECT_EQ(row.at("validation_tokens").get<int64_t>(), 3 * 2 * 32) << row.dump();
  }
  EXPECT_EQ(passes, 2);
}

// Item 10: SIGTERM (a sweep's timeout, Slurm's preemption) waited for the
// whole validation pass. Now it ends the pass between batches.
TEST(Reliability, SigtermDuringValidationStopsBetweenBatches) {
  const fs::path dump = fresh_dir("r3_valstop") / "run";
  bool sent = false;
  const auto t0 = std::chrono::steady_clock::now();
  const ProcessResult r = train({"--training.steps", "3", "--validation.enable", "--validation.freq", "1",
                                 "--validation.steps", "100000000", "--validation.dataset", "markov", "--metrics.log_freq", "1",
                                 "--validation.seq_len", "32", "--validation.local_batch_size", "2", "--job.dump_folder",
                                 dump.string()},
                                [&](const std::string& line, pid_t pid) {
                                  if (!sent && line.rfind("step:", 0) == 0) {  // step 1 is logged, validation starts
                                    sent = true;
                                    ::kill(pid, SIGTERM);
                                  }
                                },
                                90);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(sent) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 130) << "exit " << r.exit_code << " after " << seconds << " s\n" << r.err;
  EXPECT_EQ(read_json(dump / "summary.json").at("status"), "interrupted");
  for (const auto& row : read_jsonl(dump / "metrics.jsonl"))
    EXPECT_FALSE(row.contains("validation_loss")) << "a cut-short pass was logged: " << row.dump();
}

// CI saw the test above end 143 once: timeout(1) passes SIGTERM on to ctitan
// and then to its group, and when it is descheduled between the two, the
// repeat came after the run had put the default handler back. A stopped run
// keeps its handlers to the exit: SIGTERM sent again and again, until the
// process has ended, still ends it 130 with its summary.
TEST(Reliability, RepeatedSigtermStillEndsTheRunInterrupted) {
  const fs::path dump = fresh_dir("r3_valstop_repeat") / "run";
  int sent = 0;
  const ProcessResult r = train({"--training.steps", "3", "--validation.enable", "--validation.freq", "1",
                                 "--validation.steps", "100000000", "--validation.dataset", "markov", "--metrics.log_freq", "1",
                                 "--validation.seq_len", "32", "--validation.local_batch_size", "2", "--job.dump_folder",
                                 dump.string()},
                                [&](const std::string& line, pid_t pid) {
                                  if (sent > 0 || line.rfind("step:", 0) != 0) return;
                                  // Until ctitan has exited (seen without reaping it, so the pid stays its own).
                                  for (int i = 0; i < 20000; ++i) {
                                    siginfo_t info{};
                                    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                                        info.si_pid == pid)
                                      break;
                                    ::kill(pid, SIGTERM);
                                    ++sent;
                                    std::this_thread::sleep_for(std::chrono::microseconds(200));
                                  }
                                },
                                0);
  ASSERT_GT(sent, 1) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 130) << "exit " << r.exit_code << " after " << sent << " SIGTERMs\n" << r.err;
  EXPECT_EQ(read_json(dump / "summary.json").at("status"), "interrupted");
}

// Item 13: a missing validation set named training.dataset_path, and under
// `ctitan launch` every rank printed the same line.
TEST(Reliability, MissingValidationSetNamesItsKeyOnce) {
  const fs::path dir = fresh_dir("r3_valpath");
  const ProcessResult r = run_ctitan({"launch", "--nproc", "2", "--", "--job.config_file", recipe(), "--model.flavor",
                                      "tiny", "--training.seq_len", "32", "--training.local_batch_size", "2",
                                      "--validation.enable", "--validation.dataset", "bin", "--validation.dataset_path",
                                      (dir / "missing.bin").string(), "--job.dump_folder", (dir / "run").string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.find("training.dataset_path"), std::string::npos) << r.err;
  const std::string line = "no such file or folder: set validation.dataset_path to a .bin shard";
  const size_t first = r.err.find(line);
  EXPECT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(line, first + 1), std::string::npos) << "printed more than once:\n" << r.err;
}
