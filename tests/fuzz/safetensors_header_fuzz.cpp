// safetensors header (trainer/checkpoint/safetensors_header.h): the input
// is the whole file, length prefix and all.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_check.h"
#include "trainer/checkpoint/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ctitan::fuzz::expect_accept_or_one_line(
      [&] { ctitan::parse_safetensors_header(data, size, "safetensors file fuzz/model.safetensors"); });
  return 0;
}
