#include "trainer/train.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "common/errors.h"
#include "profiling/env_info.h"
#include "profiling/memory.h"
#include "profiling/peak_flops.h"
#include "profiling/profiler_session.h"
#include "profiling/trace.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/config/config_loader.h"
#include "trainer/data/dataset.h"
#include "trainer/dist/flight_recorder.h"
#include "trainer/dist/mesh.h"
#include "trainer/metrics.h"
#include "trainer/model/llama.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/parallel/data_parallel.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void write_text_atomically(const fs::path& path, const std::string& text) {
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
  }
  fs::rename(tmp, path);
}

at::Tensor to_tensor(const std::vector<int64_t>& v, int64_t rows, int64_t cols) {
  return torch::from_blob(const_cast<int64_t*>(v.data()), {rows, cols}, torch::kLong).clone();
}

NamedTensors checkpoint_tensors(Llama3& model, AdamW& opt) {
  NamedTensors t;
  for (const auto& s : model.slots()) t.emplace_back("model." + s.name, model.param(s.name));
  auto view = [&](at::Tensor& flat, const ParamSlot& s) { return flat.narrow(0, s.offset, s.numel).view(s.shape); };
  for (const auto& s : model.slots()) t.emplace_back("optimizer.exp_avg." + s.name, view(opt.exp_avg(), s));
  for (const auto& s : model.slots()) t.emplace_back("optimizer.exp_avg_sq." + s.name, view(opt.exp_avg_sq(), s));
  t.emplace_back("optimizer.step", opt.step_tensor());
  return t;
}

// One micro-batch without data parallelism: the ops of Llama3::forward_loss
// (embed, blocks, head) and one autograd pass. While the tracer records, each
// unit's forward gets a range, and hooks on the units' outputs time where
// each unit's backward begins and ends (autograd runs CPU backward on this
// thread). Returns the (scaled) loss.
double single_forward_backward(Llama3& model, const at::Tensor& inputs, const at::Tensor& labels, int64_t accum) {
  MemoryCategoryScope mem(MemoryCategory::kActivations);
  const auto& units = model.units();
  const bool traced = Tracer::recording();
  at::Tensor loss;
  std::vector<at::Tensor> outputs;  // units 0..L (embedding, blocks) while traced
  if (!traced) {
    loss = model.forward_loss(inputs, labels);
  } else {
    at::Tensor h;
    {
      TraceRange r(trace_cat::kCompute, "forward", units[0].name);
      h = model.embed(inputs);
    }
    outputs.push_back(h);
    for (int64_t l = 0; l < model.args().n_layers; ++l) {
      TraceRange r(trace_cat::kCompute, "forward", units[l + 1].name);
      h = model.block(l, h);
      outputs.push_back(h);
    }
    TraceRange r(trace_cat::kCompute, "forward", units.back().name);
    loss = model.head_loss(h, labels);
  }
  if (accum > 1) loss = loss / static_cast<double>(accum);
  std::vector<int64_t> grad_ready(outputs.size(), 0);  // when each output's gradient was complete
  for (size_t i = 0; i < outputs.size(); ++i)
    outputs[i].register_hook([&grad_ready, i](const at::Tensor&) { grad_ready[i] = trace_now_ns(); });
  const int64_t b0 = trace_now_ns();
  loss.backward();
  const int64_t b1 = trace_now_ns();
  if (traced) {
    Tracer& t = Tracer::get();
    const size_t L = outputs.size() - 1;
    t.complete("backward " + units.back().name, trace_cat::kCompute, b0, grad_ready[L]);
    for (size_t u = L; u >= 1; --u)
      t.complete("backward " + units[u].name, trace_cat::kCompute, grad_ready[u], grad_ready[u - 1]);
    t.complete("backward " + units[0].name, trace_cat::kCompute, grad_ready[0], b1);
  }
  {
    TraceRange r(trace_cat::kCompute, "accumulate_grads");
    model.accumulate_grads();
  }
  return loss.item<double>();
}

}  // namespace

void configure_threads() {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  int threads = omp && *omp ? std::atoi(omp) : 0;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
}

int train(const JobConfig& cfg) {
  install_accounting_allocator();

  // --- model ---------------------------------------------------------------
  LlamaArgs args = llama3_flavor(cfg.model.flavor);
  const at::ScalarType dtype = cfg.training.mixed_precision_param == "float32" ? torch::kFloat : torch::kBFloat16;
  const int64_t B = cfg.training.local_batch_size, S = cfg.training.seq_len;
  const DistEnv env = DistEnv::from_environment();
  const MeshShape shape = resolve_mesh_shape(cfg.parallelism, env.world_size);
  if (shape.tp > 1 || shape.pp > 1 || shape.cp > 1)
    throw InputError("tensor, pipeline and context parallelism are not in this ctitan build yet (mesh " +
                     shape.describe() + "); use data parallelism: data_parallel_replicate_degree and "
                     "data_parallel_shard_degree");
  const int64_t dp_world = shape.dp_replicate * shape.dp_shard;
  const bool rank0 = env.rank == 0;
  const auto ac_policy =
      ActivationCheckpointPolicy::parse(cfg.activation_checkpoint.mode, cfg.activation_checkpoint.selective_ac_option);
  for (const auto& c : cfg.compile.components)
    if (c != "model" && c != "loss")
      throw InputError("compile.components entry '" + c + "' is unknown; use \"model\" and/or \"loss\"");
  bool float8 = false;
  for (const auto& c : cfg.model.converters) {
    if (c != "quantize.linear.float8" && c != "float8")
      throw InputError("model.converters entry '" + c + "' is unknown; ctitan has \"quantize.linear.float8\"");
    float8 = true;
  }
  if (cfg.profiling.enable_profiling &&
      cfg.profiling.profile_freq < cfg.profiling.profiler_warmup + cfg.profiling.profiler_active)
    throw InputError("profiling.profile_freq " + std::to_string(cfg.profiling.profile_freq) +
                     " is less than profiler_warmup + profiler_active = " +
                     std::to_string(cfg.profiling.profiler_warmup) + " + " +
                     std::to_string(cfg.profiling.profiler_active) + "; raise profile_freq or lower the other two");
  if (cfg.training.global_batch_size > 0 && cfg.training.global_batch_size % (B * dp_world) != 0)
    throw InputError("training.global_batch_size " + std::to_string(cfg.training.global_batch_size) +
                     " is not a multiple of local_batch_size x data-parallel degree = " + std::to_string(B) + " x " +
                     std::to_string(dp_world) + "; use a multiple or -1");
  const int64_t accum = cfg.training.global_batch_size > 0 ? cfg.training.global_batch_size / (B * dp_world) : 1;

  // --- ranks ---------------------------------------------------------------
  std::shared_ptr<DeviceMesh> mesh = DeviceMesh::single();
  std::shared_ptr<FlightRecorder> recorder;
  if (env.world_size > 1) {
    CommOptions copts;
    copts.timeout = std::chrono::seconds(cfg.comm.train_timeout_seconds);
    copts.init_timeout = std::chrono::seconds(cfg.comm.init_timeout_seconds);
    copts.recorder = recorder = std::make_shared<FlightRecorder>(
        env.rank, static_cast<size_t>(cfg.comm.trace_buf_size),
        (fs::path(cfg.job.dump_folder) / cfg.comm.save_traces_folder /
         (cfg.comm.save_traces_file_prefix + std::to_string(env.rank) + ".json"))
            .string());
    auto store = rendezvous(env, std::chrono::seconds(cfg.comm.init_timeout_seconds));
    mesh = DeviceMesh::create(shape, env.rank, store, copts);
  }

  // Memory by category: the model's buffers (master, gradient, compute copy)
  // are parameters until the gradient buffer is tagged below.
  std::optional<MemoryCategoryScope> param_memory(std::in_place, MemoryCategory::kParameters);
  Llama3 model(args, dtype, S);
  model.set_activation_checkpointing(ac_policy);
  if (cfg.compile.enable) {
    auto has = [&](const char* c) {
      return std::find(cfg.compile.components.begin(), cfg.compile.components.end(), c) !=
             cfg.compile.components.end();
    };
    model.set_compile(has("model"), has("loss"));
  }
  if (float8)
    model.set_float8(parse_float8_recipe(cfg.float8.recipe_name), cfg.float8.emulate, cfg.float8.filter_fqns);
  model.init_weights(static_cast<uint64_t>(cfg.debug.seed));
  std::unique_ptr<DataParallel> dp;
  if (dp_world > 1) {
    DataParallelOptions dpo;
    dpo.reshard_after_forward = cfg.parallelism.fsdp_reshard_after_forward;
    // As in TorchTitan, the float8 all-gather applies only when FSDP shards.
    dpo.float8_all_gather = float8 && shape.dp_shard > 1 && cfg.float8.enable_fsdp_float8_all_gather;
    dpo.float8_precompute_scales = dpo.float8_all_gather && cfg.float8.precompute_float8_dynamic_scale_for_fsdp;
    dpo.recorder = recorder;
    dp = std::make_unique<DataParallel>(model, *mesh, dpo);
  }
  param_memory.reset();
  const ParamCounts counts = count_params(args);
  const double fpt = flops_per_token(args, S);
  // Selective "op" checkpointing keeps attention's output only on ATen's flash
  // path: equal head counts and no fused ("compile") attention (llama.cpp).
  const bool fused_model = cfg.compile.enable && std::find(cfg.compile.components.begin(),
                                                           cfg.compile.components.end(), "model") !=
                                                     cfg.compile.components.end();
  const bool attention_kept = args.n_kv_heads == args.n_heads && !fused_model;

  // --- data ----------------------------------------------------------------
  DataOptions dopts;
  dopts.dataset = cfg.training.dataset;
  dopts.path = cfg.training.dataset_path;
  dopts.tokenizer_path = cfg.model.hf_assets_path;
  dopts.batch = B;
  dopts.seq_len = S;
  dopts.vocab_size = args.vocab_size;
  dopts.seed = static_cast<uint64_t>(cfg.debug.seed);
  dopts.dp_rank = mesh->coord("dp_replicate") * shape.dp_shard + mesh->coord("dp_shard");
  dopts.dp_world = dp_world;
  auto loader = make_data_loader(dopts);

  // --- optimizer, schedule, checkpoint --------------------------------------
  AdamWOptions aopts{cfg.optimizer.lr,           cfg.optimizer.beta1, cfg.optimizer.beta2, cfg.optimizer.eps,
                     cfg.optimizer.weight_decay, cfg.optimizer.implementation};
  AdamW optimizer(dp ? dp->params() : model.flat_params(), dp ? dp->grads() : model.flat_grads(), aopts);
  tag_tensor_memory(optimizer.exp_avg(), MemoryCategory::kOptimizerState);
  tag_tensor_memory(optimizer.exp_avg_sq(), MemoryCategory::kOptimizerState);
  tag_tensor_memory(dp ? dp->grads() : model.flat_grads(), MemoryCategory::kGradients);
  LrSchedule schedule(cfg.training.steps, cfg.lr_scheduler.warmup_steps, cfg.lr_scheduler.decay_ratio,
                      cfg.lr_scheduler.decay_type, cfg.lr_scheduler.min_lr_factor);
  Checkpointer checkpointer(cfg.checkpoint, cfg.job.dump_folder);
  const TensorPieces load_pieces =
      dp ? dp->checkpoint_pieces(optimizer, false) : whole_tensors(checkpoint_tensors(model, optimizer));
  const TensorPieces save_pieces = dp ? dp->checkpoint_pieces(optimizer, true) : load_pieces;
  SaveGroup save_group{env.rank, env.world_size, [&] { mesh->group("world").barrier(); }};
  int64_t step = 0;
  if (checkpointer.enabled()) {
    if (auto loaded = checkpointer.load_sharded(load_pieces, env.rank)) {
      if (!loaded->model_only) {
        step = loaded->step;
        // Each rank resumes its own stream; after a change of layout only
        // counter-based streams (synthetic, markov: a global position) carry over.
        const nlohmann::json& shared = loaded->train_state.at("data_loader");
        if (loaded->world_size == env.world_size) {
          loader->load_state(loaded->rank_state.value("data_loader", shared));
        } else if (shared.contains("batches")) {
          loader->load_state(shared);
        } else if (rank0) {
          std::cerr << "ctitan: warning: the checkpoint was saved by " << loaded->world_size
                    << " ranks; the data loader cannot re-shard a " << shared.value("dataset", "")
                    << " position, so the data starts from the beginning" << std::endl;
        }
      }
      if (rank0)
        std::cout << "ctitan: resumed from " << loaded->path << " (step " << loaded->step
                  << (loaded->model_only ? ", weights only" : "") << ", saved by " << loaded->world_size
                  << (loaded->world_size == 1 ? " rank" : " ranks") << ")" << std::endl;
    }
  }
  {
    MemoryCategoryScope mem(MemoryCategory::kParameters);  // FSDP: the compute copy of the shard
    if (dp) {
      dp->begin_step();
    } else {
      model.begin_step();
    }
  }
  // Live tensor bytes between steps: parameters, gradients, optimizer state
  // (and the small RoPE table) — what FSDP divides by its degree.
  const int64_t resident_bytes = cpu_memory_stats().current_bytes;

  // Every input has been checked by now: only a valid run touches the run directory.
  const fs::path dump(cfg.job.dump_folder);
  if (rank0) {
    fs::create_directories(dump);
    write_text_atomically(dump / "config.toml", to_toml(cfg));
    write_text_atomically(dump / "env.json", environment_fingerprint().dump(2) + "\n");
  }

  const PeakFlops peak = resolve_cpu_peak_flops(dtype, cfg.metrics.peak_tflops);
  if (!peak.warning.empty() && rank0) std::cerr << "ctitan: warning: " << peak.warning << std::endl;
  std::cout << "ctitan: llama3 " << cfg.model.flavor << ", " << counts.total << " params, "
            << c10::toString(dtype) << ", activation checkpointing " << ac_policy.describe() << ", "
            << model.techniques() << ", batch " << B << " x seq " << S << " (x" << accum
            << " accumulation), " << at::get_num_threads() << " threads, data: " << loader->describe()
            << ", peak " << peak.flops / 1e12 << " TFLOPs (" << peak.source << ")" << std::endl;
  const int64_t state_bytes = dp ? dp->state_bytes() : model.num_params() * 16;
  if (env.world_size > 1)
    std::cout << "ctitan: rank " << env.rank << "/" << env.world_size << ", " << (dp ? dp->describe() : "no data parallelism")
              << ", mesh " << shape.describe() << ", parameters + gradients + optimizer state "
              << state_bytes / (1024.0 * 1024.0) << " MiB on this rank (measured: "
              << resident_bytes / (1024.0 * 1024.0) << " MiB of live tensors)" << std::endl;

  MetricsOptions mopts;
  mopts.dump_folder = cfg.job.dump_folder;
  mopts.log_freq = cfg.metrics.log_freq;
  mopts.color = !cfg.metrics.disable_color_printing && ::isatty(STDOUT_FILENO);
  mopts.flops_per_token = fpt;
  mopts.hardware_flops_per_token = hardware_flops_per_token(args, S, ac_policy, attention_kept);
  mopts.peak_flops = peak.flops;
  mopts.warmup_steps = cfg.metrics.warmup_steps;
  mopts.write_files = rank0;
  MetricsLogger metrics(mopts);

  ProfilerOptions popts;
  popts.traces = cfg.profiling.enable_profiling;
  popts.memory_snapshots = cfg.profiling.enable_memory_snapshot;
  popts.trace_folder = (dump / cfg.profiling.save_traces_folder).string();
  popts.memory_folder = (dump / cfg.profiling.save_memory_snapshot_folder).string();
  popts.freq = cfg.profiling.profile_freq;
  popts.warmup = cfg.profiling.profiler_warmup;
  popts.active = cfg.profiling.profiler_active;
  popts.rank = env.rank;
  popts.world_size = env.world_size;
  popts.steady_after = cfg.metrics.warmup_steps;
  ProfilerSession profiler(popts);
  if (popts.traces && rank0)
    std::cout << "ctitan: profiling: " << popts.active << " of every " << popts.freq << " steps traced into "
              << popts.trace_folder << "/iteration_N/rank<R>_trace.json; " << profiler.gpu_status()
              << (profiler.gpu_status() == "cupti" ? "" : "; tracing the CPU only") << std::endl;
  reset_peak_cpu_memory();
  reset_memory_category_peaks();

  g_stop_signal = 0;
  auto old_int = std::signal(SIGINT, on_stop_signal);
  auto old_term = std::signal(SIGTERM, on_stop_signal);
  TokenBatch batch;
  std::string status = "ok";
  double comm_s = 0, exposed_comm_s = 0;
  int64_t comm_steps = 0;
  while (step < cfg.training.steps) {
    ++step;
    profiler.step_begin(step);
    const auto t0 = Clock::now();
    double data_time = 0, loss_sum = 0, grad_norm = 0;
    const double lr = cfg.optimizer.lr * schedule.factor(step - 1);
    std::string oom;  // what ran out of memory in this step, if anything did
    try {
      for (int64_t micro = 0; micro < accum; ++micro) {
        const auto td = Clock::now();
        at::Tensor inputs, labels;
        {
          TraceRange r(trace_cat::kData, "data");
          loader->next(batch);
          inputs = to_tensor(batch.inputs, B, S);
          labels = to_tensor(batch.labels, B, S);
        }
        data_time += seconds_since(td);
        if (dp) {
          loss_sum += dp->forward_backward(inputs, labels, 1.0 / static_cast<double>(accum), micro == 0,
                                           micro + 1 == accum) /
                      static_cast<double>(accum);
          continue;
        }
        loss_sum += single_forward_backward(model, inputs, labels, accum);
      }
      if (dp) {
        grad_norm = dp->clip_grad_norm(cfg.training.max_norm);
        {
          TraceRange r(trace_cat::kCompute, "optimizer");
          optimizer.step(lr);
          MemoryCategoryScope mem(MemoryCategory::kParameters);  // FSDP: this step's compute copy of the shard
          dp->begin_step();
        }
        loss_sum = dp->dp_mean(loss_sum);
        const CommTimes ct = dp->take_comm_times();
        if (step > cfg.metrics.warmup_steps) {
          comm_s += ct.comm_s;
          exposed_comm_s += ct.exposed_comm_s;
          ++comm_steps;
        }
      } else {
        {
          TraceRange r(trace_cat::kCompute, "clip_grad_norm");
          grad_norm = clip_grad_norm_(model.flat_grads(), cfg.training.max_norm);
        }
        TraceRange r(trace_cat::kCompute, "optimizer");
        optimizer.step(lr);
        model.zero_grad();
        model.begin_step();
      }
    } catch (const c10::OutOfMemoryError& e) {
      oom = e.what_without_backtrace();
    } catch (const std::bad_alloc& e) {
      oom = std::string("std::bad_alloc: ") + e.what();
    }
    if (!oom.empty()) {  // the snapshot, one line, summary.json with status "oom" (rank 0), exit 1
      std::signal(SIGINT, old_int);
      std::signal(SIGTERM, old_term);
      std::cerr << "ctitan: " << profiler.out_of_memory(step, oom) << std::endl;
      if (rank0) metrics.write_summary("oom", {{"error", "out of memory in step " + std::to_string(step)}});
      return 1;
    }
    const auto t1 = Clock::now();
    const double step_time = std::chrono::duration<double>(t1 - t0).count();
    auto ns = [](Clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    };
    profiler.record_step(step, ns(t0), ns(t1));
    if (profiler.last_gpu_busy_s() >= 0) metrics.attach("gpu_busy_s", profiler.last_gpu_busy_s());
    // Every rank stops at the same step, or the others would wait in a collective.
    int stop = g_stop_signal != 0;
    if (env.world_size > 1) {
      at::Tensor t = torch::full({1}, stop, torch::kInt);
      mesh->group("world").all_reduce(t, ReduceOp::kMax)->wait();
      stop = t.item<int>();
    }

    const bool last = step == cfg.training.steps || stop != 0;
    std::string sqnr_line;
    if (float8 && (!dp || !dp->sharded()) && metrics.logs_step(step, last)) {
      // Outside the timed step: an extra no-grad forward on this batch.
      const auto sqnr = model.float8_sqnr(to_tensor(batch.inputs, B, S));
      nlohmann::json per_unit = nlohmann::json::object();
      std::pair<std::string, double> worst{"", 1e300};
      for (const auto& [unit, db] : sqnr) {
        per_unit[unit] = db;
        if (db < worst.second) worst = {unit, db};
      }
      metrics.attach("float8_sqnr_db", per_unit);
      char buf[256];
      std::snprintf(buf, sizeof(buf), "       float8 SQNR: min %.1f dB (%s) over %zu GEMMs", worst.second,
                    worst.first.c_str(), sqnr.size());
      if (!sqnr.empty()) sqnr_line = buf;
    }
    metrics.record({step, loss_sum, grad_norm, lr, step_time, data_time, B * S * accum}, last);
    if (!sqnr_line.empty()) std::cout << sqnr_line << std::endl;
    if (checkpointer.should_save(step, cfg.training.steps)) {
      // Rank 0's loader state is the shared one; every rank also keeps its own.
      nlohmann::json state = {{"step", step}, {"data_loader", loader->state()}};
      const bool model_only = step == cfg.training.steps && cfg.checkpoint.last_save_model_only;
      TraceRange r(trace_cat::kCheckpoint, "checkpoint");
      checkpointer.save_sharded(step, save_pieces, state, {{"data_loader", loader->state()}}, model_only, save_group);
    }
    profiler.step_end(step, step_time);
    if (stop != 0) {
      status = "interrupted";
      break;
    }
  }
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  profiler.finish(step);

  nlohmann::json extra = {{"flavor", cfg.model.flavor},
                          {"num_params", counts.total},
                          {"dtype", c10::toString(dtype)},
                          {"activation_checkpoint", ac_policy.describe()},
                          {"techniques", model.techniques()},
                          {"tokens_per_step", B * S * accum},
                          {"peak_flops_source", peak.source},
                          {"world_size", env.world_size},
                          {"mesh", shape.describe()},
                          {"state_bytes", state_bytes},
                          {"resident_bytes", resident_bytes},
                          {"mem_by_category", memory_by_category_json()}};
  if (dp) {
    extra["data_parallel"] = dp->describe();
    extra["comm_s"] = comm_steps ? comm_s / comm_steps : 0.0;
    extra["exposed_comm_s"] = comm_steps ? exposed_comm_s / comm_steps : 0.0;
    extra["comm_source"] = "flight_recorder";
  }
  if (popts.traces) {  // every rank: the breakdowns are gathered
    at::Tensor mine = torch::tensor(profiler.summary_breakdown(cfg.metrics.warmup_steps), torch::kDouble);
    at::Tensor all = mine;
    if (env.world_size > 1) {
      all = torch::empty({env.world_size * mine.numel()}, torch::kDouble);
      mesh->group("world").all_gather(all, mine)->wait();
    }
    add_trace_summary(extra, std::vector<double>(all.data_ptr<double>(), all.data_ptr<double>() + all.numel()),
                      profiler.summary_steps(cfg.metrics.warmup_steps));
    if (const std::string line = profiler.overhead_line(); !line.empty() && rank0)
      std::cout << "ctitan: " << line << std::endl;
  }
  if (env.world_size > 1) {
    // Memory per rank, gathered so that rank 0's summary shows every rank.
    at::Tensor in = torch::tensor({cpu_memory_stats().peak_bytes, state_bytes, resident_bytes,
                                   process_peak_rss_bytes()}, torch::kLong);
    at::Tensor all = torch::empty({env.world_size * 4}, torch::kLong);
    mesh->group("world").all_gather(all, in)->wait();
    nlohmann::json ranks = nlohmann::json::array();
    for (int r = 0; r < env.world_size; ++r)
      ranks.push_back({{"rank", r},
                       {"mem_peak_bytes", all[r * 4].item<int64_t>()},
                       {"state_bytes", all[r * 4 + 1].item<int64_t>()},
                       {"resident_bytes", all[r * 4 + 2].item<int64_t>()},
                       {"rss_peak_bytes", all[r * 4 + 3].item<int64_t>()}});
    extra["ranks"] = ranks;
  }
  if (rank0) metrics.write_summary(status, extra);
  if (status == "interrupted") {
    std::cerr << "ctitan: interrupted by signal " << g_stop_signal.load() << " at step " << step
              << "; summary.json written" << std::endl;
    return 130;
  }
  return 0;
}

}  // namespace ctitan
