// predict(): the step of one rank, unit by unit (plan_compute.h), then the
// mesh's communication dimension by dimension (plan_comm.h), the pipeline
// schedule and the optimizer on top, and every pipeline rank's memory. See
// plan.h for what each figure covers; the efficiencies come from the
// hardware spec, what a framework does differently from its FrameworkRules.
#include "planner/plan.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>
#include <tuple>

#include "common/errors.h"
#include "planner/plan_comm.h"
#include "planner/plan_compute.h"
#include "planner/plan_internal.h"
#include "trainer/kernels/documents.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/metrics.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/parallel/context_parallel.h"
#include "trainer/parallel/pipeline.h"

namespace ctitan {
namespace {

using planner_detail::BusiestRank;
using planner_detail::DimComm;
using planner_detail::Env;
using planner_detail::Layout;
using planner_detail::Network;
using planner_detail::RankLayout;
using planner_detail::RankStep;
using planner_detail::StageCosts;
using planner_detail::UnitCost;
using planner_detail::UnitCosts;

// What an MoE model's step time assumes.
constexpr const char* kMoeTimingNote =
    "MoE: the routed experts' grouped GEMMs are timed as dense GEMMs of each expert's share of the tokens (a "
    "balanced load); their own efficiency is not calibrated yet (ATen's CPU grouped GEMM reaches about a quarter "
    "of the dense GEMMs' rate: step times here are optimistic)";

// What the trainer refuses before any layout: sequence parallelism's and
// context parallelism's cuts of the sequence.
void check_sequence_split(const JobConfig& cfg, const MeshShape& shape) {
  const int64_t seq_len = cfg.training.seq_len;
  if (shape.tp > 1 && cfg.parallelism.enable_sequence_parallel && seq_len % shape.tp != 0)
    throw InputError("training.seq_len " + std::to_string(seq_len) + " is not divisible by tensor_parallel_degree " +
                     std::to_string(shape.tp) + " (sequence parallelism)");
  if (shape.cp > 1)
    check_context_parallel(cfg.parallelism.context_parallel_rotate_method,
                           cfg.parallelism.context_parallel_load_balancer, shape.cp, seq_len);
}

// What the prediction is of: the spec, the model, the world and its nodes.
Prediction prediction_header(const PlanRequest& req, const HardwareSpec& hw, const MeshShape& shape,
                             const Layout& layout) {
  Prediction prediction;
  prediction.hardware = hw.name;
  prediction.hardware_title = hw.title;
  prediction.calibration = hw.calibration;
  prediction.machine_probe = hw.probe;
  prediction.model = describe(req.model);
  prediction.world_size = req.world_size;
  prediction.devices_per_node = req.devices_per_node > 0 ? req.devices_per_node : hw.devices_per_node;
  prediction.nodes =
      req.nodes > 0 ? req.nodes : (req.world_size + prediction.devices_per_node - 1) / prediction.devices_per_node;
  if (prediction.nodes * prediction.devices_per_node < req.world_size)
    throw InputError(std::to_string(prediction.nodes) + " nodes x " + std::to_string(prediction.devices_per_node) +
                     " devices hold fewer than the " + std::to_string(req.world_size) + " ranks of this layout");
  prediction.layout = shape.describe();
  prediction.memory.layout_source = layout.source;
  return prediction;
}

bool uses_float32(const JobConfig& cfg) { return cfg.training.mixed_precision_param == "float32"; }

// One rank's dtype, techniques and rates on the spec (notes: how the spec's
// peaks were shared or stood in for).
Env rank_env(const PlanRequest& req, const HardwareSpec& hw, const MeshShape& shape, const RankRates& rates,
             std::vector<std::string>& notes) {
  const JobConfig& cfg = req.cfg;
  Env env{req.model, cfg, hw, framework_rules(req.framework), shape};
  env.elem_bytes = uses_float32(cfg) ? 4 : 2;
  env.float8 = !cfg.model.converters.empty();
  const auto& components = cfg.compile.components;
  env.compiled = cfg.compile.enable && std::count(components.begin(), components.end(), "model") > 0;
  env.peak_flops = rates.peak_flops;
  env.fp8_peak_flops = rates.fp8_peak_flops;
  env.bandwidth = rates.bandwidth;
  env.overhead_mult = rates.overhead_mult;
  env.gemm_by_size = rates.gemm_by_size;
  if (hw.kind == "cpu")
    notes.push_back("ranks share " + std::to_string(static_cast<int>(rates.cores)) + " cores: each gets 1/" +
                    std::to_string(req.world_size) + " of the GEMM rate");
  else if (env.float8 && env.fp8_peak_flops <= 0)
    notes.push_back(hw.name + " has no fp8 tensor cores: Float8 GEMMs at the bf16 rate");
  if (env.peak_flops <= 0 || env.bandwidth <= 0)
    throw InputError("hardware spec " + hw.name + " has no peak FLOP/s or memory bandwidth to plan with");
  return env;
}

// block_causal (document masks): the attention does the density of
// visible pairs of causal's work, at an assumed document length.
void apply_document_masks(Env& env, const ModelArgs& args, std::vector<std::string>& notes) {
  if (!args.block_causal()) return;
  const int64_t seq_len = env.cfg.training.seq_len;
  env.attn_density = c4_like_attention_density(seq_len);
  notes.push_back("block_causal: attention does " + std::to_string(static_cast<int>(100 * env.attn_density + 0.5)) +
                  "% of causal's work at seq " + std::to_string(seq_len) +
                  " (assumed: packed C4-like documents, mean 427 tokens; the data's own "
                  "lengths are not read)");
}

// Sliding windows (GPT-OSS): the planner prices every block alike, so each
// does the layers' mean share of causal's attention work
// (window_attention_share, trainer/metrics.h). Sinks add one logit per
// query row: no work worth pricing.
void apply_sliding_window(Env& env, const ModelArgs& args, std::vector<std::string>& notes) {
  const double share = window_attention_share(args, env.cfg.training.seq_len);
  if (share >= 1.0) return;
  env.attn_density *= share;
  notes.push_back("sliding window " + std::to_string(args.sliding_window) + " on every other layer: attention does " +
                  std::to_string(static_cast<int>(100 * share + 0.5)) + "% of causal's work at seq " +
                  std::to_string(env.cfg.training.seq_len));
}

// Gradient accumulation over local batches, pipeline micro-batches inside one.
struct Batch {
  int64_t accumulation = 1;    // local batches per step
  int64_t microbatches = 1;    // per local batch
  double tokens = 0;           // T: tokens of one (pipeline) micro-batch on a rank
  double tokens_per_step = 0;  // global
};

Batch batch_of(const JobConfig& cfg, const MeshShape& shape) {
  const auto& training = cfg.training;
  const int64_t dp = shape.dp_replicate * shape.dp_shard;
  Batch batch;
  batch.accumulation = training.global_batch_size > 0
                           ? std::max<int64_t>(1, training.global_batch_size / (training.local_batch_size * dp))
                           : 1;
  const double S = static_cast<double>(training.seq_len);
  const int64_t microbatch_size =
      shape.pp > 1 ? cfg.parallelism.pipeline_parallel_microbatch_size : training.local_batch_size;
  batch.microbatches = shape.pp > 1 ? training.local_batch_size / microbatch_size : 1;
  batch.tokens = static_cast<double>(microbatch_size) * S / static_cast<double>(shape.cp);
  batch.tokens_per_step = static_cast<double>(training.local_batch_size * dp * batch.accumulation) * S;
  return batch;
}

ModelArgs model_args_of(const ModelDesc& model) {
  if (!model.trainer_builds()) return ModelArgs{};  // no trainer model (default arguments: dense, causal)
  return model.trainer_args();
}

// The MoE layers' share of the model's layers (0: dense).
double moe_share(const ModelDesc& model, const ModelArgs& args) {
  return model.n_layers > 0 ? static_cast<double>(args.n_moe_layers()) / static_cast<double>(model.n_layers) : 0;
}

// A rank's FSDP units: its blocks, the embedding and the head where it has
// them.
double units_of(const RankLayout& rank) {
  return static_cast<double>(rank.layers + (rank.embedding ? 1 : 0) + (rank.head ? 1 : 0));
}

// The busiest pipeline rank's step: its stages' compute, its layout, the batch.
RankStep rank_step(const Layout& layout, const StageCosts& stages, const Batch& batch, const JobConfig& cfg,
                   int64_t pp) {
  const BusiestRank busiest =
      planner_detail::busiest_rank(stages, pp, layout.stages_per_rank, cfg.parallelism.pipeline_parallel_schedule);
  const RankLayout& rank = layout.ranks[static_cast<size_t>(busiest.rank)];
  return {.layout = rank,
          .forward_s = busiest.forward_s,
          .backward_s = busiest.backward_s,
          .recompute_s = busiest.recompute_s,
          .microbatches = batch.microbatches,
          .accumulation = batch.accumulation,
          .tokens = batch.tokens,
          .units = units_of(rank),
          .recomputed_layers = stages.recomputed_layers};
}

// What the mesh's communication leaves exposed: per local batch (FSDP, TP,
// CP, EP) and once per step (the data-parallel all-reduce, the tied
// embedding).
struct ExposedComm {
  double per_local_batch = 0, per_step = 0;
};

// Each mesh dimension's communication, in the report's order (its lines
// and notes into `prediction`).
ExposedComm mesh_communication(const Env& env, const Network& net, const RankStep& step, const UnitCost& block,
                               const ModelArgs& args, const ActivationCheckpointPolicy& ac, Prediction& prediction) {
  namespace detail = planner_detail;
  ExposedComm exposed;
  for (const std::optional<DimComm>& comm :
       {detail::fsdp_comm(env, net, step), detail::replicate_comm(env, net, step),
        detail::tied_embedding_comm(env, net), detail::tp_comm(env, net, step, block),
        detail::cp_comm(env, net, step, block), detail::ep_comm(env, net, step, args, ac)}) {
    if (!comm) continue;
    prediction.time.comm.push_back(comm->line);
    (comm->per_local_batch ? exposed.per_local_batch : exposed.per_step) += comm->exposed_s;
    if (!comm->note.empty()) prediction.notes.push_back(comm->note);
  }
  return exposed;
}

// The local batch's compute with the pipeline schedule's bubble: the
// trainer's own schedule replayed with each stage's costs and the
// hand-over time; on a CPU whose ranks outnumber its cores, a rank idle in
// the bubble or waiting on its neighbour hands its core to the busy ones
// (the running ranks share the cores: `core_share` each).
struct PipelineTime {
  double local_batch_s = 0, bubble_s = 0;
  std::optional<CommDim> handover;  // pp's send/recv line
};

PipelineTime pipeline_time(const Env& env, const Network& net, const RankStep& step, const StageCosts& stages,
                           const PipelineSchedule& schedule, double core_share) {
  PipelineTime time;
  time.local_batch_s = (step.forward_s + step.backward_s) * static_cast<double>(step.microbatches);
  if (env.shape.pp <= 1) return time;
  const planner_detail::PipelineHandover handover = planner_detail::pipeline_handover(env, net, step.tokens);
  const planner_detail::PipelineSim sim =
      planner_detail::simulate_pipeline(schedule, stages.forward, stages.backward, handover.seconds, core_share);
  time.bubble_s = std::max(0.0, sim.step_s - time.local_batch_s);
  time.local_batch_s = time.local_batch_s + time.bubble_s;
  const int64_t microbatches = step.microbatches, accumulation = step.accumulation;
  time.handover = CommDim{"pp",
                          "send/recv activations and gradients",
                          handover.link.name,
                          2 * handover.bytes * microbatches * accumulation,
                          2 * handover.seconds * microbatches * accumulation,
                          0.0};
  return time;
}

// The optimizer and the step's fixed costs: AdamW reads and writes the
// fp32 master, gradient and both moments, the norm reads the gradients,
// the compute copy is refreshed. Measured (--profile): their traffic scales
// with this rank's parameters and bandwidth, their per-tensor host work
// with its units and the cores it shares; so does the step's own.
struct OptimizerCost {
  double work_s = 0, fixed_s = 0, step_overhead_s = 0;
};

OptimizerCost optimizer_cost(const Env& env, const PlanRequest& req, double param_elems, double units) {
  const HardwareSpec& hw = env.hw;
  const double optimizer_bytes = param_elems * (28 + 4 + 4 + (uses_float32(req.cfg) ? 0 : 6));
  OptimizerCost cost;
  cost.work_s = optimizer_bytes / (env.bandwidth * hw.eff.memory);
  cost.fixed_s = 30 * hw.eff.kernel_overhead_s * env.overhead_mult;
  cost.step_overhead_s = hw.eff.step_overhead_s * env.overhead_mult;
  if (!req.measured) return cost;
  const MeasuredUnits& measured = *req.measured;
  const double corun = req.world_size > 1 ? measured.corun : 1.0;
  const double overhead_ratio = env.overhead_mult / std::max(1e-9, measured.planned_overhead_mult) * corun;
  if (measured.planned_param_elems > 0 && env.bandwidth > 0)
    cost.work_s = measured.param_s * param_elems / measured.planned_param_elems * measured.planned_bandwidth /
                  env.bandwidth * corun;
  if (measured.planned_units > 0)
    cost.fixed_s = measured.param_fixed_s * units / measured.planned_units * overhead_ratio;
  cost.step_overhead_s = measured.step_fixed_s * overhead_ratio;
  return cost;
}

// What the step is assembled from: the busiest rank's units and pipeline
// time, the exposed communication, the optimizer.
struct StepParts {
  const RankStep& step;
  const UnitCost& block;  // the mean block
  const UnitCosts& units;
  PipelineTime pipeline;
  ExposedComm exposed;
  double world_s = 0;
  OptimizerCost optimizer;
};

void fill_step_time(TimeBreakdown& time, const StepParts& parts) {
  const RankLayout& rank = parts.step.layout;
  const UnitCost &block = parts.block, &head = parts.units.head, &embedding = parts.units.embedding;
  const double layers = static_cast<double>(rank.layers);
  const double accumulation = static_cast<double>(parts.step.accumulation);
  const double microbatches = static_cast<double>(parts.step.microbatches);
  time.gemm = ((block.gemm_f + block.gemm_b) * layers + (rank.head ? head.gemm_f + head.gemm_b : 0)) * microbatches *
              accumulation;
  time.attention = (block.attn_f + block.attn_b) * layers * microbatches * accumulation;
  time.elementwise = ((block.elem_f + block.elem_b) * layers + (rank.head ? head.elem_f + head.elem_b : 0) +
                      (rank.embedding ? embedding.elem_f + embedding.elem_b : 0)) *
                         microbatches * accumulation +
                     parts.optimizer.work_s;
  time.float8_casts = 2 * block.cast * layers * microbatches * accumulation;
  time.recompute = parts.step.recompute_s * microbatches * accumulation;
  time.kernel_overhead =
      ((block.kernels_f + block.kernels_b) * layers + head.kernels_f + head.kernels_b) * microbatches * accumulation +
      parts.optimizer.fixed_s;
  time.bubble = parts.pipeline.bubble_s * accumulation;
  time.comm_exposed = parts.exposed.per_local_batch * accumulation + parts.exposed.per_step + parts.world_s;
  time.data = 0;
  time.step_overhead = parts.optimizer.step_overhead_s;
  const double optimizer_s = parts.optimizer.work_s + parts.optimizer.fixed_s;
  time.step = parts.pipeline.local_batch_s * accumulation + parts.exposed.per_local_batch * accumulation +
              parts.exposed.per_step + parts.world_s + optimizer_s + time.step_overhead;
}

}  // namespace

double gemm_rate_at(const std::vector<std::pair<double, double>>& by_size, double n) {
  if (by_size.empty()) return 0;
  if (n <= by_size.front().first) return by_size.front().second * n / by_size.front().first;
  for (size_t i = 1; i < by_size.size(); ++i) {
    const auto& [n0, r0] = by_size[i - 1];
    const auto& [n1, r1] = by_size[i];
    if (n <= n1) return r0 * std::pow(r1 / r0, std::log(n / n0) / std::log(n1 / n0));
  }
  return by_size.back().second;
}

RankRates rank_rates(const HardwareSpec& hw, const JobConfig& cfg, int64_t world_size) {
  RankRates rates;
  if (hw.kind == "cpu") {
    // The ranks are processes sharing the machine: each gets 1/world of
    // its GEMM rate and memory bandwidth, and dispatch queues for cores.
    rates.cores = hw.cores > 0 ? hw.cores : std::max(1u, std::thread::hardware_concurrency());
    // The GEMM rate of the run's dtype on this machine (probed: a bf16 run's
    // is ctitan's bf16 path, native or widened).
    const double peak = uses_float32(cfg) || hw.peak_bf16_flops <= 0 ? hw.peak_fp32_flops : hw.peak_bf16_flops;
    // A rank with several threads (cores / world) syncs them on every op.
    const double ranks = static_cast<double>(world_size);
    const double thread_factor = rates.cores / ranks > 1 ? hw.eff.multi_thread : 1.0;
    rates.peak_flops = peak / ranks * thread_factor;
    rates.bandwidth = hw.memory_bandwidth / ranks * thread_factor;
    rates.overhead_mult = std::max(1.0, ranks / rates.cores);
    // A rank runs cores / world threads (ctitan launch's OMP_NUM_THREADS),
    // at least one; more ranks than cores time-share them. Its rate at a
    // size is the probe's at that thread count: all threads' or one's, and
    // geometrically between for a count in between.
    const bool fp32 = uses_float32(cfg) || hw.peak_bf16_flops <= 0;
    const double threads = std::max(1.0, std::floor(rates.cores / ranks));
    const double all = std::max(1, hw.probe_threads), share = std::min(1.0, rates.cores / (ranks * threads));
    for (const HardwareSpec::ProbedGemm& g : hw.probed_gemms) {
      const double many = fp32 ? g.fp32 : g.bf16, one = fp32 ? g.fp32_1t : g.bf16_1t;
      const double at = threads >= all || all <= 1 ? many
                        : threads <= 1             ? one
                                                   : one * std::pow(many / one, std::log(threads) / std::log(all));
      rates.gemm_by_size.emplace_back(g.n, at * share * thread_factor);
    }
  } else {
    rates.peak_flops =
        uses_float32(cfg) ? (hw.peak_fp32_flops > 0 ? hw.peak_fp32_flops : hw.peak_bf16_flops / 2) : hw.peak_bf16_flops;
    rates.fp8_peak_flops = hw.peak_fp8_flops;
    rates.bandwidth = hw.memory_bandwidth;
  }
  return rates;
}

Prediction predict(const PlanRequest& req, const HardwareSpec& spec) {
  // A cpu spec's zeros are the machine's probe (the run's, else this one's).
  const HardwareSpec resolved = spec.kind == "cpu" ? resolved_for_plan(spec, req.machine ? &*req.machine : nullptr)
                                                   : HardwareSpec{};
  const HardwareSpec& hw = spec.kind == "cpu" ? resolved : spec;
  const JobConfig& cfg = req.cfg;
  if (req.world_size < 1) throw InputError("world size " + std::to_string(req.world_size) + " is not a rank count");
  const MeshShape shape = resolve_mesh_shape(cfg.parallelism, req.world_size);
  check_sequence_split(cfg, shape);
  // The trainer's own rules refuse bad layouts here.
  const Layout layout = planner_detail::plan_layout(req.model, cfg, shape);
  Prediction prediction = prediction_header(req, hw, shape, layout);

  // One rank's rates and units.
  const bool cpu = hw.kind == "cpu";
  const RankRates rates = rank_rates(hw, cfg, req.rate_world_size > 0 ? req.rate_world_size : req.world_size);
  Env env = rank_env(req, hw, shape, rates, prediction.notes);
  const double mfu_peak =
      cpu ? env.peak_flops * req.world_size : (uses_float32(cfg) ? env.peak_flops : hw.peak_bf16_flops);
  const Batch batch = batch_of(cfg, shape);
  prediction.tokens_per_step = batch.tokens_per_step;
  const ActivationCheckpointPolicy ac =
      ActivationCheckpointPolicy::parse(cfg.activation_checkpoint.mode, cfg.activation_checkpoint.selective_ac_option);
  const ModelArgs args = model_args_of(req.model);
  apply_document_masks(env, args, prediction.notes);
  apply_sliding_window(env, args, prediction.notes);
  UnitCosts units = planner_detail::analytic_unit_costs(env, args, batch.tokens);
  if (args.moe.num_experts > 0) prediction.notes.emplace_back(kMoeTimingNote);
  if (req.measured)
    planner_detail::rescale_to_measured(units, *req.measured, env, batch.tokens, req.world_size, prediction);
  prediction.block = unit_times(units.dense_block), prediction.head = unit_times(units.head),
  prediction.embedding = unit_times(units.embedding);
  // The mean block (MoE models: dense and MoE layers in the model's
  // proportion), for what is reported or communicated per block.
  const UnitCost block = planner_detail::mean_block(units.dense_block, units.moe_block, moe_share(req.model, args));

  // Every stage's compute, the busiest pipeline rank's step, and the
  // communication of each mesh dimension.
  const StageCosts stages = planner_detail::stage_costs(layout, args, ac, units);
  const RankStep step = rank_step(layout, stages, batch, cfg, shape.pp);
  const double core_share = cpu ? std::min(1.0, rates.cores / req.world_size) : 1.0;
  const Network net{.shape = shape,
                    .hw = hw,
                    .devices_per_node = prediction.devices_per_node,
                    // cpu: Gloo's copies through loopback need a core, so
                    // ranks beyond the cores move their bytes slower, by
                    // the law the machine probe measured.
                    .comm_eff = hw.eff.comm * std::pow(core_share, hw.oversubscription),
                    .overlap = hw.eff.overlap,
                    .hides = core_share};
  const ExposedComm exposed = mesh_communication(env, net, step, block, args, ac, prediction);

  // The schedule the trainer runs: its bubble here, each rank's memory below.
  const PipelineSchedule schedule =
      shape.pp > 1 ? planner_detail::planned_schedule(cfg, shape.pp, layout.stages_per_rank, batch.microbatches)
                   : PipelineSchedule{};
  const PipelineTime pipeline = pipeline_time(env, net, step, stages, schedule, core_share);
  if (pipeline.handover) prediction.time.comm.push_back(*pipeline.handover);

  prediction.rank_param_elems = static_cast<double>(step.layout.param_elems);
  prediction.rank_units = step.units;
  prediction.overhead_mult = env.overhead_mult;
  prediction.bandwidth = env.bandwidth;
  const OptimizerCost optimizer = optimizer_cost(env, req, prediction.rank_param_elems, step.units);
  const CommDim world = planner_detail::world_reductions(net);
  if (world.seconds > 0)
    prediction.time.comm.push_back(world);  // a communication like the others: in the totals, never hidden

  fill_step_time(prediction.time, {.step = step,
                                   .block = block,
                                   .units = units,
                                   .pipeline = pipeline,
                                   .exposed = exposed,
                                   .world_s = world.seconds,
                                   .optimizer = optimizer});
  prediction.tps_per_device = prediction.tokens_per_step / prediction.time.step / static_cast<double>(req.world_size);
  prediction.tflops_per_device = req.model.flops_per_token(cfg.training.seq_len) * prediction.tps_per_device / 1e12;
  prediction.mfu = 100.0 * prediction.tflops_per_device * 1e12 / mfu_peak;
  if (const auto iv = interval80(prediction.tps_per_device, hw.tps_error)) std::tie(prediction.tps_low, prediction.tps_high) = *iv;

  // Memory: every pipeline rank is planned (its own stages, parameters
  // and place in the schedule); the largest is the prediction.
  const bool widened = cpu && (req.bf16_gemm_widened >= 0 ? req.bf16_gemm_widened > 0 : !aten_cpu_is_avx512());
  prediction.memory =
      planner_detail::peak_rank_memory(env, layout, schedule, ac, batch.tokens, batch.microbatches, widened);
  prediction.fits = prediction.memory.total <= hw.memory_bytes || hw.memory_bytes <= 0;
  return prediction;
}


}  // namespace ctitan
