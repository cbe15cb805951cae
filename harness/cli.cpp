#include "harness/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <sstream>

#include "common/errors.h"
#include "trainer/config/config_loader.h"  // HelpRequested

namespace ctitan {
namespace {

// What CLI11 found, in this project's words where CLI11's are unclear.
std::string what_is_wrong(const CLI::App& app, const CLI::ParseError& e) {
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    const std::vector<std::string> extra = app.remaining(true);
    if (!extra.empty()) return "unknown argument '" + extra.front() + "'";
  }
  std::string msg = e.what();
  std::replace(msg.begin(), msg.end(), '\n', ' ');
  // CLI11: "--db: 1 required FILE missing", an option given without its value.
  static const std::regex kNoValue("^(-\\S+): 1 required \\S+ missing$");
  // CLI11: "Could not convert: --iteration = x", a value of the wrong type.
  static const std::regex kNotConverted("^Could not convert: (\\S+) = (.*)$");
  std::smatch m;
  if (std::regex_match(msg, m, kNoValue)) return m[1].str() + " needs a value";
  if (std::regex_match(msg, m, kNotConverted)) return m[1].str() + ": '" + m[2].str() + "' is not a number";
  return msg;
}

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

// A number as people write it: 1000, 0.05, 1e-09 (not 1000.000000).
std::string shortest(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// A value flag given twice: the later wins, as it always has in ctitan
// (CLI11's default would refuse it).
void later_value_wins(CLI::App& app) {
  for (CLI::Option* o : app.get_options([](CLI::Option*) { return true; }))
    if (o->get_expected_max() <= 1 && o->get_multi_option_policy() == CLI::MultiOptionPolicy::Throw)
      o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) later_value_wins(*sub);
}

}  // namespace

void parse_command_line(CLI::App& app, const std::vector<std::string>& args, const std::string& command) {
  later_value_wins(app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11's convention
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw HelpRequested(app.help());
  } catch (const CLI::ParseError& e) {
    throw command_line_error(command, what_is_wrong(app, e));
  }
}

std::vector<std::string> take_known_options(CLI::App& app, const std::vector<std::string>& args,
                                            const std::string& command) {
  app.allow_extras();
  app.set_help_flag();  // -h/--help: the other parser's
  parse_command_line(app, args, command);
  return app.remaining();
}

bool is_config_key_arg(const std::string& arg) {
  const std::string flag = arg.substr(0, arg.find('='));
  return flag.rfind("--", 0) == 0 && flag.find('.') != std::string::npos;
}

InputError command_line_error(const std::string& command, const std::string& what) {
  return InputError(command + ": " + what + "; run `ctitan " + command + " --help`");
}

std::string integer_problem(const std::string& text, long long lo, long long hi) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != 0 && used == text.size() && v >= lo && v <= hi) return "";
  return "must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + in_quotes(text);
}

CLI::Validator integer_in(long long lo, long long hi) {
  return CLI::Validator([lo, hi](std::string& text) { return integer_problem(text, lo, hi); },
                        "");
}

CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (!text.empty() && end == text.c_str() + text.size() && v >= lo && v <= hi) return "";
        return "must be a number in [" + shortest(lo) + ", " + shortest(hi) + "], got " + in_quotes(text);
      },
      "");
}

CLI::Validator one_of(const std::vector<std::string>& allowed) {
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  return CLI::Validator(
      [allowed, list](std::string& text) -> std::string {
        if (std::find(allowed.begin(), allowed.end(), text) != allowed.end()) return "";
        return "must be one of " + list + ", got " + in_quotes(text);
      },
      "");
}

}  // namespace ctitan
