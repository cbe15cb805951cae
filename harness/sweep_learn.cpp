#include "harness/sweep_learn.h"

#include <cmath>
#include <numeric>

#include "profiling/peak_flops.h"

namespace ctitan {

double t90(int dof) {
  // Student's t, 0.90 quantile (tables to four places).
  static const double table[] = {3.0777, 1.8856, 1.6377, 1.5332, 1.4759, 1.4398, 1.4149, 1.3968, 1.3830, 1.3722,
                                 1.3634, 1.3562, 1.3502, 1.3450, 1.3406, 1.3368, 1.3334, 1.3304, 1.3277, 1.3253,
                                 1.3232, 1.3212, 1.3195, 1.3178, 1.3163, 1.3150, 1.3137, 1.3125, 1.3114, 1.3104};
  if (dof < 1) dof = 1;
  return dof <= 30 ? table[dof - 1] : 1.2816;
}

SweepLearner::SweepLearner(ResolvedHardware prior) : prior_(std::move(prior)) {
  learning_ = !prior_.stand_in && !prior_.units;
  // One measurement of a CPU's GEMM peak for every refit (as fit_spec does).
  if (learning_ && prior_.spec.kind == "cpu" && prior_.spec.peak_fp32_flops <= 0)
    prior_.spec.peak_fp32_flops = resolve_cpu_peak_flops(at::kFloat, 0).flops;
  current_ = prior_;
}

Prediction SweepLearner::predict(const SweepPoint& pt) const {
  Prediction p = predict_on(pt.config, pt.world_size, current_);
  if (scale_ != 1.0 && p.tps_per_device > 0) {
    p.tps_per_device *= scale_;
    p.tflops_per_device *= scale_;
    p.mfu *= scale_;
    p.time.step /= scale_;
  }
  return p;
}

void SweepLearner::add(const SweepPoint& pt, double tps_per_device, double mem_peak_bytes, double predicted_tps,
                       int predicted_from) {
  if (!learning_ || tps_per_device <= 0) return;
  if (predicted_tps > 0 && predicted_from > 0) residuals_.push_back(std::log(tps_per_device / predicted_tps));
  // The planner's step for this point's tokens at the measured rate.
  const Prediction p = predict_on(pt.config, pt.world_size, prior_);
  if (p.tokens_per_step <= 0) return;
  MeasuredRun r;
  r.label = pt.label;
  r.cfg = pt.config;
  r.world_size = pt.world_size;
  r.step_time_s = p.tokens_per_step / (tps_per_device * pt.world_size);
  r.mem_peak_bytes = mem_peak_bytes;
  rows_.push_back(std::move(r));
  refit();
}

void SweepLearner::refit() {
  ResolvedHardware next = prior_;
  if (static_cast<int>(rows_.size()) >= kMinFitPoints) {
    // Warm start from the last fit; pulled toward the spec as written.
    next.spec = fit_spec(current_.spec, rows_, &prior_.spec, 2);
    next.spec.calibration = prior_.spec.calibration + "; refitted on " + std::to_string(rows_.size()) +
                            " points of this sweep";
  }
  // What bias is left: the geometric mean of measured over predicted.
  double sum = 0;
  int n = 0;
  for (const MeasuredRun& r : rows_) {
    PlanRequest q;
    q.cfg = r.cfg;
    q.model = model_from_config(r.cfg.model);
    q.world_size = r.world_size;
    const double step = ctitan::predict(q, next.spec).time.step;
    if (step > 0 && r.step_time_s > 0) sum += std::log(step / r.step_time_s), ++n;
  }
  current_ = std::move(next);
  scale_ = n > 0 ? std::exp(sum / n) : 1.0;
}

std::optional<std::pair<double, double>> SweepLearner::interval(double tps) const {
  const int m = static_cast<int>(residuals_.size());
  if (m < kMinResiduals || tps <= 0) return std::nullopt;
  const double mean = std::accumulate(residuals_.begin(), residuals_.end(), 0.0) / m;
  double ss = 0;
  for (double r : residuals_) ss += (r - mean) * (r - mean);
  const double s = std::sqrt(ss / (m - 1));
  const double half = t90(m - 1) * s * std::sqrt(1.0 + 1.0 / m);
  return std::make_pair(tps * std::exp(mean - half), tps * std::exp(mean + half));
}

}  // namespace ctitan
