// The pipeline bubble, from the trainer's own schedule: every rank's action
// list (pipeline.h) replayed in order with each stage's forward and backward
// cost and the hand-over time between ranks. Whatever the schedule (GPipe,
// 1F1B, interleaved, looped BFS, zero bubble, ZB-V, a CSV), the idle time
// is what its order of actions leaves, not a closed-form guess.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "common/errors.h"
#include "planner/plan_internal.h"
#include "trainer/parallel/pipeline.h"

namespace ctitan::planner_detail {

PipelineSchedule planned_schedule(const JobConfig& cfg, int64_t pp, int64_t stages_per_rank, int64_t microbatches) {
  const auto& parallelism = cfg.parallelism;
  return parallelism.pipeline_parallel_schedule_csv.empty()
             ? build_pipeline_schedule(parallelism.pipeline_parallel_schedule, pp, stages_per_rank, microbatches)
             : load_pipeline_csv(parallelism.pipeline_parallel_schedule_csv, parallelism.pipeline_parallel_schedule, pp,
                                 stages_per_rank, microbatches);
}

PipelineSim simulate_pipeline(const JobConfig& cfg, const MeshShape& shape, int64_t stages_per_rank,
                              int64_t microbatches, const std::vector<double>& stage_forward_s,
                              const std::vector<double>& stage_backward_s, double p2p_s, double share) {
  return simulate_pipeline(planned_schedule(cfg, shape.pp, stages_per_rank, microbatches), stage_forward_s,
                           stage_backward_s, p2p_s, share);
}

namespace {

// The replay's state: each rank's next action, when it is free, how long it
// has worked, and when each action ended. Done times are keyed by (kind
// class, stage, micro-batch); I and B both end a stage's input gradient.
class Replay {
 public:
  Replay(const PipelineSchedule& sched, const std::vector<double>& forward, const std::vector<double>& backward,
         double p2p_s)
      : sched_(sched),
        forward_(forward),
        backward_(backward),
        p2p_s_(p2p_s),
        next_(static_cast<size_t>(sched.ranks), 0),
        free_at_(static_cast<size_t>(sched.ranks), 0.0),
        busy_(static_cast<size_t>(sched.ranks), 0.0) {
    for (const auto& actions : sched.actions) remaining_ += actions.size();
  }

  int64_t ranks() const { return sched_.ranks; }
  size_t remaining() const { return remaining_; }
  bool finished(int64_t rank) const { return next_[rank] >= sched_.actions[rank].size(); }
  const PipelineAction& next_action(int64_t rank) const { return sched_.actions[rank][next_[rank]]; }
  double free_at(int64_t rank) const { return free_at_[rank]; }

  // Seconds of `action` on its rank.
  double cost(const PipelineAction& action) const {
    const double full_backward = backward_[static_cast<size_t>(action.stage)];
    switch (action.kind) {
      case Kind::kForward:
        return forward_[static_cast<size_t>(action.stage)];
      case Kind::kBackward:
        return full_backward;
      case Kind::kBackwardInput:
        return full_backward / 2;  // dX and dW GEMMs are the same size
      case Kind::kBackwardWeight:
        return full_backward / 2;
    }
    return 0.0;
  }

  // When `rank`'s next action may start: false while what it waits on has
  // not run; else its inputs' arrival in `ready`.
  bool ready_of(int64_t rank, double& ready) const {
    const PipelineAction& action = next_action(rank);
    ready = 0;
    bool ok = true;
    const auto after = [&](Kind kind, int64_t stage, int64_t microbatch, bool other_rank) {
      auto it = done_.find(key(kind, stage, microbatch));
      if (it == done_.end()) {
        ok = false;
        return;
      }
      ready = std::max(ready, it->second + (other_rank ? p2p_s_ : 0.0));
    };
    if (action.kind == Kind::kForward) {
      if (action.stage > 0)
        after(Kind::kForward, action.stage - 1, action.microbatch, rank_of(action.stage - 1) != rank);
    } else if (action.kind == Kind::kBackwardWeight) {
      after(Kind::kBackwardInput, action.stage, action.microbatch, false);
    } else if (action.stage + 1 < sched_.ranks * sched_.stages_per_rank) {
      after(Kind::kBackward, action.stage + 1, action.microbatch, rank_of(action.stage + 1) != rank);
    } else {
      after(Kind::kForward, action.stage, action.microbatch, false);
    }
    return ok;
  }

  // `rank`'s next action ended at `end`, having worked `worked` seconds.
  void finish(int64_t rank, double end, double worked) {
    const PipelineAction& action = next_action(rank);
    busy_[rank] += worked;
    free_at_[rank] = end;
    done_[key(action.kind, action.stage, action.microbatch)] = end;
    ++next_[rank];
    --remaining_;
  }

  InputError stuck() const {
    return InputError("pipeline schedule " + sched_.name + " cannot finish (an action waits on one that never runs)");
  }

  PipelineSim result() const {
    PipelineSim sim;
    sim.step_s = *std::max_element(free_at_.begin(), free_at_.end());
    sim.busy_s = *std::max_element(busy_.begin(), busy_.end());
    return sim;
  }

 private:
  using Kind = PipelineAction::Kind;

  static std::tuple<int, int64_t, int64_t> key(Kind kind, int64_t stage, int64_t microbatch) {
    const int kind_class = kind == Kind::kForward ? 0 : kind == Kind::kBackwardWeight ? 2 : 1;
    return std::make_tuple(kind_class, stage, microbatch);
  }

  int64_t rank_of(int64_t stage) const {
    const int64_t ranks = sched_.ranks;
    if (sched_.style == StageStyle::kV) return stage < ranks ? stage : 2 * ranks - 1 - stage;
    return stage % ranks;
  }

  const PipelineSchedule& sched_;
  const std::vector<double>& forward_;
  const std::vector<double>& backward_;
  const double p2p_s_;
  std::map<std::tuple<int, int64_t, int64_t>, double> done_;
  std::vector<size_t> next_;
  std::vector<double> free_at_, busy_;
  size_t remaining_ = 0;
};

// Each rank on its own processor: replay in order.
void replay_in_order(Replay& replay) {
  while (replay.remaining() > 0) {
    bool progress = false;
    for (int64_t rank = 0; rank < replay.ranks(); ++rank) {
      while (!replay.finished(rank)) {
        double ready = 0;
        if (!replay.ready_of(rank, ready)) break;
        const double start = std::max(replay.free_at(rank), ready), cost = replay.cost(replay.next_action(rank));
        replay.finish(rank, start + cost, cost);
        progress = true;
      }
    }
    if (!progress) throw replay.stuck();
  }
}

// More ranks than processors (a CPU: `share` = cores / ranks): the costs
// are planned at that share each, but whichever ranks are running at a
// moment share all the cores, at most one each, so a rank idle in the
// bubble or waiting on its neighbour lends its share to the busy ones.
// Processor sharing, advanced from event to event.
void replay_sharing_processors(Replay& replay, double share) {
  const int64_t ranks = replay.ranks();
  const double cores = share * static_cast<double>(ranks);
  std::vector<double> left(ranks, -1), ready_at(ranks, 0);  // left < 0: the next action is not yet startable
  double now = 0;
  while (replay.remaining() > 0) {
    int running = 0;
    double wake = INFINITY;
    for (int64_t rank = 0; rank < ranks; ++rank) {
      if (replay.finished(rank)) continue;
      if (left[rank] < 0) {
        double ready = 0;
        if (!replay.ready_of(rank, ready)) continue;
        left[rank] = replay.cost(replay.next_action(rank));
        ready_at[rank] = std::max(ready, replay.free_at(rank));
      }
      if (ready_at[rank] <= now) ++running;
      else wake = std::min(wake, ready_at[rank]);
    }
    if (running == 0) {
      if (!std::isfinite(wake)) throw replay.stuck();
      now = wake;
      continue;
    }
    const double speed = std::min(1.0, cores / running) / share;  // planned seconds done per second
    double dt = wake - now;
    for (int64_t rank = 0; rank < ranks; ++rank)
      if (left[rank] >= 0 && ready_at[rank] <= now && !replay.finished(rank)) dt = std::min(dt, left[rank] / speed);
    now += dt;
    for (int64_t rank = 0; rank < ranks; ++rank) {
      if (left[rank] < 0 || ready_at[rank] > now - dt || replay.finished(rank)) continue;
      left[rank] -= dt * speed;
      if (left[rank] > 1e-12 * std::max(1.0, now)) continue;
      replay.finish(rank, now, replay.cost(replay.next_action(rank)));
      left[rank] = -1;
    }
  }
}

}  // namespace

PipelineSim simulate_pipeline(const PipelineSchedule& sched, const std::vector<double>& stage_forward_s,
                              const std::vector<double>& stage_backward_s, double p2p_s, double share) {
  Replay replay(sched, stage_forward_s, stage_backward_s, p2p_s);
  if (share >= 1) replay_in_order(replay);
  else replay_sharing_processors(replay, share);
  return replay.result();
}

}  // namespace ctitan::planner_detail
