// tokenizer.json (trainer/data/tokenizer.h): Tokenizer::from_json_text on
// any text, then, for a tokenizer that loads, an encode and a decode (what a
// run does with it next). An input holding "\n#tokenizer_config.json\n"
// is split there: the rest is the tokenizer_config.json beside it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "trainer/data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  const std::string mark = "\n#tokenizer_config.json\n";
  std::string config;
  const size_t at = text.find(mark);
  if (at != std::string::npos) {
    config = text.substr(at + mark.size());
    text.resize(at);
  }
  ctitan::fuzz::expect_accept_or_one_line([&] {
    const ctitan::Tokenizer tok = ctitan::Tokenizer::from_json_text(
        text, "fuzz/tokenizer.json", at == std::string::npos ? nullptr : &config, "fuzz/tokenizer_config.json");
    const auto ids = tok.encode("Hello world  <|begin_of_text|> caf\xc3\xa9 123\n\t\xff<s></s>");
    tok.decode(ids);
    tok.decode({0, 1, tok.vocab_size() - 1, tok.vocab_size(), -1});
  });
  return 0;
}
