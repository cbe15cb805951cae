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
#include <thread>

#include "profiling/env_info.h"
#include "profiling/memory.h"
#include "profiling/peak_flops.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/config/config_loader.h"
#include "trainer/data/dataset.h"
#include "trainer/dist/flight_recorder.h"
#include "trainer/dist/mesh.h"
#include <torch/csrc/distributed/c10d/Store.hpp>
#include "trainer/errors.h"
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
  if (cfg.profiling.enable_profiling || cfg.profiling.enable_memory_snapshot)
    std::cerr << "ctitan: warning: [profiling] traces and memory snapshots are not implemented in this build; "
                 "training runs without them (metrics.jsonl still has memory per step)"
              << std::endl;
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
  const ParamCounts counts = count_params(args);
  const double fpt = flops_per_token(args, S);

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
  if (dp) {
    dp->begin_step();
  } else {
    model.begin_step();
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
  mopts.peak_flops = peak.flops;
  mopts.warmup_steps = cfg.metrics.warmup_steps;
  mopts.write_files = rank0;
  MetricsLogger metrics(mopts);
  reset_peak_cpu_memory();

  g_stop_signal = 0;
  auto old_int = std::signal(SIGINT, on_stop_signal);
  auto old_term = std::signal(SIGTERM, on_stop_signal);
  TokenBatch batch;
  std::string status = "ok";
  double comm_s = 0, exposed_comm_s = 0;
  int64_t comm_steps = 0;
  while (step < cfg.training.steps) {
    ++step;
    const auto t0 = Clock::now();
    double data_time = 0, loss_sum = 0;
    for (int64_t micro = 0; micro < accum; ++micro) {
      const auto td = Clock::now();
      loader->next(batch);
      at::Tensor inputs = to_tensor(batch.inputs, B, S), labels = to_tensor(batch.labels, B, S);
      data_time += seconds_since(td);
      if (dp) {
        loss_sum += dp->forward_backward(inputs, labels, 1.0 / static_cast<double>(accum), micro == 0,
                                         micro + 1 == accum) /
                    static_cast<double>(accum);
        continue;
      }
      at::Tensor loss = model.forward_loss(inputs, labels);
      if (accum > 1) loss = loss / static_cast<double>(accum);
      loss.backward();
      model.accumulate_grads();
      loss_sum += loss.item<double>();
    }
    double grad_norm;
    const double lr = cfg.optimizer.lr * schedule.factor(step - 1);
    if (dp) {
      grad_norm = dp->clip_grad_norm(cfg.training.max_norm);
      optimizer.step(lr);
      dp->begin_step();
      loss_sum = dp->dp_mean(loss_sum);
      const CommTimes ct = dp->take_comm_times();
      if (step > cfg.metrics.warmup_steps) {
        comm_s += ct.comm_s;
        exposed_comm_s += ct.exposed_comm_s;
        ++comm_steps;
      }
    } else {
      grad_norm = clip_grad_norm_(model.flat_grads(), cfg.training.max_norm);
      optimizer.step(lr);
      model.zero_grad();
      model.begin_step();
    }
    const double step_time = seconds_since(t0);
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
      checkpointer.save_sharded(step, save_pieces, state, {{"data_loader", loader->state()}}, model_only, save_group);
    }
    if (stop != 0) {
      status = "interrupted";
      break;
    }
  }
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);

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
                          {"resident_bytes", resident_bytes}};
  if (dp) {
    extra["data_parallel"] = dp->describe();
    extra["comm_s"] = comm_steps ? comm_s / comm_steps : 0.0;
    extra["exposed_comm_s"] = comm_steps ? exposed_comm_s / comm_steps : 0.0;
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
