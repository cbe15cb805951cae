#include "trainer/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "trainer/errors.h"

namespace fs = std::filesystem;

namespace ctitan {

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

namespace {

const char* kFormat = "ctitan-checkpoint-v1";

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

}  // namespace

Checkpointer::Checkpointer(const CheckpointSection& cfg, const std::string& dump_folder)
    : cfg_(cfg), folder_((fs::path(dump_folder) / cfg.folder).string()) {}

bool Checkpointer::should_save(int64_t step, int64_t last_step) const {
  if (!cfg_.enable) return false;
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

void Checkpointer::save(int64_t step, const NamedTensors& tensors, const nlohmann::json& train_state,
                        bool model_only) {
  fs::create_directories(folder_);
  const fs::path final_dir = fs::path(folder_) / ("step-" + std::to_string(step));
  const fs::path tmp_dir = fs::path(folder_) / (".step-" + std::to_string(step) + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir);

  nlohmann::json meta;
  meta["format"] = kFormat;
  meta["step"] = step;
  meta["model_only"] = model_only;
  meta["world_size"] = 1;
  meta["train_state"] = train_state;
  meta["tensors"] = nlohmann::json::array();
  {
    std::ofstream out(tmp_dir / "rank0.bin", std::ios::binary);
    int64_t offset = 0;
    for (const auto& [name, t] : tensors) {
      if (model_only && name.rfind("model.", 0) != 0) continue;
      at::Tensor c = t.contiguous();
      const auto nbytes = static_cast<int64_t>(c.nbytes());
      out.write(static_cast<const char*>(c.data_ptr()), nbytes);
      meta["tensors"].push_back({{"name", name},
                                 {"dtype", c10::toString(c.scalar_type())},
                                 {"shape", c.sizes().vec()},
                                 {"file", "rank0.bin"},
                                 {"offset", offset},
                                 {"nbytes", nbytes},
                                 {"crc32", crc32(c.data_ptr(), c.nbytes())}});
      offset += nbytes;
    }
    if (!out) throw std::runtime_error("checkpoint: writing " + (tmp_dir / "rank0.bin").string() + " failed");
  }
  {
    std::ofstream out(tmp_dir / "metadata.json");
    out << meta.dump(1) << "\n";
    if (!out) throw std::runtime_error("checkpoint: writing metadata in " + tmp_dir.string() + " failed");
  }
  fsync_path(tmp_dir / "rank0.bin");
  fsync_path(tmp_dir / "metadata.json");
  fsync_path(tmp_dir);
  fs::remove_all(final_dir);
  fs::rename(tmp_dir, final_dir);
  fsync_path(folder_);

  if (cfg_.keep_latest_k > 0) {
    auto steps = saved_steps();
    while (static_cast<int64_t>(steps.size()) > cfg_.keep_latest_k) {
      fs::remove_all(fs::path(folder_) / ("step-" + std::to_string(steps.front())));
      steps.erase(steps.begin());
    }
  }
}

std::optional<LoadedCheckpoint> Checkpointer::load(const NamedTensors& tensors) const {
  try {
    return load_impl(tensors);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("checkpoint in " + folder_ + ": metadata.json is malformed (" + e.what() +
                     "); delete that step folder or set checkpoint.load_step to another step");
  }
}

std::optional<LoadedCheckpoint> Checkpointer::load_impl(const NamedTensors& tensors) const {
  auto steps = saved_steps();
  fs::path dir;
  if (cfg_.load_step >= 0) {
    dir = fs::path(folder_) / ("step-" + std::to_string(cfg_.load_step));
    if (!fs::exists(dir / "metadata.json"))
      throw InputError("checkpoint.load_step=" + std::to_string(cfg_.load_step) + ": no checkpoint at " +
                       dir.string() + "; existing steps are listed under " + folder_);
  } else if (!steps.empty()) {
    // Newest full checkpoint; a weights-only export (last_save_model_only)
    // is used only when nothing else exists.
    dir = fs::path(folder_) / ("step-" + std::to_string(steps.back()));
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      const fs::path cand = fs::path(folder_) / ("step-" + std::to_string(*it));
      try {
        std::ifstream in(cand / "metadata.json");
        if (!nlohmann::json::parse(in).value("model_only", false)) {
          dir = cand;
          break;
        }
      } catch (const nlohmann::json::exception&) {
        dir = cand;  // reported properly below
        break;
      }
    }
  } else {
    return std::nullopt;
  }
  const std::string where = "checkpoint " + dir.string();
  nlohmann::json meta;
  try {
    std::ifstream in(dir / "metadata.json");
    in >> meta;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(where + ": metadata.json is not valid JSON (" + e.what() +
                     "); delete this folder or set checkpoint.load_step to another step");
  }
  if (meta.value("format", "") != kFormat)
    throw InputError(where + ": unknown format '" + meta.value("format", "") + "', expected " + kFormat);

  LoadedCheckpoint loaded;
  loaded.step = meta.value("step", int64_t{0});
  loaded.model_only = meta.value("model_only", false);
  loaded.train_state = meta.value("train_state", nlohmann::json::object());
  loaded.path = dir.string();

  std::map<std::string, nlohmann::json> index;
  for (const auto& t : meta["tensors"]) index[t.at("name").get<std::string>()] = t;
  std::ifstream data(dir / "rank0.bin", std::ios::binary);
  if (!data) throw InputError(where + ": rank0.bin is missing; delete this folder or pick another load_step");
  const auto file_size = static_cast<int64_t>(fs::file_size(dir / "rank0.bin"));
  for (const auto& [name, t] : tensors) {
    if (loaded.model_only && name.rfind("model.", 0) != 0) continue;
    for (const auto& ex : cfg_.exclude_from_loading)
      if (name.rfind(ex, 0) == 0) goto next_tensor;
    {
      auto it = index.find(name);
      if (it == index.end())
        throw InputError(where + ": tensor '" + name + "' is missing (saved by a different model?); check model.flavor");
      const auto& e = it->second;
      const auto shape = e.at("shape").get<std::vector<int64_t>>();
      if (shape != t.sizes().vec() || e.at("dtype").get<std::string>() != c10::toString(t.scalar_type()))
        throw InputError(where + ": tensor '" + name + "' has shape/dtype " + e.at("shape").dump() + " " +
                         e.at("dtype").get<std::string>() + " but the model expects " +
                         nlohmann::json(t.sizes().vec()).dump() + " " + c10::toString(t.scalar_type()) +
                         "; check model.flavor and training.mixed_precision_param");
      const int64_t offset = e.at("offset").get<int64_t>(), nbytes = e.at("nbytes").get<int64_t>();
      if (offset + nbytes > file_size || nbytes != static_cast<int64_t>(t.nbytes()))
        throw InputError(where + ": rank0.bin is truncated at tensor '" + name + "'; delete this folder");
      std::vector<char> buf(nbytes);
      data.seekg(offset);
      data.read(buf.data(), nbytes);
      if (crc32(buf.data(), buf.size()) != e.at("crc32").get<uint32_t>())
        throw InputError(where + ": checksum mismatch in tensor '" + name +
                         "' (file corrupt); delete this folder or set checkpoint.load_step to another step");
      torch::NoGradGuard no_grad;
      at::Tensor dst = t;
      std::memcpy(dst.data_ptr(), buf.data(), nbytes);
    }
  next_tensor:;
  }
  return loaded;
}

}  // namespace ctitan
