// make_data_loader and the helpers every loader shares.
#include <algorithm>
#include <filesystem>
#include <limits>

#include "common/errors.h"
#include "common/file_io.h"
#include "trainer/data/loaders.h"

namespace ctitan {
namespace data_detail {

namespace fs = std::filesystem;

std::vector<std::string> list_data_files(const std::string& path,
                                         const std::vector<std::string>& suffixes,
                                         const std::string& hint) {
  std::error_code ec;
  if (path.empty()) throw InputError("the dataset path is empty: " + hint);
  if (!fs::exists(path, ec)) throw InputError(path + ": no such file or folder: " + hint);
  if (!fs::is_directory(path, ec)) {
    // A FIFO or a device would block or never end: only regular files are data.
    check_regular_file(path, "dataset file", std::numeric_limits<std::uintmax_t>::max());
    return {path};
  }
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    const std::string name = entry.path().filename().string();
    for (const std::string& s : suffixes) {
      if (name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        files.push_back(entry.path().string());
        break;
      }
    }
  }
  if (ec) throw InputError(path + ": cannot list folder (" + ec.message() + ")");
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::string list;
    for (const std::string& s : suffixes) list += (list.empty() ? "*" : ", *") + s;
    throw InputError(path + ": no " + list + " files in this folder: " + hint);
  }
  return files;
}

nlohmann::json file_names(const std::vector<std::string>& files) {
  nlohmann::json names = nlohmann::json::array();
  for (const std::string& f : files) names.push_back(fs::path(f).filename().string());
  return names;
}

void check_state(const nlohmann::json& s, const std::string& kind, const nlohmann::json& mine,
                 const std::vector<std::string>& same) {
  if (!s.is_object() || !s.contains("dataset")) {
    throw InputError("checkpoint data state " + s.dump() +
                     " is not a data loader state: was it written by ctitan?");
  }
  if (s.at("dataset") != kind) {
    throw InputError("checkpoint data state is for dataset " + s.at("dataset").dump() +
                     " but this run uses \"" + kind +
                     "\": resume with the same training.dataset or start without the checkpoint");
  }
  for (const std::string& key : same) {
    const nlohmann::json theirs = s.contains(key) ? s.at(key) : nlohmann::json();
    if (theirs != mine.at(key)) {
      throw InputError("checkpoint data state has " + key + " = " + theirs.dump() +
                       " but this run has " + mine.at(key).dump() +
                       ": resume with the same data settings");
    }
  }
}

void shape_batch(const DataOptions& opts, TokenBatch& out) {
  out.batch = opts.batch;
  out.seq_len = opts.seq_len;
  out.inputs.resize(static_cast<size_t>(opts.batch * opts.seq_len));
  out.labels.resize(static_cast<size_t>(opts.batch * opts.seq_len));
}

void put_window(const int64_t* window, int64_t row, TokenBatch& out) {
  const int64_t s = out.seq_len;
  std::copy(window, window + s, out.inputs.begin() + row * s);
  std::copy(window + 1, window + s + 1, out.labels.begin() + row * s);
}

std::string dp_summary(const DataOptions& opts) {
  return "batch " + std::to_string(opts.batch) + " x seq " + std::to_string(opts.seq_len) +
         ", dp rank " + std::to_string(opts.dp_rank) + "/" + std::to_string(opts.dp_world);
}

}  // namespace data_detail

std::unique_ptr<DataLoader> make_data_loader(const DataOptions& opts) {
  using namespace data_detail;
  if (opts.batch < 1)
    throw InputError("data loader batch size is " + std::to_string(opts.batch) + ": must be >= 1");
  if (opts.seq_len < 1)
    throw InputError("training.seq_len is " + std::to_string(opts.seq_len) + ": must be >= 1");
  if (opts.dp_world < 1 || opts.dp_rank < 0 || opts.dp_rank >= opts.dp_world) {
    throw InputError("data-parallel rank " + std::to_string(opts.dp_rank) + " of " +
                     std::to_string(opts.dp_world) + " is out of range");
  }
  if (opts.vocab_size < 0) throw InputError("vocab_size is negative");
  const std::string& d = opts.dataset;
  if (d == "synthetic" || d == "markov") return make_synthetic_loader(opts, d == "markov");
  if (d == "text") return make_text_loader(opts);
  if (d == "bin") return make_bin_loader(opts);
  if (d == "c4" || d == "c4_test" || d == "c4_validation") {
    // TorchTitan streams these from the Hugging Face hub (c4_test from its
    // tests/assets); ctitan reads the same files from disk and fetches nothing.
    if (!opts.path.empty()) return make_text_loader(opts);
    const std::string key = path_key(opts);
    const std::string file = d == "c4_validation" ? "en/c4-validation.00000-of-00008.json.gz"
                             : d == "c4_test"     ? "TorchTitan's tests/assets/c4_test/data.json"
                                                  : "en/c4-train.00000-of-01024.json.gz";
    throw InputError("dataset \"" + d + "\" is read from disk and " + key +
                     " is not set: download " + file +
                     (d == "c4_test" ? "" : " (and more shards) from https://huggingface.co/datasets/allenai/c4") +
                     " and set " + key + " to the file or its folder (ctitan downloads nothing at run time)");
  }
  const std::string key = path_key(opts);
  throw InputError("unknown " + key.substr(0, key.find('.')) + ".dataset \"" + d +
                   "\": expected synthetic, markov, text, bin, c4, c4_test or c4_validation");
}

}  // namespace ctitan
