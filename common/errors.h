// Error policy for the whole project, stated once.
//
// Bad input (config, CLI, data file, tokenizer, checkpoint, spec, database)
// throws InputError whose what() is ONE line: what went wrong, where
// (file:line or key), and what to do. `ctitan` prints it prefixed with
// "ctitan: " and exits with code 2. Anything else that escapes (a bug, a
// LibTorch failure) exits with code 1.
#pragma once

#include <stdexcept>
#include <string>

namespace ctitan {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& one_line) : std::runtime_error(one_line) {}
};

constexpr int kExitBadInput = 2;

}  // namespace ctitan
