// What train() drives, whatever the layout: the model part(s) of this rank,
// the optimizer's flat buffers, the parallelisms' unit hooks, and the unit
// runner that owns the order of forward and backward.
//
// parallelize_model() is TorchTitan's recipe of passes, in its order:
//   1. build the model part on the runtime's device (meta: shapes only),
//      its storage chosen by the placement plan (FSDP: unit buffers, no
//      full master anywhere);
//   2. techniques applied to the model part — activation checkpointing,
//      compile (fused kernels), Float8 — as TorchTitan's apply_ac,
//      apply_compile and the float8 converter;
//   3. data parallelism (DDP / FSDP / HSDP) as unit hooks, allocating this
//      rank's shards;
//   4. init_weights: each rank fills its own boxes (per parameter, from the
//      seed), as TorchTitan materialises after parallelize.
// Tensor parallelism enters at step 1: the model part is built with this
// rank's shards of TorchTitan's TP plan and runs its communication regions;
// FSDP then shards each local TP shard along dim 0. Pipeline parallelism
// builds this rank's stage as the model part (its layers keep their global
// indices) and runs the schedule (pipeline.h) with send/recv over the pp
// group. Context parallelism cuts every sequence over the cp ranks
// (context_parallel.h); FSDP then shards over dp_shard x cp.
//
// Not thread-safe; one TrainModel per rank.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "trainer/config/job_config.h"
#include "trainer/model/transformer.h"
#include "trainer/optim/adamw.h"
#include "trainer/parallel/data_parallel.h"
#include "trainer/parallel/pipeline.h"
#include "trainer/runtime.h"

namespace ctitan {

// Pipeline parallelism of this rank: its stages among the pp group's ranks.
struct PipelineOptions {
  Communicator* group = nullptr;  // the mesh's pp group; null or size 1: no pipeline
  PipelineSchedule schedule;      // every rank's actions (pipeline.h): named or from a CSV
  bool csv = false;               // the schedule came from pipeline_parallel_schedule_csv
  int64_t microbatch_size = 1;    // pipeline_parallel_microbatch_size
  bool on() const { return group != nullptr && group->size() > 1; }
};

// One step's pipeline timing on this rank (seconds).
struct PipelineTimes {
  double busy_s = 0;   // inside its forward/backward actions
  double total_s = 0;  // from its first action's start to the last send's completion
};

class TrainModel {
 public:
  TrainModel(std::unique_ptr<Transformer> model, DeviceMesh& mesh, DataParallelOptions dp_options,
             PipelineOptions pp = {});

  Transformer& model() { return *model_; }
  const Transformer& model() const { return *model_; }

  // One micro-batch: forward, backward of loss * scale, and the hooks'
  // gradient reduction. Under pipeline parallelism the micro-batch is cut
  // into local_batch / microbatch_size pipeline micro-batches run by the
  // schedule; the loss comes from the last stage and reaches every stage. Returns the micro-batch's mean loss over this
  // rank's tokens, detached, unscaled — a device scalar: nothing waits for
  // the device here (read it with mean_loss on log steps).
  at::Tensor forward_backward(const at::Tensor& tokens, const at::Tensor& labels, double scale, bool first_micro,
                              bool last_micro);
  // The mean loss of a no-grad forward over this rank's tokens (a device
  // scalar, as forward_backward's), in the same layout; nothing is
  // accumulated and nothing stays gathered. Validation's forward.
  at::Tensor evaluate(const at::Tensor& tokens, const at::Tensor& labels);
  // block_causal models: the data's EOS token, which ends each document
  // (documents.h). Both calls above find the documents of their tokens —
  // the whole sequences, before CP cuts them — and hand each forward its
  // rows' (each pipeline micro-batch its own).
  void set_eos_id(int64_t eos_id) { eos_id_ = eos_id; }
  // block_causal: the share of causal attention's (query, key) pairs the
  // last batch's documents leave visible (document_attention_fraction; the
  // attention work done relative to causal). NaN for a causal model.
  double attention_density() const;
  // The true global L2 norm of the gradients (every shard counted once),
  // gradients clipped to max_norm.
  // With `deferred_coef`: the coefficient is written there, the gradients
  // left for AdamW::step to scale.
  double clip_grad_norm(double max_norm, double* deferred_coef = nullptr) {
    return dp_->clip_grad_norm(max_norm, deferred_coef);
  }
  // MoE, before the optimizer step: the tokens each local MoE layer's
  // experts received this step, summed over the ranks that routed other
  // tokens (the loss group dp × cp, and tp under SP), one all-reduce; with
  // load_balance_coeff > 0 each expert bias moves by TorchTitan's rule
  // (moe.h update_expert_bias). Returns the load over all local MoE
  // layers' experts (zeros without MoE).
  ExpertLoad balance_experts();
  void init_weights(uint64_t seed) { dp_->init_weights(seed); }
  // After the optimizer: the compute copy of the new weights.
  void begin_step(bool after_optimizer_step = false) { dp_->begin_step(after_optimizer_step); }
  // compile.enable on CUDA, flat storage, bf16: the optimizer's fused
  // kernel writes the compute copy (AdamW::write_compute_copy); true if so.
  bool give_compute_copy(AdamW& opt) { return dp_->give_compute_copy(opt); }
  // The loss TorchTitan logs: `local` averaged over the data-parallel ranks.
  double mean_loss(const at::Tensor& local) { return dp_->dp_mean(local.item<double>()); }
  // TorchTitan's global_max_loss: the largest `local` over the same ranks.
  double max_loss(const at::Tensor& local);

  // The optimizer's view: this rank's fp32 master parameters and gradients.
  at::Tensor& params() { return dp_->params(); }
  at::Tensor& grads() { return dp_->grads(); }
  TensorPieces checkpoint_pieces(AdamW& opt, bool for_save) { return dp_->checkpoint_pieces(opt, for_save); }
  int64_t state_bytes() const { return dp_->state_bytes(); }  // params + grads + AdamW state on this rank
  // "FSDP 2 (...), TP 2 (sequence parallel, loss parallel)"
  std::string describe() const {
    std::string d = dp_->describe();
    if (model_->tensor_parallel().on()) d += ", " + model_->tensor_parallel().describe();
    if (model_->context_parallel().on()) d += ", " + model_->context_parallel().describe();
    if (model_->expert_parallel().on())
      d += ", EP " + std::to_string(model_->expert_parallel().size()) +
           (model_->expert_parallel().etp ? " (experts tensor-parallel over tp)" : "");
    return d;
  }
  // Since the last call: the data-parallel hooks' collectives and, under
  // TP, the time blocked in the tp regions (exposed_by_dim["tp"]).
  CommTimes take_comm_times();
  // Whether this rank holds whole weights (the float8 SQNR probe needs them).
  bool whole_weights() const { return !dp_->sharded() && !pp_.on(); }

  const PipelineOptions& pipeline() const { return pp_; }
  // Since the last call, summed over the steps.
  PipelineTimes take_pipeline_times() {
    PipelineTimes t = pp_times_;
    pp_times_ = {};
    return t;
  }

  // The layout, one line per parameter: FQN, global shape, local shape,
  // placement ("Shard(0) over dp_shard 64", "Replicate").
  std::vector<std::string> layout() const { return dp_->layout(); }
  const std::vector<ParamSpec>& specs() const { return dp_->specs(); }

 private:
  at::Tensor run_whole(const at::Tensor& tokens, const at::Tensor& labels, double scale);
  at::Tensor run_units(const at::Tensor& tokens, const at::Tensor& labels, double scale, bool first_micro,
                       bool last_micro);
  at::Tensor run_pipeline(const at::Tensor& tokens, const at::Tensor& labels, const at::Tensor& docs, double scale,
                          bool first_micro, bool last_micro);
  at::Tensor evaluate_pipeline(const at::Tensor& tokens, const at::Tensor& labels, const at::Tensor& docs);
  // Per batch, before CP cuts it: the ptrr balancer's deal of the blocks
  // (CP), and this rank's document starts of `tokens` (whole sequences), cut
  // like the tokens; undefined for a causal model.
  at::Tensor documents_of(const at::Tensor& tokens);

  std::unique_ptr<Transformer> model_;
  std::unique_ptr<DataParallel> dp_;
  UnitHooks* hooks_ = nullptr;  // null: one autograd pass, no unit boundaries needed
  PipelineOptions pp_;
  PipelineTimes pp_times_;
  Communicator* loss_group_ = nullptr;  // the mesh's "loss" group (dp x cp), as mean_loss averages over
  int64_t eos_id_ = -1;
  mutable at::Tensor last_starts_;  // the last batch's document starts (whole sequences)
};

std::unique_ptr<TrainModel> parallelize_model(const ModelArgs& args, const Runtime& rt, const JobConfig& cfg);

// training.mixed_precision_param as a dtype.
at::ScalarType compute_dtype(const JobConfig& cfg);

}  // namespace ctitan
