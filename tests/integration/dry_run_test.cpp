// The dry run through the real binary: `NGPU=N ctitan train ... --comm.mode
// fake_backend` builds rank 0's model of any flavor on the meta device and
// prints its layout and per-rank memory; the device and comm.mode inputs
// that cannot work are one line and exit 2.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <regex>

#include "tests/integration/process.h"

namespace {

using ctitan::testing::run_ctitan;

// NGPU for the child processes of one test.
class ScopedNgpu {
 public:
  explicit ScopedNgpu(const char* value) {
    if (value) {
      setenv("NGPU", value, 1);
    } else {
      unsetenv("NGPU");
    }
  }
  ~ScopedNgpu() { unsetenv("NGPU"); }
};

// The "= X GiB" total of parameters + gradients + AdamW state per rank.
double state_gib(const std::string& out) {
  std::smatch m;
  const std::regex re("AdamW state [0-9.]+ GiB = ([0-9.]+) GiB");
  return std::regex_search(out, m, re) ? std::stod(m[1]) : -1.0;
}

TEST(DryRun, Llama8BOnFsdp64MatchesTheParameterCount) {
  ScopedNgpu ngpu("64");
  const auto r = run_ctitan({"train", "--model.flavor", "8B", "--comm.mode", "fake_backend"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("8,030,261,248 parameters"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FSDP 64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("one forward and backward on the meta device checked every shape"), std::string::npos) << r.out;
  // fp32 master + gradient + two AdamW moments = 16 B per parameter, / 64.
  const double expected = 8030261248.0 * 16 / 64 / (1024.0 * 1024 * 1024);
  EXPECT_NEAR(state_gib(r.out), expected, 0.05 * expected) << r.out;
  EXPECT_NE(r.out.find("layers.0.attention.wq.weight  global [4096, 4096]  local [64, 4096]  Shard(0) over dp_shard 64"),
            std::string::npos)
      << r.out;
}

// DeepSeek-V3 671B (a block_causal flavor: the document mask changes no
// shape) on 512 fake ranks, PP 8 x FSDP 64: MLA with the
// low-rank q, 3 dense then 58 MoE layers, group-limited sigmoid routing, all
// through the meta device's forward and backward.
TEST(DryRun, DeepSeekV3671BOn512RanksChecksEveryShape) {
  ScopedNgpu ngpu("512");
  const auto r = run_ctitan({"train", "--model.name", "deepseek_v3", "--model.flavor", "671B", "--comm.mode",
                             "fake_backend", "--parallelism.pipeline_parallel_degree", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("671,026,404,352 parameters (37,552,282,624 active)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mesh pp 8 x dp_shard 64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("one forward and backward on the meta device checked every shape"), std::string::npos) << r.out;
}

// The same model at EP 64 on 512 fake ranks (FSDP over all of them): each
// rank holds 4 of every MoE layer's 256 experts, FSDP-sharded along their
// hidden dimension over dp_shard_mod_ep 8 (8 x 64 ranks outnumber the
// experts, as TorchTitan's shard_placement_fn decides); the dense and the
// MoE runs of blocks are printed once each; the state per rank is 1/512 of
// the 671B's 16 bytes per parameter.
TEST(DryRun, DeepSeekV3671BAtExpertParallel64On512Ranks) {
  ScopedNgpu ngpu("512");
  const auto r = run_ctitan({"train", "--model.name", "deepseek_v3", "--model.flavor", "671B", "--comm.mode",
                             "fake_backend", "--parallelism.expert_parallel_degree", "64", "--training.seq_len",
                             "4096", "--training.local_batch_size", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("mesh dp_shard 512 x (ep 64, etp 1), FSDP 512"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layers.3.moe.experts.w1  global [256, 2048, 7168]  local [4, 256, 7168]  Shard(0) over ep 64, "
                       "Shard(1) over dp_shard_mod_ep 8"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("layers.1 .. layers.2: as layers.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layers.4 .. layers.60: as layers.3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("one forward and backward on the meta device checked every shape"), std::string::npos) << r.out;
  const double expected = 671026404352.0 * 16 / 512 / (1024.0 * 1024 * 1024);
  EXPECT_NEAR(state_gib(r.out), expected, 0.01 * expected) << r.out;
}

// GPT-OSS 20b at the layouts TorchTitan's gpt_oss parallelize takes: FSDP
// over 64 fake ranks with EP 8 (4 of the 32 experts per rank, their biases
// with them, FSDP over their hidden dimension as 64 ranks outnumber the
// experts), and FSDP 8 × TP 2 with expert TP 2 (the sinks and q/k/v
// biases Shard(0) with their heads, b2 whole on each tp rank). Parameters:
// 20,914,757,184 (OpenAI's 20.91B), 4,187,440,704 active.
TEST(DryRun, GptOss20bAtFsdpEpAndTpEtp) {
  {
    ScopedNgpu ngpu("64");
    const auto r = run_ctitan({"train", "--model.name", "gpt_oss", "--model.flavor", "20b", "--comm.mode",
                               "fake_backend", "--parallelism.expert_parallel_degree", "8", "--training.seq_len",
                               "4096", "--training.local_batch_size", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("20,914,757,184 parameters (4,187,440,704 active)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("layers.0.moe.experts.b1  global [32, 2880]  local [4, 360]  Shard(0) over ep 8, Shard(1) "
                         "over dp_shard_mod_ep 8"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("one forward and backward on the meta device checked every shape"), std::string::npos) << r.out;
  }
  ScopedNgpu ngpu("16");
  const auto r = run_ctitan({"train", "--model.name", "gpt_oss", "--model.flavor", "20b", "--comm.mode", "fake_backend",
                             "--parallelism.tensor_parallel_degree", "2", "--parallelism.expert_parallel_degree", "8",
                             "--parallelism.expert_tensor_parallel_degree", "2", "--training.seq_len", "4096",
                             "--training.local_batch_size", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("layers.0.attention.sinks  global [64]  local [4]  Shard(0) over tp 2, Shard(0) over dp_shard 8"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("layers.0.moe.experts.b2  global [32, 2880]  local [4, 2880]  Shard(0) over ep 8, "
                       "Replicate() over tp 2"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("one forward and backward on the meta device checked every shape"), std::string::npos) << r.out;
}

TEST(DryRun, HsdpLayoutReplicatesAndShards) {
  ScopedNgpu ngpu("8");
  const auto r = run_ctitan({"train", "--comm.mode", "fake_backend", "--parallelism.data_parallel_replicate_degree",
                             "2", "--activation_checkpoint.mode", "full"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("HSDP 2 x 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Shard(0) over dp_shard 4, Replicate() over dp_replicate 2"), std::string::npos) << r.out;
}

TEST(DryRun, MetaDeviceWithoutFakeBackendIsOneProcess) {
  const auto r = run_ctitan({"train", "--training.device", "meta"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("dry run of rank 0 of 1"), std::string::npos) << r.out;
}

TEST(DryRunBadInput, FakeBackendWithoutNgpu) {
  ScopedNgpu ngpu(nullptr);
  ctitan::testing::expect_one_line_exit2(run_ctitan({"train", "--comm.mode", "fake_backend"}), "NGPU");
}

TEST(DryRunBadInput, NgpuNotANumber) {
  ScopedNgpu ngpu("lots");
  ctitan::testing::expect_one_line_exit2(run_ctitan({"train", "--comm.mode", "fake_backend"}), "NGPU='lots'");
}

TEST(DryRunBadInput, UnknownDevice) {
  ctitan::testing::expect_one_line_exit2(run_ctitan({"train", "--training.device", "tpu"}), "training.device");
}

TEST(DryRunBadInput, UnknownCommMode) {
  ctitan::testing::expect_one_line_exit2(run_ctitan({"train", "--comm.mode", "local_tensor"}), "comm.mode");
}

TEST(DryRunBadInput, CudaWithoutGpu) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a GPU";
  ctitan::testing::expect_one_line_exit2(run_ctitan({"train", "--training.device", "cuda"}), "no GPU");
}

}  // namespace
