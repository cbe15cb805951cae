// Pipeline parallelism's plan: how the model is cut into stages, which
// stages each pp rank holds, and in which order each rank runs the
// micro-batches' forward and backward passes.
//
// Stage split (TorchTitan's generate_llm_fqn_per_model_part): the embedding
// counts as `first_less` layers and norm + output as `last_less` layers;
// n_layers + first_less + last_less "effective" layers are spread evenly
// over the stages, the first `extra` stages taking one more. With
// pipeline_parallel_layers_per_stage set, the number of stages is
// ceil(effective / layers_per_stage) and must be a multiple of pp; without
// it single-stage schedules run one stage per rank and multi-stage ones two.
//
// Stages per rank (TorchTitan's pipeline_module_split): "loop" style puts
// stages r, r+p, r+2p, ... on rank r; "V" style (ZBVZeroBubble) puts stages
// r and 2p-1-r on rank r, so the last stage is back on rank 0.
//
// Schedules (pipeline_parallel_schedule, TorchTitan's names; the same
// action order as PyTorch's torch.distributed.pipelining):
//   GPipe                 every forward, then every backward.
//   1F1B                  rank r runs min(p-1-r, m) forwards, then one
//                         forward and one backward alternately, then the
//                         remaining backwards (at most p-r micro-batches
//                         alive on rank r).
//   LoopedBFS             each local stage's forwards of every micro-batch
//                         in stage order, then the backwards in reverse.
//   Interleaved1F1B       Megatron's interleaved 1F1B over v local stages
//                         (rounds of min(m, p) micro-batches, depth first).
//   InterleavedZeroBubble the same with backwards split into input (I) and
//                         weight (W) gradients, W delayed to fill bubbles
//                         (ZB1P of Qi et al. 2024).
//   ZBVZeroBubble         ZB-V: two stages per rank in V shape, I and W.
// Actions: F forward, B whole backward, I input-gradient backward, W the
// weight gradients of an earlier I of the same stage and micro-batch.
//
// Not thread-safe (plain values).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/config/job_config.h"
#include "trainer/model/model_part.h"

namespace ctitan {

// The model parts of `n_stages` stages, in stage order. InputError (one line
// naming the numbers) when a stage would get fewer than zero transformer
// layers, or when layers_per_stage (> 0) does not give n_stages stages.
std::vector<ModelPart> pipeline_stage_parts(const ModelArgs& args, int64_t n_stages, int64_t layers_per_stage,
                                            int64_t first_less, int64_t last_less);

struct PipelineAction {
  enum class Kind { kForward, kBackward, kBackwardInput, kBackwardWeight };
  int64_t stage = 0;  // global stage index
  Kind kind = Kind::kForward;
  int64_t microbatch = 0;
  std::string str() const;  // PyTorch's notation: "1F3", "0B0", "2I1", "0W3"
  bool backward() const { return kind == Kind::kBackward || kind == Kind::kBackwardInput; }
};

// How stages sit on the pp ranks.
enum class StageStyle { kLoop, kV };

// Every rank's actions, as every rank computes them.
struct PipelineSchedule {
  std::string name;         // pipeline_parallel_schedule
  int64_t ranks = 1;        // p
  int64_t stages_per_rank = 1;  // v
  int64_t microbatches = 1;     // m
  StageStyle style = StageStyle::kLoop;
  std::vector<std::vector<PipelineAction>> actions;  // per rank, in run order

  int64_t stages() const { return ranks * stages_per_rank; }
  int64_t rank_of(int64_t stage) const;
  std::vector<int64_t> stages_of(int64_t rank) const;  // in local order (the model's part order)
  bool splits_backward() const;                        // has I/W actions
};

// Whether the name is one of TorchTitan's schedules running several stages
// per rank (or its multi-stage CSV runners).
bool pipeline_multi_stage(const std::string& name);
// InputError for a name TorchTitan does not have, or one not in this build.
// With a CSV schedule the name must be one of TorchTitan's CSV runners
// (PipelineScheduleSingle, PipelineScheduleMulti, _PipelineScheduleRuntime).
void check_pipeline_schedule(const std::string& name, bool csv = false);

// TorchTitan's number of stages per rank for the schedule: from
// layers_per_stage when set (the stage count must be a multiple of pp;
// single-stage schedules need exactly one per rank, multi-stage ones at
// least two, V schedules exactly two), else 1 or 2. InputError otherwise.
int64_t pipeline_stages_per_rank(const std::string& name, const ModelArgs& args, int64_t pp,
                                 int64_t layers_per_stage, int64_t first_less, int64_t last_less);

// How the model is cut and how many stages each rank holds, as the trainer
// plans it: from module_fqns_per_model_part (TorchTitan's lists of module
// names per stage: tok_embeddings, layers.N, norm, output — every layer
// once, in order), else the older pipeline_parallel_split_points (layers
// opening a stage), else layers_per_stage or the even split; then the
// stages-per-rank rules above. InputError, one line, otherwise.
struct PipelineSplit {
  int64_t stages_per_rank = 1;
  std::vector<ModelPart> parts;  // every stage, in stage order
};
PipelineSplit plan_pipeline_split(const ModelArgs& args, const ParallelismSection& parallelism, int64_t pp);

// The named schedule for p ranks, v stages per rank and m micro-batches,
// validated. InputError when the schedule cannot run that shape (ZBV: v
// must be 2; interleaved: m a multiple of its rounds).
PipelineSchedule build_pipeline_schedule(const std::string& name, int64_t p, int64_t v, int64_t m);

// pipeline_parallel_schedule_csv: TorchTitan's CSV schedule (PyTorch's
// _load_csv, "compute_only"): one row per pp rank, each cell an action
// "<stage><F|B|I|W><micro-batch>" ("0F0", "1B3"), empty cells idle. The
// runner `name` gives the stages per rank (PipelineScheduleSingle: one,
// stage = row; the Multi runners: v, loop style). Checked before anything
// runs (validate_pipeline_schedule); InputError, one line naming the file,
// row and action, otherwise.
PipelineSchedule load_pipeline_csv(const std::string& path, const std::string& name, int64_t p, int64_t v,
                                   int64_t m);
// Every rank only runs its own stages; each (stage, micro-batch) runs F once,
// then B once or I once then W once; and the rows together finish when each
// forward waits for the previous stage's forward and each backward (B or
// I) for the next stage's (no deadlock; sends never block). `where` names
// the schedule in the one-line InputError.
void validate_pipeline_schedule(const PipelineSchedule& s, const std::string& where);

// The point-to-point transfers of `rank`'s actions, grouped as the rank
// posts them (PyTorch's _step_microbatches batches the same way):
// groups[k] is posted before action k and holds the sends that action k-1
// produced together with the receive that action k needs; groups[size] holds
// the last action's sends. Each group goes to Communicator::batch_p2p at
// once, so under NCCL a send and a receive to and from the same peer never
// wait for each other (1F1B's steady state posts send-then-receive on one
// side of a link and receive-then-send on the other). Transfers between two
// stages of the same rank are hand-overs, not listed. Tags: one per
// (receiving stage, micro-batch, direction).
struct PipelineP2P {
  bool send = false;       // else receive
  int64_t peer = 0;        // pp rank
  int64_t stage = 0;       // the receiving stage
  int64_t microbatch = 0;
  int dir = 0;             // 0 activation (forward), 1 gradient (backward)
  int tag = 0;
};
std::vector<std::vector<PipelineP2P>> plan_pipeline_p2p(const PipelineSchedule& s, int64_t rank);

// The idle fraction of an average rank when every action of a stage takes
// its nominal time (F = I = W = 1, B = 2) and communication is free, from
// simulating the schedule. For GPipe and 1F1B this is (p-1)/(m+p-1); for
// the interleaved ones close to (p-1)/(v·m+p-1).
double pipeline_bubble_theory(const PipelineSchedule& s);
// The theory's formula, as text: "(p-1)/(m+p-1)", "(p-1)/(v*m+p-1)", or
// "simulated: F = I = W, B = I + W" for the zero-bubble schedules and CSVs.
std::string pipeline_bubble_formula(const std::string& name);

}  // namespace ctitan
