// Subcommand dispatch for the `ctitan` binary.
#pragma once

#include <string>
#include <vector>

namespace ctitan {

// args: everything after the program name. Returns the exit code; bad input
// throws InputError.
int run_command(const std::vector<std::string>& args);

}  // namespace ctitan
