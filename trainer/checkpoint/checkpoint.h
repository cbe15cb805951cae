// Checkpoints: a folder per step, written atomically, verified on load,
// sharded per rank and re-shardable.
//
//   <dump_folder>/<checkpoint.folder>/step-<N>/metadata.json   index of every piece + train state
//                                          /rank<R>.bin     rank R's tensor bytes
//                                          /rank<R>.json    rank R's own state (data loader)
//
// A tensor is saved as pieces: boxes of its global shape (an offset and an
// extent in every dimension), each written by the rank that holds it (FSDP:
// every rank its rows of every parameter and of its AdamW state; a tensor-
// parallel shard: a column or row block, and FSDP rows inside it; DDP and
// single-process runs: rank 0 whole tensors). Loading asks for the boxes of
// the new layout and assembles each from whichever saved boxes overlap it in
// every dimension, so any layout loads into any other.
//
// Formats: v3 (boxes, "offsets"); v2 (dim-0 row ranges, "row_offset") and
// v1 (whole tensors) still load.
//
// metadata.json also describes the model (checkpoint_model.h): a run with
// another model (model.n_layers, moe_top_k, flavor, ...) is refused in one
// line before it writes anything (check_model); a change of layout is not
// a change of model. Checkpoints without the description are checked by
// their tensor names and global shapes.
//
// A checkpoint is first written to a hidden temporary folder, fsync'ed, then
// renamed to step-<N>: a crash leaves either the old set or the new one,
// never a half-written step. Every tensor carries its dtype, shape, byte
// offset and CRC-32; loading checks all of them, so a truncated or corrupt
// file is an InputError naming the tensor, not a crash. The JSON is checked
// whole before any tensor byte is read (checkpoint_metadata.h), and a file
// it names must lie inside the step folder: no absolute path, no "..", no
// symbolic link out of it. Tensors are stored
// one per parameter name (TorchTitan FQNs), so a later loader can re-shard.
//
// checkpoint.async_mode "async" / "async_with_pinned_mem" (TorchTitan's):
// save_sharded copies this rank's tensors (to pinned host memory from a GPU
// for the latter; a plain copy otherwise) and returns; a background thread
// writes and fsyncs the rank's files into the temporary folder. The thread
// does file I/O only — never a collective, so training's collectives on the
// same process group (Gloo) never run concurrently with the save's: the
// barrier, metadata and rename happen on the calling thread at the next
// save_sharded or wait_for_save(). The files are byte-identical to a
// synchronous save's.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainer/checkpoint/checkpoint_model.h"
#include "trainer/config/job_config.h"
#include "trainer/model/tensor_piece.h"

namespace ctitan {

// NamedTensors, TensorPiece, row_box, whole_tensors: model/tensor_piece.h.

// The ranks that save one checkpoint together: every rank calls save() with
// its pieces; `barrier` synchronises them (world 1: not called).
struct SaveGroup {
  int rank = 0, world = 1;
  std::function<void()> barrier;
};

struct LoadedCheckpoint {
  int64_t step = 0;
  bool model_only = false;
  int world_size = 1;         // ranks that saved it
  nlohmann::json train_state;
  nlohmann::json rank_state;  // this rank's own state, when the saving world had this rank
  std::string path;
};

class Checkpointer {
 public:
  // `model`: the run's model, written into every save's metadata and
  // checked by check_model (empty: neither).
  Checkpointer(const CheckpointSection& cfg, const std::string& dump_folder, CheckpointModel model = {});
  // Joins a background writer still running without putting its step in
  // place (no collectives here): the step stays a hidden temporary folder.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  bool enabled() const { return cfg_.enable; }
  std::string folder() const { return folder_; }
  // True when `step` is a save step (interval, last step, first step if
  // asked); never under checkpoint.load_only.
  bool should_save(int64_t step, int64_t last_step) const;
  // Writes step-<step> (all ranks of `group` together; rank 0 writes the
  // metadata and renames the folder into place); then prunes to
  // keep_latest_k. Tensors are read only; under async_mode they are copied
  // before this returns and may change afterwards. First waits for the
  // previous asynchronous save.
  void save_sharded(int64_t step, const TensorPieces& pieces, const nlohmann::json& train_state,
            const nlohmann::json& rank_state, bool model_only, const SaveGroup& group = {});
  // Waits for the asynchronous save in flight, if any, and puts its step in
  // place (every rank of its group calls it: it uses the group's barrier,
  // on this thread). Throws what the writer hit, as one line.
  void wait_for_save();
  bool save_in_flight() const { return pending_ != nullptr; }
  void save(int64_t step, const NamedTensors& tensors, const nlohmann::json& train_state, bool model_only) {
    save_sharded(step, whole_tensors(tensors), train_state, nlohmann::json::object(), model_only);
  }
  // Loads checkpoint.load_step, or the newest checkpoint, into `pieces`
  // (names must match; model-only checkpoints fill only names starting with
  // "model."). Returns nullopt when there is nothing to resume from.
  std::optional<LoadedCheckpoint> load_sharded(const TensorPieces& pieces, int rank = 0) const;
  std::optional<LoadedCheckpoint> load(const NamedTensors& tensors) const { return load_sharded(whole_tensors(tensors)); }
  std::vector<int64_t> saved_steps() const;  // ascending
  // Throws InputError for a step-<N> folder that is not a ctitan checkpoint
  // (a Hugging Face export, or no metadata.json): the run would neither
  // resume from it nor leave it alone (a save of step N replaces it).
  void check_step_folders() const;
  // Throws InputError when the step a run would resume from holds the
  // weights only (a finished run's last save under last_save_model_only).
  void check_resumable() const;
  // Throws InputError, one line naming the first difference, when the
  // checkpoint a run would load (its own newest or load_step, or
  // initial_load_path) holds another model than this run's: its
  // description differs, or (any checkpoint) a tensor this model has is
  // missing, has another global shape, or one it lacks is there. Reads
  // metadata.json only; call it before the run writes anything.
  void check_model() const;

 private:
  std::optional<LoadedCheckpoint> load_impl(const TensorPieces& pieces, int rank) const;
  // checkpoint.load_step's folder, or the newest one, or (the folder
  // holding none) checkpoint.initial_load_path; empty: none.
  std::filesystem::path step_dir_to_load() const;
  struct PendingSave;
  void finish_save(PendingSave& save);
  CheckpointSection cfg_;
  std::string folder_;
  CheckpointModel model_;
  std::unique_ptr<PendingSave> pending_;
};

uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

}  // namespace ctitan
