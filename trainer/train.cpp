// The train loop, top to bottom: runtime → parallelize → optimizer → data →
// resume → run directory → loop { batch, forward/backward, clip, step,
// metrics, checkpoint } → summary. Nothing here branches on the layout:
// the parallelisms live in parallelize_model() (TrainModel), the device in
// the runtime.
#include "trainer/train.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <fstream>
#include <iostream>
#include <thread>
#include <tuple>
#include <vector>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "common/errors.h"
#include "common/file_io.h"
#include "common/quality.h"
#include "common/run_timing.h"
#include "profiling/env_info.h"
#include "profiling/memory.h"
#include "profiling/profiler_session.h"
#include "profiling/trace.h"
#include "trainer/cpu_vector_math.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/hf_checkpoint.h"
#include "trainer/config/config_loader.h"
#include "trainer/data/batch_stager.h"
#include "trainer/data/dataset.h"
#include "trainer/dry_run.h"
#include "trainer/machine_probe.h"
#include "trainer/metrics.h"
#include "trainer/models/registry.h"
#include "trainer/model/gemm.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/parallel/pipeline.h"
#include "trainer/parallel/train_model.h"
#include "trainer/runtime.h"
#include "trainer/validate.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
int64_t ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Checks that need no model: what the run's options say of each other.
void check_run_options(const JobConfig& cfg) {
  if (cfg.profiling.enable_profiling &&
      cfg.profiling.profile_freq < cfg.profiling.profiler_warmup + cfg.profiling.profiler_active)
    throw InputError("profiling.profile_freq " + std::to_string(cfg.profiling.profile_freq) +
                     " is less than profiler_warmup + profiler_active = " +
                     std::to_string(cfg.profiling.profiler_warmup) + " + " +
                     std::to_string(cfg.profiling.profiler_active) + "; raise profile_freq or lower the other two");
}

// checkpoint.create_seed_checkpoint, as TorchTitan: the step-0 checkpoint
// (weights only under last_save_model_only, its default), then exit. Any
// layout may write it — every rank saves its own boxes — and ctitan needs
// none to start a parallel run: each shard initialises itself.
int write_seed_checkpoint(const JobConfig& cfg, const Runtime& rt, TrainModel& tm, AdamW& opt) {
  if (!cfg.checkpoint.enable)
    throw InputError("checkpoint.create_seed_checkpoint needs checkpoint.enable = true (the seed checkpoint is written "
                     "to job.dump_folder/checkpoint.folder); add --checkpoint.enable");
  Checkpointer ckpt(cfg.checkpoint, cfg.job.dump_folder, checkpoint_model(tm.model().args(), cfg.model.flavor));
  SaveGroup group{rt.env.rank, rt.env.world_size, [&rt] { rt.mesh->group("world").barrier(); }};
  ckpt.save_sharded(0, tm.checkpoint_pieces(opt, true), {{"step", 0}}, nlohmann::json::object(),
                    cfg.checkpoint.last_save_model_only, group);
  ckpt.wait_for_save();
  if (rt.rank0())
    std::cout << "ctitan: seed checkpoint written to " << (fs::path(ckpt.folder()) / "step-0").string()
              << (cfg.checkpoint.last_save_model_only ? " (weights only)" : "") << "; not training" << std::endl;
  return 0;
}

// Micro-batches per step: global batch / (local batch × the batch group).
int64_t accumulation_steps(const JobConfig& cfg, const Runtime& rt) {
  const int64_t B = cfg.training.local_batch_size, dp = rt.mesh->size("batch");
  if (cfg.training.global_batch_size <= 0) return 1;
  if (cfg.training.global_batch_size % (B * dp) != 0)
    throw InputError("training.global_batch_size " + std::to_string(cfg.training.global_batch_size) +
                     " is not a multiple of local_batch_size x data-parallel degree = " + std::to_string(B) + " x " +
                     std::to_string(dp) + "; use a multiple or -1");
  return cfg.training.global_batch_size / (B * dp);
}

std::unique_ptr<DataLoader> build_data_loader(const JobConfig& cfg, const ModelArgs& args, const Runtime& rt) {
  DataOptions d;
  d.dataset = cfg.training.dataset;
  d.path = cfg.training.dataset_path;
  d.tokenizer_path = cfg.model.hf_assets_path;
  d.batch = cfg.training.local_batch_size;
  d.seq_len = cfg.training.seq_len;
  d.vocab_size = args.vocab_size;
  d.seed = static_cast<uint64_t>(cfg.debug.seed);
  d.dp_rank = rt.mesh->coord("batch");
  d.dp_world = rt.mesh->size("batch");
  return make_data_loader(d);
}

AdamWOptions adamw_options(const JobConfig& cfg) {
  const auto& o = cfg.optimizer;
  return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.implementation};
}

// Loads checkpoint.load_step or the newest checkpoint into the model and
// optimizer (any saved layout) and the data loader; returns the step to
// continue after (0: a fresh start).
int64_t resume(Checkpointer& ckpt, const TensorPieces& pieces, DataLoader& loader, const Runtime& rt) {
  if (!ckpt.enabled()) return 0;
  auto loaded = ckpt.load_sharded(pieces, rt.env.rank);
  if (!loaded) return 0;
  if (rt.rank0())
    std::cout << "ctitan: resumed from " << loaded->path << " (step " << loaded->step
              << (loaded->model_only ? ", weights only" : "") << ", saved by " << loaded->world_size
              << (loaded->world_size == 1 ? " rank" : " ranks") << ")" << std::endl;
  if (loaded->model_only || loaded->step == 0) return 0;  // weights only, or a seed checkpoint
  // Each rank resumes its own stream; after a change of layout only
  // counter-based streams (synthetic, markov: a global position) carry over.
  const nlohmann::json& shared = loaded->train_state.at("data_loader");
  if (loaded->world_size == rt.env.world_size) {
    loader.load_state(loaded->rank_state.value("data_loader", shared));
  } else if (shared.contains("batches")) {
    loader.load_state(shared);
  } else if (rt.rank0()) {
    std::cerr << "ctitan: warning: the checkpoint was saved by " << loaded->world_size
              << " ranks; the data loader cannot re-shard a " << shared.value("dataset", "")
              << " position, so the data starts from the beginning" << std::endl;
  }
  return loaded->step;
}

ProfilerOptions profiler_options(const JobConfig& cfg, const Runtime& rt) {
  const fs::path dump(cfg.job.dump_folder);
  ProfilerOptions p;
  p.traces = cfg.profiling.enable_profiling;
  p.memory_snapshots = cfg.profiling.enable_memory_snapshot;
  p.trace_folder = (dump / cfg.profiling.save_traces_folder).string();
  p.memory_folder = (dump / cfg.profiling.save_memory_snapshot_folder).string();
  p.freq = cfg.profiling.profile_freq;
  p.warmup = cfg.profiling.profiler_warmup;
  p.active = cfg.profiling.profiler_active;
  p.rank = rt.env.rank;
  p.world_size = rt.env.world_size;
  p.steady_after = cfg.metrics.warmup_steps;
  p.gpu_every_step = rt.device.is_cuda() && cfg.profiling.enable_cupti;
  return p;
}

}  // namespace

void configure_threads() {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  int threads = omp && *omp ? std::atoi(omp) : 0;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  settle_cpu_vector_math();  // before the first op on several threads
}

// One training job once everything is built: the loop and the summary.
class TrainLoop {
 public:
  TrainLoop(const JobConfig& cfg, Runtime& rt, TrainModel& tm, AdamW& opt, DataLoader& loader,
            Checkpointer& ckpt, Validator& validator, int64_t accum, double checkpoint_load_s)
      : cfg_(cfg), rt_(rt), tm_(tm), opt_(opt), loader_(loader), ckpt_(ckpt), validator_(validator), accum_(accum),
        non_data_parallel_(rt.shape.tp * rt.shape.cp * rt.shape.pp),
        schedule_(cfg.lr_scheduler.total_steps.value_or(cfg.training.steps), cfg.lr_scheduler.warmup_steps,
                  cfg.lr_scheduler.decay_ratio,
                  cfg.lr_scheduler.decay_type, cfg.lr_scheduler.min_lr_factor),
        save_pieces_(tm.checkpoint_pieces(opt, true)),
        stager_(rt.device, cfg.training.local_batch_size, cfg.training.seq_len) {
    goodput_.checkpoint_load_s = checkpoint_load_s;
  }

  int run(int64_t step, int64_t resident_bytes);

 private:
  struct StepResult {
    at::Tensor loss;  // this rank's mean loss over the step's micro-batches (device scalar)
    double grad_norm = 0, lr = 0, data_s = 0;
    ExpertLoad experts;  // MoE: tokens per expert this step (zeros without MoE)
    std::string oom;  // what ran out of memory, if anything did
  };
  void print_header(const PeakFlops& peak, int64_t resident_bytes);
  void start_metrics(const PeakFlops& peak);
  StepResult step(int64_t step);
  // Agreed by every rank (one all-reduce): a stop signal, a non-finite gradient norm.
  struct StepVerdict {
    bool stop = false, nonfinite = false;
    int signal = 0;        // the stop signal (the largest number, if ranks got several)
    int signalled_rank = -1;  // a rank that received it
  };
  StepVerdict verdict(double grad_norm);
  int fail_nonfinite(int64_t step, double loss, double grad_norm);
  void log_float8_sqnr(int64_t step, bool last, std::string& line);
  void save_checkpoint(int64_t step);
  bool validate(int64_t step);
  nlohmann::json summary_extra(int64_t resident_bytes);
  nlohmann::json quality_json() const;
  void gather_rank_memory(nlohmann::json& extra, int64_t resident_bytes);
  void add_pipeline_bubble(nlohmann::json& extra);
  bool slowed_here() const { return cfg_.debug.slow_rank < 0 || cfg_.debug.slow_rank == rt_.env.rank; }
  double& save_seconds() {  // goodput's part for checkpoint saves of this run's async_mode
    return cfg_.checkpoint.async_mode == "disabled" ? goodput_.checkpoint_save_sync_s : goodput_.checkpoint_save_async_s;
  }
  bool rank_timing() const { return cfg_.metrics.rank_timing && rt_.env.world_size > 1; }
  void gather_rank_times(int64_t step, const RankStepTime& mine, bool steady, bool flush);
  void add_mfu_by_dtype(nlohmann::json& extra);

  const JobConfig& cfg_;
  Runtime& rt_;
  TrainModel& tm_;
  AdamW& opt_;
  DataLoader& loader_;
  Checkpointer& ckpt_;
  Validator& validator_;
  const int64_t accum_;
  const int64_t non_data_parallel_;  // ranks that share one rank's tokens (tp·cp·pp)
  LrSchedule schedule_;
  TensorPieces save_pieces_;
  std::unique_ptr<MetricsLogger> metrics_;
  std::unique_ptr<ProfilerSession> profiler_;
  TokenBatch batch_;
  BatchStager stager_;  // host batch -> device (pinned and non-blocking on CUDA)
  bool traces_ = false;
  double comm_s_ = 0, exposed_comm_s_ = 0;
  std::map<std::string, std::pair<double, double>> comm_by_dim_;  // group -> (comm_s, exposed_comm_s) sums
  PipelineTimes pipeline_;  // this rank's pipeline actions over the measured steps
  int64_t comm_steps_ = 0;
  double ep_imbalance_ = 0;  // expert parallelism: the sum over the measured steps
  int64_t ep_steps_ = 0;
  // [validation]: the run's clock from its first step (this process's: a
  // resumed run's starts at the resume) and every pass, for summary.json's quality.
  std::optional<Clock::time_point> first_step_t0_;
  std::vector<EvalPoint> evals_;
  // metrics.rank_timing: this rank's times not yet gathered, and (every
  // rank) the steady steps' times of all ranks, gathered at log steps.
  struct UnsentTime {
    int64_t step;
    RankStepTime t;
    bool steady;
  };
  std::vector<UnsentTime> unsent_times_;
  std::vector<std::vector<RankStepTime>> rank_times_;
  std::vector<int64_t> rank_time_steps_;
  Goodput goodput_;  // where this process's wall clock went (summary.json's goodput)
  PeakFlops peak_;   // MFU's denominator (TorchTitan's: the compute dtype's peak)
  double density_sum_ = 0;  // block_causal: attention_density over the logged steady steps
  int64_t density_n_ = 0;
};

TrainLoop::StepResult TrainLoop::step(int64_t step) {
  StepResult r;
  r.lr = cfg_.optimizer.lr * schedule_.factor(step - 1);
  const auto start = Clock::now();
  const auto sleep_ms = [](double ms) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); };
  if (cfg_.debug.step_delay_ms > 0 && slowed_here()) sleep_ms(cfg_.debug.step_delay_ms);
  try {
    for (int64_t micro = 0; micro < accum_; ++micro) {
      const auto td = Clock::now();
      at::Tensor inputs, labels;
      {
        TraceRange tr(trace_cat::kData, "data");
        loader_.next(batch_);
        if (cfg_.debug.data_stall_ms > 0 && slowed_here()) sleep_ms(cfg_.debug.data_stall_ms);
        std::tie(inputs, labels) = stager_.stage(batch_);
      }
      r.data_s += seconds_since(td);
      const double scale = 1.0 / static_cast<double>(accum_);
      at::Tensor loss = tm_.forward_backward(inputs, labels, scale, micro == 0, micro + 1 == accum_);
      r.loss = micro == 0 ? loss * scale : r.loss + loss * scale;
    }
    // ctitan's fused AdamW (compile on CUDA) applies the clipping in its pass.
    double clip = 1.0;
    r.grad_norm = tm_.clip_grad_norm(cfg_.training.max_norm, opt_.writes_compute_copy() ? &clip : nullptr);
    r.experts = tm_.balance_experts();  // MoE: this step's expert load, the expert biases' update
    TraceRange tr(trace_cat::kCompute, "optimizer");
    opt_.step(r.lr, clip);
    MemoryCategoryScope mem(MemoryCategory::kParameters);  // FSDP: this step's compute copy of the shard
    tm_.begin_step(/*after_optimizer_step=*/true);
    if (cfg_.debug.step_slowdown > 0 && slowed_here()) {
      rt_.monitor.step_end();  // the step's queued work is part of what the share is of
      sleep_ms(1e3 * cfg_.debug.step_slowdown * seconds_since(start));
    }
  } catch (const c10::OutOfMemoryError& e) {
    r.oom = e.what_without_backtrace();
  } catch (const std::bad_alloc& e) {
    r.oom = std::string("std::bad_alloc: ") + e.what();
  }
  return r;
}

// Every rank stops at the same step, or the others would wait in a collective.
TrainLoop::StepVerdict TrainLoop::verdict(double grad_norm) {
  const int sig = g_stop_signal.load();
  at::Tensor t = torch::tensor({sig, sig != 0 ? static_cast<int>(rt_.env.rank) + 1 : 0, std::isfinite(grad_norm) ? 0 : 1}, torch::kInt);
  rt_.mesh->group("world").all_reduce(t, ReduceOp::kMax)->wait();
  return {t[0].item<int>() != 0, t[2].item<int>() != 0, t[0].item<int>(), t[1].item<int>() - 1};
}

// A non-finite loss or gradient norm ends the run as failed (nothing is
// saved from it): one line naming the step, summary.json status "failed".
int TrainLoop::fail_nonfinite(int64_t step, double loss, double grad_norm) {
  const auto show = [](double v) { return std::isnan(v) ? std::string("nan") : std::to_string(v); };
  std::ostringstream line;
  line << "step " << step << ": the loss is " << show(loss) << " and the gradient norm " << show(grad_norm)
       << "; the run stopped as failed with nothing saved from this step (lower optimizer.lr, or check the data and "
          "the initial weights)";
  std::cerr << "ctitan: " << line.str() << std::endl;
  if (rt_.rank0()) metrics_->write_summary("failed", {{"error", line.str()}});
  return 1;
}

// Outside the timed step: an extra no-grad forward on this batch.
void TrainLoop::log_float8_sqnr(int64_t step, bool last, std::string& line) {
  if (tm_.model().float8().gemms().empty() || !tm_.whole_weights() || !metrics_->logs_step(step, last)) return;
  const int64_t B = cfg_.training.local_batch_size, S = cfg_.training.seq_len;
  at::Tensor tokens = torch::from_blob(batch_.inputs.data(), {B, S}, torch::kLong).to(rt_.device, false, true);
  const auto sqnr = tm_.model().float8_sqnr(tokens);
  nlohmann::json per_unit = nlohmann::json::object();
  std::pair<std::string, double> worst{"", 1e300};
  for (const auto& [unit, db] : sqnr) {
    per_unit[unit] = db;
    if (db < worst.second) worst = {unit, db};
  }
  metrics_->attach("float8_sqnr_db", per_unit);
  char buf[256];
  std::snprintf(buf, sizeof(buf), "       float8 SQNR: min %.1f dB (%s) over %zu GEMMs", worst.second,
                worst.first.c_str(), sqnr.size());
  if (!sqnr.empty()) line = buf;
}

void TrainLoop::save_checkpoint(int64_t step) {
  if (!ckpt_.should_save(step, cfg_.training.steps)) return;
  // Rank 0's loader state is the shared one; every rank also keeps its own.
  nlohmann::json state = {{"step", step}, {"data_loader", loader_.state()}};
  const bool model_only = step == cfg_.training.steps && cfg_.checkpoint.last_save_model_only;
  SaveGroup group{rt_.env.rank, rt_.env.world_size, [this] { rt_.mesh->group("world").barrier(); }};
  TraceRange r(trace_cat::kCheckpoint, "checkpoint");
  if (step == cfg_.training.steps && cfg_.checkpoint.last_save_in_hf) {  // TorchTitan: the last save, in HF format
    export_hf_checkpoint(ckpt_.folder(), step, save_pieces_, tm_.model().args(), hf_export_options(cfg_), group);
    if (rt_.rank0())
      std::cout << "ctitan: Hugging Face checkpoint written to " << ckpt_.folder() << "/step-" << step << " ("
                << cfg_.checkpoint.export_dtype << ")" << std::endl;
    return;
  }
  ckpt_.save_sharded(step, save_pieces_, state, {{"data_loader", loader_.state()}}, model_only, group);
}

// [validation] after the step (outside its timing): the pass's loss on the
// console, in metrics.jsonl and TensorBoard. Its communication is not the
// step's: dropped from the per-step sums.
// Returns false when a stop signal ended the pass (nothing logged of it).
bool TrainLoop::validate(int64_t step) {
  if (!validator_.due(step)) return true;
  const ValidationResult v = validator_.run(tm_, [] { return g_stop_signal != 0; });
  tm_.take_comm_times();
  if (v.interrupted) return false;
  if (!v.note.empty() && rt_.rank0()) std::cerr << "ctitan: " << v.note << std::endl;
  // Tokens trained through this step: the global batch's (every data-parallel rank's), from step 1.
  const int64_t data_parallel = rt_.env.world_size / non_data_parallel_;
  const int64_t train_tokens =
      step * cfg_.training.local_batch_size * cfg_.training.seq_len * accum_ * data_parallel;
  const double elapsed_s =
      first_step_t0_ ? std::chrono::duration<double>(Clock::now() - *first_step_t0_).count() : 0.0;
  metrics_->log_validation(step, v.loss, v.tokens / non_data_parallel_, v.seconds, train_tokens, elapsed_s);
  evals_.push_back({static_cast<double>(train_tokens), elapsed_s, v.loss});
  return true;
}

// The start-up lines: what trains, where, and (several ranks) this rank's
// share of the state.
void TrainLoop::print_header(const PeakFlops& peak, int64_t resident_bytes) {
  const Transformer& m = tm_.model();
  if (!peak.warning.empty() && rt_.rank0()) std::cerr << "ctitan: warning: " << peak.warning << std::endl;
  const ParamCounts counts = count_params(m.args());
  const MoeArgs& moe = m.args().moe;
  std::cout << "ctitan: " << m.args().family << " " << cfg_.model.flavor << ", " << counts.total << " params"
            << (moe.num_experts > 0 ? " (" + std::to_string(counts.active) + " active: top " +
                                          std::to_string(moe.top_k) + " of " + std::to_string(moe.num_experts) +
                                          " experts)"
                                    : std::string())
            << ", "
            << c10::toString(m.compute_dtype()) << " on " << rt_.monitor.name() << ", activation checkpointing "
            << m.activation_checkpointing().describe() << ", " << m.techniques() << ", batch "
            << cfg_.training.local_batch_size << " x seq " << cfg_.training.seq_len << " (x" << accum_
            << " accumulation), " << at::get_num_threads() << " threads, data: " << loader_.describe() << ", peak "
            << peak.flops / 1e12 << " TFLOPs (" << peak.source << ")" << std::endl;
  if (validator_.enabled() && rt_.rank0()) std::cout << "ctitan: validation " << validator_.describe() << std::endl;
  if (rt_.env.world_size > 1)
    std::cout << "ctitan: rank " << rt_.env.rank << "/" << rt_.env.world_size << ", " << tm_.describe() << ", mesh "
              << rt_.shape.describe() << ", parameters + gradients + optimizer state "
              << tm_.state_bytes() / (1024.0 * 1024.0) << " MiB on this rank (measured: "
              << resident_bytes / (1024.0 * 1024.0) << " MiB of live tensors)" << std::endl;
}

// The metrics logger (TorchTitan's formulas) and the profiler session.
void TrainLoop::start_metrics(const PeakFlops& peak) {
  const Transformer& m = tm_.model();
  const ModelArgs& args = m.args();
  const int64_t S = cfg_.training.seq_len;
  MetricsOptions mo;
  mo.dump_folder = cfg_.job.dump_folder;
  mo.log_freq = cfg_.metrics.log_freq;
  mo.color = !cfg_.metrics.disable_color_printing && ::isatty(STDOUT_FILENO);
  mo.flops_per_token = flops_per_token(args, S);
  // Selective "op" checkpointing keeps attention's output only on ATen's
  // CPU flash path: equal head counts and no fused ("compile") attention.
  const bool attention_kept = args.n_kv_heads == args.n_heads && !m.fused_model() && rt_.device.is_cpu();
  mo.hardware_flops_per_token = hardware_flops_per_token(args, S, m.activation_checkpointing(), attention_kept);
  mo.peak_flops = peak.flops;
  mo.warmup_steps = cfg_.metrics.warmup_steps;
  mo.write_files = rt_.rank0();
  mo.monitor = rt_.monitor;
  if (cfg_.metrics.enable_tensorboard) {
    // TorchTitan's layout; every rank names the same minute (the latest clock).
    const bool all_ranks = cfg_.metrics.save_for_all_ranks;
    at::Tensor now = torch::full({1}, static_cast<int64_t>(std::time(nullptr)), torch::kLong);
    if (all_ranks) rt_.mesh->group("world").all_reduce(now, ReduceOp::kMax)->wait();
    if (all_ranks || rt_.rank0())
      mo.tensorboard_folder = tensorboard_folder(cfg_.job.dump_folder, cfg_.metrics.save_tb_folder,
                                                 now.item<int64_t>(), all_ranks ? rt_.env.rank : -1);
  }
  metrics_ = std::make_unique<MetricsLogger>(mo);
  const ProfilerOptions popts = profiler_options(cfg_, rt_);
  traces_ = popts.traces;
  profiler_ = std::make_unique<ProfilerSession>(popts);
  if (popts.traces && rt_.rank0())
    std::cout << "ctitan: profiling: " << popts.active << " of every " << popts.freq << " steps traced into "
              << popts.trace_folder << "/iteration_N/rank<R>_trace.json; " << profiler_->gpu_status()
              << (profiler_->gpu_status() == "cupti" ? "" : "; tracing the CPU only") << std::endl;
  else if (rt_.device.is_cuda() && profiler_->gpu_status() != "cupti" && rt_.rank0())
    // The run goes on; only the per-step GPU split (compute, NCCL, exposed) is lost.
    std::cout << "ctitan: " << profiler_->gpu_status()
              << "; training continues without the GPU compute/communication split" << std::endl;
}

int TrainLoop::run(int64_t step, int64_t resident_bytes) {
  const int64_t B = cfg_.training.local_batch_size, S = cfg_.training.seq_len;
  peak_ = rt_.monitor.peak_flops(gemm_dtype(tm_.model().compute_dtype(), rt_.device), cfg_.metrics.peak_tflops);
  print_header(peak_, resident_bytes);
  start_metrics(peak_);
  rt_.monitor.reset_peak();
  reset_memory_category_peaks();

  g_stop_signal = 0;
  StepVerdict stopped_by;  // the verdict of the step a signal stopped, if one did
  auto old_int = std::signal(SIGINT, on_stop_signal);
  auto old_term = std::signal(SIGTERM, on_stop_signal);
  std::string status = "ok";
  const int64_t first_step = step + 1;
  const int64_t data_parallel = rt_.env.world_size / non_data_parallel_;
  const auto seconds_between = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  while (step < cfg_.training.steps) {
    ++step;
    profiler_->step_begin(step);
    const auto t0 = Clock::now();
    if (!first_step_t0_) {
      first_step_t0_ = t0;
      goodput_.init_s = process_age_s() - goodput_.checkpoint_load_s;  // before the first step
    }
    rt_.monitor.step_begin();
    StepResult r = this->step(step);
    // Waits for the step's queued work. On CUDA the step's time is the one
    // between events at its boundaries, from the GPU; elsewhere the host's.
    const double device_step_s = rt_.monitor.step_end();
    if (!r.oom.empty()) {  // the snapshot, one line, summary.json with status "oom" (rank 0), exit 1
      std::signal(SIGINT, old_int);
      std::signal(SIGTERM, old_term);
      std::cerr << "ctitan: " << profiler_->out_of_memory(step, r.oom) << std::endl;
      if (rt_.rank0()) metrics_->write_summary("oom", {{"error", "out of memory in step " + std::to_string(step)}});
      return 1;
    }
    const auto t1 = Clock::now();
    const double step_time = device_step_s >= 0 ? device_step_s : std::chrono::duration<double>(t1 - t0).count();
    const bool steady = step - first_step >= cfg_.metrics.warmup_steps;
    (steady ? goodput_.steady_steps_s : goodput_.warmup_steps_s) += seconds_between(t0, t1) - r.data_s;
    goodput_.data_s += r.data_s;
    if (steady) goodput_.steady_tokens += B * S * accum_ * data_parallel;
    profiler_->record_step(step, ns_of(t0), ns_of(t1));
    if (profiler_->last_gpu_busy_s() >= 0) metrics_->attach("gpu_busy_s", profiler_->last_gpu_busy_s());
    const CommTimes ct = tm_.take_comm_times();
    if (step > cfg_.metrics.warmup_steps && rt_.env.world_size > 1) {
      comm_s_ += ct.comm_s;
      exposed_comm_s_ += ct.exposed_comm_s;
      for (const auto& [dim, s] : ct.comm_by_dim) comm_by_dim_[dim].first += s;
      for (const auto& [dim, s] : ct.exposed_by_dim) comm_by_dim_[dim].second += s;
      ++comm_steps_;
    }
    const PipelineTimes pt = tm_.take_pipeline_times();
    if (step > cfg_.metrics.warmup_steps) {
      pipeline_.busy_s += pt.busy_s;
      pipeline_.total_s += pt.total_s;
    }
    const StepVerdict v = verdict(r.grad_norm);
    const bool stop = v.stop;
    if (stop) stopped_by = v;
    const bool last = step == cfg_.training.steps || stop || v.nonfinite;
    if (rank_timing())
      gather_rank_times(step, {step_time, r.data_s, ct.exposed_comm_s}, steady, metrics_->logs_step(step, last));
    // The collectives between steps (the verdict, the rank times) are not the next step's.
    tm_.take_comm_times();
    // The loss is read (and averaged over the ranks) on log steps only.
    const bool read_loss = metrics_->logs_step(step, last) || step == first_step;
    const double loss = read_loss ? tm_.mean_loss(r.loss) : std::nan("");
    const double max_loss = read_loss ? tm_.max_loss(r.loss) : std::nan("");
    std::string sqnr_line;
    log_float8_sqnr(step, last, sqnr_line);
    if (tm_.model().has_moe() && metrics_->logs_step(step, last)) {
      // MoE: how evenly this step's tokens reached the experts (over the
      // data-parallel group), what MoE comparisons look at.
      metrics_->attach("moe_load_cv", r.experts.cv);
      metrics_->attach("moe_load_min", r.experts.min);
      metrics_->attach("moe_load_max", r.experts.max);
      if (tm_.model().expert_parallel().on()) metrics_->attach("moe_ep_imbalance", r.experts.ep_imbalance);
    }
    if (tm_.model().args().block_causal() && metrics_->logs_step(step, last)) {
      const double density = tm_.attention_density();  // this rank's last micro-batch
      metrics_->attach("attention_density", density);
      if (steady && std::isfinite(density)) density_sum_ += density, ++density_n_;
    }
    if (tm_.model().expert_parallel().on() && step > cfg_.metrics.warmup_steps) {
      ep_imbalance_ += r.experts.ep_imbalance;
      ++ep_steps_;
    }
    // TorchTitan's tps is per device: this rank's tokens over the ranks that
    // share them (the non-data-parallel size, tp·cp·pp).
    metrics_->record(
        {step, loss, r.grad_norm, r.lr, step_time, r.data_s, B * S * accum_ / non_data_parallel_, max_loss}, last);
    if (!sqnr_line.empty()) std::cout << sqnr_line << std::endl;
    if (v.nonfinite || (read_loss && !std::isfinite(loss))) {
      std::signal(SIGINT, old_int);
      std::signal(SIGTERM, old_term);
      profiler_->finish(step);
      return fail_nonfinite(step, loss, r.grad_norm);
    }
    const auto t2 = Clock::now();
    goodput_.logging_s += seconds_between(t1, t2);
    const bool stopped_in_validation = !stop && !validate(step);
    const auto t3 = Clock::now();
    goodput_.validation_s += seconds_between(t2, t3);
    save_checkpoint(step);
    const auto t4 = Clock::now();
    save_seconds() += seconds_between(t3, t4);
    profiler_->step_end(step, step_time);
    goodput_.logging_s += seconds_since(t4);
    if (stop || stopped_in_validation) {
      status = "interrupted";
      break;
    }
  }
  const auto loop_end = Clock::now();
  ckpt_.wait_for_save();  // checkpoint.async_mode: the last save in flight, also after a signal
  save_seconds() += seconds_since(loop_end);
  const auto teardown_t0 = Clock::now();
  // A stopped run keeps the stop handlers to its exit: the signal may come
  // again (timeout(1) sends it to the process, then to its group, and may be
  // descheduled between the two), and a repeat must not kill the teardown
  // before summary.json is written and the run exits 130.
  if (status != "interrupted") {
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
  }
  profiler_->finish(step);
  nlohmann::json extra = summary_extra(resident_bytes);
  goodput_.teardown_s = seconds_since(teardown_t0);
  goodput_.wall_s = process_age_s();
  extra["goodput"] = goodput_.to_json();
  if (rt_.rank0()) metrics_->write_summary(status, extra);
  if (status == "interrupted") {
    // Every rank stops at the step one rank's signal was seen (the verdict);
    // a rank that got none says whose it was, not "signal 0".
    const int sig = g_stop_signal != 0 ? g_stop_signal.load() : stopped_by.signal;
    std::cerr << "ctitan: interrupted by signal " << sig << " (" << (strsignal(sig) ? strsignal(sig) : "?") << ")";
    if (g_stop_signal == 0 && stopped_by.signalled_rank >= 0) std::cerr << " sent to rank " << stopped_by.signalled_rank;
    std::cerr << " at step " << step << "; summary.json written" << std::endl;
    return 130;
  }
  return 0;
}

// [validation]: the seed, the last pass's loss and, with
// validation.target_loss, when the curve first reached it (common/quality.h).
nlohmann::json TrainLoop::quality_json() const {
  const double target = cfg_.validation.target_loss;
  nlohmann::json q = {{"seed", cfg_.debug.seed},
                      {"evaluations", evals_.size()},
                      {"final_validation_loss", evals_.empty() ? nlohmann::json(nullptr) : nlohmann::json(evals_.back().loss)},
                      {"target_loss", target > 0 ? nlohmann::json(target) : nlohmann::json(nullptr)}};
  if (target <= 0) return q;
  const TargetCrossing c = first_crossing(evals_, target);
  q["reached"] = c.reached;
  q["tokens_to_target"] = c.reached ? nlohmann::json(c.tokens) : nlohmann::json(nullptr);
  q["time_to_target_s"] = c.reached ? nlohmann::json(c.seconds) : nlohmann::json(nullptr);
  return q;
}

nlohmann::json TrainLoop::summary_extra(int64_t resident_bytes) {
  const Transformer& m = tm_.model();
  nlohmann::json extra = {{"flavor", cfg_.model.flavor},
                          {"num_params", count_params(m.args()).total},
                          {"dtype", c10::toString(m.compute_dtype())},
                          {"device", rt_.monitor.name()},
                          {"activation_checkpoint", m.activation_checkpointing().describe()},
                          {"techniques", m.techniques()},
                          {"tokens_per_step", cfg_.training.local_batch_size * cfg_.training.seq_len * accum_},
                          {"peak_flops_source", peak_.source},
                          {"world_size", rt_.env.world_size},
                          {"mesh", rt_.shape.describe()},
                          // Expert parallelism: the busiest rank's routed rows over the ep
                          // group's mean, the measured steps' mean (null without EP).
                          {"moe_ep_imbalance",
                           ep_steps_ > 0 ? nlohmann::json(ep_imbalance_ / ep_steps_) : nlohmann::json(nullptr)},
                          {"state_bytes", tm_.state_bytes()},
                          {"resident_bytes", resident_bytes},
                          // The accounting allocator wraps the CPU's allocator: on CUDA its
                          // categories are host memory, and named so (the GPU's is mem_peak_bytes).
                          {rt_.device.is_cuda() ? "host_mem_by_category" : "mem_by_category",
                           memory_by_category_json()}};
  if (validator_.enabled()) extra["quality"] = quality_json();
  add_mfu_by_dtype(extra);
  if (rt_.env.world_size > 1) {
    extra["data_parallel"] = tm_.describe();
    if (rt_.device.is_cuda()) {
      // NCCL's wait() only orders streams: host time around it is not the
      // GPU's exposed communication; CUPTI's NCCL kernels are (the breakdown below).
      const std::string& cupti = profiler_->gpu_status();
      extra["comm_source"] = "none: " + (cupti == "cupti" ? std::string("CUPTI recorded no steady step") : cupti) +
                             " (on CUDA communication is measured from CUPTI's NCCL kernels)";
    } else {
      extra["comm_s"] = comm_steps_ ? comm_s_ / comm_steps_ : 0.0;
      extra["exposed_comm_s"] = comm_steps_ ? exposed_comm_s_ / comm_steps_ : 0.0;
      extra["comm_source"] = "flight_recorder";
      // Per mesh dimension (rank 0's view): which parallelism's communication it was.
      nlohmann::json by_dim = nlohmann::json::object();
      for (const auto& [dim, s] : comm_by_dim_)
        by_dim[dim] = {{"comm_s", comm_steps_ ? s.first / comm_steps_ : 0.0},
                       {"exposed_comm_s", comm_steps_ ? s.second / comm_steps_ : 0.0}};
      extra["comm_by_dim"] = by_dim;
    }
  }
  // Every rank: the breakdowns (traces, or CUPTI on every CUDA step) are gathered.
  if (traces_ || rt_.device.is_cuda()) {
    at::Tensor mine = torch::tensor(profiler_->summary_breakdown(cfg_.metrics.warmup_steps), torch::kDouble);
    at::Tensor all = torch::empty({rt_.env.world_size * mine.numel()}, torch::kDouble);
    rt_.mesh->group("world").all_gather(all, mine)->wait();
    const std::string source = profiler_->breakdown_source();
    add_trace_summary(extra, std::vector<double>(all.data_ptr<double>(), all.data_ptr<double>() + all.numel()),
                      profiler_->summary_steps(cfg_.metrics.warmup_steps), source.empty() ? "trace" : source);
    if (const std::string line = profiler_->overhead_line(); !line.empty() && rt_.rank0())
      std::cout << "ctitan: " << line << std::endl;
  }
  if (rt_.env.world_size > 1) gather_rank_memory(extra, resident_bytes);
  if (tm_.pipeline().on()) add_pipeline_bubble(extra);
  if (!rank_times_.empty()) extra["stragglers"] = stragglers_json(straggler_figures(rank_times_), rank_times_, rank_time_steps_);
  return extra;
}

// MFU that names its peaks (summary.json): the model FLOPs per token split
// by the peak they run at — the float8 GEMMs at the fp8 peak on a GPU with
// fp8 tensor cores (emulated Float8 runs in the compute dtype, at its
// peak), the rest at the compute dtype's — and the FLOPs of the attention
// pairs the masks leave (useful_flops_per_token). Each MFU is null where a
// peak it needs is unknown; TorchTitan's mfu stays as it is.
void TrainLoop::add_mfu_by_dtype(nlohmann::json& extra) {
  const Transformer& m = tm_.model();
  const int64_t S = cfg_.training.seq_len;
  double fp8 = m.float8_flops_per_token();
  if (rt_.shape.pp > 1) {  // each rank counts its stage's layers: the sum over one copy of every stage
    at::Tensor t = torch::full({1}, fp8, torch::kDouble);
    rt_.mesh->group("world").all_reduce(t)->wait();
    fp8 = t.item<double>() * static_cast<double>(rt_.shape.pp) / rt_.env.world_size;
  }
  const double total = metrics_->flops_per_token();
  const double density = density_n_ > 0 ? density_sum_ / static_cast<double>(density_n_) : 1.0;
  const double useful = useful_flops_per_token(m.args(), S, density);
  // Float8 emulated (float8.emulate, or a CPU: no fp8 units) runs its GEMMs in the compute dtype.
  const bool emulated = m.float8().emulate() || !rt_.device.is_cuda();
  const PeakFlops fp8_peak = emulated || fp8 == 0 ? peak_ : rt_.monitor.fp8_peak_flops();
  const std::string compute = m.compute_dtype() == at::kFloat ? "float32" : "bfloat16";
  extra["flops_by_dtype"] = {{compute, total - fp8}, {"float8", fp8}};
  extra["peak_flops_by_dtype"] = {{compute, peak_.flops > 0 ? nlohmann::json(peak_.flops) : nlohmann::json(nullptr)},
                                  {"float8", fp8 > 0 && fp8_peak.flops > 0 ? nlohmann::json(fp8_peak.flops)
                                                                          : nlohmann::json(nullptr)}};
  if (fp8 > 0) extra["float8_peak_source"] = emulated ? "emulated: " + peak_.source : fp8_peak.source;
  extra["useful_flops_per_token"] = useful;
  extra["attention_visible_fraction"] = (S + 1.0) / (2.0 * S) * density * window_attention_share(m.args(), S);
  const std::optional<double> tps = metrics_->steady_tps_median();
  const auto mfu = [&](double compute_flops) -> nlohmann::json {
    if (!tps) return nullptr;
    const auto v = mfu_at_peaks(*tps, {{compute_flops, peak_.flops}, {fp8, fp8_peak.flops}});
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  extra["mfu_by_dtype"] = mfu(total - fp8);
  extra["useful_mfu"] = mfu(useful - fp8);
}

// metrics.rank_timing: this step's times join the unsent ones; at a log
// step one all-gather brings every rank's, and the log line gets the
// interval's spread over the ranks (means over its steps of each step's
// min, median and max busy time), each rank's mean busy time and the rank
// slowest in most of its steps. Steady steps are kept for summary.json.
void TrainLoop::gather_rank_times(int64_t step, const RankStepTime& mine, bool steady, bool flush) {
  unsent_times_.push_back({step, mine, steady});
  if (!flush) return;
  const int64_t n = static_cast<int64_t>(unsent_times_.size()), ws = rt_.env.world_size;
  at::Tensor in = torch::empty({n * 3}, torch::kDouble);
  double* p = in.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) {
    p[3 * i] = unsent_times_[i].t.step_s;
    p[3 * i + 1] = unsent_times_[i].t.data_s;
    p[3 * i + 2] = unsent_times_[i].t.exposed_comm_s;
  }
  at::Tensor all = torch::empty({ws * n * 3}, torch::kDouble);
  rt_.mesh->group("world").all_gather(all, in)->wait();
  const double* a = all.data_ptr<double>();
  double lo = 0, mid = 0, hi = 0, share = 0;
  std::vector<double> busy(ws, 0.0);
  std::vector<int64_t> slowest(ws, 0);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<RankStepTime> ranks;
    for (int64_t r = 0; r < ws; ++r) {
      const double* q = a + (r * n + i) * 3;
      ranks.push_back({q[0], q[1], q[2]});
      busy[r] += ranks.back().busy_s() / static_cast<double>(n);
    }
    const StepSpread s = step_spread(ranks);
    lo += s.min_s / n, mid += s.median_s / n, hi += s.max_s / n, share += s.straggler_share / n;
    ++slowest[s.slowest_rank];
    if (unsent_times_[i].steady) {
      rank_times_.push_back(std::move(ranks));
      rank_time_steps_.push_back(unsent_times_[i].step);
    }
  }
  metrics_->attach("rank_busy_s_min", lo);
  metrics_->attach("rank_busy_s_median", mid);
  metrics_->attach("rank_busy_s_max", hi);
  metrics_->attach("straggler_share", share);
  metrics_->attach("slowest_rank", std::max_element(slowest.begin(), slowest.end()) - slowest.begin());
  metrics_->attach("rank_busy_s", busy);
  unsent_times_.clear();
}

// Memory per rank, gathered so that rank 0's summary shows every rank.
// The pipeline bubble: each rank's idle fraction of the pipeline's time
// over the measured steps — the slowest rank's, as every rank waits for
// the pipeline to drain (for a neighbour's activation or gradient, its
// sends, then the step's end) — beside the schedule's fraction with
// nominal action times (pipeline_bubble_theory, the same definition).
void TrainLoop::add_pipeline_bubble(nlohmann::json& extra) {
  const PipelineOptions& pp = tm_.pipeline();
  at::Tensor mine = torch::tensor({pipeline_.busy_s, pipeline_.total_s}, torch::kDouble);
  at::Tensor all = torch::empty({rt_.env.world_size * 2}, torch::kDouble);
  rt_.mesh->group("world").all_gather(all, mine)->wait();
  nlohmann::json by_rank = nlohmann::json::array();
  double sum = 0, span = 0;
  for (int r = 0; r < rt_.env.world_size; ++r) span = std::max(span, all[2 * r + 1].item<double>());
  for (int r = 0; r < rt_.env.world_size; ++r) {
    const double busy = all[2 * r].item<double>();
    const double bubble = span > 0 ? 1.0 - busy / span : 0.0;
    by_rank.push_back(bubble);
    sum += bubble;
  }
  const PipelineSchedule& s = pp.schedule;
  extra["pipeline"] = {{"schedule", s.name},
                       {"csv", pp.csv ? cfg_.parallelism.pipeline_parallel_schedule_csv : ""},
                       {"ranks", s.ranks},
                       {"stages", s.stages()},
                       {"stages_per_rank", s.stages_per_rank},
                       {"microbatches", s.microbatches},
                       {"bubble_by_rank", by_rank},
                       {"bubble_formula", pp.csv ? "simulated: F = I = W, B = I + W" : pipeline_bubble_formula(s.name)}};
  extra["pipeline_bubble"] = sum / rt_.env.world_size;
  extra["pipeline_bubble_theory"] = pipeline_bubble_theory(s);
}

void TrainLoop::gather_rank_memory(nlohmann::json& extra, int64_t resident_bytes) {
  at::Tensor in = torch::tensor({metrics_->run_peak_bytes(), tm_.state_bytes(), resident_bytes,
                                 process_peak_rss_bytes()}, torch::kLong);
  at::Tensor all = torch::empty({rt_.env.world_size * 4}, torch::kLong);
  rt_.mesh->group("world").all_gather(all, in)->wait();
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < rt_.env.world_size; ++r)
    ranks.push_back({{"rank", r},
                     {"mem_peak_bytes", all[r * 4].item<int64_t>()},
                     {"state_bytes", all[r * 4 + 1].item<int64_t>()},
                     {"resident_bytes", all[r * 4 + 2].item<int64_t>()},
                     {"rss_peak_bytes", all[r * 4 + 3].item<int64_t>()}});
  extra["ranks"] = ranks;
}

int train(const JobConfig& cfg) {
  install_accounting_allocator();
  check_run_options(cfg);
  if (cfg.debug.deterministic) {  // TorchTitan's set_determinism
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);
    at::globalContext().setDeterministicAlgorithms(true, cfg.debug.deterministic_warn_only);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
  }
  Runtime rt = init_runtime(cfg);
  if (rt.rank0())
    for (const std::string& line : config_warnings(cfg)) std::cerr << line << std::endl;
  const ModelArgs args = model_flavor(cfg.model);
  // transformers must read the same model from the weights (before any
  // allocation, as the layout checks in parallelize_model).
  if (cfg.checkpoint.initial_load_in_hf || cfg.checkpoint.last_save_in_hf) check_hf_checkpoint_family(args);
  const int64_t accum = accumulation_steps(cfg, rt);
  if (cfg.debug.slow_rank >= rt.env.world_size)
    throw InputError("debug.slow_rank " + std::to_string(cfg.debug.slow_rank) + " is not a rank of this run (world size " +
                     std::to_string(rt.env.world_size) + "); use 0.." + std::to_string(rt.env.world_size - 1) +
                     " or -1 for every rank");
  std::unique_ptr<TrainModel> tm = parallelize_model(args, rt, cfg);

  AdamW optimizer(tm->params(), tm->grads(), adamw_options(cfg));
  // compile.enable on CUDA: the optimizer's kernel writes the compute copy.
  tm->give_compute_copy(optimizer);
  tag_tensor_memory(optimizer.exp_avg(), MemoryCategory::kOptimizerState);
  tag_tensor_memory(optimizer.exp_avg_sq(), MemoryCategory::kOptimizerState);
  tag_tensor_memory(tm->grads(), MemoryCategory::kGradients);
  if (rt.dry_run()) return dry_run(cfg, rt, *tm, optimizer);
  if (cfg.checkpoint.create_seed_checkpoint) return write_seed_checkpoint(cfg, rt, *tm, optimizer);

  auto loader = build_data_loader(cfg, args, rt);
  if (args.block_causal() && loader->eos_id() < 0)
    throw InputError("model.attn_mask_type block_causal finds documents at EOS tokens, and dataset '" +
                     cfg.training.dataset + "' has none (" + loader->describe() +
                     "); use a dataset with a tokenizer that names its EOS, or attn_mask_type causal");
  tm->set_eos_id(loader->eos_id());
  Validator validator(cfg, args, rt);
  Checkpointer checkpointer(cfg.checkpoint, cfg.job.dump_folder, checkpoint_model(args, cfg.model.flavor));
  checkpointer.check_step_folders();
  checkpointer.check_model();  // another model than the checkpoint's is one line, before anything is written
  checkpointer.check_resumable();
  const TensorPieces load_pieces = tm->checkpoint_pieces(optimizer, false);
  const auto load_t0 = Clock::now();
  const int64_t step = initial_load_hf(cfg, checkpointer, args, load_pieces, rt.rank0())
                           ? 0
                           : resume(checkpointer, load_pieces, *loader, rt);
  const double checkpoint_load_s = seconds_since(load_t0);
  if (step >= cfg.training.steps) {  // said, and the finished run's files left as they are
    if (rt.rank0())
      std::cerr << "ctitan: nothing to train: the checkpoint is at step " << step << " and training.steps is "
                << cfg.training.steps << "; " << cfg.job.dump_folder
                << " is left as it was (raise --training.steps to extend the run)" << std::endl;
    return 0;
  }
  // Folders the run will write, checked before step 1 rather than after the last.
  check_folder_writable(cfg.job.dump_folder);
  if (checkpointer.enabled() && !cfg.checkpoint.load_only) check_folder_writable(checkpointer.folder());
  {
    MemoryCategoryScope mem(MemoryCategory::kParameters);  // FSDP: the compute copy of the shard
    tm->begin_step();
  }
  // Live tensor bytes between steps: parameters, gradients, optimizer state
  // (and the small RoPE table) — what FSDP divides by its degree.
  const int64_t resident_bytes = rt.monitor.memory().current_bytes;

  // Every input has been checked by now: only a valid run touches the run directory.
  const fs::path dump(cfg.job.dump_folder);
  if (rt.rank0()) {
    fs::create_directories(dump);
    // Another run's summary never stays beside this run's config (a harness
    // would read it as this run's result): it is moved aside first, put
    // back if the config cannot be written (a full disk leaves the earlier
    // run's files as they were), and dropped once the config is in place.
    const fs::path summary = dump / "summary.json", aside = dump / ".summary.json.previous";
    std::error_code ec;
    fs::rename(summary, aside, ec);
    const bool moved = !ec;
    try {
      write_file_atomic((dump / "config.toml").string(), to_toml(cfg));
    } catch (...) {
      if (moved) fs::rename(aside, summary, ec);
      throw;
    }
    if (moved) fs::remove(aside, ec);
    // A run killed after its last complete checkpoint logged steps past it:
    // this run logs them again, so the earlier ones go (each step once).
    drop_step_records_after((dump / "metrics.jsonl").string(), step);
    nlohmann::json env = environment_fingerprint();
    if (rt.device.is_cuda()) env["nccl_version"] = nccl_version();
    // The machine the run ran on, as the planner measured it (cached; the
    // trainer never measures): `ctitan plan --calibrate` predicts the run
    // with these figures, not the calibrating machine's.
    if (const auto probe = cached_machine_probe()) env["machine_probe"] = probe->to_json();
    write_file_atomic((dump / "env.json").string(), env.dump(2) + "\n");
  }
  TrainLoop loop(cfg, rt, *tm, optimizer, *loader, checkpointer, validator, accum, checkpoint_load_s);
  return loop.run(step, resident_bytes);
}

}  // namespace ctitan
