#include "common/run_timing.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "common/quantile.h"

namespace ctitan {

StepSpread step_spread(const std::vector<RankStepTime>& ranks) {
  StepSpread s;
  if (ranks.empty()) return s;
  std::vector<double> busy, step;
  for (const RankStepTime& r : ranks) {
    busy.push_back(r.busy_s());
    step.push_back(r.step_s);
  }
  const auto most = std::max_element(busy.begin(), busy.end());  // the first of equals
  s.slowest_rank = static_cast<int>(most - busy.begin());
  s.max_s = *most;
  s.min_s = *std::min_element(busy.begin(), busy.end());
  s.median_s = quantile(busy, 0.5);
  const double step_median = quantile(step, 0.5);
  s.straggler_share = step_median > 0 ? (s.max_s - s.median_s) / step_median : 0.0;
  return s;
}

double binomial_tail(int64_t k, int64_t n, double p) {
  if (k <= 0) return 1.0;
  if (k > n) return 0.0;
  double sum = 0;
  for (int64_t i = k; i <= n; ++i)
    sum += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) + i * std::log(p) +
                    (n - i) * std::log1p(-p));
  return std::min(1.0, sum);
}

StragglerFigures straggler_figures(const std::vector<std::vector<RankStepTime>>& steps) {
  StragglerFigures f;
  if (steps.empty() || steps.front().empty()) return f;
  f.steps = static_cast<int64_t>(steps.size());
  f.ranks = static_cast<int>(steps.front().size());
  f.slowest_steps.assign(f.ranks, 0);
  std::vector<double> shares, spreads;
  std::vector<std::vector<double>> busy(f.ranks);
  for (const auto& ranks : steps) {
    const StepSpread s = step_spread(ranks);
    ++f.slowest_steps[s.slowest_rank];
    shares.push_back(s.straggler_share);
    spreads.push_back(s.max_s - s.min_s);
    for (int r = 0; r < f.ranks && r < static_cast<int>(ranks.size()); ++r) busy[r].push_back(ranks[r].busy_s());
  }
  f.rank = static_cast<int>(std::max_element(f.slowest_steps.begin(), f.slowest_steps.end()) - f.slowest_steps.begin());
  f.persistence = static_cast<double>(f.slowest_steps[f.rank]) / static_cast<double>(f.steps);
  f.share = quantile(shares, 0.5);
  f.spread_s = quantile(spreads, 0.5);
  for (const auto& b : busy) f.busy_median_s.push_back(quantile(b, 0.5));
  if (f.ranks > 1)
    f.chance_p = std::min(1.0, f.ranks * binomial_tail(f.slowest_steps[f.rank], f.steps, 1.0 / f.ranks));
  f.marked = f.ranks > 1 && f.persistence >= kStragglerPersistence && f.chance_p <= kStragglerAlpha &&
             f.share >= kStragglerShare;
  return f;
}

nlohmann::json stragglers_json(const StragglerFigures& f, const std::vector<std::vector<RankStepTime>>& steps,
                               const std::vector<int64_t>& step_numbers, size_t max_steps) {
  nlohmann::json j = {{"steps", f.steps},
                      {"ranks", f.ranks},
                      {"slowest_rank", f.rank},
                      {"persistence", f.persistence},
                      {"chance_p", f.chance_p},
                      {"share", f.share},
                      {"spread_s", f.spread_s},
                      {"marked", f.marked},
                      {"busy_median_s", f.busy_median_s},
                      {"slowest_steps", f.slowest_steps}};
  nlohmann::json rows = nlohmann::json::array();
  const size_t first = steps.size() > max_steps ? steps.size() - max_steps : 0;
  for (size_t i = first; i < steps.size(); ++i) {
    nlohmann::json busy = nlohmann::json::array(), data = nlohmann::json::array(), comm = nlohmann::json::array();
    for (const RankStepTime& r : steps[i]) {
      busy.push_back(r.busy_s());
      data.push_back(r.data_s);
      comm.push_back(r.exposed_comm_s);
    }
    rows.push_back({{"step", i < step_numbers.size() ? step_numbers[i] : static_cast<int64_t>(i)},
                    {"busy_s", busy},
                    {"data_s", data},
                    {"exposed_comm_s", comm}});
  }
  j["by_step"] = rows;
  return j;
}

namespace {

// Every part, by name, in the order summary.json and the database keep them.
const std::vector<std::pair<std::string, double Goodput::*>>& goodput_parts() {
  static const std::vector<std::pair<std::string, double Goodput::*>> parts = {
      {"init_s", &Goodput::init_s},
      {"checkpoint_load_s", &Goodput::checkpoint_load_s},
      {"warmup_steps_s", &Goodput::warmup_steps_s},
      {"steady_steps_s", &Goodput::steady_steps_s},
      {"data_s", &Goodput::data_s},
      {"validation_s", &Goodput::validation_s},
      {"checkpoint_save_sync_s", &Goodput::checkpoint_save_sync_s},
      {"checkpoint_save_async_s", &Goodput::checkpoint_save_async_s},
      {"logging_s", &Goodput::logging_s},
      {"teardown_s", &Goodput::teardown_s}};
  return parts;
}

}  // namespace

const std::vector<std::string>& goodput_part_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [name, field] : goodput_parts()) out.push_back(name);
    return out;
  }();
  return names;
}

bool Goodput::set_part(const std::string& name, double seconds) {
  for (const auto& [part, field] : goodput_parts())
    if (part == name) {
      this->*field = seconds;
      return true;
    }
  return false;
}

double Goodput::parts_s() const {
  double sum = 0;
  for (const auto& [name, field] : goodput_parts()) sum += this->*field;
  return sum;
}

double Goodput::time_to_tokens_s(double n) const {
  const double fixed = init_s + checkpoint_load_s + warmup_steps_s + teardown_s;
  const double per_token = steady_tokens > 0 ? (parts_s() - fixed) / static_cast<double>(steady_tokens) : NAN;
  return fixed + n * per_token;
}

nlohmann::json Goodput::to_json() const {
  nlohmann::json j = {{"wall_s", wall_s}};
  for (const auto& [name, field] : goodput_parts()) j[name] = this->*field;
  j["unaccounted_s"] = unaccounted_s();
  j["steady_tokens"] = steady_tokens;
  // Goodput: the share of the wall clock spent in steady training steps.
  j["goodput"] = wall_s > 0 ? steady_steps_s / wall_s : 0.0;
  return j;
}

double process_age_s() {
  std::ifstream in("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Field 2 (comm) is in parentheses and may hold spaces: count from the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return NAN;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) start_ticks = std::stoull(field);
  const long hz = sysconf(_SC_CLK_TCK);
  timespec now{};
  if (start_ticks == 0 || hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return NAN;
  const double since_boot = static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
  return since_boot - static_cast<double>(start_ticks) / static_cast<double>(hz);
}

}  // namespace ctitan
