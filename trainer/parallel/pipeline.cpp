#include "trainer/parallel/pipeline.h"

#include <algorithm>

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

void check_pipeline_schedule(const std::string& name) {
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

double pipeline_bubble_theory(const std::string& name, int64_t stages, int64_t microbatches) {
  (void)name;  // GPipe and 1F1B share it
  return static_cast<double>(stages - 1) / static_cast<double>(microbatches + stages - 1);
}

std::string pipeline_bubble_formula(const std::string& name) {
  (void)name;
  return "(p-1)/(m+p-1)";
}

}  // namespace ctitan
