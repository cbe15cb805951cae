// A sweep that learns as it runs. After each point it measures, the
// planner's hardware spec is refitted on every point the sweep has measured
// so far (planner/calibrate.h fit_spec, pulled toward the spec as written,
// so constants the points do not constrain stay where they were), and the
// points still to run are predicted again with it: their run order and
// their memory check use the refitted plan, and the prediction stored
// beside each run is the one made just before it ran — out of sample.
//
// With fewer than kMinFitPoints measured points the constants are not
// refitted (a dozen constants from one or two rows would be a guess): the
// spec's step times are scaled by the geometric mean of measured over
// predicted, the one thing two rows do say. Either way a final scale
// (the same mean, under the refitted spec) takes out what bias is left.
// From kMinFitPoints on, a point whose layout (world size, mesh, pipeline
// schedule, async TP) the sweep has measured is scaled again by the mean
// log error left on that layout's points, shrunk toward none as if
// kLayoutShrink more points had none: the refit's constants are shared by
// every layout, and a layout the model prices wrong (TP's many small
// collectives on Gloo, DDP against FSDP) keeps its own error.
//
// Every prediction made from a refit carries an 80 % interval from the
// log errors of the earlier out-of-sample predictions of this sweep (their
// mean and spread, Student's t for their count: exp(mean ± t·s·√(1+1/m))),
// once there are kMinResiduals of them. Before the first point is measured
// it is the spec's own calibration spread (HardwareSpec::tps_error), where
// the spec has one; in between, none.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/sweep_spec.h"
#include "planner/calibrate.h"

namespace ctitan {

class SweepLearner {
 public:
  static constexpr int kMinFitPoints = 3;
  static constexpr int kMinResiduals = LogSpread::kMinForInterval;
  static constexpr double kLayoutShrink = 1.0;

  // Learns on `prior` unless it is a stand-in (memory only) or plans with
  // measured units ([sweep] plan_profile: already measured).
  explicit SweepLearner(ResolvedHardware prior);
  bool learning() const { return learning_; }

  // `pt` measured at `tps_per_device` (the summary's median) and
  // `mem_peak_bytes` (0: none); `predicted_tps` is what the point was
  // predicted at when it ran (its residual counts toward the interval
  // when that prediction came from a refit). Then refits.
  void add(const SweepPoint& pt, double tps_per_device, double mem_peak_bytes, double predicted_tps,
           int predicted_from);

  // The point on the current spec (the prior until the first add), its
  // throughput and step time scaled. InputError as predict()'s.
  Prediction predict(const SweepPoint& pt) const;
  // The 80 % interval of a prediction of `tps` made now (lower, upper
  // tokens/s): the spec's calibration spread before any point is measured,
  // then none until kMinResiduals out-of-sample errors.
  std::optional<std::pair<double, double>> interval(double tps) const;
  // Measured points the current spec was fitted on (0: the prior).
  int fitted_on() const { return static_cast<int>(rows_.size()); }
  const HardwareSpec& spec() const { return current_.spec; }
  // log(measured / predicted) of the out-of-sample predictions so far.
  const std::vector<double>& residuals() const { return residuals_; }

  // The layout a point's error is shared with: "2 dp_shard 2", "4 tp 2 x pp 2 GPipe".
  static std::string layout_key(const JobConfig& cfg, int world_size);

 private:
  void refit();

  ResolvedHardware prior_, current_;
  bool learning_ = false;
  double scale_ = 1.0;  // on tokens/s: measured over predicted under current_
  // layout_key → (sum of log(measured / predicted) after scale_, points)
  std::map<std::string, std::pair<double, int>> layout_residual_;
  std::vector<MeasuredRun> rows_;
  std::vector<double> residuals_;
};

}  // namespace ctitan
