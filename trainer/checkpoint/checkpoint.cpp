#include "trainer/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <zlib.h>

#include "common/errors.h"
#include "common/file_io.h"
#include "common/printable.h"
#include "trainer/checkpoint/checkpoint_metadata.h"

namespace fs = std::filesystem;

namespace ctitan {

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes uInt lengths
    const auto chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

namespace {

// Pieces are boxes ("offsets"). v2 (dim-0 row ranges, "row_offset") and v1
// (whole tensors, rank0.bin only) still load: checkpoint_metadata.cpp reads all three.
const char* kFormat = "ctitan-checkpoint-v3";

// The box [lo, hi) of a piece in every dimension of its global shape; a
// scalar is a 0-d box of one element.
struct Box {
  std::vector<int64_t> lo, hi;
  int64_t volume() const {
    int64_t v = 1;
    for (size_t d = 0; d < lo.size(); ++d) v *= std::max<int64_t>(0, hi[d] - lo[d]);
    return v;
  }
  Box intersect(const Box& o) const {
    Box r = *this;
    for (size_t d = 0; d < lo.size(); ++d) {
      r.lo[d] = std::max(lo[d], o.lo[d]);
      r.hi[d] = std::min(hi[d], o.hi[d]);
    }
    return r;
  }
  std::string describe() const {
    std::string s = "[";
    for (size_t d = 0; d < lo.size(); ++d)
      s += (d ? ", " : "") + std::to_string(lo[d]) + ":" + std::to_string(hi[d]);
    return s + "]";
  }
};

Box make_box(std::vector<int64_t> offsets, const std::vector<int64_t>& sizes) {
  if (offsets.empty()) offsets.assign(sizes.size(), 0);
  Box b{offsets, offsets};
  for (size_t d = 0; d < sizes.size(); ++d) b.hi[d] += sizes[d];
  return b;
}

// `t` narrowed to the part of box `of` that `sub` covers.
at::Tensor narrow_to(at::Tensor t, const Box& of, const Box& sub) {
  for (size_t d = 0; d < of.lo.size(); ++d) t = t.narrow(static_cast<int64_t>(d), sub.lo[d] - of.lo[d], sub.hi[d] - sub.lo[d]);
  return t;
}

void fsync_path(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::optional<int64_t> parse_step_dir(const fs::path& p) {
  const std::string name = p.filename().string();
  if (name.rfind("step-", 0) != 0) return std::nullopt;
  try {
    size_t used = 0;
    int64_t step = std::stoll(name.substr(5), &used);
    if (used != name.size() - 5) return std::nullopt;
    return step;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// A step folder's metadata.json, read (bounded, regular file only) and checked.
CheckpointMetadata read_metadata(const fs::path& dir) {
  return parse_checkpoint_metadata(
      read_file_bounded((dir / "metadata.json").string(), "checkpoint metadata", kMaxJsonBytes),
      "checkpoint " + dir.string());
}

}  // namespace

Checkpointer::Checkpointer(const CheckpointSection& cfg, const std::string& dump_folder, CheckpointModel model)
    : cfg_(cfg), folder_((fs::path(dump_folder) / cfg.folder).string()), model_(std::move(model)) {}

bool Checkpointer::should_save(int64_t step, int64_t last_step) const {
  if (!cfg_.enable || cfg_.load_only) return false;
  if (step == 1 && cfg_.enable_first_step_checkpoint) return true;
  return step % cfg_.interval == 0 || step == last_step;
}

std::vector<int64_t> Checkpointer::saved_steps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(folder_, ec)) return steps;
  for (const auto& e : fs::directory_iterator(folder_, ec)) {
    auto s = parse_step_dir(e.path());
    if (s && fs::exists(e.path() / "metadata.json")) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void Checkpointer::check_step_folders() const {
  std::error_code ec;
  if (!cfg_.enable || !fs::is_directory(folder_, ec)) return;
  for (const auto& e : fs::directory_iterator(folder_, ec)) {
    if (!parse_step_dir(e.path()) || fs::exists(e.path() / "metadata.json")) continue;
    const std::string dir = e.path().string();
    const bool hf = fs::exists(e.path() / "model.safetensors.index.json") || fs::exists(e.path() / "config.json") ||
                    fs::exists(e.path() / "model.safetensors");
    if (hf)
      throw InputError(dir + " is a Hugging Face export (checkpoint.last_save_in_hf), not a checkpoint a run resumes "
                       "from, and a save of that step would replace it; to train on from those weights set "
                       "checkpoint.initial_load_path to it with checkpoint.initial_load_in_hf and another "
                       "job.dump_folder");
    throw InputError(dir + " has no metadata.json (an unfinished or foreign save): ctitan cannot resume from it, and a "
                     "save of that step would replace it; move it out of " + folder_ + " or delete it");
  }
}

namespace {

// Runs a write of the file layer (common/file_io.h: every write checked,
// fsync'ed, renamed into place), its one-line error prefixed with what was
// being written: a full disk ends the save with one line, never a short shard.
template <typename F>
void checkpoint_write(const std::string& what, F&& write) {
  try {
    write();
  } catch (const InputError& e) {
    throw InputError("checkpoint: writing " + what + " failed: " + e.what());
  }
}

void write_rank_files_unwrapped(const fs::path& tmp_dir, int rank, const TensorPieces& pieces,
                                const nlohmann::json& rank_state, bool model_only) {
  const std::string bin = "rank" + std::to_string(rank) + ".bin";
  nlohmann::json index = nlohmann::json::array();
  AtomicFile out((tmp_dir / bin).string());
  int64_t offset = 0;
  for (const auto& p : pieces) {
    if (model_only && p.name.rfind("model.", 0) != 0) continue;
    // A snapshot is already contiguous on the host: no ATen call on the writer thread.
    const at::Tensor c = p.tensor.is_cpu() && p.tensor.is_contiguous() ? p.tensor : p.tensor.contiguous().cpu();
    const auto nbytes = static_cast<int64_t>(c.nbytes());
    out.write(std::string_view(static_cast<const char*>(c.data_ptr()), c.nbytes()));
    index.push_back({{"name", p.name},
                     {"dtype", c10::toString(c.scalar_type())},
                     {"global_shape", p.global_shape},
                     {"offsets", p.offsets.empty() ? std::vector<int64_t>(p.global_shape.size(), 0) : p.offsets},
                     {"shape", c.sizes().vec()},
                     {"file", bin},
                     {"offset", offset},
                     {"nbytes", nbytes},
                     {"crc32", crc32(c.data_ptr(), c.nbytes())}});
    offset += nbytes;
  }
  out.commit();
  write_file_atomic((tmp_dir / ("rank" + std::to_string(rank) + ".json")).string(),
                    nlohmann::json{{"tensors", index}, {"rank_state", rank_state}}.dump(1) + "\n");
}

// This rank's rank<R>.bin and rank<R>.json in `tmp_dir`, fsync'ed. Given
// contiguous CPU tensors it is file I/O only, so it may run on a background
// thread.
void write_rank_files(const fs::path& tmp_dir, int rank, const TensorPieces& pieces, const nlohmann::json& rank_state,
                      bool model_only) {
  checkpoint_write("rank " + std::to_string(rank) + "'s files",
                   [&] { write_rank_files_unwrapped(tmp_dir, rank, pieces, rank_state, model_only); });
}

// A copy of the pieces to save that training cannot change: contiguous CPU
// tensors, in page-locked memory from a GPU when `pinned`.
TensorPieces snapshot(const TensorPieces& pieces, bool model_only, bool pinned) {
  torch::NoGradGuard no_grad;
  TensorPieces out;
  for (const auto& p : pieces) {
    if (model_only && p.name.rfind("model.", 0) != 0) continue;
    at::Tensor copy;
    if (p.tensor.is_cpu()) {
      copy = p.tensor.clone(at::MemoryFormat::Contiguous);
    } else {
      copy = at::empty(p.tensor.sizes(), p.tensor.options().device(at::kCPU).pinned_memory(pinned));
      copy.copy_(p.tensor);
    }
    out.push_back({p.name, copy, p.global_shape, p.offsets});
  }
  return out;
}

}  // namespace

// A save whose rank files a background thread is writing.
struct Checkpointer::PendingSave {
  int64_t step = 0;
  fs::path tmp_dir, final_dir;
  nlohmann::json train_state;
  bool model_only = false;
  SaveGroup group;
  TensorPieces files;  // the snapshot the writer reads (freed on the calling thread, at the wait)
  nlohmann::json rank_state;
  std::thread writer;
  std::exception_ptr error;  // what the writer threw
};

Checkpointer::~Checkpointer() {
  if (pending_ && pending_->writer.joinable()) pending_->writer.join();
}

void Checkpointer::save_sharded(int64_t step, const TensorPieces& pieces, const nlohmann::json& train_state,
                                const nlohmann::json& rank_state, bool model_only, const SaveGroup& group) {
  wait_for_save();
  auto save = std::make_unique<PendingSave>();
  save->step = step;
  save->final_dir = fs::path(folder_) / ("step-" + std::to_string(step));
  // One temporary folder for all ranks; it becomes step-<N> only once every
  // rank's file is complete, so a crash never leaves a half-written step.
  save->tmp_dir = fs::path(folder_) / (".step-" + std::to_string(step) + ".tmp");
  save->train_state = train_state;
  save->model_only = model_only;
  save->group = group;
  if (group.rank == 0) {
    fs::create_directories(folder_);
    fs::remove_all(save->tmp_dir);
    fs::create_directories(save->tmp_dir);
  }
  if (group.world > 1) group.barrier();

  if (cfg_.async_mode == "disabled") {
    write_rank_files(save->tmp_dir, group.rank, pieces, rank_state, model_only);
    finish_save(*save);
    return;
  }
  save->files = snapshot(pieces, model_only, cfg_.async_mode == "async_with_pinned_mem");
  save->rank_state = rank_state;
  PendingSave* s = save.get();
  s->writer = std::thread([s] {
    try {
      write_rank_files(s->tmp_dir, s->group.rank, s->files, s->rank_state, s->model_only);
    } catch (...) {
      s->error = std::current_exception();
    }
  });
  pending_ = std::move(save);
}

void Checkpointer::wait_for_save() {
  if (!pending_) return;
  std::unique_ptr<PendingSave> save = std::move(pending_);
  save->writer.join();
  if (save->error) {
    const std::string what = "checkpoint: the asynchronous save of step " + std::to_string(save->step) + " failed: ";
    try {
      std::rethrow_exception(save->error);
    } catch (const InputError& e) {
      throw InputError(what + e.what());
    } catch (const std::exception& e) {
      throw std::runtime_error(what + e.what());
    }
  }
  finish_save(*save);
}

// Every rank's files are complete: rank 0 writes the metadata, renames the
// folder into place and prunes to keep_latest_k.
void Checkpointer::finish_save(PendingSave& save) {
  const SaveGroup& group = save.group;
  auto barrier = [&] {
    if (group.world > 1) group.barrier();
  };
  barrier();
  if (group.rank == 0) {
    const fs::path& tmp_dir = save.tmp_dir;
    nlohmann::json meta;
    meta["format"] = kFormat;
    meta["step"] = save.step;
    meta["model_only"] = save.model_only;
    meta["world_size"] = group.world;
    if (!model_.description.empty()) meta["model"] = to_json(model_.description);
    meta["train_state"] = save.train_state;
    meta["tensors"] = nlohmann::json::array();
    for (int r = 0; r < group.world; ++r) {
      std::ifstream in(tmp_dir / ("rank" + std::to_string(r) + ".json"));
      const nlohmann::json rank_index = nlohmann::json::parse(in);
      for (const auto& t : rank_index.at("tensors")) meta["tensors"].push_back(t);
    }
    checkpoint_write("the metadata",
                     [&] { write_file_atomic((tmp_dir / "metadata.json").string(), meta.dump(1) + "\n"); });
    fsync_path(tmp_dir);
    fs::remove_all(save.final_dir);
    fs::rename(tmp_dir, save.final_dir);
    fsync_path(folder_);

    if (cfg_.keep_latest_k > 0) {
      auto steps = saved_steps();
      while (static_cast<int64_t>(steps.size()) > cfg_.keep_latest_k) {
        fs::remove_all(fs::path(folder_) / ("step-" + std::to_string(steps.front())));
        steps.erase(steps.begin());
      }
    }
  }
  barrier();  // nobody trains on (or prunes) until the step is in place
}

std::optional<LoadedCheckpoint> Checkpointer::load_sharded(const TensorPieces& pieces, int rank) const {
  try {
    return load_impl(pieces, rank);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("checkpoint in " + folder_ + ": metadata is malformed (" + e.what() +
                     "); delete that step folder or set checkpoint.load_step to another step");
  }
}

namespace {

// The saved pieces of one step folder, by tensor name, as boxes (v1 files
// hold whole tensors, v2 files dim-0 row ranges); fills the boxes a layout
// asks for from whichever saved boxes overlap them.
class SavedPieces {
 public:
  SavedPieces(fs::path dir, const CheckpointMetadata& meta)
      : dir_(std::move(dir)), where_("checkpoint " + dir_.string()) {
    for (const SavedPieceEntry& e : meta.tensors) index_[e.name].push_back(e);
  }

  void fill(const TensorPiece& want) {
    const std::string& name = want.name;
    auto it = index_.find(name);
    if (it == index_.end())
      throw InputError(where_ + ": tensor '" + name + "' is missing (saved by a different model?); check model.flavor");
    const at::Tensor& t = want.tensor;
    const SavedPieceEntry& first = it->second.front();
    if (first.global_shape != want.global_shape || first.dtype != c10::toString(t.scalar_type()))
      throw InputError(where_ + ": tensor '" + name + "' has shape/dtype " + nlohmann::json(first.global_shape).dump() +
                       " " + message_text(first.dtype) + " but the model expects " +
                       nlohmann::json(want.global_shape).dump() + " " + c10::toString(t.scalar_type()) +
                       "; check model.flavor and training.mixed_precision_param");
    const Box want_box = make_box(want.offsets, t.sizes().vec());
    if (want_box.lo.size() != want.global_shape.size())
      throw std::logic_error("checkpoint load: '" + name + "' has " + std::to_string(want_box.lo.size()) +
                             " offsets for a " + std::to_string(want.global_shape.size()) + "-d tensor");
    torch::NoGradGuard no_grad;
    int64_t covered = 0;
    // parse_checkpoint_metadata checked every saved box against its global
    // shape (the same for all pieces of a name), so this arithmetic is in range.
    for (const SavedPieceEntry& e : it->second) {
      const Box saved = make_box(e.offsets, e.shape);
      const std::string in_file = "piece of '" + name + "' in " + message_text(e.file);
      const Box overlap = want_box.intersect(saved);
      if (overlap.volume() == 0) continue;
      if (e.nbytes != saved.volume() * t.element_size())
        throw InputError(where_ + ": " + in_file + " has the wrong size; delete this folder");
      auto buf = read(e, name);
      const at::Tensor src = at::from_blob(buf.data(), e.shape, at::TensorOptions().dtype(t.scalar_type()));
      narrow_to(t, want_box, overlap).copy_(narrow_to(src, saved, overlap));
      covered += overlap.volume();
    }
    if (covered != want_box.volume())
      throw InputError(where_ + ": box " + want_box.describe() + " of '" + name + "' is " +
                       (covered < want_box.volume() ? "not covered by the saved pieces (a rank's file is missing from "
                                                      "metadata.json)"
                                                    : "covered twice (overlapping saved pieces)") +
                       "; delete this folder");
  }

 private:
  // One piece's bytes, checked against the file's size and the CRC-32.
  std::vector<char> read(const SavedPieceEntry& e, const std::string& name) {
    const std::string& file = e.file;
    const std::string shown = message_text(file);
    const fs::path path = confined_file(dir_, file, where_, "the entry of tensor '" + name + "'");
    if (!file_sizes_.count(file)) {
      std::error_code ec;
      const auto size = fs::file_size(path, ec);
      if (ec)
        throw InputError(where_ + ": " + shown + " is missing (a rank's shard); restore it or delete this folder");
      file_sizes_[file] = static_cast<int64_t>(size);
    }
    if (e.offset + e.nbytes > file_sizes_[file])
      throw InputError(where_ + ": " + shown + " is truncated at tensor '" + name + "'; restore it or delete this folder");
    std::vector<char> buf(e.nbytes);
    std::ifstream data(path, std::ios::binary);
    data.seekg(e.offset);
    data.read(buf.data(), e.nbytes);
    if (!data || crc32(buf.data(), buf.size()) != e.crc32)
      throw InputError(where_ + ": checksum mismatch in " + shown + " at tensor '" + name +
                       "' (file corrupt); delete this folder or set checkpoint.load_step to another step");
    return buf;
  }

  fs::path dir_;
  std::string where_;
  std::map<std::string, std::vector<SavedPieceEntry>> index_;
  std::map<std::string, int64_t> file_sizes_;
};

}  // namespace

fs::path Checkpointer::step_dir_to_load() const {
  if (cfg_.load_step >= 0) {
    const fs::path dir = fs::path(folder_) / ("step-" + std::to_string(cfg_.load_step));
    if (!fs::exists(dir / "metadata.json"))
      throw InputError("checkpoint.load_step=" + std::to_string(cfg_.load_step) + ": no checkpoint at " +
                       dir.string() + "; existing steps are listed under " + folder_);
    return dir;
  }
  const auto steps = saved_steps();
  // TorchTitan's initial_load_path: the checkpoint to start from while the
  // run's own folder holds none (a Hugging Face one is loaded elsewhere).
  if (steps.empty() && !cfg_.initial_load_path.empty() && !cfg_.initial_load_in_hf) {
    const fs::path dir = cfg_.initial_load_path;
    if (!fs::exists(dir / "metadata.json"))
      throw InputError("checkpoint.initial_load_path: no checkpoint at " + dir.string() +
                       " (expected a step-<N> folder holding metadata.json)");
    return dir;
  }
  if (steps.empty()) return {};
  return fs::path(folder_) / ("step-" + std::to_string(steps.back()));
}

void Checkpointer::check_resumable() const {
  if (!cfg_.enable) return;
  const auto steps = saved_steps();
  if (steps.empty() && cfg_.load_step < 0) return;  // a fresh start, or initial_load_path: weights are fine there
  const fs::path dir = step_dir_to_load();
  CheckpointMetadata meta;
  try {
    meta = read_metadata(dir);
  } catch (const InputError&) {
    return;  // reported properly by load_impl
  }
  // A run resumes from a full checkpoint only (TorchTitan refuses a
  // weights-only one too): resuming from a finished run's weights-only save
  // would restart its optimizer, schedule and data under a step number
  // already written. Step 0 is a seed checkpoint: weights to start from.
  if (meta.model_only && meta.step > 0)
    throw InputError("checkpoint " + dir.string() + " holds the weights only (the last save of a finished run under "
                     "checkpoint.last_save_model_only = true), so the run cannot resume from it: to extend a run, "
                     "train it with --checkpoint.no_last_save_model_only; to start a new run from these weights, "
                     "set checkpoint.initial_load_path to this folder with another job.dump_folder");
}

void Checkpointer::check_model() const {
  if (!cfg_.enable || model_.description.empty()) return;
  const fs::path dir = step_dir_to_load();
  if (dir.empty()) return;  // a fresh start, or a Hugging Face initial load (checked by its importer)
  const CheckpointMetadata meta = read_metadata(dir);
  const bool initial = saved_steps().empty() && cfg_.load_step < 0;
  const std::string head = (initial ? "cannot start from checkpoint.initial_load_path " : "cannot resume from ") +
                           dir.string() + ": it holds ";
  const std::string tail = initial ? "; set [model] to that checkpoint's model, or start from a checkpoint of this one"
                                   : "; resume with the same model, or start a new run in another job.dump_folder";
  if (const std::string diff = first_model_difference(meta.model, model_.description); !diff.empty())
    throw InputError(head + "a model with " + diff + tail);

  // The tensors, whatever the description said (older checkpoints have none):
  // the names loaded (weights only: "model.*"; none under exclude_from_loading).
  const bool weights_only = meta.model_only || (initial && cfg_.initial_load_model_only);
  const auto loaded = [&](const std::string& name) {
    if (weights_only && name.rfind("model.", 0) != 0) return false;
    for (const auto& ex : cfg_.exclude_from_loading)
      if (name.rfind(ex, 0) == 0) return false;
    return true;
  };
  std::map<std::string, const std::vector<int64_t>*> saved;
  for (const SavedPieceEntry& e : meta.tensors) saved.emplace(e.name, &e.global_shape);
  std::map<std::string, const std::vector<int64_t>*> expected;
  for (const auto& [name, shape] : model_.tensors) {
    expected.emplace(name, &shape);
    if (!loaded(name)) continue;
    const auto it = saved.find(name);
    if (it == saved.end())
      throw InputError(head + "no tensor '" + name + "', which this run's model has (another model.flavor or "
                       "model.n_layers?)" + tail);
    if (*it->second != shape)
      throw InputError(head + "tensor '" + name + "' of shape " + nlohmann::json(*it->second).dump() +
                       ", this run's model has " + nlohmann::json(shape).dump() + tail);
  }
  for (const SavedPieceEntry& e : meta.tensors)
    if (loaded(e.name) && !expected.count(e.name))
      throw InputError(head + "tensor '" + message_text(e.name) + "', which this run's model does not have (another "
                       "model.flavor or model.n_layers?)" + tail);
}

std::optional<LoadedCheckpoint> Checkpointer::load_impl(const TensorPieces& pieces, int rank) const {
  const fs::path dir = step_dir_to_load();
  if (dir.empty()) return std::nullopt;
  const std::string where = "checkpoint " + dir.string();
  const CheckpointMetadata meta = read_metadata(dir);

  LoadedCheckpoint loaded;
  loaded.step = meta.step;
  loaded.model_only = meta.model_only;
  // checkpoint.initial_load_model_only: a start from initial_load_path takes
  // the weights only (and starts at step 0).
  const bool initial = saved_steps().empty() && cfg_.load_step < 0;
  if (initial && cfg_.initial_load_model_only) loaded.model_only = true;
  loaded.world_size = meta.world_size;
  loaded.train_state = meta.train_state;
  loaded.path = dir.string();
  const fs::path rank_file = dir / ("rank" + std::to_string(rank) + ".json");
  if (rank < loaded.world_size && fs::exists(rank_file))
    loaded.rank_state =
        parse_rank_state(read_file_bounded(rank_file.string(), "checkpoint rank file", kMaxJsonBytes), where);

  SavedPieces saved(dir, meta);
  for (const auto& want : pieces) {
    if (loaded.model_only && want.name.rfind("model.", 0) != 0) continue;
    bool excluded = false;
    for (const auto& ex : cfg_.exclude_from_loading) excluded = excluded || want.name.rfind(ex, 0) == 0;
    if (!excluded) saved.fill(want);
  }
  return loaded;
}

}  // namespace ctitan
