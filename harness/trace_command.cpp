#include "harness/trace_command.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "common/file_io.h"
#include "harness/cli.h"
#include "profiling/trace.h"
#include "profiling/trace_analysis.h"
#include "profiling/trace_merge.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

nlohmann::json read_trace(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw InputError("cannot read " + p.string() + ": no such file or not readable");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(p.string() + " is not valid JSON (" + std::string(e.what()) + "); was the run interrupted while writing it?");
  }
}

std::vector<StepBreakdown> analyze_or_throw(const nlohmann::json& trace, const std::string& what) {
  try {
    return analyze_trace(trace);
  } catch (const std::exception& e) {
    throw InputError(what + ": " + e.what());
  }
}

int merge(const fs::path& run_dir, int64_t only_iteration, const std::string& out) {
  if (!fs::is_directory(run_dir))
    throw InputError("trace merge: " + run_dir.string() + " is not a directory; give the run's dump_folder");
  auto found = find_rank_traces(run_dir);
  if (only_iteration >= 0) {
    auto it = found.find(only_iteration);
    if (it == found.end())
      throw InputError("trace merge: no iteration_" + std::to_string(only_iteration) + "/rank*_trace.json under " +
                       run_dir.string() + (found.empty() ? "" : "; the first traced one is iteration_" + std::to_string(found.begin()->first)));
    found = {{it->first, it->second}};
  }
  if (found.empty())
    throw InputError("trace merge: no iteration_N/rank<R>_trace.json under " + run_dir.string() +
                     "; run with --profiling.enable_profiling (traces go to <dump_folder>/<save_traces_folder>)");
  if (!out.empty() && found.size() > 1)
    throw InputError("trace merge: --out names one file but " + std::to_string(found.size()) +
                     " iterations were traced; add --iteration N");
  for (const auto& [iteration, files] : found) {
    std::vector<CommandInput> inputs;
    for (const auto& f : files) inputs.push_back({"the rank trace", f.string()});
    check_output_is_not_an_input(out, "trace merge --out", inputs);
    std::vector<nlohmann::json> traces;
    for (const auto& f : files) traces.push_back(read_trace(f));
    nlohmann::json merged;
    try {
      merged = merge_traces(traces);
    } catch (const std::exception& e) {
      throw InputError("trace merge: iteration_" + std::to_string(iteration) + ": " + e.what());
    }
    const fs::path target = out.empty() ? files.front().parent_path() / "merged_trace.json" : fs::path(out);
    write_json_file(target.string(), merged);
    std::cout << "iteration " << iteration << ": " << files.size() << " ranks -> " << target.string() << "\n"
              << "  clock: " << merged["ctitan"]["clock"].get<std::string>() << "\n";
    std::cout << format_breakdown_table(analyze_or_throw(merged, target.string()));
  }
  return 0;
}

int analyze(const std::vector<std::string>& files) {
  for (const auto& f : files) {
    const auto steps = analyze_or_throw(read_trace(f), f);
    std::cout << f << "\n";
    if (steps.empty()) {
      std::cout << "  no \"step\" events: not a ctitan trace, or the window held no whole step\n";
      continue;
    }
    std::cout << format_breakdown_table(steps);
  }
  return 0;
}

}  // namespace

int run_trace_command(const std::vector<std::string>& args) {
  CLI::App app{"The profiler's traces after a run ([profiling] enable_profiling).", "ctitan trace"};
  app.require_subcommand(1);
  app.footer("Categories, clocks and the breakdown's definitions: docs/profiling.md.");
  std::string run_dir, out;
  int64_t iteration = -1;
  std::vector<std::string> files;
  CLI::App* m = app.add_subcommand("merge", "merge every rank's trace of each traced iteration into "
                                            "iteration_N/merged_trace.json (one timeline, aligned clocks)");
  m->add_option("run_dir", run_dir, "the run's dump_folder")->required();
  m->add_option("--iteration", iteration, "only this iteration (a step number)");
  m->add_option("--out", out, "write the merged trace here instead (one iteration)");
  CLI::App* a = app.add_subcommand("analyze", "per rank and step: compute, communication, exposed communication, idle");
  a->add_option("files", files, "rank or merged trace files")->required();
  if (!args.empty() && args[0] != "merge" && args[0] != "analyze" && args[0].rfind('-', 0) != 0)
    throw InputError("unknown trace command '" + args[0] + "'; `ctitan trace --help` lists merge and analyze");
  parse_command_line(app, args, "trace");
  return m->parsed() ? merge(run_dir, iteration, out) : analyze(files);
}

}  // namespace ctitan
