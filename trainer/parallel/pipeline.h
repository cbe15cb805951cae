// Pipeline parallelism's plan: how the model is cut into stages and in which
// order each stage runs the micro-batches' forward and backward passes.
//
// Stage split (TorchTitan's generate_llm_fqn_per_model_part): the embedding
// counts as `first_less` layers and norm + output as `last_less` layers;
// n_layers + first_less + last_less "effective" layers are spread evenly
// over the stages, the first `extra` stages taking one more. With
// pipeline_parallel_layers_per_stage set, the number of stages is
// ceil(effective / layers_per_stage) and must equal pp × stages per rank.
//
// Schedules (pipeline_parallel_schedule, TorchTitan's names): one list of
// actions per pp rank, in the order the rank runs them.
//   GPipe  every forward, then every backward (micro-batches 0..m-1 both).
//   1F1B   Megatron's: rank r runs min(p-1-r, m) forwards, then alternates
//          one forward and one backward, then the remaining backwards; at
//          most p-r micro-batches' activations are alive on rank r.
// Bubble (idle fraction of a rank when every action takes the same time):
// (p-1)/(m+p-1) for both.
//
// Not thread-safe (plain values).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/model/llama.h"

namespace ctitan {

// The model parts of `n_stages` stages, in stage order. InputError (one line
// naming the numbers) when a stage would get fewer than zero transformer
// layers, or when layers_per_stage (> 0) does not give n_stages stages.
std::vector<ModelPart> pipeline_stage_parts(const LlamaArgs& args, int64_t n_stages, int64_t layers_per_stage,
                                            int64_t first_less, int64_t last_less);

struct PipelineAction {
  enum class Kind { kForward, kBackward };
  Kind kind = Kind::kForward;
  int64_t microbatch = 0;
  std::string str() const;  // "F3", "B0"
};

// The schedules this build runs, and all of TorchTitan's names.
bool pipeline_schedule_supported(const std::string& name);
// InputError for a name TorchTitan does not have, or one not in this build.
// With a CSV schedule the name must be one of TorchTitan's CSV runners
// (PipelineScheduleSingle, PipelineScheduleMulti, _PipelineScheduleRuntime).
void check_pipeline_schedule(const std::string& name, bool csv = false);

// Rank r's actions among `stages` ranks for `microbatches` micro-batches.
std::vector<PipelineAction> pipeline_schedule(const std::string& name, int64_t stages, int64_t rank,
                                              int64_t microbatches);

// pipeline_parallel_schedule_csv: TorchTitan's CSV schedule (PyTorch's
// _load_csv, "compute_only"): one row per pp rank, each cell an action
// "<stage><F|B|I|W><micro-batch>" ("0F0", "1B3"), empty cells idle. Checked
// before anything runs: this build runs one stage per rank (stage = row)
// and whole backwards (F, B); every micro-batch once forward then once
// backward on each row; and the rows together must finish when each
// forward waits for the previous stage's and each backward for the next
// stage's (no deadlock). InputError, one line naming the file, row and
// action, otherwise.
std::vector<std::vector<PipelineAction>> load_pipeline_csv(const std::string& path, int64_t stages,
                                                           int64_t microbatches);
// The same checks on actions already parsed; `where` names them in errors.
void validate_pipeline_schedule(const std::vector<std::vector<PipelineAction>>& ranks, int64_t microbatches,
                                const std::string& where);

// The idle fraction of the schedule when every action takes the same time.
double pipeline_bubble_theory(const std::string& name, int64_t stages, int64_t microbatches);
// The formula, as text: "(p-1)/(m+p-1)".
std::string pipeline_bubble_formula(const std::string& name);

}  // namespace ctitan
