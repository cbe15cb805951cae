#include "harness/gate_run.h"

#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <stdexcept>

#include "common/errors.h"
#include "common/subprocess.h"
#include "harness/launch.h"
#include "harness/sweep.h"
#include "harness/sweep_spec.h"

namespace ctitan {

BuildIdentity binary_identity(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || ::access(path.c_str(), X_OK) != 0)
    throw InputError("gate: " + flag + " '" + path + "' is not an executable file; give the ctitan binary of a build");
  const CommandResult answer = run_command({path, "version", "--json"});
  try {
    if (!answer.started || answer.exit_code != 0) throw std::runtime_error("no answer");
    return build_identity_from_json(nlohmann::json::parse(answer.out));
  } catch (const std::exception&) {
    throw InputError("gate: " + flag + " '" + path +
                     "' does not answer `version --json` with a build identity (not ctitan, or a ctitan from before "
                     "build identities: rebuild it)");
  }
}

namespace {

// Where the spec sets `key` per point ([grid], [[include]], [[stack]]), or
// "": an override of such a key would be overwritten by the point's value
// (the candidate would silently run the baseline's recipe).
std::string varied_per_point(const SweepSpec& spec, const std::string& key) {
  for (const SweepAxis& a : spec.grid)
    if (a.key == key) return "[grid] (" + a.where + ")";
  for (const IncludeRow& r : spec.include)
    for (const Assignment& s : r.sets)
      if (s.key == key) return "[[include]] (" + s.where + ")";
  for (const StackRow& r : spec.stack)
    for (const Assignment& s : r.sets)
      if (s.key == key) return "[[stack]] " + r.name + " (" + s.where + ")";
  return "";
}

PairedSide plan_side(const SweepSpec& spec, const std::string& sweep_name, const std::string& bin,
                     const BuildIdentity& id, const std::vector<std::string>& overrides, const GateRunArgs& a) {
  PairedSide side;
  side.spec = spec;
  side.spec.name = sweep_name;
  side.spec.repeats = a.pairs;
  for (const std::string& o : overrides) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == o.size())
      throw InputError("gate: --candidate-override '" + o + "' needs KEY=VALUE, e.g. activation_checkpoint.mode=full");
    if (const std::string where = varied_per_point(spec, o.substr(0, eq)); !where.empty())
      throw InputError("gate: --candidate-override " + o + " sets a key the spec varies per point in " + where +
                       ", so the sides would not run the same points; drop it from the spec or compare two specs' "
                       "sweeps with --baseline/--candidate");
    side.spec.overrides.push_back({o.substr(0, eq), o.substr(eq + 1), "--candidate-override " + o});
  }
  side.points = plan_sweep(side.spec, device_budget(side.spec), id.id);
  side.opts.db_path = a.db;
  side.opts.binary = bin;
  side.opts.share = false;  // an A/A pair must be two runs
  return side;
}

}  // namespace

int run_gate_pairs(const GateRunArgs& a) {
  const std::string base_bin = a.baseline_bin.empty() ? self_executable() : a.baseline_bin;
  const std::string cand_bin = a.candidate_bin.empty() ? base_bin : a.candidate_bin;
  const BuildIdentity base_id = binary_identity(base_bin, "--baseline-bin");
  const BuildIdentity cand_id = cand_bin == base_bin ? base_id : binary_identity(cand_bin, "--candidate-bin");
  if (base_id.libtorch_version != cand_id.libtorch_version)
    std::cerr << "ctitan gate: warning: the binaries use different LibTorch versions (" << base_id.libtorch_version
              << " vs " << cand_id.libtorch_version << "): the comparison includes LibTorch's own changes\n";
  if (a.candidate_overrides.empty() && base_id.id == cand_id.id)
    std::cerr << "ctitan gate: note: baseline and candidate are the same build with the same recipe (an A/A "
                 "comparison: it should pass)\n";
  const SweepSpec spec = load_sweep_spec(a.spec);
  const PairedSide base =
      plan_side(spec, a.baseline_sweep.empty() ? spec.name + "-baseline" : a.baseline_sweep, base_bin, base_id, {}, a);
  const PairedSide cand = plan_side(spec, a.candidate_sweep.empty() ? spec.name + "-candidate" : a.candidate_sweep,
                                    cand_bin, cand_id, a.candidate_overrides, a);
  if (base.spec.name == cand.spec.name) throw InputError("gate: the two sides need different sweep names");
  std::cout << "gate: baseline " << base_id.describe() << "\n      candidate " << cand_id.describe()
            << (a.candidate_overrides.empty() ? "" : " with overrides") << std::endl;
  return run_paired(base, cand, a.pairs, a.seed);
}

}  // namespace ctitan
