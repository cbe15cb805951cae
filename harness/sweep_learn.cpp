#include "harness/sweep_learn.h"

#include <cmath>

#include "common/quantile.h"
#include "trainer/distributed/mesh.h"

namespace ctitan {

std::string SweepLearner::layout_key(const JobConfig& cfg, int world_size) {
  const ParallelismSection& par = cfg.parallelism;
  std::string key = std::to_string(world_size) + " " + resolve_mesh_shape(par, world_size).describe();
  if (par.enable_async_tensor_parallel) key += " async-tp";
  if (par.pipeline_parallel_degree > 1) key += " " + par.pipeline_parallel_schedule;
  return key;
}

SweepLearner::SweepLearner(ResolvedHardware prior) : prior_(std::move(prior)) {
  learning_ = !prior_.stand_in && !prior_.units;
  current_ = prior_;
}

Prediction SweepLearner::predict(const SweepPoint& pt) const {
  Prediction p = predict_on(pt.config, pt.world_size, current_);
  double scale = scale_;
  // What the refit left for this layout's measured points, shrunk toward
  // none by kLayoutShrink pseudo-points: the mean of one point counts half.
  if (const auto it = layout_residual_.find(layout_key(pt.config, pt.world_size)); it != layout_residual_.end())
    scale *= std::exp(it->second.first / (it->second.second + kLayoutShrink));
  if (scale != 1.0 && p.tps_per_device > 0) {
    p.tps_per_device *= scale;
    p.tflops_per_device *= scale;
    p.mfu *= scale;
    p.time.step /= scale;
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
  std::vector<double> log_ratio(rows_.size(), std::nan(""));
  for (size_t i = 0; i < rows_.size(); ++i) {
    const MeasuredRun& r = rows_[i];
    PlanRequest q;
    q.cfg = r.cfg;
    q.model = model_from_config(r.cfg.model);
    q.world_size = r.world_size;
    const double step = ctitan::predict(q, next.spec).time.step;
    if (step > 0 && r.step_time_s > 0) log_ratio[i] = std::log(step / r.step_time_s), sum += log_ratio[i], ++n;
  }
  current_ = std::move(next);
  scale_ = n > 0 ? std::exp(sum / n) : 1.0;
  // Per layout (world size, mesh, schedule): what is left after the scale.
  layout_residual_.clear();
  if (static_cast<int>(rows_.size()) < kMinFitPoints) return;
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (std::isnan(log_ratio[i])) continue;
    auto& [residual, count] = layout_residual_[layout_key(rows_[i].cfg, rows_[i].world_size)];
    residual += log_ratio[i] - std::log(scale_);
    count += 1;
  }
}

std::optional<std::pair<double, double>> SweepLearner::interval(double tps) const {
  // Before any point is measured, the spec's own calibration spread (if it has one).
  if (rows_.empty()) return interval80(tps, prior_.spec.tps_error);
  return interval80(tps, log_spread(residuals_));  // none under kMinResiduals errors
}

}  // namespace ctitan
