#include "harness/commands.h"

#include <iostream>

#include "ctitan/build_info.h"
#include "trainer/config/config_loader.h"
#include "trainer/errors.h"
#include "trainer/train.h"

namespace ctitan {
namespace {

const char* kUsage =
    "usage: ctitan <command> [options]\n"
    "  train     train a Llama 3 model (TorchTitan-style TOML + --section.key overrides;\n"
    "            `ctitan train --help` lists every key)\n"
    "  version   print the version, git sha and LibTorch version\n";

}  // namespace

int run_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? kExitBadInput : 0;
  }
  const std::string& cmd = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "version" || cmd == "--version") {
    std::cout << "ctitan " << CTITAN_VERSION << " (" << CTITAN_GIT_SHA << ", " << CTITAN_BUILD_TYPE
              << ", LibTorch " << CTITAN_TORCH_VERSION << ")\n";
    return 0;
  }
  if (cmd == "train") {
    configure_threads();
    JobConfig cfg;
    try {
      cfg = parse_job_config(rest);
    } catch (const HelpRequested& help) {
      std::cout << help.what();
      return 0;
    }
    if (cfg.job.print_config) {
      std::cout << to_toml(cfg);
      return 0;
    }
    return train(cfg);
  }
  throw InputError("unknown command '" + cmd + "'; run `ctitan --help` for the list");
}

}  // namespace ctitan
