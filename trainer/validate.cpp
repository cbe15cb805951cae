#include "trainer/validate.h"

#include <chrono>

#include "common/errors.h"
#include "profiling/trace.h"
#include "trainer/data/batch_stager.h"
#include "trainer/model/model_args.h"
#include "trainer/parallel/train_model.h"
#include "trainer/runtime.h"

namespace ctitan {

Validator::Validator(const JobConfig& cfg, const ModelArgs& args, const Runtime& rt)
    : cfg_(cfg.validation), rt_(rt) {
  if (!cfg_.enable) return;
  DataOptions d;
  d.dataset = cfg_.dataset;
  d.path = cfg_.dataset_path;
  d.path_key = "validation.dataset_path";
  d.tokenizer_path = cfg.model.hf_assets_path;
  d.batch = cfg_.local_batch_size;
  d.seq_len = cfg_.seq_len;
  d.vocab_size = args.vocab_size;
  // Not the training stream's seed: a synthetic validation set is other
  // data. A markov one is other samples of the chain the model trains on.
  d.seed = static_cast<uint64_t>(cfg.debug.seed) ^ 0x76616C6964ull;
  if (cfg_.dataset == "markov" && cfg.training.dataset == "markov") d.table_seed = static_cast<uint64_t>(cfg.debug.seed);
  d.dp_rank = rt.mesh->coord("batch");
  d.dp_world = rt.mesh->size("batch");
  loader_ = make_data_loader(d);
  start_ = loader_->state();
  stager_ = std::make_unique<BatchStager>(rt.device, cfg_.local_batch_size, cfg_.seq_len);
}

Validator::~Validator() = default;

std::string Validator::describe() const {
  return "every " + std::to_string(cfg_.freq) + " steps, " +
         (cfg_.steps < 0 ? std::string("the whole set") : std::to_string(cfg_.steps) + " batches") + " of " +
         loader_->describe();
}

std::string Validator::short_set_note(int64_t batches) const {
  return "validation: the set holds " + std::to_string(batches) + " batches per rank, fewer than validation.steps = " +
         std::to_string(cfg_.steps) + "; each pass stops at the end of the set, as TorchTitan's does (validation.steps "
         "= -1 says so)";
}

ValidationResult Validator::run(TrainModel& tm, const std::function<bool()>& stop_signalled) {
  using Clock = std::chrono::steady_clock;
  TraceRange range(trace_cat::kCompute, "validate");
  const auto t0 = Clock::now();
  loader_->load_state(start_);
  ValidationResult r;
  at::Tensor sum;
  for (; cfg_.steps < 0 || r.batches < cfg_.steps; ++r.batches) {
    loader_->next(batch_);
    // Stop, on every rank together, before a batch that wrapped around to
    // the start on any rank, or at a stop signal; after a batch that ended
    // exactly at the end of the set (a loader that counts the epoch as soon
    // as its last window is read is back at the start, one epoch on).
    nlohmann::json state = loader_->state();
    const int64_t epoch = state.value("epoch", int64_t{0});
    bool at_end = false;
    if (epoch == 1) {
      state["epoch"] = 0;
      at_end = state == start_;
    }
    at::Tensor flags = torch::tensor({epoch > 0 && !at_end ? 1 : 0, stop_signalled() ? 1 : 0, at_end ? 1 : 0},
                                     torch::kInt);
    rt_.mesh->group("world").all_reduce(flags, ReduceOp::kMax)->wait();
    if (flags[1].item<int>() != 0) {
      r.interrupted = true;
      return r;
    }
    if (flags[0].item<int>() != 0) {
      if (cfg_.steps >= 0 && !said_short_) {
        said_short_ = true;
        r.note = short_set_note(r.batches);
      }
      break;
    }
    const auto [inputs, labels] = stager_->stage(batch_);
    at::Tensor loss = tm.evaluate(inputs, labels);
    sum = r.batches == 0 ? loss : sum + loss;
    r.tokens += batch_.batch * batch_.seq_len;
    if (flags[2].item<int>() != 0) {  // the set's last batch (on some rank): the pass ends with it
      ++r.batches;
      if (cfg_.steps >= 0 && r.batches < cfg_.steps && !said_short_) {
        said_short_ = true;
        r.note = short_set_note(r.batches);
      }
      break;
    }
  }
  if (r.batches == 0)
    throw InputError("the validation set (" + loader_->describe() + ") holds less than one batch of " +
                     std::to_string(cfg_.local_batch_size) + " x " + std::to_string(cfg_.seq_len + 1) +
                     " tokens per data-parallel rank: lower validation.local_batch_size or validation.seq_len, or add data");
  r.loss = tm.mean_loss(sum / static_cast<double>(r.batches));
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace ctitan
