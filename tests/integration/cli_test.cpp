// Issue 56, item 5: every subcommand but `train` reads its flags one way
// (harness/cli.h): a bad flag or value is the same one line on stderr,
//   ctitan: <command>: <what is wrong>; run `ctitan <command> --help`
// with exit code 2, and --help is CLI11's help on stdout with exit code 0.
// None of these cases gets as far as reading a file.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/integration/process.h"

namespace ctitan {
namespace {

using testing::run_ctitan;

struct FlagCase {
  std::string name;
  std::vector<std::string> args;
  std::string line;  // all of stderr, without "ctitan: " and the newline
};
void PrintTo(const FlagCase& c, std::ostream* os) { *os << c.name; }

class BadFlag : public ::testing::TestWithParam<FlagCase> {};

TEST_P(BadFlag, IsOneLineInOneStyleAndExit2) {
  const testing::ProcessResult r = run_ctitan(GetParam().args);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(r.err, "ctitan: " + GetParam().line + "\n");
  EXPECT_EQ(r.out, "");
}

std::string help_hint(const std::string& command) { return "; run `ctitan " + command + " --help`"; }

FlagCase unknown(const std::string& command, std::vector<std::string> args) {
  args.insert(args.begin(), command);
  return {command, args, command + ": unknown argument '--bogus'" + help_hint(command)};
}

FlagCase no_value(const std::string& command, std::vector<std::string> args) {
  const std::string flag = args.back();
  args.insert(args.begin(), command);
  return {command, args, command + ": " + flag + " needs a value" + help_hint(command)};
}

FlagCase bad_value(const std::string& command, std::vector<std::string> args, const std::string& what) {
  args.insert(args.begin(), command);
  return {command, args, command + ": " + what + help_hint(command)};
}

INSTANTIATE_TEST_SUITE_P(
    UnknownFlag, BadFlag,
    ::testing::Values(unknown("db", {"ls", "--db", "r.db", "--bogus"}), unknown("trace", {"analyze", "t.json", "--bogus"}),
                      unknown("launch", {"--nproc", "2", "--bogus", "1"}), unknown("sweep", {"s.toml", "--bogus"}),
                      unknown("report", {"--db", "r.db", "--bogus"}), unknown("gate", {"--db", "r.db", "--bogus"}),
                      unknown("plan", {"recipe.toml", "--bogus"}), unknown("version", {"--bogus"})),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    FlagWithoutValue, BadFlag,
    ::testing::Values(no_value("db", {"ls", "--db"}), no_value("trace", {"merge", "run", "--iteration"}),
                      no_value("launch", {"--nproc"}), no_value("sweep", {"s.toml", "--db"}),
                      no_value("report", {"--db"}), no_value("gate", {"--db"}),
                      no_value("plan", {"recipe.toml", "--hardware"})),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    BadValue, BadFlag,
    ::testing::Values(bad_value("trace", {"merge", "run", "--iteration", "x"}, "--iteration: 'x' is not a number"),
                      bad_value("launch", {"--nproc", "0"}, "--nproc: must be an integer in 1..64, got '0'"),
                      bad_value("sweep", {"s.toml", "--max-queued", "0"},
                                "--max-queued: must be an integer in 1..100000, got '0'"),
                      bad_value("report", {"--db", "r.db", "--format", "pdf"},
                                "--format: must be one of md, html, csv, json, got 'pdf'"),
                      bad_value("gate", {"--db", "r.db", "--alpha", "2"}, "--alpha: must be a number in [1e-09, 0.5], got '2'"),
                      bad_value("plan", {"recipe.toml", "--ngpu", "0"}, "--ngpu: must be an integer in 1..65536, got '0'")),
    [](const auto& info) { return info.param.name; });

class CommandHelp : public ::testing::TestWithParam<std::string> {};

TEST_P(CommandHelp, IsCliElevensOnStdoutAndExit0) {
  for (const char* flag : {"--help", "-h"}) {
    const testing::ProcessResult r = run_ctitan({GetParam(), flag});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_NE(r.out.find("Usage: ctitan " + GetParam() + " [OPTIONS]"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  -h,--help "), std::string::npos) << r.out;
  }
}

INSTANTIATE_TEST_SUITE_P(Commands, CommandHelp,
                         ::testing::Values("db", "trace", "launch", "sweep", "report", "gate", "plan", "version"));

}  // namespace
}  // namespace ctitan
