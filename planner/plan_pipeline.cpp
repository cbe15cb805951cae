// The pipeline bubble, from the trainer's own schedule: every rank's action
// list (pipeline.h) replayed in order with each stage's forward and backward
// cost and the hand-over time between ranks. Whatever the schedule (GPipe,
// 1F1B, interleaved, looped BFS, zero bubble, ZB-V, a CSV), the idle time
// is what its order of actions leaves, not a closed-form guess.
#include <algorithm>
#include <map>
#include <tuple>

#include "common/errors.h"
#include "planner/plan_internal.h"
#include "trainer/parallel/pipeline.h"

namespace ctitan::planner_detail {

PipelineSchedule planned_schedule(const JobConfig& cfg, int64_t pp, int64_t stages_per_rank, int64_t microbatches) {
  const auto& p = cfg.parallelism;
  return p.pipeline_parallel_schedule_csv.empty()
             ? build_pipeline_schedule(p.pipeline_parallel_schedule, pp, stages_per_rank, microbatches)
             : load_pipeline_csv(p.pipeline_parallel_schedule_csv, p.pipeline_parallel_schedule, pp, stages_per_rank,
                                 microbatches);
}

PipelineSim simulate_pipeline(const JobConfig& cfg, const MeshShape& shape, int64_t stages_per_rank,
                              int64_t microbatches, const std::vector<double>& f, const std::vector<double>& b,
                              double p2p_s) {
  const int64_t P = shape.pp;
  const PipelineSchedule sched = planned_schedule(cfg, P, stages_per_rank, microbatches);
  const int64_t n_stages = P * sched.stages_per_rank;
  const auto rank_of = [&](int64_t stage) {
    if (sched.style == StageStyle::kV) return stage < P ? stage : 2 * P - 1 - stage;
    return stage % P;
  };
  using Kind = PipelineAction::Kind;
  // Done times: (kind class, stage, micro-batch); I and B both end a
  // stage's input gradient.
  std::map<std::tuple<int, int64_t, int64_t>, double> done;
  const auto key = [](Kind k, int64_t s, int64_t m) {
    const int cls = k == Kind::kForward ? 0 : k == Kind::kBackwardWeight ? 2 : 1;
    return std::make_tuple(cls, s, m);
  };
  std::vector<size_t> next(P, 0);
  std::vector<double> free_at(P, 0.0), busy(P, 0.0);
  const auto cost = [&](const PipelineAction& a) {
    const double full_b = b[static_cast<size_t>(a.stage)];
    switch (a.kind) {
      case Kind::kForward: return f[static_cast<size_t>(a.stage)];
      case Kind::kBackward: return full_b;
      case Kind::kBackwardInput: return full_b / 2;  // dX and dW GEMMs are the same size
      case Kind::kBackwardWeight: return full_b / 2;
    }
    return 0.0;
  };
  size_t remaining = 0;
  for (const auto& acts : sched.actions) remaining += acts.size();
  while (remaining > 0) {
    bool progress = false;
    for (int64_t r = 0; r < P; ++r) {
      while (next[r] < sched.actions[r].size()) {
        const PipelineAction& a = sched.actions[r][next[r]];
        double ready = 0;
        bool ok = true;
        const auto after = [&](Kind k, int64_t s, int64_t m, bool other_rank) {
          auto it = done.find(key(k, s, m));
          if (it == done.end()) {
            ok = false;
            return;
          }
          ready = std::max(ready, it->second + (other_rank ? p2p_s : 0.0));
        };
        if (a.kind == Kind::kForward) {
          if (a.stage > 0) after(Kind::kForward, a.stage - 1, a.microbatch, rank_of(a.stage - 1) != r);
        } else if (a.kind == Kind::kBackwardWeight) {
          after(Kind::kBackwardInput, a.stage, a.microbatch, false);
        } else if (a.stage + 1 < n_stages) {
          after(Kind::kBackward, a.stage + 1, a.microbatch, rank_of(a.stage + 1) != r);
        } else {
          after(Kind::kForward, a.stage, a.microbatch, false);
        }
        if (!ok) break;
        const double start = std::max(free_at[r], ready), c = cost(a);
        free_at[r] = start + c;
        busy[r] += c;
        done[key(a.kind, a.stage, a.microbatch)] = free_at[r];
        ++next[r];
        --remaining;
        progress = true;
      }
    }
    if (!progress) throw InputError("pipeline schedule " + sched.name + " cannot finish (an action waits on one that never runs)");
  }
  PipelineSim sim;
  sim.step_s = *std::max_element(free_at.begin(), free_at.end());
  sim.busy_s = *std::max_element(busy.begin(), busy.end());
  return sim;
}

}  // namespace ctitan::planner_detail
