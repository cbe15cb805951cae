#include "harness/commands.h"

#include <algorithm>
#include <iostream>

#include "common/errors.h"
#include "common/build_identity.h"
#include "ctitan/build_info.h"
#include "harness/cli.h"
#include "harness/db_command.h"
#include "harness/gate_command.h"
#include "harness/launch.h"
#include "harness/plan_command.h"
#include "harness/report_command.h"
#include "harness/sweep_command.h"
#include "harness/trace_command.h"
#include "trainer/config/config_loader.h"
#include "trainer/train.h"

namespace ctitan {
namespace {

const char* kUsage =
    "usage: ctitan <command> [options]\n"
    "  train     train a Llama 3, Qwen3 or DeepSeek-V3 model (model.name; TorchTitan-style TOML +\n"
    "            --section.key overrides; `ctitan train --help` lists every key; `--nproc N` runs\n"
    "            N ranks through `launch`)\n"
    "  launch    start N ranks with torchrun's environment, each running `ctitan train`\n"
    "            (`ctitan launch --help`)\n"
    "  db        list and show the runs in a results database (`ctitan db --help`)\n"
    "  sweep     run a sweep spec (recipes/sweeps/*.toml) into a results database, resumably\n"
    "            (`ctitan sweep --help`)\n"
    "  report    tables and charts of a results database: md, self-contained html, csv, json\n"
    "            (`ctitan report --help`)\n"
    "  plan      predict a recipe's per-rank memory, step time, tokens/s and MFU on a hardware spec;\n"
    "            calibrate a spec from a results database; check published tables (`ctitan plan --help`)\n"
    "  gate      compare a candidate with a baseline; exit 0 pass, 1 regression, 3 needs action\n"
    "            (`ctitan gate --help`)\n"
    "  trace     merge the ranks' profiler traces of a run, and break steps down into compute,\n"
    "            communication, exposed communication and idle (`ctitan trace --help`)\n"
    "  version   print the version and the build's identity (git sha, uncommitted changes, LibTorch,\n"
    "            build type); --json for machines\n";

int version_command(const std::vector<std::string>& args) {
  CLI::App app{"The version and the build's identity (git sha, uncommitted changes, LibTorch, build type).",
               "ctitan version"};
  bool json = false;
  app.add_flag("--json", json, "one JSON object, for machines");
  parse_command_line(app, args, "version");
  if (json) {
    nlohmann::json j = to_json(this_build());
    j["ctitan_version"] = CTITAN_VERSION;
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::cout << "ctitan " << CTITAN_VERSION << ", " << this_build().describe() << "\n";
  return 0;
}

int train_command_line(const std::vector<std::string>& args) {
  std::vector<std::string> train_args = args;
  // `ctitan train --nproc N ...` = `ctitan launch --nproc N -- ...`; help is printed once, not per rank.
  std::vector<std::string> launcher = take_launcher_flags(train_args);
  const bool help = std::find(train_args.begin(), train_args.end(), "--help") != train_args.end() ||
                    std::find(train_args.begin(), train_args.end(), "-h") != train_args.end();
  if (!launcher.empty() && !help) {
    if (std::none_of(launcher.begin(), launcher.end(), [](const std::string& a) { return a.rfind("--nproc", 0) == 0; }))
      throw InputError(launcher.front() + " is a launcher flag: add --nproc N (or use `ctitan launch`)");
    launcher.push_back("--");
    launcher.insert(launcher.end(), train_args.begin(), train_args.end());
    LaunchOptions opts = parse_launch_args(launcher);
    opts.command = train_command(train_args);
    return launch(opts);
  }
  configure_threads();
  const JobConfig cfg = parse_job_config(train_args);
  if (cfg.job.print_config) {
    std::cout << to_toml(cfg);
    return 0;
  }
  return train(cfg);
}

int dispatch(const std::string& cmd, const std::vector<std::string>& rest) {
  if (cmd == "version" || cmd == "--version") return version_command(rest);
  if (cmd == "db") return run_db_command(rest);
  if (cmd == "launch") return launch(parse_launch_args(rest));
  if (cmd == "sweep") return sweep_command(rest);
  if (cmd == "report") return report_command(rest);
  if (cmd == "plan") return plan_command(rest);
  if (cmd == "gate") return gate_command(rest);
  if (cmd == "trace") return run_trace_command(rest);
  if (cmd == "train") return train_command_line(rest);
  throw InputError("unknown command '" + cmd + "'; run `ctitan --help` for the list");
}

}  // namespace

int run_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? kExitBadInput : 0;
  }
  try {
    return dispatch(args[0], {args.begin() + 1, args.end()});
  } catch (const HelpRequested& help) {
    std::cout << help.what();
    return 0;
  }
}

}  // namespace ctitan
