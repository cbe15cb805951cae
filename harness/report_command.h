// `ctitan report --db FILE [--sweep NAME] [--baseline LABEL] [--published [DIR]] [--format md|html|csv|json]
// [--out FILE]`: the tables and charts of reports/report.h from a results database; --published adds the
// published tables with the planner's predictions and the database's measurements (harness/published.h).
// Bad input (no such database or sweep, an unknown format, a baseline label
// no point has) throws InputError before anything is written.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ctitan {

int report_command(const std::vector<std::string>& args);
std::string report_usage();

// The flag reader `report` and `gate` share: `--flag VALUE` or
// `--flag=VALUE`, and one-line InputErrors that name the command.
class ArgReader {
 public:
  ArgReader(const std::vector<std::string>& args, std::string command) : args_(args), command_(std::move(command)) {}
  bool done() const { return i_ >= args_.size(); }
  const std::string& current() const { return args_[i_]; }
  // Consumes `flag VALUE` / `flag=VALUE` into `out`; false when the current
  // argument is another flag. `example` completes "needs a value, e.g. ...".
  bool value(const std::string& flag, std::string& out, const std::string& example);
  bool flag(const std::string& flag);  // a boolean switch
  [[noreturn]] void unknown() const;   // InputError for the current argument

 private:
  const std::vector<std::string>& args_;
  std::string command_;
  size_t i_ = 0;
};

// InputError unless `path` exists: reading commands never create a database.
void require_database(const std::string& path);

}  // namespace ctitan
