// The JSON a checkpoint folder holds, read and checked before any byte of a
// tensor is: ctitan's metadata.json and rank<R>.json (checkpoint.h) and a
// Hugging Face model.safetensors.index.json (hf_checkpoint.h). No LibTorch
// here, so the fuzz targets (tests/fuzz/) build these parsers on their own.
//
// Error policy (common/errors.h): any text that is not a checkpoint this
// ctitan can load is an InputError with one line naming the checkpoint, the
// entry (tensors[3].shape, weight_map["x"]) and what to do. Every number that
// later sizes an allocation or indexes a file is range-checked here, so the
// loader's arithmetic cannot overflow. Files named by the metadata are
// confined to the checkpoint's folder (confined_file).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/limits.h"

namespace ctitan {

// One saved piece of a tensor: the box [offsets, offsets + shape) of its
// global shape, stored in `file` at bytes [offset, offset + nbytes). v1 and
// v2 entries are normalised to this form (whole tensors; dim-0 row ranges).
struct SavedPieceEntry {
  std::string name;
  std::string dtype;  // ATen's name, as c10::toString writes it ("Float", "BFloat16")
  std::vector<int64_t> global_shape, offsets, shape;
  std::string file;  // relative to the step folder; checked by confined_file when read
  int64_t offset = 0, nbytes = 0;
  uint32_t crc32 = 0;
};

struct CheckpointMetadata {
  std::string format;  // ctitan-checkpoint-v1/v2/v3
  int64_t step = 0;
  bool model_only = false;
  int world_size = 1;
  nlohmann::json train_state = nlohmann::json::object();
  // The model's description (checkpoint_model.h); null in a checkpoint
  // saved before ctitan wrote one.
  nlohmann::json model;
  std::vector<SavedPieceEntry> tensors;
};

// Limits the loader relies on (a real checkpoint is far inside them).
inline constexpr int kMaxCheckpointWorld = static_cast<int>(kMaxWorldSize);
inline constexpr int kMaxTensorDims = 16;
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 56;  // x 8 bytes still fits int64
inline constexpr int kMaxCheckpointJsonDepth = 64;

// metadata.json's text. `where` names the checkpoint in messages
// ("checkpoint runs/x/checkpoint/step-10"). Checks: the format is known;
// step in 0..2^53; world_size in 1..kMaxCheckpointWorld; train_state and its
// data_loader, when present, are objects; model, when present, is an
// object; every tensor entry has a
// non-empty name, a dtype, shapes of equal rank with the box inside the
// global shape, a file name, offset/nbytes >= 0 whose sum fits, a 32-bit
// crc32; the pieces of one name agree on global shape and dtype.
CheckpointMetadata parse_checkpoint_metadata(std::string_view text, const std::string& where);

// rank<R>.json's rank_state (an object; {} when absent or null). Its tensor index
// is not needed to load: metadata.json holds every rank's entries.
nlohmann::json parse_rank_state(std::string_view text, const std::string& where);

// model.safetensors.index.json's weight_map: tensor name -> shard file.
std::map<std::string, std::string> parse_safetensors_index(std::string_view text, const std::string& where);

// `dir / name` for a file that checkpoint metadata names, or an InputError
// naming the checkpoint (`where`) and `entry` when it would leave `dir`: an
// empty or absolute name, a ".." component, or a symbolic link (of the name
// or of a folder in it) that resolves outside `dir`.
std::filesystem::path confined_file(const std::filesystem::path& dir, const std::string& name, const std::string& where,
                                    const std::string& entry);

}  // namespace ctitan
