// The synthetic (uniform random) and markov (learnable) datasets. Both are
// counter-based: every token is a pure function of (seed, row, position),
// so the whole state is the number of batches served.
#include <algorithm>
#include <cmath>

#include "common/errors.h"
#include "trainer/data/loaders.h"

namespace ctitan {
namespace data_detail {
namespace {

// Successor probabilities of every markov token, most likely first. The
// skew keeps the entropy (~0.91 nats) far below log(vocab) so a model that
// learns the table shows a clear drop in loss.
constexpr double kSuccessorProbs[] = {0.70, 0.15, 0.10, 0.05};
constexpr int64_t kSuccessors = 4;

// Streams of different purposes draw from unrelated counters.
constexpr uint64_t kTableStream = 1, kStartStream = 2, kStepStream = 3, kUniformStream = 4;

int64_t successor_count(int64_t vocab) { return std::min(kSuccessors, vocab); }

// Probabilities of the first `k` successors, renormalised (k < 4 only for
// vocabularies smaller than 4).
double successor_prob(int64_t j, int64_t k) {
  double total = 0;
  for (int64_t i = 0; i < k; ++i) total += kSuccessorProbs[i];
  return kSuccessorProbs[j] / total;
}

double to_unit(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

class SyntheticLoader : public DataLoader {
 public:
  SyntheticLoader(const DataOptions& opts, bool markov) : opts_(opts), markov_(markov) {
    if (opts.vocab_size < 1 || (markov && opts.vocab_size < 2)) {
      throw InputError(std::string(markov ? "markov" : "synthetic") +
                       " dataset needs vocab_size >= " + (markov ? "2" : "1") + " (got " +
                       std::to_string(opts.vocab_size) + "): check model.flavor");
    }
    if (markov_) build_table();
    window_.resize(static_cast<size_t>(opts.seq_len + 1));
  }

  void next(TokenBatch& out) override {
    shape_batch(opts_, out);
    const auto vocab = static_cast<uint64_t>(opts_.vocab_size);
    for (int64_t r = 0; r < opts_.batch; ++r) {
      // Rows are numbered globally and dealt round-robin, like the windows
      // of the file datasets, so ranks never share one.
      const auto row =
          static_cast<uint64_t>((batches_ * opts_.batch + r) * opts_.dp_world + opts_.dp_rank);
      if (!markov_) {
        for (size_t p = 0; p < window_.size(); ++p) {
          window_[p] =
              static_cast<int64_t>(hash_counter(opts_.seed, kUniformStream, row, p) % vocab);
        }
      } else {
        window_[0] = static_cast<int64_t>(hash_counter(opts_.seed, kStartStream, row, 0) % vocab);
        for (size_t p = 1; p < window_.size(); ++p) {
          window_[p] = step(window_[p - 1], to_unit(hash_counter(opts_.seed, kStepStream, row, p)));
        }
      }
      put_window(window_.data(), r, out);
    }
    ++batches_;
  }

  nlohmann::json state() const override {
    return {{"dataset", kind()},
            {"seed", opts_.seed},
            {"vocab_size", opts_.vocab_size},
            {"batches", batches_}};
  }

  void load_state(const nlohmann::json& s) override {
    check_state(s, kind(), state(), {"seed", "vocab_size"});
    if (!s.contains("batches") || !s.at("batches").is_number_integer() ||
        s.at("batches").get<int64_t>() < 0) {
      throw InputError("checkpoint data state " + s.dump() + " has no valid \"batches\" count");
    }
    batches_ = s.at("batches").get<int64_t>();
  }

  int64_t eos_id() const override { return 0; }

  std::string describe() const override {
    std::string d = kind() + ": vocab " + std::to_string(opts_.vocab_size) + ", seed " +
                    std::to_string(opts_.seed);
    if (markov_ && opts_.table_seed && *opts_.table_seed != opts_.seed)
      d += " (the chain of seed " + std::to_string(*opts_.table_seed) + ")";
    if (markov_)
      d += ", entropy " + std::to_string(markov_entropy_nats(opts_.vocab_size, opts_.seed)) +
           " nats";
    return d + ", " + dp_summary(opts_);
  }

 private:
  std::string kind() const { return markov_ ? "markov" : "synthetic"; }

  // Each token gets successor_count distinct successors drawn from the seed.
  void build_table() {
    const int64_t k = successor_count(opts_.vocab_size);
    const auto vocab = static_cast<uint64_t>(opts_.vocab_size);
    table_.resize(static_cast<size_t>(opts_.vocab_size * k));
    for (int64_t t = 0; t < opts_.vocab_size; ++t) {
      int64_t* row = &table_[static_cast<size_t>(t * k)];
      uint64_t draw = 0;
      for (int64_t j = 0; j < k;) {
        const auto cand =
            static_cast<int64_t>(hash_counter(opts_.table_seed.value_or(opts_.seed), kTableStream, t, draw++) % vocab);
        if (std::find(row, row + j, cand) == row + j) row[j++] = cand;
      }
    }
  }

  int64_t step(int64_t from, double u) const {
    const int64_t k = successor_count(opts_.vocab_size);
    const int64_t* row = &table_[static_cast<size_t>(from * k)];
    for (int64_t j = 0; j < k - 1; ++j) {
      u -= successor_prob(j, k);
      if (u < 0) return row[j];
    }
    return row[k - 1];
  }

  DataOptions opts_;
  bool markov_;
  int64_t batches_ = 0;
  std::vector<int64_t> table_;  // [vocab][successor_count]
  std::vector<int64_t> window_;
};

}  // namespace

std::unique_ptr<DataLoader> make_synthetic_loader(const DataOptions& opts, bool markov) {
  return std::make_unique<SyntheticLoader>(opts, markov);
}

}  // namespace data_detail

// Every row of the table has the same successor probabilities over distinct
// successors, so the entropy is the same from every token and does not
// depend on the seed (kept in the signature for callers that log it).
double markov_entropy_nats(int64_t vocab_size, uint64_t /*seed*/) {
  const int64_t k = data_detail::successor_count(vocab_size);
  double h = 0;
  for (int64_t j = 0; j < k; ++j) {
    const double p = data_detail::successor_prob(j, k);
    h -= p * std::log(p);
  }
  return h;
}

}  // namespace ctitan
