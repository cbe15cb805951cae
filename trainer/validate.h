// [validation]: TorchTitan's Validator. Every `freq` steps (and at step 1)
// a no-grad pass over `steps` batches of the validation set — -1: the whole
// set once — in the training layout, its mean loss averaged over the
// data-parallel (and context-parallel) ranks as the training loss is.
//
// Each pass starts at the beginning of the set, so successive passes see
// the same batches and their losses compare. A pass stops before the first
// batch that would wrap around to the start on any rank (all ranks agree, as
// every forward runs collectives): every rank runs the same number of full
// batches — TorchTitan's -1 can hang on unequal counts. validation.steps
// larger than the set stops there too, as TorchTitan's finite validation
// loader does, and says so once; a stop signal (SIGINT, SIGTERM) ends the
// pass between batches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "trainer/config/job_config.h"
#include "trainer/data/dataset.h"

namespace ctitan {

struct ModelArgs;
struct Runtime;
class TrainModel;
class BatchStager;

struct ValidationResult {
  double loss = 0;       // mean over the pass, every data-parallel rank's tokens
  int64_t batches = 0;   // per rank
  int64_t tokens = 0;    // this rank's tokens (per device, as TorchTitan's tps counts them)
  double seconds = 0;
  bool interrupted = false;  // a stop signal ended the pass between batches
  std::string note;          // set when validation.steps ran past the end of the set
};

class Validator {
 public:
  // Builds the validation loader (InputError for bad settings or data:
  // before the run directory is touched).
  Validator(const JobConfig& cfg, const ModelArgs& args, const Runtime& rt);
  ~Validator();
  bool enabled() const { return loader_ != nullptr; }
  bool due(int64_t step) const { return enabled() && (step == 1 || step % cfg_.freq == 0); }
  // `stop_signalled` is asked between batches (all ranks agree on the answer).
  ValidationResult run(TrainModel& tm, const std::function<bool()>& stop_signalled);
  std::string describe() const;  // one line for the header

 private:
  std::string short_set_note(int64_t batches) const;

  ValidationSection cfg_;
  const Runtime& rt_;
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<BatchStager> stager_;
  nlohmann::json start_;  // the loader's state at the start of the set
  TokenBatch batch_;
  bool said_short_ = false;
};

}  // namespace ctitan
