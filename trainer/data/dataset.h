// Data loaders: each rank's stream of token batches for the train loop.
//
//   synthetic  uniform random ids in [0, vocab_size) (throughput runs)
//   markov     a seeded sparse Markov chain: learnable, with a known best
//              loss (markov_entropy_nats) so loss curves can be judged
//   text       .txt / .jsonl ({"text": ...} per line, like C4) files or a
//              folder of them, tokenized with a Hugging Face tokenizer.json
//   c4, c4_test, c4_validation
//              TorchTitan's names: the text loader over local C4 files
//              (.json / .json.gz shards as allenai/c4 publishes them)
//   bin        pre-tokenized shards: llm.c's .bin (header) or raw uint16 /
//              uint32 (".u32.bin") token files, memory-mapped
//
// Every loader cuts its stream into windows of seq_len + 1 tokens; inputs
// are window[:-1] and labels window[1:] (TorchTitan's convention), and data
// parallel rank r takes every dp_world-th window (or row) starting at r.
// state() is small JSON that, after load_state() on a fresh loader with the
// same options, makes it continue with exactly the batches the original
// would have produced.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ctitan {

struct TokenBatch {
  int64_t batch = 0, seq_len = 0;
  std::vector<int64_t> inputs,
      labels;  // row-major [batch][seq_len]; labels = inputs shifted by one
};

struct DataOptions {
  std::string dataset;                               // synthetic | markov | text | bin | c4*
  std::string path;                                  // file or folder (text, bin, c4*)
  std::string path_key;                              // the config key `path` came from (messages);
                                                     // empty: training.dataset_path
  std::string tokenizer_path;                        // tokenizer.json or its folder (text)
  int64_t batch = 8, seq_len = 256, vocab_size = 0;  // vocab_size 0: unchecked (text, bin)
  uint64_t seed = 0;
  // markov: the seed of the chain (its successor table); unset: `seed`. A
  // validation set samples the training chain with a seed of its own.
  std::optional<uint64_t> table_seed;
  int64_t dp_rank = 0, dp_world = 1;
};

class DataLoader {  // one per rank; not thread-safe
 public:
  virtual ~DataLoader() = default;
  virtual void next(TokenBatch& out) = 0;                // fills out; reuses its storage
  virtual nlohmann::json state() const = 0;              // position, saved in checkpoints
  virtual void load_state(const nlohmann::json& s) = 0;  // throws InputError if incompatible
  virtual std::string describe() const = 0;              // one line for logs
  // The token that ends a document (block_causal attention, documents.h):
  // the tokenizer's EOS; synthetic and markov data have no tokenizer and
  // use id 0, TorchTitan's ModelArgs.eos_id default (uniform ids make
  // documents of geometric length, mean vocab_size). -1: none.
  virtual int64_t eos_id() const { return -1; }
};

// Throws InputError on bad options or unreadable / garbled data.
std::unique_ptr<DataLoader> make_data_loader(const DataOptions& opts);

// Entropy (nats per token) of the markov dataset's next-token distribution:
// the lowest mean cross-entropy any model can reach on it.
double markov_entropy_nats(int64_t vocab_size, uint64_t seed);

}  // namespace ctitan
