// Data loader tests: shapes, shifted labels, determinism, exact resume from
// state(), disjoint data-parallel windows, file formats and their errors.
// Expected windows are computed here from the files' contents directly.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/errors.h"
#include "trainer/data/dataset.h"
#include "trainer/data/tokenizer.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int64_t>;

// A fresh folder under the temp dir, removed with its contents at scope exit.
struct TempDir {
  std::string tmpl = (fs::temp_directory_path() / "ctitan_data_XXXXXX").string();
  const fs::path root = mkdtemp(tmpl.data());
  std::error_code ec;
  ~TempDir() { fs::remove_all(root, ec); }
  std::string sub(const std::string& name) const { return (root / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    fs::create_directories((root / name).parent_path());
    std::ofstream(root / name, std::ios::binary) << bytes;
    return sub(name);
  }
};

template <typename T>
std::string as_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A byte-level tokenizer with ids = byte values, a few merges (ids 256+),
// so that chunked and whole-text encodings differ if the text loader cut a
// pre-token, then BOS and EOS.
std::string test_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_alphabet()[b]] = b;
  const std::string sp = byte_level_alphabet()[' '], nl = byte_level_alphabet()['\n'];
  const std::vector<std::pair<std::string, std::string>> merges = {
      {sp, "t"}, {"h", "e"}, {sp + "t", "he"}, {nl, nl}, {"o", "n"}, {sp, sp}, {"e", "s"}};
  nlohmann::json m = nlohmann::json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    m.push_back(a + " " + b);
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
  }
  nlohmann::json added = nlohmann::json::array();
  for (const char* special : {"<|begin_of_text|>", "<|end_of_text|>"}) {
    added.push_back({{"id", next}, {"content", special}, {"special", true}});
    vocab[special] = next++;
  }
  nlohmann::json j = {
      {"added_tokens", added},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}}};
  return j.dump();
}

DataOptions options(const std::string& dataset, int64_t batch, int64_t seq, int64_t vocab) {
  DataOptions o;
  o.dataset = dataset, o.batch = batch, o.seq_len = seq, o.vocab_size = vocab, o.seed = 1234;
  return o;
}

// Builds a loader and reads one batch: where file contents are checked.
void first_batch(const DataOptions& o) {
  TokenBatch b;
  make_data_loader(o)->next(b);
}

std::vector<TokenBatch> take(DataLoader& loader, int n) {
  std::vector<TokenBatch> out(n);
  for (TokenBatch& b : out) loader.next(b);
  return out;
}

// Rows of a batch as windows of seq_len + 1 tokens (inputs + last label).
std::vector<Ids> windows_of(const TokenBatch& b) {
  std::vector<Ids> rows;
  for (int64_t r = 0; r < b.batch; ++r) {
    Ids w(b.inputs.begin() + r * b.seq_len, b.inputs.begin() + (r + 1) * b.seq_len);
    w.push_back(b.labels[(r + 1) * b.seq_len - 1]);
    rows.push_back(w);
  }
  return rows;
}

void expect_shape_and_shift(const TokenBatch& b, int64_t batch, int64_t seq, int64_t vocab) {
  ASSERT_EQ(b.batch, batch);
  ASSERT_EQ(b.seq_len, seq);
  ASSERT_TRUE(b.inputs.size() == static_cast<size_t>(batch * seq) &&
              b.labels.size() == b.inputs.size());
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t i = 0; i + 1 < seq; ++i)
      ASSERT_EQ(b.labels[r * seq + i], b.inputs[r * seq + i + 1]);
  }
  for (const Ids* ids : {&b.inputs, &b.labels}) {
    for (int64_t v : *ids) ASSERT_TRUE(v >= 0 && v < vocab) << v;
  }
}

// Uninterrupted loader vs. one rebuilt from state() after `k` batches (the
// state round-trips through text, as in a checkpoint).
void expect_exact_resume(const DataOptions& opts, int k, int more) {
  auto a = make_data_loader(opts);
  take(*a, k);
  const std::string saved = a->state().dump();
  const auto expected = take(*a, more);
  auto b = make_data_loader(opts);
  b->load_state(nlohmann::json::parse(saved));
  const auto got = take(*b, more);
  for (int i = 0; i < more; ++i) {
    EXPECT_TRUE(got[i].inputs == expected[i].inputs && got[i].labels == expected[i].labels)
        << "batch " << k + i;
  }
}

// Rank r of `world` must see exactly windows r, r + world, ... of the
// single-rank stream.
void expect_dp_strided(DataOptions opts, int64_t world, int batches) {
  opts.dp_world = 1, opts.dp_rank = 0;
  auto single = make_data_loader(opts);
  std::vector<Ids> all;
  for (const TokenBatch& b : take(*single, static_cast<int>(batches * world))) {
    for (Ids& w : windows_of(b)) all.push_back(w);
  }
  for (int64_t r = 0; r < world; ++r) {
    opts.dp_world = world, opts.dp_rank = r;
    auto loader = make_data_loader(opts);
    size_t i = static_cast<size_t>(r);
    for (const TokenBatch& b : take(*loader, batches)) {
      for (const Ids& w : windows_of(b)) {
        ASSERT_LT(i, all.size());
        EXPECT_EQ(w, all[i]) << "rank " << r << " window " << i;
        i += static_cast<size_t>(world);
      }
    }
  }
}

void expect_input_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(DataSynthetic, ShapesShiftAndRange) {
  auto loader = make_data_loader(options("synthetic", 4, 16, 50));
  for (const TokenBatch& b : take(*loader, 3)) expect_shape_and_shift(b, 4, 16, 50);
  const Ids last = take(*loader, 1)[0].inputs;
  EXPECT_GT(std::set<int64_t>(last.begin(), last.end()).size(), 30u);  // 64 draws from 50 values
}

TEST(DataSynthetic, DeterministicResumableAndStrided) {
  DataOptions o = options("synthetic", 2, 32, 1000);
  auto a = make_data_loader(o), b = make_data_loader(o);
  const auto ba = take(*a, 3), bb = take(*b, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ba[i].inputs, bb[i].inputs);
  EXPECT_NE(ba[0].inputs, ba[1].inputs);
  o.seed = 99;
  EXPECT_NE(take(*make_data_loader(o), 1)[0].inputs, ba[0].inputs);
  expect_exact_resume(options("synthetic", 3, 8, 100), 5, 3);
  expect_dp_strided(options("synthetic", 3, 8, 100), 3, 2);
}

// Plug-in estimate of H(next | current) from the pairs in the batches.
double empirical_conditional_entropy(const std::vector<TokenBatch>& batches,
                                     size_t* max_successors) {
  std::map<int64_t, std::map<int64_t, double>> counts;
  double n = 0;
  for (const TokenBatch& b : batches) {
    for (size_t i = 0; i < b.inputs.size(); ++i) counts[b.inputs[i]][b.labels[i]] += 1, n += 1;
  }
  double h = 0;
  *max_successors = 0;
  for (const auto& [from, next] : counts) {
    double row = 0;
    for (const auto& [to, c] : next) row += c;
    for (const auto& [to, c] : next) h -= c / n * std::log(c / row);
    *max_successors = std::max(*max_successors, next.size());
  }
  return h;
}

TEST(DataMarkov, EntropyMatchesEmpiricalEstimate) {
  // Successor probabilities 0.7, 0.15, 0.1, 0.05 (the first three,
  // renormalised, when the vocab has only three tokens).
  EXPECT_NEAR(markov_entropy_nats(64, 7), 0.914285581467099, 1e-12);
  EXPECT_NEAR(markov_entropy_nats(3, 7), 0.753442461180238, 1e-12);
  for (const int64_t vocab : {int64_t{64}, int64_t{3}}) {
    DataOptions o = options("markov", 32, 256, vocab);
    o.seed = 7;
    auto loader = make_data_loader(o);
    const auto batches = take(*loader, 24);  // ~200k transitions
    expect_shape_and_shift(batches[0], 32, 256, vocab);
    size_t max_successors = 0;
    const double h = empirical_conditional_entropy(batches, &max_successors);
    EXPECT_NEAR(h, markov_entropy_nats(vocab, 7), 0.01) << "vocab " << vocab;
    EXPECT_EQ(max_successors, static_cast<size_t>(std::min<int64_t>(4, vocab)));
    EXPECT_LT(h, std::log(static_cast<double>(vocab)));
  }
}

TEST(DataMarkov, DeterministicResumableAndStrided) {
  const DataOptions o = options("markov", 4, 32, 500);
  EXPECT_EQ(take(*make_data_loader(o), 2)[1].inputs, take(*make_data_loader(o), 2)[1].inputs);
  expect_exact_resume(o, 4, 2);
  expect_dp_strided(o, 2, 3);
}

struct TextCorpus {
  TempDir dir;
  Tokenizer tok;
  Ids stream;  // one epoch of the expected token stream

  TextCorpus()
      : tok(Tokenizer::from_file(dir.write("tok/tokenizer.json", test_tokenizer_json()))) {}

  void add_jsonl(const std::string& name, const std::vector<std::string>& docs) {
    std::string text;
    for (const std::string& d : docs) {
      text += d.empty() ? "\n" : nlohmann::json({{"text", d}}).dump() + "\n";
      if (!d.empty()) add_doc(d);
    }
    dir.write("corpus/" + name, text);
  }
  void add_txt(const std::string& name, const std::string& text) {
    dir.write("corpus/" + name, text);
    add_doc(text);
  }
  void add_doc(const std::string& text) {
    stream.push_back(tok.bos_id());
    for (int64_t id : tok.encode(text)) stream.push_back(id);
    stream.push_back(tok.eos_id());
  }
  DataOptions opts(int64_t batch, int64_t seq) const {
    DataOptions o = options("text", batch, seq, tok.vocab_size());
    o.path = dir.sub("corpus");
    o.tokenizer_path = dir.sub("tok");
    return o;
  }
  // Window w of the endless stream.
  Ids window(int64_t w, int64_t seq) const {
    Ids out;
    for (int64_t i = 0; i <= seq; ++i)
      out.push_back(stream[static_cast<size_t>((w * (seq + 1) + i)) % stream.size()]);
    return out;
  }
};

void expect_windows(DataLoader& loader, const TextCorpus& c, int64_t seq, int batches) {
  int64_t w = 0;
  for (const TokenBatch& b : take(loader, batches)) {
    for (const Ids& got : windows_of(b)) ASSERT_EQ(got, c.window(w++, seq)) << "window " << w - 1;
  }
}

TEST(DataText, StreamIsBosTokensEosOverFilesAndEpochs) {
  TextCorpus c;
  c.add_jsonl("a.jsonl", {"the first document", "", "Ωmega and 日本語 then\n\nmore", "x"});
  c.add_txt("b.txt", "A plain text file.\nWith the lines\n\n  and spaces  \n");
  c.dir.write("corpus/notes.md", "ignored: not .txt/.jsonl/.json");
  auto loader = make_data_loader(c.opts(3, 7));
  EXPECT_NE(loader->describe().find("2 file(s)"), std::string::npos) << loader->describe();
  expect_windows(*loader, c, 7, 12);  // 288 tokens: several epochs of the ~110-token stream
  EXPECT_GE(loader->state().at("epoch").get<int64_t>(), 2);
}

TEST(DataText, LargeTxtChunksKeepWholeFileTokens) {
  TextCorpus c;
  // 10-byte units: the 1 MiB and 2 MiB marks fall after " then " (2^20 % 10
  // == 6), inside a pre-token, so a loader that cut chunks at fixed sizes
  // instead of before a letter-'\n' would change the ids there.
  std::string text;
  while (text.size() < (size_t{5} << 19)) text += " then the\n";
  c.add_txt("big.txt", text);
  const int64_t seq = 4095;
  const int batches = static_cast<int>(c.stream.size() / (8 * (seq + 1))) + 1;
  auto loader = make_data_loader(c.opts(8, seq));
  expect_windows(*loader, c, seq, batches);
  expect_exact_resume(c.opts(8, seq), batches / 2, 2);  // resumes inside the second chunk
}

TEST(DataText, ResumesExactlyAndStridesRanks) {
  TextCorpus c;
  std::vector<std::string> docs;
  for (int i = 0; i < 40; ++i)
    docs.push_back("document number " + std::to_string(i) + " says the thing");
  c.add_jsonl("a.jsonl", docs);
  c.add_txt("b.txt", "tail text\n");
  for (int k : {0, 1, 3, 7}) expect_exact_resume(c.opts(2, 13), k, 3);
  expect_dp_strided(c.opts(2, 13), 3, 4);
}

// gzip with zlib's own file writer (not the reader under test): one
// member per entry of `members`, concatenated as `cat a.gz b.gz` does.
std::string gzip_members(const std::vector<std::string>& members) {
  std::string out;
  for (const std::string& m : members) {
    z_stream zs{};
    EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    std::string buf(deflateBound(&zs, m.size()) + 64, '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(m.data()));
    zs.avail_in = static_cast<uInt>(m.size());
    zs.next_out = reinterpret_cast<Bytef*>(buf.data());
    zs.avail_out = static_cast<uInt>(buf.size());
    EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
    buf.resize(zs.total_out);
    deflateEnd(&zs);
    out += buf;
  }
  return out;
}

std::string jsonl_text(const std::vector<std::string>& docs) {
  std::string text;
  for (const std::string& d : docs) text += nlohmann::json({{"text", d}, {"url", "https://x"}}).dump() + "\n";
  return text;
}

// C4 as published: .json.gz shards of {"text", "timestamp", "url"} lines,
// read in name order, each document BOS + tokens + EOS, resumable anywhere.
TEST(DataText, C4GzipShardsReadInNameOrderAndResume) {
  TextCorpus c;
  std::vector<std::string> a, b;
  for (int i = 0; i < 30; ++i) a.push_back("shard zero document " + std::to_string(i));
  for (int i = 0; i < 30; ++i) b.push_back("shard one, text " + std::to_string(i) + " of C4");
  // Written out of order; two gzip members in the second shard.
  c.dir.write("corpus/c4-train.00001-of-01024.json.gz",
              gzip_members({jsonl_text({b.begin(), b.begin() + 11}), jsonl_text({b.begin() + 11, b.end()})}));
  c.dir.write("corpus/c4-train.00000-of-01024.json.gz", gzip_members({jsonl_text(a)}));
  for (const std::string& d : a) c.add_doc(d);
  for (const std::string& d : b) c.add_doc(d);
  for (const char* name : {"c4", "c4_test", "c4_validation", "text"}) {
    DataOptions o = c.opts(2, 31);
    o.dataset = name;
    auto loader = make_data_loader(o);
    EXPECT_NE(loader->describe().find("2 file(s)"), std::string::npos) << loader->describe();
    expect_windows(*loader, c, 31, 40);  // past the end of both shards: a second epoch
  }
  for (int k : {0, 5, 17, 29}) expect_exact_resume(c.opts(2, 31), k, 3);  // 17: inside the second member
  expect_dp_strided(c.opts(2, 31), 2, 5);
}

TEST(DataText, CorruptGzipNamesFileAndCompressedOffset) {
  TextCorpus c;
  std::vector<std::string> docs;
  for (int i = 0; i < 400; ++i) docs.push_back("document " + std::to_string(i) + " with some words in it");
  const std::string gz = gzip_members({jsonl_text(docs)});
  ASSERT_GT(gz.size(), 1000u);
  std::string bad = gz;
  for (size_t i = 600; i < 640; ++i) bad[i] = static_cast<char>(bad[i] ^ 0x5A);
  const std::string path = c.dir.write("corpus/c4-train.00000-of-01024.json.gz", bad);
  DataOptions o = c.opts(4, 63);
  o.dataset = "c4";
  expect_input_error(
      [&] {
        auto loader = make_data_loader(o);
        TokenBatch b;
        for (int i = 0; i < 100; ++i) loader->next(b);
      },
      {path + ": corrupt gzip data at compressed byte ", "download it again"});
  c.dir.write("corpus/c4-train.00000-of-01024.json.gz", gz.substr(0, gz.size() / 2));  // cut short
  expect_input_error(
      [&] {
        auto loader = make_data_loader(o);
        TokenBatch b;
        for (int i = 0; i < 100; ++i) loader->next(b);
      },
      {path + ": corrupt gzip data at compressed byte " + std::to_string(gz.size() / 2), "unexpected end of file"});
}

TEST(DataText, SharedTokenizerVocabMismatch) {
  const char* src = std::getenv("CTITAN_SOURCE_DIR");
  const fs::path shared = fs::path(src ? src : ".") / ".." / "shared" / "data";
  if (!fs::exists(shared / "tokenizer.json"))
    GTEST_SKIP() << "no ../shared/data/tokenizer.json (project cloned alone)";
  TextCorpus c;
  c.add_txt("a.txt", "hello");
  DataOptions o = c.opts(1, 4);
  o.tokenizer_path = shared.string();
  o.vocab_size = 1000;
  expect_input_error([&] { make_data_loader(o); },
                     {"has vocab 2020 ids but model.flavor has vocab_size 1000"});
  o.vocab_size = 2048;
  TokenBatch b;
  make_data_loader(o)->next(b);
  EXPECT_EQ(b.inputs, (Ids{2002, 104, 101, 108}));  // BOS "hel"
}

TEST(DataText, BadFilesStatesAndVocabAreInputErrors) {
  TextCorpus c;
  c.add_txt("a.txt", "hello");
  DataOptions v = c.opts(1, 4);
  v.vocab_size = 200;
  expect_input_error(
      [&] { make_data_loader(v); },
      {"tokenizer " + c.dir.sub("tok/tokenizer.json"),
       "has vocab " + std::to_string(c.tok.vocab_size()) +
           " ids but model.flavor has vocab_size 200: use a matching tokenizer or flavor"});
  fs::remove(c.dir.sub("corpus/a.txt"));
  const std::string bad = c.dir.write("corpus/a.jsonl", "{\"text\": \"ok\"}\n{\"text\": broken}\n");
  DataOptions o = c.opts(1, 64);
  expect_input_error([&] { first_batch(o); }, {bad + ":2:", "not a JSON line"});
  c.dir.write("corpus/a.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n");
  expect_input_error([&] { first_batch(o); }, {bad + ":2:", "\"text\""});
  o.path = c.dir.sub("missing");
  expect_input_error([&] { make_data_loader(o); }, {o.path, "no such file or folder"});
  o.path = c.dir.sub("empty");
  fs::create_directories(o.path);
  expect_input_error([&] { make_data_loader(o); }, {o.path, "no *.txt, *.jsonl, *.json, *.txt.gz, *.jsonl.gz, *.json.gz files"});
  o = c.opts(1, 4);
  o.tokenizer_path.clear();
  expect_input_error([&] { make_data_loader(o); }, {"needs a tokenizer"});
  c.dir.write("corpus/a.jsonl", "{\"text\": \"fine\"}\n");
  auto loader = make_data_loader(c.opts(1, 4));
  nlohmann::json s = loader->state();
  s["files"] = {"other.jsonl"};
  expect_input_error([&] { loader->load_state(s); }, {"files", "other.jsonl"});
  c.dir.write("corpus/blank.txt", "");
  fs::remove(bad);
  expect_input_error([&] { first_batch(c.opts(1, 4)); }, {"hold no text"});
}

std::string llmc_shard(int32_t magic, int32_t version, const std::vector<uint32_t>& tokens,
                       bool u16) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic, header[1] = version, header[2] = static_cast<int32_t>(tokens.size());
  std::string out = as_bytes(header);
  if (u16) return out + as_bytes(std::vector<uint16_t>(tokens.begin(), tokens.end()));
  return out + as_bytes(tokens);
}

std::vector<uint32_t> ramp(size_t n, uint32_t start, uint32_t step) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<uint32_t>(i) * step;
  return v;
}

// Expected windows: each shard cut separately into seq + 1 token windows.
std::vector<Ids> shard_windows(const std::vector<std::vector<uint32_t>>& shards, int64_t seq) {
  std::vector<Ids> out;
  for (const auto& s : shards) {
    for (size_t w = 0; (w + 1) * (seq + 1) <= s.size(); ++w) {
      out.emplace_back(s.begin() + w * (seq + 1), s.begin() + (w + 1) * (seq + 1));
    }
  }
  return out;
}

void expect_bin_windows(const DataOptions& o, const std::vector<Ids>& expected, int batches) {
  auto loader = make_data_loader(o);
  size_t w = 0;
  for (const TokenBatch& b : take(*loader, batches)) {
    expect_shape_and_shift(b, o.batch, o.seq_len, o.vocab_size);
    for (const Ids& got : windows_of(b)) {
      ASSERT_EQ(got, expected[w % expected.size()]) << "window " << w;
      ++w;
    }
  }
  EXPECT_GE(w, 2 * expected.size());  // wrapped into a second epoch
}

TEST(DataBin, LlmcHeaderShardsInNameOrder) {
  TempDir dir;
  const auto s0 = ramp(40, 1, 3), s1 = ramp(23, 5000, 1);  // 23: a tail of 3 is skipped
  dir.write("shards/train_001.bin", llmc_shard(20240520, 1, s1, true));
  dir.write("shards/train_000.bin", llmc_shard(20240520, 1, s0, true));
  dir.write("shards/readme.txt", "not a shard");
  DataOptions o = options("bin", 2, 4, 50257);
  o.path = dir.sub("shards");
  expect_bin_windows(o, shard_windows({s0, s1}, 4), 12);
  // llm.c's Llama-3 variant: uint32 tokens.
  const auto big = ramp(30, 100000, 1000);
  o.path = dir.write("llama.bin", llmc_shard(20240801, 7, big, false));
  o.vocab_size = 200000;
  expect_bin_windows(o, shard_windows({big}, 4), 6);
}

TEST(DataBin, RawUint16AndUint32Files) {
  TempDir dir;
  const auto small = ramp(50, 0, 7);
  DataOptions o = options("bin", 3, 5, 1000);
  o.path = dir.write("raw.bin", as_bytes(std::vector<uint16_t>(small.begin(), small.end())));
  expect_bin_windows(o, shard_windows({small}, 5), 6);
  const auto big = ramp(50, 70000, 1);
  o.path = dir.write("raw.u32.bin", as_bytes(big));
  o.vocab_size = 128256;
  expect_bin_windows(o, shard_windows({big}, 5), 6);
}

TEST(DataBin, ResumesExactlyAndStridesRanks) {
  TempDir dir;
  dir.write("d/a.bin", llmc_shard(20240520, 1, ramp(100, 0, 1), true));
  dir.write("d/b.bin", llmc_shard(20240520, 1, ramp(61, 200, 1), true));
  DataOptions o = options("bin", 2, 6, 300);
  o.path = dir.sub("d");
  for (int k : {0, 1, 4, 9}) expect_exact_resume(o, k, 4);
  expect_dp_strided(o, 2, 5);
  expect_dp_strided(o, 3, 4);
}

TEST(DataBin, OutOfRangeTokenNamesFileAndOffset) {
  TempDir dir;
  auto tokens = ramp(64, 0, 1);
  tokens[10] = 999;
  DataOptions o = options("bin", 1, 8, 500);
  o.path = dir.write("bad.bin", llmc_shard(20240520, 1, tokens, true));
  expect_input_error([&] { first_batch(o); },
                     {o.path, "token 999 at index 10 (byte offset 1044)", "vocab_size 500"});
}

TEST(DataBin, GarbledFilesAreInputErrors) {
  TempDir dir;
  DataOptions o = options("bin", 1, 4, 500);
  std::string shard = llmc_shard(20240520, 1, ramp(20, 0, 1), true);
  o.path = dir.write("cut.bin", shard.substr(0, shard.size() - 6));
  expect_input_error([&] { make_data_loader(o); },
                     {o.path, "header says 20 tokens", "truncated or garbled"});
  o.path = dir.write("v2.bin", llmc_shard(20240520, 2, ramp(20, 0, 1), true));
  expect_input_error([&] { make_data_loader(o); }, {o.path, "unsupported version 2"});
  o.path = dir.write("odd.bin", "abc");
  expect_input_error([&] { make_data_loader(o); }, {o.path, "not a whole number of uint16 tokens"});
  o.path = dir.write("short.bin", as_bytes(std::vector<uint16_t>{1, 2, 3}));
  expect_input_error([&] { make_data_loader(o); },
                     {o.path, "no shard holds seq_len + 1 = 5 tokens"});
  o.path = dir.sub("nothing.bin");
  expect_input_error([&] { make_data_loader(o); }, {o.path, "no such file"});
}

TEST(DataOptionsTest, BadOptionsAndStatesAreInputErrors) {
  DataOptions o = options("fineweb", 1, 4, 100);
  expect_input_error([&] { make_data_loader(o); }, {"unknown training.dataset \"fineweb\""});
  o.dataset = "c4_test";
  expect_input_error([&] { make_data_loader(o); }, {"c4_test", "training.dataset_path"});
  o = options("synthetic", 1, 4, 100);
  o.dp_rank = 2, o.dp_world = 2;
  expect_input_error([&] { make_data_loader(o); }, {"rank 2 of 2"});
  o = options("synthetic", 0, 4, 100);
  expect_input_error([&] { make_data_loader(o); }, {"batch"});
  o = options("synthetic", 1, 4, 0);
  expect_input_error([&] { make_data_loader(o); }, {"vocab_size"});
  auto markov = make_data_loader(options("markov", 1, 4, 100));
  const nlohmann::json synthetic_state = make_data_loader(options("synthetic", 1, 4, 100))->state();
  expect_input_error([&] { markov->load_state(synthetic_state); }, {"\"synthetic\"", "\"markov\""});
  nlohmann::json other_seed = markov->state();
  other_seed["seed"] = 5;
  expect_input_error([&] { markov->load_state(other_seed); }, {"seed"});
  expect_input_error([&] { markov->load_state(nlohmann::json::array()); },
                     {"not a data loader state"});
  EXPECT_EQ(markov->describe().rfind("markov: vocab 100, seed 1234, entropy 0.914", 0), 0u)
      << markov->describe();
}

}  // namespace
}  // namespace ctitan
