// Internals shared by the data loaders (dataset.cpp and the *_data.cpp
// files); the public API is dataset.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/data/dataset.h"

namespace ctitan::data_detail {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A counter-based random number: a pure function of its inputs, so any
// position of any stream can be produced without replaying the stream.
inline uint64_t hash_counter(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  return splitmix64(splitmix64(splitmix64(splitmix64(seed ^ 0x6A09E667F3BCC909ull) ^ a) ^ b) ^ c);
}

std::unique_ptr<DataLoader> make_synthetic_loader(const DataOptions& opts, bool markov);
std::unique_ptr<DataLoader> make_text_loader(const DataOptions& opts);
std::unique_ptr<DataLoader> make_bin_loader(const DataOptions& opts);

// `path` itself when it is a file, else the files in the folder whose names
// end with one of `suffixes`, sorted by name. Throws InputError when there
// is nothing to read; `hint` says what to do.
std::vector<std::string> list_data_files(const std::string& path,
                                         const std::vector<std::string>& suffixes,
                                         const std::string& hint);

// The config key the data path came from (training.dataset_path or
// validation.dataset_path), for messages.
inline std::string path_key(const DataOptions& opts) {
  return opts.path_key.empty() ? "training.dataset_path" : opts.path_key;
}

// File names (no folder) for the state, so a checkpoint detects that the
// data changed under it.
nlohmann::json file_names(const std::vector<std::string>& files);

// Throws InputError unless `s` is an object with "dataset" == kind and, for
// each key in `same`, the value that `mine` has.
void check_state(const nlohmann::json& s, const std::string& kind, const nlohmann::json& mine,
                 const std::vector<std::string>& same);

// Sizes `out` for opts.batch rows of opts.seq_len.
void shape_batch(const DataOptions& opts, TokenBatch& out);

// Writes window (seq_len + 1 tokens) as row `row` of inputs and labels.
void put_window(const int64_t* window, int64_t row, TokenBatch& out);

std::string dp_summary(const DataOptions& opts);  // "batch 8 x seq 256, dp rank 0/1"

}  // namespace ctitan::data_detail
