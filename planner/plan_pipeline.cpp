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
  const auto& p = cfg.parallelism;
  return p.pipeline_parallel_schedule_csv.empty()
             ? build_pipeline_schedule(p.pipeline_parallel_schedule, pp, stages_per_rank, microbatches)
             : load_pipeline_csv(p.pipeline_parallel_schedule_csv, p.pipeline_parallel_schedule, pp, stages_per_rank,
                                 microbatches);
}

PipelineSim simulate_pipeline(const JobConfig& cfg, const MeshShape& shape, int64_t stages_per_rank,
                              int64_t microbatches, const std::vector<double>& f, const std::vector<double>& b,
                              double p2p_s, double share) {
  return simulate_pipeline(planned_schedule(cfg, shape.pp, stages_per_rank, microbatches), f, b, p2p_s, share);
}

PipelineSim simulate_pipeline(const PipelineSchedule& sched, const std::vector<double>& f,
                              const std::vector<double>& b, double p2p_s, double share) {
  const int64_t P = sched.ranks;
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
  // When rank r's next action may start: false while what it waits on has
  // not run; else its inputs' arrival.
  const auto ready_of = [&](int64_t r, double& ready) {
    const PipelineAction& a = sched.actions[static_cast<size_t>(r)][next[static_cast<size_t>(r)]];
    ready = 0;
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
    return ok;
  };
  size_t remaining = 0;
  for (const auto& acts : sched.actions) remaining += acts.size();
  const auto stuck = [&] {
    return InputError("pipeline schedule " + sched.name + " cannot finish (an action waits on one that never runs)");
  };
  if (share >= 1) {
    // Each rank on its own processor: replay in order.
    while (remaining > 0) {
      bool progress = false;
      for (int64_t r = 0; r < P; ++r) {
        while (next[r] < sched.actions[r].size()) {
          const PipelineAction& a = sched.actions[r][next[r]];
          double ready = 0;
          if (!ready_of(r, ready)) break;
          const double start = std::max(free_at[r], ready), c = cost(a);
          free_at[r] = start + c;
          busy[r] += c;
          done[key(a.kind, a.stage, a.microbatch)] = free_at[r];
          ++next[r];
          --remaining;
          progress = true;
        }
      }
      if (!progress) throw stuck();
    }
  } else {
    // More ranks than processors (a CPU: `share` = cores / ranks): the costs
    // are planned at that share each, but whichever ranks are running at a
    // moment share all the cores, at most one each, so a rank idle in the
    // bubble or waiting on its neighbour lends its share to the busy ones.
    // Processor sharing, advanced from event to event.
    const double cores = share * static_cast<double>(P);
    std::vector<double> left(P, -1), ready_at(P, 0);  // left < 0: the next action is not yet startable
    double now = 0;
    while (remaining > 0) {
      int running = 0;
      double wake = INFINITY;
      for (int64_t r = 0; r < P; ++r) {
        if (next[r] >= sched.actions[r].size()) continue;
        if (left[r] < 0) {
          double ready = 0;
          if (!ready_of(r, ready)) continue;
          left[r] = cost(sched.actions[r][next[r]]);
          ready_at[r] = std::max(ready, free_at[r]);
        }
        if (ready_at[r] <= now) ++running;
        else wake = std::min(wake, ready_at[r]);
      }
      if (running == 0) {
        if (!std::isfinite(wake)) throw stuck();
        now = wake;
        continue;
      }
      const double speed = std::min(1.0, cores / running) / share;  // planned seconds done per second
      double dt = wake - now;
      for (int64_t r = 0; r < P; ++r)
        if (left[r] >= 0 && ready_at[r] <= now && next[r] < sched.actions[r].size()) dt = std::min(dt, left[r] / speed);
      now += dt;
      for (int64_t r = 0; r < P; ++r) {
        if (left[r] < 0 || ready_at[r] > now - dt || next[r] >= sched.actions[r].size()) continue;
        left[r] -= dt * speed;
        if (left[r] > 1e-12 * std::max(1.0, now)) continue;
        const PipelineAction& a = sched.actions[r][next[r]];
        busy[r] += cost(a);
        free_at[r] = now;
        done[key(a.kind, a.stage, a.microbatch)] = now;
        left[r] = -1;
        ++next[r];
        --remaining;
      }
    }
  }
  PipelineSim sim;
  sim.step_s = *std::max_element(free_at.begin(), free_at.end());
  sim.busy_s = *std::max_element(busy.begin(), busy.end());
  return sim;
}

}  // namespace ctitan::planner_detail
