// The planner: per-rank memory and step time of one recipe at one world
// size on one hardware spec, every figure broken down.
//
// Memory: parameters, gradients and optimizer state read from the trainer's
// own dry-run layout (parallelize_model on the meta device, every pipeline
// stage; nothing re-derived), activations per activation-checkpointing
// mode with sequence/context parallelism in Korthikanti et al.'s form,
// logits and loss buffers, FSDP's gathered units and communication
// buffers, allocator overhead.
// Time: GEMMs and attention at shape-dependent efficiencies, element-wise
// traffic (less under compile), recomputation, Float8 per GEMM size and its
// casts, communication per mesh dimension (all-gather / reduce-scatter /
// all-reduce / send-recv / ring attention, bandwidth and latency per link
// class) with what each technique overlaps (FSDP prefetch, async TP, the
// pipeline schedule), the pipeline bubble, data loading.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/hardware.h"
#include "planner/model_desc.h"
#include "trainer/config/job_config.h"

namespace ctitan {

// What one rank of `world_size` gets of the spec's compute and memory: its
// GEMM FLOP/s in the compute dtype (a cpu's ranks share its measured peak
// and cores), the fp8 peak (0: none), bytes/s, and how much slower dispatch
// is when ranks outnumber cores.
struct RankRates {
  double peak_flops = 0, fp8_peak_flops = 0, bandwidth = 0, overhead_mult = 1, cores = 0;
  // cpu with a probe that measured GEMM sizes: (n, this rank's FLOP/s for an
  // n³ GEMM in the compute dtype), its threads and its share of the cores
  // applied. Empty: GEMMs follow the spec's gemm_half_size law.
  std::vector<std::pair<double, double>> gemm_by_size;
};
// The rate of a GEMM whose smallest dimension is `n` on a rank's probed
// curve: log-log between the probed sizes, the largest's beyond them, and
// falling in proportion below the smallest.
double gemm_rate_at(const std::vector<std::pair<double, double>>& by_size, double n);
RankRates rank_rates(const HardwareSpec& hw, const JobConfig& cfg, int64_t world_size);

// Seconds one unit (a TransformerBlock, the embedding, the norm and output
// head) costs per micro-batch, by class: GEMMs, attention, element-wise
// traffic, and the fixed host work of its ops (dispatch, the autograd
// engine), forward and backward.
struct UnitTimes {
  double gemm_f = 0, gemm_b = 0, attn_f = 0, attn_b = 0, elem_f = 0, elem_b = 0, fixed_f = 0, fixed_b = 0;
};

// What one profiled run measured, unit by unit (planner/op_costs.h,
// measured_units_from_run), with what the planner's analytic model says
// that run's units cost (`planned_*`): a recipe is then predicted as the
// measured time times the analytic model's ratio, class by class — the
// analytic model says how the work scales (tokens, TP shards, model
// dimensions, GEMM sizes, cores shared), the measurement what it costs.
// One more single-process run of the same model at another micro-batch
// size: its units measured and planned (the size curve: a class's measured
// over planned time at each size).
struct MeasuredShape {
  std::string run_dir;
  double tokens = 0;  // per micro-batch
  UnitTimes block, head, embedding, planned_block, planned_head, planned_embedding;
};

struct MeasuredUnits {
  std::string run_dir;
  double tokens = 0;                       // the profiled run's tokens per micro-batch
  double dim = 0, vocab = 0;               // its model's (the size curve's widths; 0: one size only)
  UnitTimes block, head, embedding;        // measured, seconds per instance per micro-batch
  double param_s = 0, param_fixed_s = 0;   // per step: gradient accumulation, clipping, AdamW (work, fixed)
  double step_fixed_s = 0;                 // per step: data and the host work outside every unit
  UnitTimes planned_block, planned_head, planned_embedding;
  double planned_param_elems = 0, planned_units = 0, planned_overhead_mult = 1, planned_bandwidth = 0;
  // Ranks running side by side on one machine slow each other (shared
  // memory bandwidth and caches, the collectives' own threads): a rank's
  // unit time in a profiled multi-rank run over the single process's. 1:
  // not measured. Applied to every recipe of more than one rank.
  double corun = 1;
  std::string corun_run_dir;
  // Further single-process runs of the model at other micro-batch sizes. A
  // recipe's class is then scaled by the measured-over-planned ratio
  // interpolated, in log working set (tokens per micro-batch times the
  // model's dim; the head: times its vocabulary shard), between the runs
  // around its size (the nearest one's outside them): what the analytic model does
  // not know about size — caches, the autograd engine's per-tensor work —
  // is measured instead of extrapolated from one size.
  std::vector<MeasuredShape> shapes;
};

struct PlanRequest {
  JobConfig cfg;         // the recipe, fully resolved (parallelism degrees may be -1)
  ModelDesc model;       // from cfg.model.flavor unless overridden
  int world_size = 1;    // ranks (GPUs)
  int nodes = 0;         // 0: ceil(world_size / devices_per_node)
  int devices_per_node = 0;  // 0: the spec's
  // kind = "cpu": whether the run's machine widens bf16 GEMM operands to
  // fp32 (its ATen runs no AVX-512 kernels, trainer/model/gemm.cpp), so each
  // GEMM briefly holds fp32 copies of its input, weight and output. -1: this
  // machine's, read at plan time; --calibrate sets each run's own from its
  // env's aten_cpu_capability.
  int bf16_gemm_widened = -1;
  // kind = "cpu": the machine the run ran on, as probed there (the figures
  // its spec leaves at 0, HardwareSpec::probed); unset: this machine's.
  // --calibrate sets each run's own from its env's machine_probe.
  std::optional<MachineProbe> machine;
  // cpu: how many processes share the cores for the rates (rank_rates);
  // 0: world_size. A single-process run on fewer threads than cores has
  // the rate of a rank among cores/threads.
  int rate_world_size = 0;
  // Set: the compute of every unit, the parameter work and the step's
  // fixed cost come from this measurement scaled by the analytic model's
  // ratios (ctitan plan --profile); communication stays analytic.
  std::shared_ptr<const MeasuredUnits> measured;
  // Whose training loop is planned: "ctitan" (the trainer here),
  // "torchtitan" or "megatron" (published rows they measured); what each
  // does differently is its FrameworkRules (planner/framework_rules.h).
  std::string framework = "ctitan";
};

struct MemoryBreakdown {  // bytes per rank (the largest rank: every pipeline stage is planned)
  double parameters = 0;   // fp32 master shards + compute copies gathered at the peak
  double gradients = 0;
  double optimizer = 0;
  double activations = 0;  // kept for backward at the peak, plus one recomputed block
  double logits = 0;       // logits, their fp32 loss copy and gradient
  double communication = 0;  // gathered FSDP units in flight, TP/CP buffers
  double overhead = 0;     // allocator slack and fixed per-rank bytes
  double total = 0;
  std::string layout_source;  // "dry-run layout (meta device)" or why it was derived
};

struct CommDim {
  std::string dim;         // "fsdp", "dp_replicate", "tp", "pp", "cp", "world" (loss/norm reductions)
  std::string what;        // "all-gather + reduce-scatter", ...
  std::string link;        // the link class it crosses
  double bytes = 0;        // per rank per step
  double seconds = 0;      // on the wire
  double exposed_s = 0;    // not hidden by compute
};

struct TimeBreakdown {  // seconds per step on one rank
  double gemm = 0, attention = 0, elementwise = 0, kernel_overhead = 0;
  double recompute = 0;    // forward work repeated by activation checkpointing (included above: no)
  double float8_casts = 0;
  double comm_exposed = 0;
  double bubble = 0;       // pipeline idle
  double data = 0, step_overhead = 0;
  double step = 0;         // the sum
  std::vector<CommDim> comm;
};

struct Prediction {
  std::string hardware;     // spec name
  std::string hardware_title;
  std::string calibration;  // the spec's calibration source
  std::string machine_probe;  // cpu: the probe the spec's zeros came from (MachineProbe::describe), else ""
  std::string model;        // describe(model)
  std::string layout;       // "FSDP 8 x TP 1 ...": the mesh
  int world_size = 1, nodes = 1, devices_per_node = 1;
  MemoryBreakdown memory;
  TimeBreakdown time;
  double tokens_per_step = 0;  // global
  double tps_per_device = 0;   // TorchTitan's tps
  // 80 % interval of tps_per_device from the spec's calibration hold-out
  // (HardwareSpec::tps_error); both 0 where the spec has none.
  double tps_low = 0, tps_high = 0;
  double tflops_per_device = 0;
  double mfu = 0;              // percent, against the spec's bf16 peak (fp32 on cpu)
  bool fits = true;            // memory.total <= the device's memory
  std::vector<std::string> notes;  // assumptions made for this recipe
  // The unit costs the step was assembled from (one rank, one micro-batch),
  // and that rank's parameter elements, units and rates.
  UnitTimes block, head, embedding;
  double rank_param_elems = 0, rank_units = 0, overhead_mult = 1, bandwidth = 0;
  std::string compute_source = "analytic";  // or "measured (RUN_DIR)"
};

// Throws InputError (one line) for a layout that does not fit the model,
// by the trainer's own rules.
Prediction predict(const PlanRequest& req, const HardwareSpec& hw);

nlohmann::json to_json(const Prediction& p);
// The human table: every line says "predicted" and names the spec.
std::string render_prediction(const Prediction& p);

}  // namespace ctitan
