// Sweep spec (harness/sweep_spec.h): parse_sweep_spec on any text. The spec
// is named as if it sat in recipes/sweeps/, so the seeds' `base` resolves
// and a fuzzed spec reaches the checks after it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/sweep_spec.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ctitan::fuzz::expect_accept_or_one_line(
      [&] { ctitan::parse_sweep_spec(text, CTITAN_SOURCE_DIR "/recipes/sweeps/fuzz.toml"); });
  return 0;
}
