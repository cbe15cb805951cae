// `ctitan sweep SPEC --db FILE [--dry-run] [--retry-failed]`: expands a sweep
// spec into points and runs them into the results database (harness/sweep.h).
#pragma once

#include <string>
#include <vector>

namespace ctitan {

// args: everything after `ctitan sweep`. Returns the exit code (see
// `ctitan sweep --help`); bad input throws InputError before any file is touched.
int sweep_command(const std::vector<std::string>& args);

}  // namespace ctitan
