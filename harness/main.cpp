// ctitan — recipe sweeps and a Llama 3 pretraining trainer on LibTorch.
//
//   ctitan <command> [options]    `ctitan --help` lists the commands (kUsage in
//                                 harness/commands.cpp), `ctitan <command> --help` each one's flags
//   ctitan train [--job.config_file F] [--section.key value ...]
//
// Exit codes: 0 ok, 2 bad input (one line on stderr), 1 internal error,
// 130 interrupted.
#include <c10/util/Exception.h>

#include <iostream>
#include <string>
#include <vector>

#include "common/errors.h"
#include "harness/commands.h"
#include "trainer/distributed/comm.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return ctitan::run_command(args);
  } catch (const ctitan::InputError& e) {
    std::cerr << "ctitan: " << e.what() << std::endl;
    return ctitan::kExitBadInput;
  } catch (const ctitan::CommError& e) {
    // A collective that failed or timed out: the message names rank and op.
    std::cerr << "ctitan: " << e.what() << std::endl;
    return 1;
  } catch (const c10::Error& e) {
    // LibTorch's what() carries a C++ backtrace; the message alone is the report.
    std::cerr << "ctitan: internal error: " << e.what_without_backtrace() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ctitan: internal error: " << e.what() << std::endl;
    return 1;
  }
}
