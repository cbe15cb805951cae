// `ctitan db`: look inside a results database without the sqlite3 shell.
//   ctitan db ls --db FILE [--sweep NAME]     one line per run
//   ctitan db show RUN_ID --db FILE [--config] a run: row, summary, env, artifacts, steps
// Bad input (no such file, not a database, unknown run or sweep) throws
// InputError; a missing file is reported, never created.
#pragma once

#include <string>
#include <vector>

namespace ctitan {

int run_db_command(const std::vector<std::string>& args);

}  // namespace ctitan
