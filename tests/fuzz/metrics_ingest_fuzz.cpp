// Metrics ingest (results/run_dir.h): the input is a run directory's
// metrics.jsonl, summary.json and env.json separated by NUL bytes. They are
// written to a scratch run folder and ingested into a results database, as
// `ctitan sweep` does after each run: the parse and the SQLite writes.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "results/results_db.h"
#include "tests/fuzz/fuzz_check.h"

namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ctitan::fuzz::ScratchFolder scratch("ctitan-fuzz-ingest");
  const fs::path& root = scratch.path();
  static std::unique_ptr<ctitan::ResultsDb> db;
  static int64_t run_id = 0;
  if (!db) {
    fs::create_directories(root / "run");
    db = std::make_unique<ctitan::ResultsDb>(":memory:");
    ctitan::RunRow r;
    r.label = "fuzz";
    run_id = db->insert_run(r);
  }
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string part[3];
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t end = i == 2 ? std::string::npos : input.find('\0', pos);
    part[i] = input.substr(std::min(pos, input.size()), end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? input.size() : end + 1;
  }
  write(root / "run" / "metrics.jsonl", part[0]);
  write(root / "run" / "summary.json", part[1]);
  write(root / "run" / "env.json", part[2]);
  ctitan::fuzz::expect_accept_or_one_line([&] {
    const ctitan::IngestReport rep = db->ingest_run_dir(run_id, (root / "run").string());
    for (const std::string& note : rep.notes)
      if (note.empty() || note.find_first_of("\n\r") != std::string::npos) __builtin_trap();
  });
  return 0;
}
