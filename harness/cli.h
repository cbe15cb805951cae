// The command line of every `ctitan` subcommand except `train` (whose
// `--section.key value` overrides are TorchTitan's syntax,
// trainer/config/config_cli.h): CLI11, one help style and one error line.
//
// Help (-h/--help anywhere) is CLI11's: the description, a usage line, the
// positionals and options with their descriptions, the footer; on stdout,
// exit 0. A bad flag or value is one InputError line (exit 2), which
// `ctitan` prints as
//   ctitan: <command>: <what is wrong>; run `ctitan <command> --help`
// e.g. "ctitan: sweep: unknown argument '--frobnicate'; run `ctitan sweep --help`".
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "common/errors.h"

namespace ctitan {

// Parses `args` (what follows `ctitan <command>`) into `app`. -h/--help
// throws HelpRequested holding app's help (run_command prints it and exits
// 0); anything CLI11 refuses throws the InputError above.
void parse_command_line(CLI::App& app, const std::vector<std::string>& args, const std::string& command);

// Parses the options `app` declares, wherever they stand in `args`, and
// returns the other arguments in their order for another parser (CLI11's
// allow_extras): `ctitan train --nproc N <train args>` takes the launcher's
// flags out of the trainer's this way. -h/--help stay with the rest (the
// other parser's help); a bad flag is parse_command_line's InputError.
std::vector<std::string> take_known_options(CLI::App& app, const std::vector<std::string>& args,
                                            const std::string& command);

// True for a `--section.key` or `--section.key=value` argument: the
// trainer's config syntax (TorchTitan's), which `ctitan launch` hands to
// its ranks and `ctitan plan` to parse_job_config (config_loader.h) beside
// their own CLI11 flags. CLI11 does not own these arguments: their keys are
// the config registry's, not an App's options, and only the registry knows
// whether the next argument is a key's value (a boolean key stands alone),
// so CLI11 would take a value for a positional (plan's RECIPE, launch's
// rank program) and its prefix_command stops at a positional only. The
// commands split them off by this one rule before CLI11 parses the rest.
bool is_config_key_arg(const std::string& arg);

// The InputError line above for a problem found after parsing (a value
// that depends on another flag): "<command>: <what>; run `ctitan <command> --help`".
InputError command_line_error(const std::string& command, const std::string& what);

// Option checks whose messages name the value and what is allowed, e.g.
// "--nproc: must be an integer in 1..64, got '0'". They add nothing to the
// help: the option's description states the range.
CLI::Validator integer_in(long long lo, long long hi);
CLI::Validator number_in(double lo, double hi);
CLI::Validator one_of(const std::vector<std::string>& allowed);

// The same check for a value from elsewhere (an environment variable):
// "" when `text` is a whole number in [lo, hi], else the message.
std::string integer_problem(const std::string& text, long long lo, long long hi);

}  // namespace ctitan
