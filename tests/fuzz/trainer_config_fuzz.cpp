// Trainer TOML config (trainer/config/config_loader.h): load_toml_text_into
// over the defaults, as `ctitan train --job.config_file F` does, then the
// resolved config written back with to_toml (what a run saves beside it).
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "trainer/config/config_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ctitan::fuzz::expect_accept_or_one_line([&] {
    ctitan::JobConfig cfg;
    ctitan::load_toml_text_into(cfg, text, "fuzz/config.toml");
    ctitan::to_toml(cfg);
    ctitan::config_warnings(cfg);
  });
  return 0;
}
