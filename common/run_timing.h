// Where a run's time went, beyond rank 0's step time: every rank's share of
// each step (stragglers) and the run's wall clock split into its parts
// (goodput). The trainer measures both and writes them into metrics.jsonl
// and summary.json; the results database and the report read them back.
//
// Per rank and step the trainer keeps three times: the step's (start to
// end, as the rank saw it), the part of it spent fetching the batch, and
// the part spent blocked in collectives (exposed communication: on Gloo the
// host's wait, the flight recorder's). A rank's *busy* time is the step less
// its exposed communication: the work it did itself. In a synchronous step
// every rank's step time is about the same — the fast ones wait in the
// collectives for the slow one — so the busy times, not the step times,
// tell the ranks apart, and the slowest rank is the one with the most.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ctitan {

struct RankStepTime {
  double step_s = 0, data_s = 0, exposed_comm_s = 0;
  double busy_s() const { return step_s > exposed_comm_s ? step_s - exposed_comm_s : 0.0; }
};

// One step over the ranks: min, median and max of the busy time, the
// slowest rank (the most busy; the lowest rank on a tie), and the share of
// the step the others waited for it: (max − median busy) / median step time.
struct StepSpread {
  double min_s = 0, median_s = 0, max_s = 0;
  int slowest_rank = -1;
  double straggler_share = 0;
};
StepSpread step_spread(const std::vector<RankStepTime>& ranks);

// A point is marked when one rank is the slowest in at least this share of
// the steady steps, more often than chance explains (the chance that any
// rank is the slowest that often with every rank equally likely each step
// is at most kStragglerAlpha: a one-sided binomial test, Bonferroni over
// the ranks), and the others wait for it at least this share of a step.
// Short runs cannot be marked: 5 steps of 2 ranks all one way happen by
// chance one time in 16.
inline constexpr double kStragglerPersistence = 0.75;
inline constexpr double kStragglerShare = 0.10;
inline constexpr double kStragglerAlpha = 0.05;

// P(X >= k) for X ~ Binomial(n, p).
double binomial_tail(int64_t k, int64_t n, double p);

// The run's straggler figures over its steady steps (steps[i][r]: step i,
// rank r; every step has the same ranks).
struct StragglerFigures {
  int64_t steps = 0;
  int ranks = 0;
  int rank = -1;             // the rank slowest in the most steps
  double persistence = 0;    // the share of steps it was the slowest in (1/ranks: chance)
  double chance_p = 1;       // how likely any rank is the slowest that often by chance (Bonferroni)
  double share = 0;          // median over steps of StepSpread::straggler_share
  double spread_s = 0;       // median over steps of max − min busy time
  bool marked = false;       // persistence, chance_p and share past their thresholds above
  std::vector<double> busy_median_s;  // per rank, median over steps
  std::vector<int64_t> slowest_steps;  // per rank, the steps it was the slowest in
};
StragglerFigures straggler_figures(const std::vector<std::vector<RankStepTime>>& steps);

// summary.json's "stragglers": the figures above and, for the report's
// rank x step view, each step's busy time per rank (the last `max_steps`
// steady steps).
nlohmann::json stragglers_json(const StragglerFigures& f, const std::vector<std::vector<RankStepTime>>& steps,
                               const std::vector<int64_t>& step_numbers, size_t max_steps = 512);

// The run's wall clock, from its process's start to summary.json, in parts
// measured each by its own clock. `unaccounted_s` = wall − the parts: what
// no part measured (a few milliseconds of loop bookkeeping when every part
// is timed).
struct Goodput {
  double wall_s = 0;
  double init_s = 0;                   // process start to the first step, less the checkpoint load
  double checkpoint_load_s = 0;
  double warmup_steps_s = 0;           // steps up to metrics.warmup_steps, less their data loading
  double steady_steps_s = 0;           // the steps after them, less their data loading
  double data_s = 0;                   // every step's batch fetch (data stalls)
  double validation_s = 0;
  double checkpoint_save_sync_s = 0;   // checkpoint.async_mode disabled: the whole save
  double checkpoint_save_async_s = 0;  // async: what the loop waited (staging, an earlier save, the last)
  double logging_s = 0;                // between steps: the stop verdict, losses, metrics lines, rank times
  double teardown_s = 0;               // after the last step to summary.json
  int64_t steady_tokens = 0;           // the global batch's tokens of the steady steps

  // Sets the part named `name` (goodput_part_names()); false for another name.
  bool set_part(const std::string& name, double seconds);
  double parts_s() const;
  double unaccounted_s() const { return wall_s - parts_s(); }
  // The wall clock a run of `tokens` tokens would take at this run's rates:
  // its fixed parts (start-up, checkpoint load, warm-up, teardown) plus the
  // rest at its share per steady-step token.
  double time_to_tokens_s(double tokens) const;
  nlohmann::json to_json() const;
};

// The names of Goodput's parts, in order, as summary.json and the results
// database store them ("init_s", ...).
const std::vector<std::string>& goodput_part_names();

// Seconds since this process started (its exec), from /proc/self/stat: what
// a run's goodput counts from. NaN where /proc is not mounted.
double process_age_s();

}  // namespace ctitan
