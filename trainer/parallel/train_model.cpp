#include "trainer/parallel/train_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "profiling/memory.h"
#include "profiling/trace.h"
#include "common/errors.h"
#include "trainer/kernels/documents.h"
#include "trainer/models/registry.h"
#include "trainer/model/weight_grad.h"
#include "trainer/parallel/context_parallel.h"
#include "trainer/parallel/expert_parallel.h"
#include "trainer/parallel/exposed_comm.h"
#include "trainer/parallel/layout_seams.h"
#include "trainer/parallel/pipeline.h"
#include "trainer/parallel/tensor_parallel.h"

namespace ctitan {

namespace {

// The "backward <unit>" ranges of units[first] .. units[first + c - 1], run
// by one autograd pass from b0 to b1, where ready[j] is when the gradient
// of unit first + j's output was complete (hooks; j < c - 1): the last unit
// from b0, each earlier one from its output's gradient to its input's.
void trace_unit_backwards(const std::vector<ParamStore::Unit>& units, size_t first, size_t c,
                          const std::vector<int64_t>& ready, int64_t b0, int64_t b1) {
  Tracer& t = Tracer::get();
  const auto name = [&](size_t j) { return "backward " + units[first + j].name; };
  if (c == 1) {
    t.complete(name(0), trace_cat::kCompute, b0, b1);
    return;
  }
  t.complete(name(c - 1), trace_cat::kCompute, b0, ready[c - 2]);
  for (size_t j = c - 2; j >= 1; --j) t.complete(name(j), trace_cat::kCompute, ready[j], ready[j - 1]);
  t.complete(name(0), trace_cat::kCompute, ready[0], b1);
}

}  // namespace

TrainModel::TrainModel(std::unique_ptr<Transformer> model, DeviceMesh& mesh, DataParallelOptions dp_options,
                       PipelineOptions pp)
    : model_(std::move(model)), pp_(std::move(pp)), loss_group_(&mesh.group("loss")) {
  dp_ = std::make_unique<DataParallel>(*model_, mesh, std::move(dp_options));
  if (dp_->needs_hooks()) hooks_ = dp_.get();
}

double TrainModel::max_loss(const at::Tensor& local) {
  at::Tensor t = torch::full({1}, local.item<double>(), torch::kDouble);
  loss_group_->all_reduce(t, ReduceOp::kMax)->wait();
  return t.item<double>();
}

at::Tensor TrainModel::forward_backward(const at::Tensor& tokens, const at::Tensor& labels, double scale,
                                        bool first_micro, bool last_micro) {
  if (first_micro) model_->store().zero_grad();
  // Context parallelism: this rank's tokens of every sequence (the loss is
  // the mean over them; the loss group averages over cp).
  const ContextParallelOptions& cp = model_->context_parallel();
  const at::Tensor docs = documents_of(tokens);                         // first: ptrr deals the blocks
  const at::Tensor t = cp_shard(tokens, cp), l = cp_shard(labels, cp);  // unchanged without CP
  if (pp_.on()) return run_pipeline(t, l, docs, scale, first_micro, last_micro);
  model_->set_documents(docs);
  return hooks_ ? run_units(t, l, scale, first_micro, last_micro) : run_whole(t, l, scale);
}

at::Tensor TrainModel::documents_of(const at::Tensor& tokens) {
  const bool documents = model_->args().block_causal();
  const ContextParallelOptions& cp = model_->context_parallel();
  const bool ptrr = cp.on() && cp.load_balancer == "ptrr";
  if (!documents && !ptrr) return {};
  const at::Tensor starts = document_starts(tokens, documents ? eos_id_ : -1);  // causal flex: one document
  if (ptrr)
    model_->set_ptrr_blocks(ptrr_assignment(starts, cp.size(), ptrr_block_size(tokens.size(1), cp.size())));
  if (!documents) return {};
  last_starts_ = starts;
  return cp_shard(starts, cp);
}

double TrainModel::attention_density() const {
  return last_starts_.defined() ? document_attention_fraction(last_starts_) : std::nan("");
}

ExpertLoad TrainModel::balance_experts() {
  Transformer& m = *model_;
  if (!m.has_moe()) return {};
  std::vector<at::Tensor> counts;
  for (int64_t l : m.moe_layers()) counts.push_back(m.moe_layer(l).take_counts());
  at::Tensor all = at::stack(counts).to(at::kFloat);  // [layers, E]; exact in fp32 below 2^24 tokens
  loss_group_->all_reduce(all)->wait();
  // Under SP the tp ranks routed different tokens — unless the experts are
  // tensor-parallel (ETP), where every tp rank routes all of the group's.
  const TensorParallelOptions& tp = m.tensor_parallel();
  if (tp.on() && tp.sequence_parallel && !m.expert_parallel().etp) tp.group->all_reduce(all)->wait();
  const double coeff = m.args().moe.load_balance_coeff;
  const std::vector<int64_t> layers = m.moe_layers();
  if (coeff > 0)
    for (size_t i = 0; i < layers.size(); ++i)
      update_expert_bias(m.moe_layer(layers[i]).bias(), all[static_cast<int64_t>(i)], coeff);
  ExpertLoad load;
  double cv = 0;
  for (int64_t i = 0; i < all.size(0); ++i) cv += expert_load(all[i]).cv;
  load = expert_load(all);
  load.cv = cv / static_cast<double>(all.size(0));  // the layers' mean
  const ExpertParallelOptions& ep = m.expert_parallel();
  if (ep.on()) {
    // Rows received per rank of the ep group (one all-gather): the busiest
    // over the mean, per layer.
    std::vector<double> mine;
    for (int64_t l : m.moe_layers()) mine.push_back(static_cast<double>(m.moe_layer(l).take_received()));
    const at::Tensor local = torch::tensor(mine, torch::kDouble);
    at::Tensor all = torch::empty({ep.size() * local.numel()}, local.options());
    ep.group->all_gather(all, local)->wait();
    const at::Tensor per_rank = all.view({ep.size(), local.numel()});
    const at::Tensor most = std::get<0>(per_rank.max(0)), mean = per_rank.mean(0);
    load.ep_imbalance = at::where(mean > 0, most / mean, at::ones_like(mean)).mean().item<double>();
  }
  return load;
}

// A no-grad forward in the training layout: the same units, hooks and
// collectives as a training forward, then every gathered unit freed. MoE
// layers route without counting their experts' tokens.
at::Tensor TrainModel::evaluate(const at::Tensor& tokens, const at::Tensor& labels) {
  torch::NoGradGuard no_grad;
  struct CountingOff {
    Transformer& m;
    bool was;
    ~CountingOff() { m.set_expert_counting(was); }
  } counting_off{*model_, model_->expert_counting()};
  model_->set_expert_counting(false);
  MemoryCategoryScope mem(MemoryCategory::kActivations);
  const ContextParallelOptions& cp = model_->context_parallel();
  const at::Tensor docs = documents_of(tokens);
  const at::Tensor t = cp_shard(tokens, cp), l = cp_shard(labels, cp);
  at::Tensor loss = pp_.on() ? evaluate_pipeline(t, l, docs) : at::Tensor();
  if (!pp_.on()) {
    Transformer& m = *model_;
    m.set_documents(docs);
    at::Tensor h = t;
    for (size_t u = 0; u < m.units().size(); ++u) {
      if (hooks_) hooks_->before_forward(u);
      h = m.run_unit(u, h, l);
    }
    loss = h;
  }
  dp_->reshard_all();
  return loss.detach();
}

// Forward-only pipeline: this rank's stages in ascending order, each over
// every micro-batch. A stage waits only for lower stages, which every rank
// runs first, so the order cannot deadlock; any number of micro-batches
// runs (the training schedule's count does not apply). The last stage's
// mean loss reaches every stage.
at::Tensor TrainModel::evaluate_pipeline(const at::Tensor& tokens, const at::Tensor& labels, const at::Tensor& docs) {
  Transformer& m = *model_;
  Communicator& pp = *pp_.group;
  const PipelineSchedule& sched = pp_.schedule;
  const int64_t B = tokens.size(0), last_stage = sched.stages() - 1, mb = pp_.microbatch_size;
  if (B % mb != 0)
    throw InputError("validation.local_batch_size " + std::to_string(B) +
                     " is not divisible by parallelism.pipeline_parallel_microbatch_size " + std::to_string(mb) +
                     "; the pipeline runs whole micro-batches");
  const int64_t n = B / mb;
  const TensorParallelOptions& tp = m.tensor_parallel();
  const int64_t S = tokens.size(1) / (tp.on() && tp.sequence_parallel ? tp.size() : 1);
  const auto token_mb = tokens.split(mb, 0), label_mb = labels.split(mb, 0);
  const std::vector<at::Tensor> doc_mb = docs.defined() ? docs.split(mb, 0) : std::vector<at::Tensor>(n);
  const std::vector<int64_t> mine = sched.stages_of(pp.rank());
  if (hooks_)
    for (size_t u = 0; u < m.units().size(); ++u) hooks_->before_forward(u);
  std::vector<at::Tensor> held(static_cast<size_t>(n)), sent;  // the previous local stage's outputs
  std::vector<WorkPtr> sends;
  int64_t held_stage = -1;
  at::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(m.device()));
  for (size_t k = 0; k < mine.size(); ++k) {
    const int64_t st = mine[k];
    const auto [first_unit, end_unit] = m.part_units(k);
    for (int64_t i = 0; i < n; ++i) {
      at::Tensor x = token_mb[i];
      if (st > 0 && held_stage == st - 1) {
        x = held[static_cast<size_t>(i)];
      } else if (st > 0) {
        x = at::empty({mb, S, m.args().dim}, torch::TensorOptions().dtype(m.compute_dtype()).device(m.device()));
        pp.recv(x, static_cast<int>(sched.rank_of(st - 1)), static_cast<int>(st * n + i))->wait();
      }
      m.set_documents(doc_mb[i]);
      for (size_t u = first_unit; u < end_unit; ++u) x = m.run_unit(u, x, label_mb[i]);
      if (st == last_stage) {
        loss_sum += x;
      } else if (k + 1 < mine.size() && mine[k + 1] == st + 1) {
        held[static_cast<size_t>(i)] = x;  // the next stage is here too (the V's turn)
      } else {
        sent.push_back(x.contiguous());
        sends.push_back(pp.send(sent.back(), static_cast<int>(sched.rank_of(st + 1)), static_cast<int>((st + 1) * n + i)));
      }
    }
    held_stage = st;
  }
  for (const WorkPtr& w : sends) w->wait();
  at::Tensor loss = (loss_sum / static_cast<double>(n)).reshape({1}).contiguous();
  pp.broadcast(loss, static_cast<int>(sched.rank_of(last_stage)))->wait();
  return loss.reshape({});
}

// The schedule's actions on this rank's stages. A forward takes the
// previous stage's output — received, or handed over when that stage is
// here too (the V schedule's turn) — (the first stage embeds the tokens),
// runs the stage's units and passes its output on (the last stage computes
// the micro-batch's loss); a backward takes the gradient of that output
// (the last stage starts from its loss, scaled by 1/m), runs autograd
// through the stage and passes the gradient of its input back. I is that
// backward with the GEMMs' weight gradients queued (weight_grad.h); W runs
// the queue of the same stage and micro-batch. Sends are asynchronous and
// complete while the next actions run; receives block. The transfers go
// in plan_pipeline_p2p's groups: an action's send is posted together with
// the next action's receive, one batch_p2p (NCCL's deadlock-free grouping).
// Tags keep each (receiving stage, micro-batch, direction) apart.
//
// With data parallelism the stages' units are gathered before the first
// action and stay so for the whole schedule (FSDP's reshard_after_forward
// is off under PP, as in TorchTitan), and their gradients — summed over the
// micro-batches by autograd — are reduced once after the last action
// (TorchTitan syncs gradients on the last backward only).
namespace {

// One step of the schedule's actions on this rank's stages
// (TrainModel::run_pipeline): the micro-batches, each action's transfers,
// and the activations, gradients and weight-gradient queues in flight,
// indexed by (local stage, micro-batch).
class PipelineStep {
 public:
  PipelineStep(Transformer& m, Communicator& pp, const PipelineSchedule& sched, int64_t microbatch_size,
               const at::Tensor& tokens, const at::Tensor& labels, const at::Tensor& docs, double scale)
      : m_(m),
        pp_(pp),
        sched_(sched),
        rank_(pp.rank()),
        last_stage_(sched.stages() - 1),
        n_(tokens.size(0) / microbatch_size),
        scale_(scale),
        mine_(sched.stages_of(rank_)),
        token_mb_(tokens.split(microbatch_size, 0)),
        label_mb_(labels.split(microbatch_size, 0)),
        doc_mb_(docs.defined() ? docs.split(microbatch_size, 0) : std::vector<at::Tensor>(static_cast<size_t>(n_))),
        p2p_(plan_pipeline_p2p(sched, rank_)),
        traced_(Tracer::recording()) {
    // The activation between stages: [mb, S, D], or [mb, S/tp, D] under sequence parallelism.
    const TensorParallelOptions& tp = m.tensor_parallel();
    const int64_t S = tokens.size(1) / (tp.on() && tp.sequence_parallel ? tp.size() : 1);
    act_options_ = torch::TensorOptions().dtype(m.compute_dtype()).device(m.device());
    act_shape_ = {microbatch_size, S, m.args().dim};
    const size_t slots = mine_.size() * static_cast<size_t>(n_);
    inputs_.resize(slots);
    outputs_.resize(slots);
    grad_ready_.resize(slots);
    weight_grads_.resize(slots);
    loss_sum_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(m.device()));
  }

  // Runs every action of this rank, then waits for the last sends.
  void run() {
    const auto& actions = sched_.actions[static_cast<size_t>(rank_)];
    for (size_t ai = 0; ai < actions.size(); ++ai) {
      const PipelineAction& a = actions[ai];
      const at::Tensor received = exchange(ai, a.str());
      if (a.kind == PipelineAction::Kind::kForward) {
        forward(a, received);
      } else if (a.kind == PipelineAction::Kind::kBackwardWeight) {
        backward_weight(a);
      } else {
        backward(a, received);
      }
    }
    exchange(actions.size(), "last");
    for (const WorkPtr& w : sends_) w->wait();
  }

  const at::Tensor& loss_sum() const { return loss_sum_; }  // the last stage's micro-batch losses, summed
  double busy_s() const { return busy_; }                    // seconds spent computing

 private:
  using Clock = std::chrono::steady_clock;

  int64_t local(int64_t stage) const {  // index into mine_, or -1
    const auto it = std::find(mine_.begin(), mine_.end(), stage);
    return it == mine_.end() ? -1 : static_cast<int64_t>(it - mine_.begin());
  }
  size_t slot(int64_t stage, int64_t i) const { return static_cast<size_t>(local(stage) * n_ + i); }

  // Posts group g; returns its receive's tensor once it arrived (undefined if none).
  at::Tensor exchange(size_t g, const std::string& what) {
    if (p2p_[g].empty()) return at::Tensor();
    std::vector<P2POp> ops;
    at::Tensor x;
    for (const PipelineP2P& t : p2p_[g]) {
      if (t.send) {
        sent_.push_back(outbox_.at(t.tag).contiguous());
        outbox_.erase(t.tag);
        ops.push_back({P2POp::Kind::kSend, sent_.back(), static_cast<int>(t.peer), t.tag});
      } else {
        x = at::empty(act_shape_, act_options_);
        ops.push_back({P2POp::Kind::kRecv, x, static_cast<int>(t.peer), t.tag});
      }
    }
    std::vector<WorkPtr> works;
    {
      TraceRange range(trace_cat::kCompute, "pipeline send", what);  // their flights: the "comm pp" track
      works = pp_.batch_p2p(ops);
    }
    for (size_t j = 0; j < ops.size(); ++j) {
      if (ops[j].kind == P2POp::Kind::kSend) {
        sends_.push_back(works[j]);
      } else {
        TraceRange range(trace_cat::kWait, "pipeline recv", what);
        works[j]->wait();
      }
    }
    return x;
  }

  // Queues t for the next group's send (tags as plan_pipeline_p2p numbers them).
  void send(const at::Tensor& t, int64_t to_stage, int64_t i, int dir) {
    outbox_[static_cast<int>(2 * (to_stage * n_ + i) + dir)] = t;
  }

  void forward(const PipelineAction& a, const at::Tensor& received) {
    const int64_t st = a.stage, i = a.microbatch;
    const size_t k = slot(st, i);
    at::Tensor x = token_mb_[i];
    if (st > 0) {
      x = local(st - 1) >= 0 ? outputs_[slot(st - 1, i)].detach() : received;
      x.requires_grad_(true);
      inputs_[k] = x;
    }
    const auto c0 = Clock::now();
    {
      TraceRange range(trace_cat::kCompute, "pipeline", a.str());
      MemoryCategoryScope mem(MemoryCategory::kActivations);
      const auto [first_unit, end_unit] = m_.part_units(static_cast<size_t>(local(st)));
      m_.set_documents(doc_mb_[i]);
      if (traced_) grad_ready_[k] = std::make_shared<std::vector<int64_t>>(end_unit - first_unit, 0);
      for (size_t u = first_unit; u < end_unit; ++u) {
        {
          TraceRange unit(trace_cat::kCompute, "forward", m_.units()[u].name);
          x = m_.run_unit(u, x, label_mb_[i]);
        }
        if (traced_ && u + 1 < end_unit && x.requires_grad())
          x.register_hook([ready = grad_ready_[k], j = u - first_unit](const at::Tensor&) { (*ready)[j] = trace_now_ns(); });
      }
      outputs_[k] = x;
    }
    busy_ += std::chrono::duration<double>(Clock::now() - c0).count();
    if (st == last_stage_) {
      loss_sum_ += outputs_[k].detach();
    } else if (local(st + 1) < 0) {
      send(outputs_[k].detach(), st + 1, i, 0);
    }
  }

  // W: the queued weight gradients of the same stage and micro-batch.
  void backward_weight(const PipelineAction& a) {
    const auto a0 = Clock::now();
    const size_t k = slot(a.stage, a.microbatch);
    TraceRange range(trace_cat::kCompute, "pipeline", a.str());
    MemoryCategoryScope mem(MemoryCategory::kActivations);
    weight_grads_[k]->run();
    weight_grads_[k].reset();
    busy_ += std::chrono::duration<double>(Clock::now() - a0).count();
  }

  // B, or I (the GEMMs' weight gradients queued for W).
  void backward(const PipelineAction& a, const at::Tensor& received) {
    const int64_t st = a.stage, i = a.microbatch;
    const size_t k = slot(st, i);
    at::Tensor g;
    if (st < last_stage_) {
      if (local(st + 1) >= 0) {
        g = inputs_[slot(st + 1, i)].grad();
        inputs_[slot(st + 1, i)] = at::Tensor();
      } else {
        g = received;
      }
    }
    const auto c0 = Clock::now();
    int64_t b0 = 0, b1 = 0;  // the backward's own span, inside its action's range
    {
      TraceRange range(trace_cat::kCompute, "pipeline", a.str());
      MemoryCategoryScope mem(MemoryCategory::kActivations);
      b0 = trace_now_ns();
      std::optional<DeferWeightGrads> defer;
      if (a.kind == PipelineAction::Kind::kBackwardInput) {
        weight_grads_[k] = std::make_unique<WeightGradQueue>(
            [model = &m_](const at::Tensor& w, const at::Tensor& dw) { model->store().add_grad(w, dw); });
        defer.emplace(weight_grads_[k].get());
      }
      if (st == last_stage_) {
        (outputs_[k] * (scale_ / static_cast<double>(n_))).backward();
      } else {
        torch::autograd::backward({outputs_[k]}, {g});
      }
      b1 = trace_now_ns();
    }
    // A whole backward's units (a split one's input half is not a unit's backward).
    if (grad_ready_[k] && a.kind == PipelineAction::Kind::kBackward)
      trace_unit_backwards(m_.units(), m_.part_units(static_cast<size_t>(local(st))).first, grad_ready_[k]->size(),
                           *grad_ready_[k], b0, b1);
    grad_ready_[k].reset();
    busy_ += std::chrono::duration<double>(Clock::now() - c0).count();
    if (st > 0 && local(st - 1) < 0) {
      send(inputs_[k].grad(), st - 1, i, 1);
      inputs_[k] = at::Tensor();
    }
    outputs_[k] = at::Tensor();
  }

  Transformer& m_;
  Communicator& pp_;
  const PipelineSchedule& sched_;
  const int64_t rank_, last_stage_, n_;
  const double scale_;
  const std::vector<int64_t> mine_;  // this rank's stages
  const std::vector<at::Tensor> token_mb_, label_mb_, doc_mb_;
  const std::vector<std::vector<PipelineP2P>> p2p_;
  // While the tracer records, each unit's forward gets a range inside its
  // action's, and hooks on the units' outputs inside a stage time where
  // each unit's backward begins and ends (as run_whole): the per-unit
  // timings `ctitan plan --profile` reads.
  const bool traced_;
  at::TensorOptions act_options_;
  std::vector<int64_t> act_shape_;
  std::vector<at::Tensor> inputs_, outputs_, sent_;
  std::vector<std::shared_ptr<std::vector<int64_t>>> grad_ready_;
  std::vector<std::unique_ptr<WeightGradQueue>> weight_grads_;
  std::vector<WorkPtr> sends_;
  std::map<int, at::Tensor> outbox_;  // by tag: what the last action sends
  at::Tensor loss_sum_;
  double busy_ = 0;
};

}  // namespace

at::Tensor TrainModel::run_pipeline(const at::Tensor& tokens, const at::Tensor& labels, const at::Tensor& docs,
                                    double scale, bool first_micro, bool last_micro) {
  Transformer& m = *model_;
  Communicator& pp = *pp_.group;
  const PipelineSchedule& sched = pp_.schedule;
  const int64_t B = tokens.size(0);
  TORCH_CHECK(B % pp_.microbatch_size == 0, "pipeline: batch ", B, " is not divisible by the micro-batch size ",
              pp_.microbatch_size);
  const int64_t n = B / pp_.microbatch_size;
  TORCH_CHECK(n == sched.microbatches, "pipeline: ", n, " micro-batches, the schedule was planned for ",
              sched.microbatches);
  PipelineStep step(m, pp, sched, pp_.microbatch_size, tokens, labels, docs, scale);
  if (hooks_)
    for (size_t u = 0; u < m.units().size(); ++u) hooks_->before_forward(u);
  const auto t0 = std::chrono::steady_clock::now();
  step.run();
  pp_times_.busy_s += step.busy_s();
  pp_times_.total_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (hooks_) {
    for (size_t u = m.units().size(); u-- > 0;) hooks_->after_backward(u, first_micro, last_micro);
    hooks_->after_all_backward(last_micro);
  } else {
    TraceRange r(trace_cat::kCompute, "accumulate_grads");
    m.store().accumulate_grads();
  }
  // The loss lives on the last stage: every stage gets it (the log line,
  // the stop decision and the summary read it anywhere).
  at::Tensor loss = (step.loss_sum() / static_cast<double>(n)).reshape({1}).contiguous();
  pp.broadcast(loss, static_cast<int>(sched.rank_of(sched.stages() - 1)))->wait();
  return loss.reshape({});
}

// No hooks: one autograd pass over the whole model. While the tracer
// records, each unit's forward gets a range, and hooks on the units' outputs
// time where each unit's backward begins and ends (autograd runs CPU
// backward on this thread).
at::Tensor TrainModel::run_whole(const at::Tensor& tokens, const at::Tensor& labels, double scale) {
  MemoryCategoryScope mem(MemoryCategory::kActivations);
  Transformer& m = *model_;
  const auto& units = m.units();
  const bool traced = Tracer::recording();
  at::Tensor loss;
  std::vector<at::Tensor> outputs;  // units 0..L (embedding, blocks) while traced
  if (!traced) {
    loss = m.forward_loss(tokens, labels);
  } else {
    at::Tensor h = tokens;
    for (size_t u = 0; u < units.size(); ++u) {
      TraceRange r(trace_cat::kCompute, "forward", units[u].name);
      h = m.run_unit(u, h, labels);
      if (u + 1 < units.size()) outputs.push_back(h);
    }
    loss = h;
  }
  std::vector<int64_t> grad_ready(outputs.size(), 0);  // when each output's gradient was complete
  for (size_t i = 0; i < outputs.size(); ++i)
    outputs[i].register_hook([&grad_ready, i](const at::Tensor&) { grad_ready[i] = trace_now_ns(); });
  const int64_t b0 = trace_now_ns();
  (scale == 1.0 ? loss : loss * scale).backward();
  const int64_t b1 = trace_now_ns();
  if (traced) trace_unit_backwards(units, 0, units.size(), grad_ready, b0, b1);
  {
    TraceRange r(trace_cat::kCompute, "accumulate_grads");
    m.store().accumulate_grads();
  }
  return loss.detach();
}

// With hooks: every unit's forward starts from a detached input, and
// backward walks the units in reverse, handing each the gradient of its
// output — exact control of when the hooks gather, free and reduce, with
// the gradients of one autograd pass.
at::Tensor TrainModel::run_units(const at::Tensor& tokens, const at::Tensor& labels, double scale, bool first_micro,
                                 bool last_micro) {
  Transformer& m = *model_;
  const auto& units = m.units();
  const size_t head = units.size() - 1;  // unit 0 embeds, 1..L are blocks, the last is norm + output + loss
  std::vector<at::Tensor> inputs(head + 1), outputs(head + 1);
  at::Tensor loss;
  for (size_t u = 0; u <= head; ++u) {
    hooks_->before_forward(u);
    {
      TraceRange range(trace_cat::kCompute, "forward", units[u].name);
      MemoryCategoryScope mem(MemoryCategory::kActivations);
      if (u > 0) inputs[u] = outputs[u - 1].detach().requires_grad_(true);
      (u < head ? outputs[u] : loss) = m.run_unit(u, u == 0 ? tokens : inputs[u], labels);
    }
    hooks_->after_forward(u);
  }
  for (size_t u = head + 1; u-- > 0;) {
    hooks_->before_backward(u);
    {
      TraceRange range(trace_cat::kCompute, "backward", units[u].name);
      MemoryCategoryScope mem(MemoryCategory::kActivations);
      if (u == head) {
        (scale == 1.0 ? loss : loss * scale).backward();
      } else {
        torch::autograd::backward({outputs[u]}, {inputs[u + 1].grad()});
        inputs[u + 1] = at::Tensor();
        outputs[u] = at::Tensor();
      }
    }
    hooks_->after_backward(u, first_micro, last_micro);
  }
  hooks_->after_all_backward(last_micro);
  return loss.detach();
}

CommTimes TrainModel::take_comm_times() {
  CommTimes t = dp_->take_comm_times();
  // Time blocked in the tp regions and in context parallelism's K/V exchange.
  for (Communicator* g :
       {model_->tensor_parallel().group, model_->context_parallel().group, model_->expert_parallel().group}) {
    if (g == nullptr || g->size() == 1) continue;
    const double s = take_exposed_seconds(*g);
    t.exposed_by_dim[g->name()] += s;
    t.exposed_comm_s += s;
  }
  return t;
}

at::ScalarType compute_dtype(const JobConfig& cfg) {
  return cfg.training.mixed_precision_param == "float32" ? torch::kFloat : torch::kBFloat16;
}

namespace {

bool has(const std::vector<std::string>& list, const char* item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// model.converters: whether float8 is on (InputError for an unknown entry).
bool float8_converter(const JobConfig& cfg) {
  bool float8 = false;
  for (const auto& c : cfg.model.converters) {
    if (c != "quantize.linear.float8" && c != "float8")
      throw InputError("model.converters entry '" + c + "' is unknown; ctitan has \"quantize.linear.float8\"");
    float8 = true;
  }
  return float8;
}

// InputError unless a sequence of S tokens (the value of `key`) can be cut
// as tensor (sequence) and context parallelism cut it.
void check_sequence_length(const std::string& key, int64_t S, const TensorParallelOptions& tp,
                           const ContextParallelOptions& cp) {
  if (tp.on() && tp.sequence_parallel && S % tp.size() != 0)
    throw InputError(key + " " + std::to_string(S) + " is not divisible by tensor_parallel_degree " +
                     std::to_string(tp.size()) + " (sequence parallelism shards the sequence); choose a multiple");
  check_context_parallel(cp.rotate_method, cp.load_balancer, cp.size(), S, key);
  if (cp.on() && tp.on() && tp.sequence_parallel && (S / cp.size()) % tp.size() != 0)
    throw InputError(key + " " + std::to_string(S) + " / context_parallel_degree " + std::to_string(cp.size()) +
                     " is not divisible by tensor_parallel_degree " + std::to_string(tp.size()) +
                     " (sequence parallelism shards each rank's part); choose a multiple");
}

// TorchTitan's apply_ac, apply_compile and float8 converter, as the model
// part's techniques.
ModelTechniques model_techniques(const JobConfig& cfg, bool float8, bool split_backward) {
  ModelTechniques t;
  t.activation_checkpointing =
      ActivationCheckpointPolicy::parse(cfg.activation_checkpoint.mode, cfg.activation_checkpoint.selective_ac_option);
  for (const auto& c : cfg.compile.components)
    if (c != "model" && c != "loss")
      throw InputError("compile.components entry '" + c + "' is unknown; use \"model\" and/or \"loss\"");
  t.compile_model = cfg.compile.enable && has(cfg.compile.components, "model");
  t.compile_loss = cfg.compile.enable && has(cfg.compile.components, "loss");
  if (float8)
    t.float8 = Float8Options{parse_float8_recipe(cfg.float8.recipe_name), cfg.float8.emulate, cfg.float8.filter_fqns};
  t.split_backward = split_backward;
  return t;
}

}  // namespace

std::unique_ptr<TrainModel> parallelize_model(const ModelArgs& args_in, const Runtime& rt, const JobConfig& cfg) {
  const bool float8 = float8_converter(cfg);
  ModelArgs args = args_in;
  args.moe.force_load_balance = cfg.debug.moe_force_load_balance;
  check_model_layout(args, ModelLayout{rt.shape.dp_replicate, rt.shape.dp_shard, rt.shape.cp, rt.shape.tp, rt.shape.pp,
                                       float8, cfg.parallelism.context_parallel_load_balancer});
  // Memory by category: the model's buffers (master, gradient, compute copy)
  // are parameters until train() tags the gradient buffer.
  MemoryCategoryScope param_memory(MemoryCategory::kParameters);
  // The placement plan decides the storage before anything is allocated:
  // under FSDP the model keeps unit buffers only and each rank allocates
  // its own shards.
  // FSDP shards over dp_shard x cp (TorchTitan's "fsdp").
  const bool fsdp = rt.shape.dp_shard * rt.shape.cp > 1;
  const auto storage = fsdp ? ParamStore::Storage::kUnits : ParamStore::Storage::kFlat;
  TensorParallelOptions tp;
  tp.group = &rt.mesh->group("tp");
  tp.sequence_parallel = cfg.parallelism.enable_sequence_parallel;
  tp.loss_parallel = !cfg.parallelism.disable_loss_parallel;
  tp.async = cfg.parallelism.enable_async_tensor_parallel;
  // Pipeline parallelism: this rank's stages of TorchTitan's split.
  PipelineOptions pp;
  std::vector<ModelPart> parts{ModelPart{}};
  pp.group = &rt.mesh->group("pp");
  if (pp.on()) {
    const auto& p = cfg.parallelism;
    const std::string& name = p.pipeline_parallel_schedule;
    pp.csv = !p.pipeline_parallel_schedule_csv.empty();
    check_pipeline_schedule(name, pp.csv);
    pp.microbatch_size = p.pipeline_parallel_microbatch_size;
    if (cfg.training.local_batch_size % pp.microbatch_size != 0)
      throw InputError("training.local_batch_size " + std::to_string(cfg.training.local_batch_size) +
                       " is not divisible by parallelism.pipeline_parallel_microbatch_size " +
                       std::to_string(pp.microbatch_size) + "; the pipeline runs whole micro-batches");
    const int64_t ranks = pp.group->size(), microbatches = cfg.training.local_batch_size / pp.microbatch_size;
    const PipelineSplit split = plan_pipeline_split(args, p, ranks);
    const int64_t v = split.stages_per_rank;
    pp.schedule = pp.csv ? load_pipeline_csv(p.pipeline_parallel_schedule_csv, name, ranks, v, microbatches)
                         : build_pipeline_schedule(name, ranks, v, microbatches);
    parts.clear();
    for (int64_t stage : pp.schedule.stages_of(pp.group->rank())) parts.push_back(split.parts[static_cast<size_t>(stage)]);
  }
  // The RoPE table covers the longest sequence run: training's or validation's.
  const int64_t max_seq_len = std::max(cfg.training.seq_len, cfg.validation.enable ? cfg.validation.seq_len : 0);
  // Expert parallelism: the routed experts sharded over the mesh's ep group.
  ExpertParallelOptions ep;
  if (rt.shape.ep > 1) {
    ep.group = &rt.mesh->group("ep");
    ep.etp = rt.shape.etp > 1;
  }
  ContextParallelOptions cp;
  cp.group = &rt.mesh->group("cp");
  cp.rotate_method = cfg.parallelism.context_parallel_rotate_method;
  cp.load_balancer = cfg.parallelism.context_parallel_load_balancer;
  const ModelTechniques techniques = model_techniques(cfg, float8, pp.on() && pp.schedule.splits_backward());
  auto model = std::make_unique<Transformer>(args, compute_dtype(cfg), max_seq_len, rt.device, parts, storage,
                                             parallel_layout(tp, ep, cp), techniques);
  check_sequence_length("training.seq_len", cfg.training.seq_len, tp, cp);
  if (cfg.validation.enable) check_sequence_length("validation.seq_len", cfg.validation.seq_len, tp, cp);
  DataParallelOptions dpo;
  dpo.reshard_after_forward = cfg.parallelism.fsdp_reshard_after_forward;
  // TorchTitan: under PP, FSDP's "default" keeps the parameters gathered
  // between the micro-batches' forward and backward; the pipeline gathers a
  // stage's units once per step.
  if (pp.on() && dpo.reshard_after_forward == "default") dpo.reshard_after_forward = "never";
  if (pp.on() && dpo.reshard_after_forward == "always")
    throw InputError("parallelism.fsdp_reshard_after_forward = \"always\" under pipeline parallelism is not in this "
                     "ctitan build (a stage's units stay gathered for the step); use \"default\" or \"never\"");
  // As in TorchTitan, the float8 all-gather applies only when FSDP shards.
  dpo.float8_all_gather = float8 && fsdp && cfg.float8.enable_fsdp_float8_all_gather;
  dpo.float8_precompute_scales = dpo.float8_all_gather && cfg.float8.precompute_float8_dynamic_scale_for_fsdp;
  dpo.recorder = rt.recorder;
  auto tm = std::make_unique<TrainModel>(std::move(model), *rt.mesh, std::move(dpo), pp);
  tm->init_weights(static_cast<uint64_t>(cfg.debug.seed));
  return tm;
}

}  // namespace ctitan
