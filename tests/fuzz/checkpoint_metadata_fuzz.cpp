// Checkpoint metadata (trainer/checkpoint/checkpoint_metadata.h): the first
// byte picks the document — metadata.json, rank<R>.json or a Hugging Face
// model.safetensors.index.json — the rest is its text. Every file a parsed
// metadata.json names goes through confined_file against a scratch folder,
// as the loader does before opening it.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "trainer/checkpoint/checkpoint_metadata.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const ctitan::fuzz::ScratchFolder scratch("ctitan-fuzz-ckpt");
  static const fs::path dir = [] {
    fs::create_directories(scratch.path() / "step-2");
    return scratch.path() / "step-2";
  }();
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string where = "checkpoint " + dir.string();
  ctitan::fuzz::expect_accept_or_one_line([&] {
    switch (data[0] % 3) {
      case 0: {
        const ctitan::CheckpointMetadata m = ctitan::parse_checkpoint_metadata(text, where);
        for (const ctitan::SavedPieceEntry& e : m.tensors) ctitan::confined_file(dir, e.file, where, "a tensor entry");
        break;
      }
      case 1:
        ctitan::parse_rank_state(text, where);
        break;
      default:
        for (const auto& [name, file] : ctitan::parse_safetensors_index(text, where))
          ctitan::confined_file(dir, file, where, "model.safetensors.index.json");
    }
  });
  return 0;
}
