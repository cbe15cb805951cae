// Checkpoints: a folder per step, written atomically, verified on load.
//
//   <dump_folder>/<checkpoint.folder>/step-<N>/metadata.json   tensor index + train state
//                                          /rank0.bin       raw tensor bytes
//
// A checkpoint is first written to a hidden temporary folder, fsync'ed, then
// renamed to step-<N>: a crash leaves either the old set or the new one,
// never a half-written step. Every tensor carries its dtype, shape, byte
// offset and CRC-32; loading checks all of them, so a truncated or corrupt
// file is an InputError naming the tensor, not a crash. Tensors are stored
// one per parameter name (TorchTitan FQNs), so a later loader can re-shard.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainer/config/job_config.h"

namespace ctitan {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct LoadedCheckpoint {
  int64_t step = 0;
  bool model_only = false;
  nlohmann::json train_state;
  std::string path;
};

class Checkpointer {
 public:
  Checkpointer(const CheckpointSection& cfg, const std::string& dump_folder);

  bool enabled() const { return cfg_.enable; }
  std::string folder() const { return folder_; }
  // True when `step` is a save step (interval, last step, first step if asked).
  bool should_save(int64_t step, int64_t last_step) const;
  // Writes step-<step>; then prunes to keep_latest_k. `tensors` are read only.
  void save(int64_t step, const NamedTensors& tensors, const nlohmann::json& train_state, bool model_only);
  // Loads checkpoint.load_step, or the newest full checkpoint, into `tensors`
  // (names must match; model-only checkpoints fill only names starting with
  // "model."). Returns nullopt when there is nothing to resume from.
  std::optional<LoadedCheckpoint> load(const NamedTensors& tensors) const;
  std::vector<int64_t> saved_steps() const;  // ascending

 private:
  std::optional<LoadedCheckpoint> load_impl(const NamedTensors& tensors) const;
  CheckpointSection cfg_;
  std::string folder_;
};

uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

}  // namespace ctitan
