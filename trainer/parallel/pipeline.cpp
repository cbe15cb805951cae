#include "trainer/parallel/pipeline.h"

#include <algorithm>
#include <array>
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

std::vector<ModelPart> pipeline_stage_parts(const ModelArgs& args, int64_t n_stages, int64_t layers_per_stage,
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

namespace {

using Kind = PipelineAction::Kind;

char kind_char(Kind k) {
  switch (k) {
    case Kind::kForward: return 'F';
    case Kind::kBackward: return 'B';
    case Kind::kBackwardInput: return 'I';
    case Kind::kBackwardWeight: return 'W';
  }
  return '?';
}

bool zero_bubble(const std::string& name) { return name == "InterleavedZeroBubble" || name == "ZBVZeroBubble"; }

// Megatron's interleaved 1F1B as PyTorch orders it (also ZB1P with
// `zero_bubble`): micro-batches go in rounds of m / max(1, m / p); a rank
// runs its warm-up forwards (the last stage's (v-1) rounds, plus `factor`
// per hop from the last rank), then one forward and one backward per step,
// then the remaining backwards. A step's local stage cycles every round:
// forwards from the first local stage up, backwards from the last down.
// With `zero_bubble` backwards are I and each W follows, from rank r's
// (r+1)-th steady step on, the I it belongs to (one W per later I, the
// rest at the end).
std::vector<PipelineAction> interleaved_ops(int64_t p, int64_t v, int64_t m, int64_t r, bool zero_bubble) {
  const int64_t rounds = std::max<int64_t>(1, m / p), per_round = m / rounds;
  const int64_t warmup = std::min((v - 1) * per_round + (zero_bubble ? 1 : 2) * (p - 1 - r), m * v);
  const int64_t total = v * m;  // forwards, and backwards
  const auto fwd_stage = [&](int64_t step) { return ((step / per_round) % v) * p + r; };
  const auto bwd_stage = [&](int64_t step) { return (v - 1 - ((step - warmup) / per_round) % v) * p + r; };
  std::vector<int64_t> next_f(p * v, 0), next_b(p * v, 0), next_w(p * v, 0);
  std::vector<int64_t> backward_steps;  // the step of each backward, in order (their W follow in that order)
  size_t weights = 0;
  std::vector<PipelineAction> out;
  const auto push = [&](int64_t stage, Kind k, std::vector<int64_t>& counter) {
    out.push_back({stage, k, counter[stage]++});
  };
  const auto weight = [&]() {
    push(bwd_stage(backward_steps[weights++]), Kind::kBackwardWeight, next_w);
  };
  for (int64_t step = 0; step < total + warmup; ++step) {
    // warm-up: [0, warmup) forwards; steady: [warmup, total) F then B;
    // cool-down: [total, total + warmup) B only.
    if (step < total) push(fwd_stage(step), Kind::kForward, next_f);
    if (step < warmup) continue;
    push(bwd_stage(step), zero_bubble ? Kind::kBackwardInput : Kind::kBackward, next_b);
    backward_steps.push_back(step);
    if (zero_bubble && step - warmup >= r) weight();
  }
  while (zero_bubble && weights < backward_steps.size()) weight();
  return out;
}

// ZB-V (Qi et al. 2024, section 6) as PyTorch orders it: rank r holds
// stage r (chunk 0) and stage 2p-1-r (chunk 1). Warm-up: 2(p-r)-1 chunk-0
// forwards, r pairs of chunk-1 and chunk-0 forwards, p-r chunk-1 F I W;
// steady: chunk-0 F I W then chunk-1 F I W; cool-down: r pairs of I, p-r
// chunk-0 I W, then every W left. Planned for max(m, 2p-1) micro-batches,
// the extra ones dropped.
std::vector<PipelineAction> zbv_ops(int64_t p, int64_t m, int64_t r) {
  const int64_t n = std::max(2 * p - 1, m);
  const int64_t c0 = r, c1 = 2 * p - 1 - r;
  int64_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  std::vector<PipelineAction> out;
  const auto act = [&](int64_t stage, Kind k, int64_t& counter) { out.push_back({stage, k, counter++}); };
  const auto fiw = [&](int64_t stage, int64_t& f, int64_t& b, bool forward) {
    if (forward) act(stage, Kind::kForward, f);
    out.push_back({stage, Kind::kBackwardInput, b});
    act(stage, Kind::kBackwardWeight, b);
  };
  for (int64_t i = 0; i < 2 * (p - r) - 1; ++i) act(c0, Kind::kForward, f0);
  for (int64_t i = 0; i < r; ++i) {
    act(c1, Kind::kForward, f1);
    act(c0, Kind::kForward, f0);
  }
  for (int64_t i = 0; i < p - r; ++i) fiw(c1, f1, b1, true);
  while (f1 < f0 || f0 < n) {
    fiw(c0, f0, b0, f0 < n);
    fiw(c1, f1, b1, true);
  }
  int64_t w0 = b0, w1 = b1;
  for (int64_t i = 0; i < r; ++i) {
    act(c0, Kind::kBackwardInput, b0);
    act(c1, Kind::kBackwardInput, b1);
  }
  for (int64_t i = 0; i < p - r; ++i) {
    act(c0, Kind::kBackwardInput, b0);
    act(c0, Kind::kBackwardWeight, w0);
  }
  while (w1 < b1) act(c1, Kind::kBackwardWeight, w1);
  while (w0 < b0) act(c0, Kind::kBackwardWeight, w0);
  out.erase(std::remove_if(out.begin(), out.end(), [&](const PipelineAction& a) { return a.microbatch >= m; }),
            out.end());
  return out;
}

std::vector<PipelineAction> single_stage_ops(const std::string& name, int64_t p, int64_t m, int64_t r) {
  std::vector<PipelineAction> out;
  if (name == "GPipe") {
    for (int64_t i = 0; i < m; ++i) out.push_back({r, Kind::kForward, i});
    for (int64_t i = 0; i < m; ++i) out.push_back({r, Kind::kBackward, i});
    return out;
  }
  // 1F1B: warm-up forwards, the steady one-forward-one-backward, cool-down.
  const int64_t warmup = std::min(p - 1 - r, m);
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back({r, Kind::kForward, f});
  for (; f < m; ++f, ++b) {
    out.push_back({r, Kind::kForward, f});
    out.push_back({r, Kind::kBackward, b});
  }
  for (; b < m; ++b) out.push_back({r, Kind::kBackward, b});
  return out;
}

std::vector<PipelineAction> looped_bfs_ops(const PipelineSchedule& s, int64_t r) {
  std::vector<PipelineAction> out;
  const std::vector<int64_t> mine = s.stages_of(r);
  for (int64_t stage : mine)
    for (int64_t i = 0; i < s.microbatches; ++i) out.push_back({stage, Kind::kForward, i});
  for (auto it = mine.rbegin(); it != mine.rend(); ++it)
    for (int64_t i = s.microbatches; i-- > 0;) out.push_back({*it, Kind::kBackward, i});
  return out;
}

}  // namespace

std::string PipelineAction::str() const {
  std::string s = std::to_string(stage);
  s += kind_char(kind);
  s += std::to_string(microbatch);
  return s;
}

int64_t PipelineSchedule::rank_of(int64_t stage) const {
  if (style == StageStyle::kV && stage >= ranks) return 2 * ranks - 1 - stage;
  return stage % ranks;
}

std::vector<int64_t> PipelineSchedule::stages_of(int64_t rank) const {
  if (style == StageStyle::kV) return {rank, 2 * ranks - 1 - rank};
  std::vector<int64_t> out;
  for (int64_t k = 0; k < stages_per_rank; ++k) out.push_back(rank + k * ranks);
  return out;
}

bool PipelineSchedule::splits_backward() const {
  for (const auto& row : actions)
    for (const auto& a : row)
      if (a.kind == Kind::kBackwardInput || a.kind == Kind::kBackwardWeight) return true;
  return false;
}

bool pipeline_multi_stage(const std::string& name) {
  return name == "Interleaved1F1B" || name == "LoopedBFS" || name == "InterleavedZeroBubble" ||
         name == "ZBVZeroBubble" || name == "DualPipeV" || name == "PipelineScheduleMulti" ||
         name == "_PipelineScheduleRuntime";
}

void check_pipeline_schedule(const std::string& name, bool csv) {
  const bool runner = name == "PipelineScheduleSingle" || name == "PipelineScheduleMulti" ||
                      name == "_PipelineScheduleRuntime";
  if (csv && !runner)
    throw InputError("parallelism.pipeline_parallel_schedule_csv runs with pipeline_parallel_schedule = "
                     "\"PipelineScheduleSingle\" or \"PipelineScheduleMulti\" (as in TorchTitan), not '" + name + "'");
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
  if (name == "DualPipeV")
    throw InputError("parallelism.pipeline_parallel_schedule 'DualPipeV' overlaps a forward with a backward of "
                     "mixture-of-experts models, which ctitan does not have; use ZBVZeroBubble");
}

namespace {

// TorchTitan's rules for `stages` stages over `pp` ranks; `what` says where
// the count came from.
int64_t stages_per_rank_of(const std::string& name, int64_t stages, int64_t pp, const std::string& what) {
  const bool multi = pipeline_multi_stage(name);
  if (stages % pp != 0)
    throw InputError(what + " gives " + std::to_string(stages) + " stages, not a multiple of pipeline_parallel_degree " +
                     std::to_string(pp) + "; every rank holds the same number of stages");
  const int64_t v = stages / pp;
  const std::string per = what + " gives " + std::to_string(stages) + " stages = " + std::to_string(v) + " per rank; ";
  if (!multi && v != 1) throw InputError(per + name + " runs one stage per rank; use Interleaved1F1B or fewer stages");
  if (multi && v < 2) throw InputError(per + name + " runs at least two per rank; use more stages");
  if (name == "ZBVZeroBubble" && v != 2) throw InputError(per + name + " runs exactly two per rank");
  return v;
}

// Parts from lists of module names ("tok_embeddings", "layers.N", "norm",
// "output"): every layer once, in order; the embedding first, norm and
// output together last.
std::vector<ModelPart> parts_from_fqns(const ModelArgs& args, const std::vector<std::vector<std::string>>& fqns,
                                       const std::string& key) {
  std::vector<ModelPart> parts;
  int64_t next = 0;
  for (size_t k = 0; k < fqns.size(); ++k) {
    const std::string at = key + ": part " + std::to_string(k) + " (";
    std::string listed;
    for (const auto& m : fqns[k]) listed += (listed.empty() ? "" : " ") + m;
    const std::string where = at + listed + ")";
    ModelPart p;
    p.embedding = false;
    p.head = false;
    p.first_layer = next;
    p.n_layers = 0;
    bool norm = false, output = false;
    for (const std::string& m : fqns[k]) {
      if (m == "tok_embeddings") {
        if (k != 0 || p.n_layers > 0) throw InputError(where + ": tok_embeddings must open the first part");
        p.embedding = true;
      } else if (m == "norm" || m == "output") {
        (m == "norm" ? norm : output) = true;
      } else if (m.rfind("layers.", 0) == 0 && m.size() > 7 && m.size() < 17 &&
                 m.find_first_not_of("0123456789", 7) == std::string::npos) {
        const int64_t l = std::stoll(m.substr(7));
        if (norm || output || l != next)
          throw InputError(where + ": " + m + " is out of order; the parts list layers.0 .. layers." +
                           std::to_string(args.n_layers - 1) + " once each, in order, norm and output last");
        if (l >= args.n_layers)
          throw InputError(where + ": " + m + " does not exist (the model has " + std::to_string(args.n_layers) +
                           " layers)");
        ++next;
        ++p.n_layers;
      } else {
        throw InputError(where + ": '" + m + "' is not a module of Llama 3 (tok_embeddings, layers.N, norm, output)");
      }
    }
    if (norm != output) throw InputError(where + ": norm and output run together in ctitan; list both in one part");
    p.head = norm;
    if (p.head && k + 1 != fqns.size()) throw InputError(where + ": norm and output must be in the last part");
    if (!p.embedding && !p.head && p.n_layers == 0) throw InputError(where + ": an empty part");
    parts.push_back(p);
  }
  if (parts.empty() || !parts.front().embedding || !parts.back().head || next != args.n_layers)
    throw InputError(key + ": the parts must hold tok_embeddings, layers.0 .. layers." +
                     std::to_string(args.n_layers - 1) + ", norm and output (they hold layers up to " +
                     std::to_string(next - 1) + ")");
  return parts;
}

}  // namespace

int64_t pipeline_stages_per_rank(const std::string& name, const ModelArgs& args, int64_t pp,
                                 int64_t layers_per_stage, int64_t first_less, int64_t last_less) {
  if (layers_per_stage <= 0) return pipeline_multi_stage(name) ? 2 : 1;
  const int64_t effective = args.n_layers + first_less + last_less;
  std::string what = "parallelism.pipeline_parallel_layers_per_stage ";
  what += std::to_string(layers_per_stage);
  what += " over " + std::to_string(args.n_layers) + " layers (+" + std::to_string(first_less) +
          " for the embedding, +" + std::to_string(last_less) + " for norm and output)";
  return stages_per_rank_of(name, (effective + layers_per_stage - 1) / layers_per_stage, pp, what);
}

PipelineSplit plan_pipeline_split(const ModelArgs& args, const ParallelismSection& p, int64_t pp) {
  const std::string& name = p.pipeline_parallel_schedule;
  std::vector<std::vector<std::string>> fqns;
  std::string key;
  if (!p.module_fqns_per_model_part.empty()) {
    key = "parallelism.module_fqns_per_model_part";
    for (const std::string& part : p.module_fqns_per_model_part) {
      std::vector<std::string> modules;
      std::stringstream in(part);
      for (std::string m; in >> m;) modules.push_back(m);
      fqns.push_back(std::move(modules));
    }
  } else if (!p.pipeline_parallel_split_points.empty()) {
    // Each point opens a stage: the older TorchTitan key, as module lists.
    key = "parallelism.pipeline_parallel_split_points";
    fqns.push_back({"tok_embeddings"});
    int64_t l = 0;
    for (const std::string& point : p.pipeline_parallel_split_points) {
      const std::string want = "layers." + std::to_string(l);
      if (point.rfind("layers.", 0) != 0 || point.find_first_not_of("0123456789", 7) != std::string::npos ||
          point.size() <= 7 || point.size() > 16 || std::stoll(point.substr(7)) <= l ||
          std::stoll(point.substr(7)) >= args.n_layers)
        throw InputError(key + ": '" + point + "' is not a layer after " + want + " and before layers." +
                         std::to_string(args.n_layers) + " (points are ascending layers.N)");
      for (const int64_t end = std::stoll(point.substr(7)); l < end; ++l)
        fqns.back().push_back("layers." + std::to_string(l));
      fqns.emplace_back();
    }
    for (; l < args.n_layers; ++l) fqns.back().push_back("layers." + std::to_string(l));
    fqns.back().push_back("norm");
    fqns.back().push_back("output");
  }
  PipelineSplit split;
  if (!fqns.empty()) {
    if (p.pipeline_parallel_layers_per_stage > 0)
      throw InputError(key + " and parallelism.pipeline_parallel_layers_per_stage both cut the model; set one");
    split.parts = parts_from_fqns(args, fqns, key);
    split.stages_per_rank = stages_per_rank_of(name, static_cast<int64_t>(split.parts.size()), pp, key);
    return split;
  }
  split.stages_per_rank =
      pipeline_stages_per_rank(name, args, pp, p.pipeline_parallel_layers_per_stage,
                               p.pipeline_parallel_first_stage_less_layers, p.pipeline_parallel_last_stage_less_layers);
  split.parts = pipeline_stage_parts(args, pp * split.stages_per_rank, p.pipeline_parallel_layers_per_stage,
                                     p.pipeline_parallel_first_stage_less_layers,
                                     p.pipeline_parallel_last_stage_less_layers);
  return split;
}

PipelineSchedule build_pipeline_schedule(const std::string& name, int64_t p, int64_t v, int64_t m) {
  check_pipeline_schedule(name);
  PipelineSchedule s;
  s.name = name;
  s.ranks = p;
  s.stages_per_rank = v;
  s.microbatches = m;
  s.style = name == "ZBVZeroBubble" ? StageStyle::kV : StageStyle::kLoop;
  if (name == "ZBVZeroBubble" && v != 2)
    throw InputError("parallelism.pipeline_parallel_schedule ZBVZeroBubble runs two stages per rank, not " +
                     std::to_string(v));
  const int64_t rounds = std::max<int64_t>(1, m / p);
  if ((name == "Interleaved1F1B" || name == "InterleavedZeroBubble") && m % rounds != 0)
    throw InputError("parallelism.pipeline_parallel_schedule " + name + " runs micro-batches in rounds of " +
                     std::to_string(m / rounds) + " (" + std::to_string(rounds) + " rounds); " + std::to_string(m) +
                     " micro-batches (local_batch_size / pipeline_parallel_microbatch_size) is not a multiple of " +
                     std::to_string(rounds) + "; choose a multiple of pipeline_parallel_degree");
  for (int64_t r = 0; r < p; ++r) {
    if (name == "GPipe" || name == "1F1B") {
      s.actions.push_back(single_stage_ops(name, p, m, r));
    } else if (name == "LoopedBFS") {
      s.actions.push_back(looped_bfs_ops(s, r));
    } else if (name == "ZBVZeroBubble") {
      s.actions.push_back(zbv_ops(p, m, r));
    } else {
      s.actions.push_back(interleaved_ops(p, v, m, r, zero_bubble(name)));
    }
  }
  validate_pipeline_schedule(s, "pipeline schedule " + name);
  return s;
}

void validate_pipeline_schedule(const PipelineSchedule& s, const std::string& where) {
  const int64_t p = s.ranks, m = s.microbatches, n_stages = s.stages();
  // Per (stage, micro-batch): which of F, B, I, W a row has run so far.
  const auto key = [&](int64_t stage, int64_t i) { return static_cast<size_t>(stage * m + i); };
  std::vector<std::array<int, 4>> ran(static_cast<size_t>(n_stages * m), {0, 0, 0, 0});
  for (int64_t r = 0; r < p; ++r) {
    for (const PipelineAction& a : s.actions[r]) {
      const std::string at = where + ": row " + std::to_string(r) + ", action " + a.str();
      if (a.stage < 0 || a.stage >= n_stages || s.rank_of(a.stage) != r) {
        std::string mine;
        for (int64_t st : s.stages_of(r)) mine += (mine.empty() ? "" : ", ") + std::to_string(st);
        throw InputError(at + ": stage " + std::to_string(a.stage) + " is not on rank " + std::to_string(r) +
                         " (it holds stage" + (s.stages_per_rank > 1 ? "s " : " ") + mine + " of " +
                         std::to_string(n_stages) + ")");
      }
      if (a.microbatch < 0 || a.microbatch >= m)
        throw InputError(at + ": micro-batch " + std::to_string(a.microbatch) + " is not in 0.." +
                         std::to_string(m - 1) + " (local_batch_size / pipeline_parallel_microbatch_size = " +
                         std::to_string(m) + ")");
      auto& seen = ran[key(a.stage, a.microbatch)];
      const int k = static_cast<int>(a.kind);
      if (seen[k]) throw InputError(at + ": a second " + kind_char(a.kind));
      if (a.kind != Kind::kForward && !seen[0]) throw InputError(at + ": backward before the micro-batch's forward");
      if (a.kind == Kind::kBackwardWeight && !seen[2]) throw InputError(at + ": W before the I it completes");
      if ((a.kind == Kind::kBackward && seen[2]) || (a.kind == Kind::kBackwardInput && seen[1]))
        throw InputError(at + ": both a whole backward (B) and a split one (I) of one micro-batch");
      seen[k] = 1;
    }
  }
  for (int64_t st = 0; st < n_stages; ++st)
    for (int64_t i = 0; i < m; ++i) {
      const auto& seen = ran[key(st, i)];
      const bool done = seen[0] && (seen[1] || (seen[2] && seen[3]));
      if (!done) {
        std::string missing = !seen[0] ? "F" : seen[2] ? "W" : "B (or I and W)";
        throw InputError(where + ": row " + std::to_string(s.rank_of(st)) + " never runs " + std::to_string(st) +
                         missing + std::to_string(i) + " (every stage runs each of the " + std::to_string(m) +
                         " micro-batches forward and backward)");
      }
    }
  // Every row as the trainer runs it: a forward needs the previous stage's
  // forward of that micro-batch, a backward (B or I) the next stage's.
  std::vector<size_t> next(p, 0);
  std::vector<char> done_f(ran.size(), 0), done_b(ran.size(), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < p; ++r) {
      while (next[r] < s.actions[r].size()) {
        const PipelineAction& a = s.actions[r][next[r]];
        const bool ready = a.kind == Kind::kForward        ? a.stage == 0 || done_f[key(a.stage - 1, a.microbatch)]
                           : a.kind == Kind::kBackwardWeight ? true
                                                             : a.stage == n_stages - 1 ||
                                                                   done_b[key(a.stage + 1, a.microbatch)];
        if (!ready) break;
        (a.kind == Kind::kForward ? done_f : done_b)[key(a.stage, a.microbatch)] |= a.kind != Kind::kBackwardWeight;
        ++next[r];
        progress = true;
      }
    }
  }
  for (int64_t r = 0; r < p; ++r)
    if (next[r] < s.actions[r].size()) {
      const PipelineAction& a = s.actions[r][next[r]];
      throw InputError(where + ": row " + std::to_string(r) + " waits for ever at action " + a.str() + " (its " +
                       (a.kind == Kind::kForward ? "input" : "gradient") +
                       " comes from an action the other rows never reach): the schedule deadlocks");
    }
}

PipelineSchedule load_pipeline_csv(const std::string& path, const std::string& name, int64_t p, int64_t v,
                                   int64_t m) {
  check_pipeline_schedule(name, /*csv=*/true);
  PipelineSchedule s;
  s.name = name;
  s.ranks = p;
  s.stages_per_rank = name == "PipelineScheduleSingle" ? 1 : v;
  s.microbatches = m;
  std::ifstream in(path);
  if (!in)
    throw InputError("parallelism.pipeline_parallel_schedule_csv: cannot read '" + path +
                     "'; give the path of a CSV schedule (one row per pipeline rank)");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const int64_t row = static_cast<int64_t>(s.actions.size());
    std::vector<PipelineAction> actions;
    std::stringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) {
      cell.erase(0, cell.find_first_not_of(" \t"));
      cell.erase(cell.find_last_not_of(" \t") + 1);
      if (cell.empty()) continue;  // idle
      const std::string at = path + ": row " + std::to_string(row) + ", action '" + cell + "'";
      const size_t k = cell.find_first_not_of("0123456789");
      if (k == 0 || k == std::string::npos || k + 1 >= cell.size() || k > 9 || cell.size() - k > 10 ||
          cell.find_first_not_of("0123456789", k + 1) != std::string::npos)
        throw InputError(at + " is not <stage><F|B|I|W><micro-batch>, e.g. 0F3");
      Kind kind;
      switch (cell[k]) {
        case 'F': kind = Kind::kForward; break;
        case 'B': kind = Kind::kBackward; break;
        case 'I': kind = Kind::kBackwardInput; break;
        case 'W': kind = Kind::kBackwardWeight; break;
        default: throw InputError(at + ": '" + std::string(1, cell[k]) + "' is not F, B, I or W");
      }
      actions.push_back({std::stoll(cell.substr(0, k)), kind, std::stoll(cell.substr(k + 1))});
    }
    s.actions.push_back(std::move(actions));
  }
  while (!s.actions.empty() && s.actions.back().empty()) s.actions.pop_back();  // trailing blank lines
  if (static_cast<int64_t>(s.actions.size()) != p)
    throw InputError(path + ": " + std::to_string(s.actions.size()) + " rows for " + std::to_string(p) +
                     " pipeline ranks; give one row per rank");
  validate_pipeline_schedule(s, path);
  return s;
}

double pipeline_bubble_theory(const PipelineSchedule& s) {
  // List scheduling with blocking dependencies: an action starts when its
  // rank is free and its input (gradient) is there.
  const int64_t p = s.ranks, m = s.microbatches, n_stages = s.stages();
  const auto key = [&](int64_t stage, int64_t i) { return static_cast<size_t>(stage * m + i); };
  std::vector<double> end_f(n_stages * m, -1), end_b(n_stages * m, -1);
  std::vector<double> clock(p, 0), busy(p, 0);
  std::vector<size_t> next(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < p; ++r) {
      while (next[r] < s.actions[r].size()) {
        const PipelineAction& a = s.actions[r][next[r]];
        double ready = 0;
        if (a.kind == Kind::kForward && a.stage > 0) ready = end_f[key(a.stage - 1, a.microbatch)];
        if (a.backward() && a.stage < n_stages - 1) ready = end_b[key(a.stage + 1, a.microbatch)];
        if (ready < 0) break;
        const double cost = a.kind == Kind::kBackward ? 2.0 : 1.0;
        clock[r] = std::max(clock[r], ready) + cost;
        busy[r] += cost;
        if (a.kind == Kind::kForward) end_f[key(a.stage, a.microbatch)] = clock[r];
        if (a.backward()) end_b[key(a.stage, a.microbatch)] = clock[r];
        ++next[r];
        progress = true;
      }
    }
  }
  const double span = *std::max_element(clock.begin(), clock.end());
  double idle = 0;
  for (int64_t r = 0; r < p; ++r) idle += 1.0 - busy[r] / span;
  return idle / static_cast<double>(p);
}

std::string pipeline_bubble_formula(const std::string& name) {
  if (name == "GPipe" || name == "1F1B") return "(p-1)/(m+p-1)";
  if (name == "Interleaved1F1B" || name == "LoopedBFS") return "simulated (the paper's (p-1)/(v*m+p-1) for whole rounds)";
  return "simulated: F = I = W, B = I + W";
}

std::vector<std::vector<PipelineP2P>> plan_pipeline_p2p(const PipelineSchedule& s, int64_t rank) {
  using Kind = PipelineAction::Kind;
  const auto& actions = s.actions[static_cast<size_t>(rank)];
  const int64_t last = s.stages() - 1, m = s.microbatches;
  const auto remote = [&](int64_t stage) { return s.rank_of(stage) != rank; };
  const auto transfer = [&](bool send, int64_t peer_stage, int64_t to_stage, int64_t i, int dir) {
    return PipelineP2P{send, s.rank_of(peer_stage), to_stage, i, dir, static_cast<int>(2 * (to_stage * m + i) + dir)};
  };
  std::vector<std::vector<PipelineP2P>> groups(actions.size() + 1);
  for (size_t k = 0; k < actions.size(); ++k) {
    const PipelineAction& a = actions[k];
    const int64_t st = a.stage, i = a.microbatch;
    auto& before = groups[k];
    auto& after = groups[k + 1];
    if (a.kind == Kind::kForward) {
      if (st > 0 && remote(st - 1)) before.push_back(transfer(false, st - 1, st, i, 0));
      if (st < last && remote(st + 1)) after.push_back(transfer(true, st + 1, st + 1, i, 0));
    } else if (a.backward()) {
      if (st < last && remote(st + 1)) before.push_back(transfer(false, st + 1, st, i, 1));
      if (st > 0 && remote(st - 1)) after.push_back(transfer(true, st - 1, st - 1, i, 1));
    }
  }
  // Sends first in each group, as batch_isend_irecv's callers list them.
  for (auto& g : groups) std::stable_partition(g.begin(), g.end(), [](const PipelineP2P& t) { return t.send; });
  return groups;
}

}  // namespace ctitan
