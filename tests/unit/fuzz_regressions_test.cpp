// Inputs the fuzz targets (tests/fuzz/, docs/fuzzing.md) and their review
// turned up, each fixed in its parser and kept here: every one must be
// refused (or read) with at most one InputError line — never another
// exception, a crash, undefined behaviour or a huge allocation. Also the
// confinement of files named by checkpoint metadata (issue 20, item 8).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/errors.h"
#include "harness/sweep_spec.h"
#include "results/results_db.h"
#include "results/run_dir.h"
#include "tests/unit/input_error.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/checkpoint_metadata.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/checkpoint/safetensors_header.h"
#include "trainer/config/config_loader.h"
#include "trainer/data/tokenizer.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

// The message `fn` throws, checked to be one non-empty line holding every `parts`.
void expect_one_line(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  const std::string e = error_of(fn);
  EXPECT_FALSE(e.empty());
  EXPECT_EQ(e.find_first_of("\n\r"), std::string::npos) << e;
  for (const std::string& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "'" << p << "' not in: " << e;
}

// A scratch folder per test, removed afterwards.
class Scratch {
 public:
  Scratch()
      : dir_(fs::path(::testing::TempDir()) / ("fuzzreg_" + std::to_string(::getpid()) + "_" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~Scratch() { fs::remove_all(dir_); }
  const fs::path& dir() const { return dir_; }
  fs::path write(const std::string& rel, const std::string& text) const {
    const fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  fs::path dir_;
};

// A minimal ByteLevel tokenizer.json whose vocab is `vocab` (JSON object text).
std::string tokenizer_json(const std::string& vocab) {
  return R"({"pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"},
             "model": {"type": "BPE", "vocab": )" +
         vocab + "}}";
}

// --- trainer TOML config and sweep spec ------------------------------------

TEST(FuzzRegressToml, CarriageReturnInASyntaxErrorStaysOnOneLine) {
  // fuzz_trainer_config, minimized: toml++ quotes what it saw, '\r' included,
  // and only '\n' was flattened (a terminal then overwrites the message).
  expect_one_line(
      [] {
        JobConfig cfg;
        load_toml_text_into(cfg, "t=f\r", "fuzz/config.toml");
      },
      {"fuzz/config.toml:1"});
  expect_one_line([] { parse_sweep_spec("t=f\r", "fuzz/spec.toml"); }, {"fuzz/spec.toml:1"});
}

TEST(FuzzRegressSweepSpec, SweepNameWithANewlineStaysOnOneLine) {
  // fuzz_sweep_spec (found by the fresh-clone run of issue 33): a name with a
  // line break was quoted as it was, so the one-line message had two lines.
  expect_one_line([] { check_sweep_name("published\nllama3"); }, {"sweep name 'published\\x0allama3'"});
}

// --- tokenizer.json ---------------------------------------------------------

TEST(FuzzRegressTokenizer, HugeTokenIdIsOneLineNamingFileAndId) {
  // Was std::bad_alloc: the id table was resized to id + 1 entries.
  expect_one_line([] { Tokenizer::from_json_text(tokenizer_json(R"({"a": 4000000000})"), "tok/tokenizer.json"); },
                  {"tok/tokenizer.json", "4000000000", "model.vocab[\"a\"]"});
  const Tokenizer ok = Tokenizer::from_json_text(tokenizer_json(R"({"a": 4194303})"), "t.json");
  EXPECT_EQ(ok.vocab_size(), Tokenizer::kMaxTokenId + 1);
}

TEST(FuzzRegressTokenizer, IdThatIsNotAnIntegerIsOneLine) {
  // 1e300 was cast to int64 (undefined); "x" escaped as nlohmann's type_error.
  for (const char* id : {"1e300", "-1", "2.5", "\"x\"", "18446744073709551615"})
    expect_one_line([&] { Tokenizer::from_json_text(tokenizer_json(std::string(R"({"a": )") + id + "}"), "t.json"); },
                    {"t.json", "model.vocab"});
}

TEST(FuzzRegressTokenizer, NumberOverflowIsOneLine) {
  // 1e400 is nlohmann's out_of_range.406, not a parse_error: it escaped parse_json.
  expect_one_line([] { Tokenizer::from_json_text(tokenizer_json(R"({"a": 1e400})"), "t.json"); },
                  {"t.json", "not valid JSON"});
}

TEST(FuzzRegressTokenizer, TokenWithANewlineStaysOnOneLine) {
  expect_one_line([] { Tokenizer::from_json_text(tokenizer_json(R"({"a\nb": -1})"), "t.json"); }, {"a\\x0ab"});
  expect_one_line(
      [] {
        Tokenizer::from_json_text(
            R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a\nb c"]}})",
            "t.json");
      },
      {"model.merges[0]"});
}

TEST(FuzzRegressTokenizer, DeepNestingIsOneLine) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_one_line([&] { Tokenizer::from_json_text(deep, "t.json"); }, {"t.json", "deeper"});
  // A Split pattern is printed in the message: its nesting was unbounded (dump() recurses).
  const std::string pattern = "{\"Regex\": \"x\", \"y\": " + std::string(5000, '[') + std::string(5000, ']') + "}";
  expect_one_line(
      [&] {
        Tokenizer::from_json_text(
            R"({"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": {"type": "Split", "pattern": )" + pattern +
                "}}",
            "t.json");
      },
      {"t.json"});
}

TEST(FuzzRegressTokenizer, BadConfigBesideItIsOneLine) {
  const std::string tok = tokenizer_json(R"({"a": 0, "b": 1})");
  const std::string config = R"({"added_tokens_decoder": {"1\n": {"content": "x"}}})";
  expect_one_line([&] { Tokenizer::from_json_text(tok, "t.json", &config, "c.json"); }, {"c.json", "1\\x0a"});
}

TEST(FuzzRegressTokenizer, FromFileRefusesADirectoryOrFifoAsTheFile) {
  Scratch s;
  fs::create_directories(s.dir() / "d" / "tokenizer.json");
  expect_one_line([&] { Tokenizer::from_file((s.dir() / "d").string()); }, {"tokenizer.json", "directory"});
  const fs::path fifo = s.dir() / "fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_one_line([&] { Tokenizer::from_file(fifo.string()); }, {"fifo.json", "FIFO"});
}

// --- checkpoint metadata ----------------------------------------------------

std::string meta_with(const std::string& tensor) {
  return R"({"format": "ctitan-checkpoint-v3", "step": 2, "train_state": {"data_loader": {}}, "tensors": [)" + tensor +
         "]}";
}

const char* kPiece =
    R"({"name": "model.a", "dtype": "Float", "global_shape": [4], "offsets": [0], "shape": [4],
        "file": "rank0.bin", "offset": 0, "nbytes": 16, "crc32": 1})";

TEST(FuzzRegressCheckpointMetadata, AValidIndexParses) {
  const CheckpointMetadata m = parse_checkpoint_metadata(meta_with(kPiece), "checkpoint c");
  ASSERT_EQ(m.tensors.size(), 1u);
  EXPECT_EQ(m.tensors[0].file, "rank0.bin");
  EXPECT_EQ(m.tensors[0].nbytes, 16);
  EXPECT_EQ(m.step, 2);
}

TEST(FuzzRegressCheckpointMetadata, EveryMalformedPieceIsOneLine) {
  // kPiece with `from` replaced by `to`.
  const auto piece = [](const std::string& from, const std::string& to) {
    std::string p = kPiece;
    p.replace(p.find(from), from.size(), to);
    return p;
  };
  // Each of these reached the loader's arithmetic, a cast or an allocation unchecked.
  const std::vector<std::string> bad = {
      meta_with(piece(R"("shape": [4])", R"("shape": [-4])")),
      meta_with(piece(R"("shape": [4])", R"("shape": [5])")),                        // box past the global shape
      meta_with(piece(R"("offsets": [0])", R"("offsets": [9223372036854775807])")),  // offset + extent overflowed
      meta_with(piece(R"("offsets": [0])", R"("offsets": [0, 0])")),
      meta_with(piece(R"("global_shape": [4])", R"("global_shape": [4294967296, 4294967296, 4294967296])")),
      meta_with(piece(R"("offset": 0)", R"("offset": 9223372036854775807)")),  // offset + nbytes overflowed
      meta_with(piece(R"("nbytes": 16)", R"("nbytes": -1)")),
      meta_with(piece(R"("crc32": 1)", R"("crc32": 4294967296)")),
      meta_with(piece(R"("crc32": 1)", R"("crc32": 1.5)")),
      meta_with(piece(R"("dtype": "Float")", R"("dtype": 7)")),
      meta_with(piece(R"("file": "rank0.bin")", R"("file": "")")),
      meta_with(piece(R"("shape": [4])", R"("shape": 1e300)")),
      meta_with(std::string(kPiece) + ", " + piece(R"("dtype": "Float")", R"("dtype": "Half")")),  // pieces disagree
      meta_with("7"),
      R"({"format": "ctitan-checkpoint-v3\nx", "tensors": []})",
      R"({"format": "ctitan-checkpoint-v3", "step": -1, "tensors": []})",
      R"({"format": "ctitan-checkpoint-v3", "world_size": 0, "tensors": []})",
      R"({"format": "ctitan-checkpoint-v3", "train_state": [], "tensors": []})",
      R"({"format": "ctitan-checkpoint-v3", "train_state": {"data_loader": 3}, "tensors": []})",
      R"({"format": "ctitan-checkpoint-v3", "tensors": {}})",
      R"({"format": "ctitan-checkpoint-v3", "step": 1e400, "tensors": []})",
      "[" + std::string(100000, '[') + std::string(100001, ']'),
  };
  for (const std::string& text : bad)
    expect_one_line([&] { parse_checkpoint_metadata(text, "checkpoint ck/step-2"); }, {"checkpoint ck/step-2"});
  // A name with a line break is shown escaped.
  expect_one_line(
      [&] { parse_checkpoint_metadata(meta_with(piece(R"("model.a", "dtype": "Float")", R"("a\nb")")), "ck"); },
      {"a\\x0ab"});
}

TEST(FuzzRegressCheckpointMetadata, RankStateAndHfIndexAreOneLine) {
  for (const char* text : {"[]", R"({"rank_state": 3})", R"({"rank_state": {"data_loader": []}})", "{"})
    expect_one_line([&] { parse_rank_state(text, "checkpoint ck"); }, {"checkpoint ck"});
  EXPECT_EQ(parse_rank_state(R"({"tensors": []})", "c"), nlohmann::json::object());
  EXPECT_EQ(parse_rank_state(R"({"rank_state": null})", "c"), nlohmann::json::object());
  for (const char* text :
       {"{}", R"({"weight_map": []})", R"({"weight_map": {"a\n": 3}})", R"({"weight_map": {"a": ""}})"})
    expect_one_line([&] { parse_safetensors_index(text, "hf ck"); }, {"hf ck"});
  EXPECT_EQ(parse_safetensors_index(R"({"weight_map": {"a": "m.safetensors"}})", "hf").at("a"), "m.safetensors");
}

// --- item 8: files named by checkpoint metadata stay in the checkpoint folder

TEST(FuzzRegressCheckpointConfine, RefusesAbsoluteParentAndEscapingSymlinks) {
  Scratch s;
  const fs::path dir = s.dir() / "step-2";
  fs::create_directories(dir / "sub");
  s.write("step-2/rank0.bin", "x");
  s.write("outside.bin", "secret");
  fs::create_symlink(s.dir() / "outside.bin", dir / "link.bin");
  fs::create_symlink(s.dir(), dir / "up");
  fs::create_symlink("rank0.bin", dir / "inside.bin");
  const std::string where = "checkpoint " + dir.string();
  EXPECT_EQ(confined_file(dir, "rank0.bin", where, "e"), dir / "rank0.bin");
  EXPECT_EQ(confined_file(dir, "inside.bin", where, "e"), dir / "inside.bin");  // a link inside is fine
  EXPECT_EQ(confined_file(dir, "sub/x.bin", where, "e"), dir / "sub" / "x.bin");
  for (const char* name : {"../../etc/passwd", "/etc/passwd", "sub/../../outside.bin", "link.bin", "up/outside.bin", "",
                           ".", "a\nb/../../x"})
    expect_one_line([&] { confined_file(dir, name, where, "tensors[0].file"); }, {where, "tensors[0].file"});
}

// A golden checkpoint whose metadata names another file: the load is refused
// with one line naming the checkpoint and the entry, and the file is not read.
class FuzzRegressCheckpointLoad : public ::testing::TestWithParam<const char*> {};

TEST_P(FuzzRegressCheckpointLoad, MetadataNamingAFileOutsideIsRefused) {
  Scratch s;
  const char* src = std::getenv("CTITAN_SOURCE_DIR");  // set by ctest; tests run in the source folder
  const fs::path golden = fs::path(src ? src : ".") / "tests/golden/checkpoint_v2_fsdp2/step-2";
  const fs::path step = s.dir() / "checkpoint" / "step-2";
  fs::create_directories(step);
  for (const char* f : {"rank0.bin", "rank1.bin", "rank0.json", "rank1.json"}) fs::copy_file(golden / f, step / f);
  std::ifstream in(golden / "metadata.json");
  nlohmann::json meta = nlohmann::json::parse(in);
  std::string target = GetParam();
  if (target == "symlink") {
    fs::create_symlink("/etc/passwd", step / "evil.bin");
    target = "evil.bin";
  }
  for (auto& t : meta["tensors"]) t["file"] = target;
  std::ofstream(step / "metadata.json") << meta.dump();

  CheckpointSection cfg;
  cfg.enable = true;
  cfg.folder = "checkpoint";
  Checkpointer ck(cfg, s.dir().string());
  at::Tensor emb = torch::zeros({64, 32});
  const TensorPieces pieces = {{"model.tok_embeddings.weight", emb, {64, 32}, {}}};
  expect_one_line([&] { ck.load_sharded(pieces, 0); },
                  {"checkpoint " + step.string(), "model.tok_embeddings.weight", "inside its own folder"});
}

INSTANTIATE_TEST_SUITE_P(Paths, FuzzRegressCheckpointLoad,
                         ::testing::Values("../../../../../../../../etc/passwd", "/etc/passwd", "symlink"));

// --- safetensors header -----------------------------------------------------

std::string safetensors_file(std::string header, size_t data_bytes) {
  while (header.size() % 8) header += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\1');
}

SafetensorsHeader parse(const std::string& file) {
  return parse_safetensors_header(reinterpret_cast<const unsigned char*>(file.data()), file.size(), "st");
}

TEST(FuzzRegressSafetensors, AValidHeaderParses) {
  const SafetensorsHeader h = parse(safetensors_file(
      R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                                  "z": {"dtype": "U8", "shape": [4294967296, 0], "data_offsets": [16, 16]}})",
      16));
  EXPECT_EQ(h.entries.at("a").end, 16);
  EXPECT_EQ(h.entries.at("z").shape[0], 4294967296);
}

TEST(FuzzRegressSafetensors, MalformedHeadersAreOneLine) {
  const std::vector<std::string> bad = {
      R"({"a": {"dtype": "F32", "shape": [1e300], "data_offsets": [0, 4]}})",  // was a float-to-int64 cast (undefined)
      R"({"a": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 4]}})",
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 1e300]}})",
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [-1, 4]}})",
      R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})",  // bytes overflow
      R"({"a\nb": {"dtype": "X", "shape": [1], "data_offsets": [0, 4]}})",
      R"({"a": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}})",
      R"({"a": [], "b": 1})",
      R"({"__metadata__": 7})",
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})",
      "{\"__metadata__\": " + std::string(1000, '[') + std::string(1000, ']') + "}",
      R"({"a": 1e400})",
  };
  for (const std::string& header : bad) {
    const std::string file = safetensors_file(header, 16);
    expect_one_line([&] { parse(file); }, {"st"});
  }
  // fuzz_safetensors_header, minimized: a tensor name with an escaped line break.
  const std::string broken_name =
      safetensors_file(R"({"__m\u000aa__": {"fortype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}})", 16);
  expect_one_line([&] { parse(broken_name); }, {"tensor '__m\\x0aa__'", "needs dtype"});
  expect_one_line([] { parse(std::string("\xff\xff\xff\xff\xff\xff\xff\xff{}", 10)); }, {"header length"});
  expect_one_line([] { parse("abc"); }, {"8-byte"});
}

TEST(FuzzRegressSafetensors, FileReaderRefusesAFifo) {
  Scratch s;
  const fs::path fifo = s.dir() / "model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_one_line([&] { SafetensorsFile f(fifo.string()); }, {"not a regular file"});
}

// --- metrics ingest ---------------------------------------------------------

TEST(FuzzRegressMetricsIngest, HugeOrNonIntegralStepsAreSkippedNotCast) {
  // static_cast<int64_t>(1e300) was undefined behaviour.
  results_detail::RunDirContents c;
  results_detail::parse_metrics_jsonl(
      "{\"step\": 1e300}\n{\"step\": -1e19}\n{\"step\": 2.5}\n{\"step\": 18446744073709551615}\n{\"step\": 3.0}\n", c);
  ASSERT_EQ(c.steps.size(), 1u);
  EXPECT_EQ(c.report.notes.size(), 4u);
  for (const std::string& n : c.report.notes) EXPECT_EQ(n.find('\n'), std::string::npos);
  results_detail::RunDirContents s;
  results_detail::parse_summary_json(R"({"mem_peak_bytes": 1e300, "tps_median": 5})", s);
  ASSERT_TRUE(s.summary);
  EXPECT_FALSE(s.summary->mem_peak_bytes);
  EXPECT_EQ(*s.summary->tps_median, 5);
}

TEST(FuzzRegressMetricsIngest, HugeValidationTokenCountIsStoredAsNull) {
  // fuzz_metrics_ingest: a 91-digit "validation_tokens" parses as a double;
  // the ingest cast it to int64 (undefined behaviour).
  Scratch s;
  s.write("run/metrics.jsonl", "{\"step\": 1, \"validation_loss\": 7.25, \"validation_tokens\": 1" +
                                   std::string(90, '0') + "}\n{\"step\": 1, \"loss\": 9.5}\n");
  ResultsDb db((s.dir() / "r.db").string());
  RunRow r;
  r.label = "x";
  const int64_t id = db.insert_run(r);
  const IngestReport rep = db.ingest_run_dir(id, (s.dir() / "run").string());
  EXPECT_EQ(rep.steps, 1);
  ASSERT_EQ(rep.validations, 1);
  EXPECT_TRUE(db.validation(id).at(0).at("tokens").is_null()) << db.validation(id).at(0).dump();
}

TEST(FuzzRegressMetricsIngest, DeepEnvJsonIsANoteNotAStackOverflow) {
  // flatten_json recursed once per level (and built an O(depth^2) key).
  std::string deep;
  for (int i = 0; i < 200000; ++i) deep += "{\"a\":";
  deep += "1" + std::string(200000, '}');
  results_detail::RunDirContents c;
  results_detail::parse_env_json(deep, c);
  EXPECT_TRUE(c.env.empty());
  ASSERT_EQ(c.report.notes.size(), 1u);
  EXPECT_NE(c.report.notes[0].find("env.json"), std::string::npos);
}

TEST(FuzzRegressMetricsIngest, AFifoInTheRunFolderDoesNotBlockTheIngest) {
  Scratch s;
  ASSERT_EQ(::mkfifo((s.dir() / "metrics.jsonl").c_str(), 0600), 0);
  s.write("summary.json", R"({"status": "ok", "tps_median": 3})");
  const results_detail::RunDirContents c = results_detail::read_run_dir(s.dir().string());
  EXPECT_TRUE(c.steps.empty());
  EXPECT_TRUE(c.report.partial);
  ASSERT_TRUE(c.summary);
}

}  // namespace
}  // namespace ctitan
