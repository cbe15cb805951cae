// `ctitan report --db FILE [--sweep NAME] [--baseline LABEL] [--published [DIR]] [--format md|html|csv|json]
// [--out FILE]`: the tables and charts of reports/report.h from a results database; --published adds the
// published tables with the planner's predictions and the database's measurements (harness/published.h).
// Bad input (no such database or sweep, an unknown format, a baseline label
// no point has) throws InputError before anything is written.
#pragma once

#include <string>
#include <vector>

namespace ctitan {

int report_command(const std::vector<std::string>& args);

// InputError unless `path` exists: reading commands never create a database.
void require_database(const std::string& path);

}  // namespace ctitan
