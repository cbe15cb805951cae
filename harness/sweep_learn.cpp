#include "harness/sweep_learn.h"

#include <cmath>

#include "common/quantile.h"

namespace ctitan {

SweepLearner::SweepLearner(ResolvedHardware prior) : prior_(std::move(prior)) {
  learning_ = !prior_.stand_in && !prior_.units;
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
  // Before any point is measured, the spec's own calibration spread (if it has one).
  if (rows_.empty()) return interval80(tps, prior_.spec.tps_error);
  return interval80(tps, log_spread(residuals_));  // none under kMinResiduals errors
}

}  // namespace ctitan
