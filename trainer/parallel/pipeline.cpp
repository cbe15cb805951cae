#include "trainer/parallel/pipeline.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "common/errors.h"

namespace ctitan {
namespace {

const std::vector<std::string>& torchtitan_schedules() {
  static const std::vector<std::string> names = {"GPipe",         "1F1B",          "Interleaved1F1B", "LoopedBFS",
                                                 "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"};
  return names;
}

}  // namespace

std::vector<ModelPart> pipeline_stage_parts(const LlamaArgs& args, int64_t n_stages, int64_t layers_per_stage,
                                            int64_t first_less, int64_t last_less) {
  const int64_t effective = args.n_layers + first_less + last_less;
  const std::string what = std::to_string(args.n_layers) + " layers (+" + std::to_string(first_less) +
                           " for the embedding, +" + std::to_string(last_less) + " for norm and output)";
  if (layers_per_stage > 0) {
    const int64_t stages = (effective + layers_per_stage - 1) / layers_per_stage;
    if (stages != n_stages)
      throw InputError("parallelism.pipeline_parallel_layers_per_stage " + std::to_string(layers_per_stage) + " cuts " +
                       what + " into " + std::to_string(stages) + " stages, but the pipeline has " +
                       std::to_string(n_stages) + "; choose layers_per_stage so that the stages match, or -1");
  }
  const int64_t per = effective / n_stages, extra = effective % n_stages;
  std::vector<ModelPart> parts;
  int64_t next = 0;
  for (int64_t s = 0; s < n_stages; ++s) {
    int64_t layers = per + (s < extra ? 1 : 0);
    if (s == 0) layers -= first_less;
    if (s == n_stages - 1) layers -= last_less;
    if (layers < 0 || (s > 0 && s < n_stages - 1 && layers == 0))
      throw InputError("pipeline split: " + what + " do not fill " + std::to_string(n_stages) +
                       " stages (stage " + std::to_string(s) + " would hold " + std::to_string(layers) +
                       " layers); use fewer stages");
    ModelPart p;
    p.embedding = s == 0;
    p.first_layer = next;
    p.n_layers = layers;
    p.head = s == n_stages - 1;
    next += layers;
    parts.push_back(p);
  }
  if (next != args.n_layers)  // the arithmetic above guarantees it; a wrong split would train a different model
    throw InputError("pipeline split: " + what + " placed " + std::to_string(next) + " layers");
  return parts;
}

std::string PipelineAction::str() const {
  std::string s(1, kind == Kind::kForward ? 'F' : 'B');
  s += std::to_string(microbatch);
  return s;
}

bool pipeline_schedule_supported(const std::string& name) { return name == "GPipe" || name == "1F1B"; }

void check_pipeline_schedule(const std::string& name, bool csv) {
  const bool runner = name == "PipelineScheduleSingle" || name == "PipelineScheduleMulti" ||
                      name == "_PipelineScheduleRuntime";
  if (csv && !runner)
    throw InputError("parallelism.pipeline_parallel_schedule_csv runs with pipeline_parallel_schedule = "
                     "\"PipelineScheduleSingle\" (as in TorchTitan), not '" + name + "'");
  if (csv) return;
  if (runner)
    throw InputError("parallelism.pipeline_parallel_schedule '" + name +
                     "' runs a CSV schedule; set parallelism.pipeline_parallel_schedule_csv");
  const auto& known = torchtitan_schedules();
  if (std::find(known.begin(), known.end(), name) == known.end()) {
    std::string list;
    for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
    throw InputError("parallelism.pipeline_parallel_schedule '" + name + "' is not one of TorchTitan's schedules (" +
                     list + ")");
  }
  if (!pipeline_schedule_supported(name))
    throw InputError("parallelism.pipeline_parallel_schedule '" + name +
                     "' is not in this ctitan build yet; use GPipe or 1F1B");
}

std::vector<PipelineAction> pipeline_schedule(const std::string& name, int64_t stages, int64_t rank,
                                              int64_t microbatches) {
  check_pipeline_schedule(name);
  using K = PipelineAction::Kind;
  std::vector<PipelineAction> out;
  const int64_t m = microbatches;
  if (name == "GPipe") {
    for (int64_t i = 0; i < m; ++i) out.push_back({K::kForward, i});
    for (int64_t i = 0; i < m; ++i) out.push_back({K::kBackward, i});
    return out;
  }
  // 1F1B: warm-up forwards, the steady one-forward-one-backward, cool-down.
  const int64_t warmup = std::min(stages - 1 - rank, m);
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back({K::kForward, f});
  for (; f < m; ++f, ++b) {
    out.push_back({K::kForward, f});
    out.push_back({K::kBackward, b});
  }
  for (; b < m; ++b) out.push_back({K::kBackward, b});
  return out;
}

void validate_pipeline_schedule(const std::vector<std::vector<PipelineAction>>& ranks, int64_t m,
                                const std::string& where) {
  using K = PipelineAction::Kind;
  const int64_t p = static_cast<int64_t>(ranks.size());
  for (int64_t r = 0; r < p; ++r) {
    std::set<int64_t> fwd, bwd;
    for (const PipelineAction& a : ranks[r]) {
      const std::string at = where + ": row " + std::to_string(r) + ", action " + a.str();
      if (a.microbatch < 0 || a.microbatch >= m)
        throw InputError(at + ": micro-batch " + std::to_string(a.microbatch) + " is not in 0.." +
                         std::to_string(m - 1) + " (local_batch_size / pipeline_parallel_microbatch_size = " +
                         std::to_string(m) + ")");
      if (a.kind == K::kForward && !fwd.insert(a.microbatch).second) throw InputError(at + ": a second forward");
      if (a.kind == K::kBackward) {
        if (!fwd.count(a.microbatch)) throw InputError(at + ": backward before the micro-batch's forward");
        if (!bwd.insert(a.microbatch).second) throw InputError(at + ": a second backward");
      }
    }
    if (static_cast<int64_t>(fwd.size()) != m || static_cast<int64_t>(bwd.size()) != m)
      throw InputError(where + ": row " + std::to_string(r) + " runs " + std::to_string(fwd.size()) + " forwards and " +
                       std::to_string(bwd.size()) + " backwards of " + std::to_string(m) + " micro-batches");
  }
  // Every rank as the trainer runs it: a forward needs the previous stage's
  // forward of that micro-batch, a backward the next stage's backward.
  std::vector<size_t> next(p, 0);
  std::set<std::pair<int64_t, int64_t>> done_f, done_b;
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < p; ++r) {
      if (next[r] == ranks[r].size()) continue;
      const PipelineAction& a = ranks[r][next[r]];
      const bool fwd = a.kind == K::kForward;
      if (fwd ? (r == 0 || done_f.count({r - 1, a.microbatch}))
              : (r == p - 1 || done_b.count({r + 1, a.microbatch}))) {
        (fwd ? done_f : done_b).insert({r, a.microbatch});
        ++next[r];
        progress = true;
      }
    }
  }
  for (int64_t r = 0; r < p; ++r)
    if (next[r] < ranks[r].size())
      throw InputError(where + ": row " + std::to_string(r) + " waits for ever at action " + ranks[r][next[r]].str() +
                       " (its " + (ranks[r][next[r]].kind == K::kForward ? "input" : "gradient") +
                       " comes from an action the other rows never reach): the schedule deadlocks");
}

std::vector<std::vector<PipelineAction>> load_pipeline_csv(const std::string& path, int64_t stages,
                                                           int64_t microbatches) {
  std::ifstream in(path);
  if (!in)
    throw InputError("parallelism.pipeline_parallel_schedule_csv: cannot read '" + path +
                     "'; give the path of a CSV schedule (one row per pipeline rank)");
  std::vector<std::vector<PipelineAction>> ranks;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const int64_t row = static_cast<int64_t>(ranks.size());
    std::vector<PipelineAction> actions;
    std::stringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) {
      cell.erase(0, cell.find_first_not_of(" \t"));
      cell.erase(cell.find_last_not_of(" \t") + 1);
      if (cell.empty()) continue;  // idle
      const std::string at = path + ": row " + std::to_string(row) + ", action '" + cell + "'";
      const size_t k = cell.find_first_not_of("0123456789");
      if (k == 0 || k == std::string::npos || k + 1 >= cell.size() ||
          cell.find_first_not_of("0123456789", k + 1) != std::string::npos)
        throw InputError(at + " is not <stage><F|B|I|W><micro-batch>, e.g. 0F3");
      const char kind = cell[k];
      if (kind == 'I' || kind == 'W')
        throw InputError(at + ": split backwards (I, W: the zero-bubble schedules) are not in this ctitan build yet; "
                              "use F and B");
      if (kind != 'F' && kind != 'B') throw InputError(at + ": '" + std::string(1, kind) + "' is not F, B, I or W");
      if (std::stoll(cell.substr(0, k)) != row)
        throw InputError(at + ": stage " + cell.substr(0, k) + " on row " + std::to_string(row) +
                         "; this build runs one stage per rank (stage = row)");
      actions.push_back({kind == 'F' ? PipelineAction::Kind::kForward : PipelineAction::Kind::kBackward,
                         std::stoll(cell.substr(k + 1))});
    }
    ranks.push_back(std::move(actions));
  }
  while (!ranks.empty() && ranks.back().empty()) ranks.pop_back();  // trailing blank lines
  if (static_cast<int64_t>(ranks.size()) != stages)
    throw InputError(path + ": " + std::to_string(ranks.size()) + " rows for " + std::to_string(stages) +
                     " pipeline ranks; give one row per rank");
  validate_pipeline_schedule(ranks, microbatches, path);
  return ranks;
}

double pipeline_bubble_theory(const std::string& name, int64_t stages, int64_t microbatches) {
  (void)name;  // GPipe and 1F1B share it
  return static_cast<double>(stages - 1) / static_cast<double>(microbatches + stages - 1);
}

std::string pipeline_bubble_formula(const std::string& name) {
  (void)name;
  return "(p-1)/(m+p-1)";
}

}  // namespace ctitan
