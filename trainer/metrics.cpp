#include "trainer/kernels/sink_attention.h"
#include "trainer/metrics.h"

#include "common/errors.h"
#include "common/file_io.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "common/quantile.h"
#include "profiling/memory.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/model_args.h"
#include "trainer/tensorboard/tb_writer.h"

namespace ctitan {

double hardware_flops_per_token(const ModelArgs& a, int64_t seq_len, const ActivationCheckpointPolicy& ac,
                                bool attention_kept) {
  const double D = static_cast<double>(a.dim), Dh = static_cast<double>(a.head_dim());
  const double H = static_cast<double>(a.n_heads), K = static_cast<double>(a.n_kv_heads);
  const double F = static_cast<double>(a.ffn_hidden_dim());
  const double wo = H * Dh * D, w2 = F * D;
  const double block_params = D * H * Dh + 2 * D * K * Dh + wo + 3 * D * F + 2 * D;  // + the two norms
  const double attention = 4.0 * H * Dh * static_cast<double>(seq_len);
  const double recompute_per_block = ac.mode == ActivationCheckpointPolicy::Mode::kSelectiveOp
                                         ? 2.0 * (wo + w2) + (attention_kept ? 0.0 : attention)
                                         : 2.0 * block_params + attention;
  int64_t recomputed = 0;
  for (int64_t l = 0; l < a.n_layers; ++l) recomputed += ac.checkpoints_layer(l) ? 1 : 0;
  return flops_per_token(a, seq_len) + static_cast<double>(recomputed) * recompute_per_block;
}


std::string with_commas(int64_t n) {
  std::string s = std::to_string(n), out;
  int count = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (count && count % 3 == 0 && *it != '-') out.push_back(',');
    out.push_back(*it);
    ++count;
  }
  return {out.rbegin(), out.rend()};
}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

nlohmann::json number_or_null(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

}  // namespace

std::string tensorboard_folder(const std::string& dump_folder, const std::string& save_tb_folder, int64_t unix_time,
                               int rank) {
  const auto t = static_cast<std::time_t>(unix_time);
  std::tm local{};
  localtime_r(&t, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M", &local);  // TorchTitan's datetime.now() format
  std::filesystem::path p = std::filesystem::path(dump_folder) / save_tb_folder / stamp;
  if (rank >= 0) {
    std::string dir = "rank_";
    dir += std::to_string(rank);
    p /= dir;
  }
  return p.string();
}

MetricsLogger::MetricsLogger(MetricsOptions opts) : opts_(std::move(opts)) {
  // First, so a folder that cannot be written stops the run before any file is touched.
  if (!opts_.tensorboard_folder.empty()) tb_ = std::make_unique<TensorBoardWriter>(opts_.tensorboard_folder);
  if (!opts_.write_files) return;
  std::error_code ec;
  std::filesystem::create_directories(opts_.dump_folder, ec);
  if (ec) throw InputError(write_error_line(opts_.dump_folder, ec.value()));
  jsonl_ = CheckedAppender((std::filesystem::path(opts_.dump_folder) / "metrics.jsonl").string());
}

MetricsLogger::~MetricsLogger() = default;  // closes the TensorBoard file (flush, fsync)

// What TorchTitan's DeviceMemoryMonitor reports, from what ctitan measures:
//   max_active   = MemoryStats::peak_bytes, the peak of live tensor bytes
//                  (CUDA: the caching allocator's active bytes, as TorchTitan);
//   max_reserved = MemoryStats::reserved_peak_bytes on CUDA (the allocator's
//                  reserved peak); on the CPU, which has no caching
//                  allocator, the live peak again — the figure the console
//                  line shows;
//   num_alloc_retries / num_ooms: CUDA only (TorchTitan reads them there too).
// Percentages are of DeviceMonitor::capacity_bytes (left out when unknown).
void MetricsLogger::add_memory_scalars(const std::string& prefix, const MemoryStats& mem, int64_t step) {
  const bool cuda_alloc = mem.reserved_peak_bytes >= 0;
  const int64_t reserved = cuda_alloc ? mem.reserved_peak_bytes : mem.peak_bytes;
  const int64_t capacity = opts_.monitor.capacity_bytes();
  const auto add = [&](const char* name, double v) { tb_->add_scalar(prefix + "memory/" + name, v, step); };
  add("max_active(GiB)", mem.peak_bytes / kGiB);
  add("max_reserved(GiB)", reserved / kGiB);
  if (capacity > 0) {
    add("max_active(%)", 100.0 * mem.peak_bytes / capacity);
    add("max_reserved(%)", 100.0 * reserved / capacity);
  }
  if (cuda_alloc && prefix.empty()) {
    add("num_alloc_retries", static_cast<double>(mem.alloc_retries));
    add("num_ooms", static_cast<double>(mem.ooms));
  }
}

void MetricsLogger::record(const StepRecord& r, bool force) {
  all_.push_back(r);
  interval_.push_back(r);
  if (logs_step(r.step, force)) log_interval();
}

void MetricsLogger::log_interval() {
  if (interval_.empty()) return;
  double time = 0, data = 0;
  int64_t tokens = 0;
  for (const auto& r : interval_) {
    time += r.step_time_s;
    data += r.data_time_s;
    tokens += r.tokens;
  }
  const StepRecord& last = interval_.back();
  const double tps = tokens / time;
  const double tflops = opts_.flops_per_token * tps / 1e12;
  const double mfu = opts_.peak_flops > 0 ? 100.0 * opts_.flops_per_token * tps / opts_.peak_flops : std::nan("");
  const double hfu = opts_.peak_flops > 0 ? 100.0 * hardware_flops() * tps / opts_.peak_flops : std::nan("");
  const MemoryStats mem = opts_.monitor.memory();
  // TorchTitan's line shows what the caching allocator reserved on a GPU;
  // on the CPU (no caching allocator) the peak of live tensors.
  const bool cuda_alloc = mem.reserved_peak_bytes >= 0;
  const int64_t shown = cuda_alloc ? mem.reserved_peak_bytes : mem.peak_bytes;
  const double mem_gib = shown / kGiB;
  const int64_t capacity = opts_.monitor.capacity_bytes();
  const double mem_pct = capacity > 0 ? 100.0 * shown / capacity : 0.0;
  if (cuda_alloc && mem.alloc_retries > reported_retries_) {
    std::cerr << "ctitan: warning: the CUDA caching allocator retried " << mem.alloc_retries - reported_retries_
              << " allocations after freeing its cache (memory pressure: expect slower steps)" << std::endl;
    reported_retries_ = mem.alloc_retries;
  }

  const bool c = opts_.color;
  auto col = [c](const char* code) { return c ? code : ""; };
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "%sstep: %2lld  %sloss: %7.4f  %sgrad_norm: %7.4f  %smemory: %5.2fGiB(%.2f%%)  %stps: %s  "
                "%stflops: %.2f  %smfu: %.2f%%%s  step_time: %.3fs  data: %.1f%%",
                col("\033[31m"), static_cast<long long>(last.step), col("\033[32m"), last.loss, col("\033[36m"),
                last.grad_norm, col("\033[33m"), mem_gib, mem_pct, col("\033[34m"),
                with_commas(static_cast<int64_t>(std::llround(tps))).c_str(), col("\033[36m"), tflops,
                col("\033[35m"), mfu, col("\033[0m"), time / interval_.size(), 100.0 * data / time);
  std::cout << buf << std::endl;

  nlohmann::json j = {{"step", last.step},
                      {"loss", last.loss},
                      {"grad_norm", last.grad_norm},
                      {"lr", last.lr},
                      {"tps", tps},
                      {"tflops", tflops},
                      {"max_loss", number_or_null(last.max_loss)},
                      {"mfu", number_or_null(mfu)},
                      {"hfu", number_or_null(hfu)},
                      {"mem_peak_bytes", mem.peak_bytes},
                      {"mem_current_bytes", mem.current_bytes},
                      {"rss_bytes", process_rss_bytes()},
                      {"step_time_s", time / interval_.size()},
                      {"data_time_s", data / interval_.size()},
                      {"steps_in_interval", interval_.size()}};
  if (cuda_alloc) {
    j["mem_reserved_peak_bytes"] = mem.reserved_peak_bytes;
    j["mem_alloc_retries"] = mem.alloc_retries;
    j["mem_ooms"] = mem.ooms;
    j["mem_capacity_bytes"] = capacity;
  }
  for (auto it = pending_.begin(); it != pending_.end(); ++it) j[it.key()] = it.value();
  pending_ = nlohmann::json::object();
  jsonl_.write(j.dump() + "\n");  // a full disk ends the run with one line, not a cut-short log
  if (tb_) {
    // TorchTitan's MetricsProcessor.log tags (with lr from its extra_metrics).
    const int64_t s = last.step;
    tb_->add_scalar("loss_metrics/global_avg_loss", last.loss, s);
    if (!std::isnan(last.max_loss)) tb_->add_scalar("loss_metrics/global_max_loss", last.max_loss, s);
    tb_->add_scalar("grad_norm", last.grad_norm, s);
    tb_->add_scalar("throughput(tps)", tps, s);
    tb_->add_scalar("tflops", tflops, s);
    if (!std::isnan(mfu)) tb_->add_scalar("mfu(%)", mfu, s);
    tb_->add_scalar("time_metrics/end_to_end(s)", time / interval_.size(), s);
    tb_->add_scalar("time_metrics/data_loading(s)", data / interval_.size(), s);
    tb_->add_scalar("time_metrics/data_loading(%)", 100.0 * data / time, s);
    add_memory_scalars("", mem, s);
    tb_->add_scalar("lr", last.lr, s);
    // Attached numbers (the MoE expert load, ...) under moe/..., by key.
    for (const char* key : {"moe_load_cv", "moe_load_min", "moe_load_max", "moe_ep_imbalance"})
      if (j.contains(key) && j[key].is_number()) tb_->add_scalar(std::string("moe/") + (key + 4), j[key].get<double>(), s);
    // metrics.rank_timing (multi-rank runs): the spread of the ranks' busy time.
    for (const char* key : {"rank_busy_s_min", "rank_busy_s_median", "rank_busy_s_max", "straggler_share", "slowest_rank"})
      if (j.contains(key) && j[key].is_number()) tb_->add_scalar(std::string("stragglers/") + key, j[key].get<double>(), s);
    if (j.contains("attention_density") && j["attention_density"].is_number())
      tb_->add_scalar("attention/density", j["attention_density"].get<double>(), s);
    tb_->flush();
  }
  interval_.clear();
  run_peak_bytes_ = std::max(run_peak_bytes_, mem.peak_bytes);
  opts_.monitor.reset_peak();
}

void MetricsLogger::log_validation(int64_t step, double loss, int64_t tokens, double seconds, int64_t train_tokens,
                                   double elapsed_s) {
  const double perplexity = std::exp(loss);
  const double tps = seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0;
  const MemoryStats mem = opts_.monitor.memory();
  const bool c = opts_.color;
  auto col = [c](const char* code) { return c ? code : ""; };
  char buf[384];
  std::snprintf(buf, sizeof(buf), "%svalidate step %lld: %sloss %7.4f  perplexity %.4g  %stps %s  %smemory %.2fGiB%s",
                col("\033[33m"), static_cast<long long>(step), col("\033[32m"), loss, perplexity, col("\033[34m"),
                with_commas(static_cast<int64_t>(std::llround(tps))).c_str(), col("\033[36m"), mem.peak_bytes / kGiB,
                col("\033[0m"));
  std::cout << buf << std::endl;
  if (jsonl_.is_open()) {
    const nlohmann::json j = {{"step", step},
                              {"validation_loss", loss},
                              {"validation_perplexity", perplexity},
                              {"validation_tokens", tokens},
                              {"validation_time_s", seconds},
                              {"validation_tps", tps},
                              {"validation_mem_peak_bytes", mem.peak_bytes},
                              {"train_tokens", train_tokens},
                              {"elapsed_s", elapsed_s}};
    jsonl_.write(j.dump() + "\n");
  }
  if (tb_) {
    // TorchTitan's MetricsProcessor.log_validation tags, and the perplexity.
    tb_->add_scalar("validation_metrics/loss", loss, step);
    tb_->add_scalar("validation_metrics/perplexity", perplexity, step);
    tb_->add_scalar("validation_metrics/throughput(tps)", tps, step);
    add_memory_scalars("validation_metrics/", mem, step);
    tb_->flush();
  }
  run_peak_bytes_ = std::max(run_peak_bytes_, mem.peak_bytes);
  opts_.monitor.reset_peak();
}

std::optional<double> mfu_at_peaks(double tps, const std::vector<FlopsAtPeak>& shares) {
  double seconds_at_peak = 0;  // per token
  for (const FlopsAtPeak& s : shares) {
    if (s.flops_per_token <= 0) continue;
    if (s.peak_flops <= 0) return std::nullopt;
    seconds_at_peak += s.flops_per_token / s.peak_flops;
  }
  return 100.0 * tps * seconds_at_peak;
}

double useful_flops_per_token(const ModelArgs& a, int64_t seq_len, double density) {
  const double all = flops_per_token(a, seq_len), attention = all - flops_per_token(a, 0);
  const double S = static_cast<double>(seq_len);
  return all - attention + attention * (S + 1) / (2 * S) * density * window_attention_share(a, seq_len);
}

double window_attention_share(const ModelArgs& a, int64_t seq_len) {
  if (a.sliding_window <= 0 || a.n_layers <= 0) return 1.0;
  double pairs = 0;
  for (int64_t l = 0; l < a.n_layers; ++l) pairs += window_visible_pairs(seq_len, a.window_of(l));
  return pairs / (static_cast<double>(a.n_layers) * window_visible_pairs(seq_len, 0));
}

std::vector<const StepRecord*> MetricsLogger::steady_steps() const {
  std::vector<const StepRecord*> out;
  for (size_t i = static_cast<size_t>(std::max<int64_t>(opts_.warmup_steps, 0)); i < all_.size(); ++i)
    out.push_back(&all_[i]);
  return out;
}

std::optional<double> MetricsLogger::steady_tps_median() const {
  std::vector<double> tps;
  for (const StepRecord* r : steady_steps()) tps.push_back(r->tokens / r->step_time_s);
  if (tps.empty()) return std::nullopt;
  return quantile(tps, 0.5);
}

nlohmann::json MetricsLogger::summary(const std::string& status) const {
  std::vector<double> tps, step_times;
  for (const StepRecord* r : steady_steps()) {
    tps.push_back(r->tokens / r->step_time_s);
    step_times.push_back(r->step_time_s);
  }
  nlohmann::json s;
  s["status"] = status;
  s["steps_run"] = all_.size();
  s["steady_state_steps"] = tps.size();
  if (!tps.empty()) {
    const double med = quantile(tps, 0.5);
    s["tps_median"] = med;
    s["tps_p10"] = quantile(tps, 0.1);
    s["tps_p90"] = quantile(tps, 0.9);
    s["step_time_median_s"] = quantile(step_times, 0.5);
    s["tflops"] = opts_.flops_per_token * med / 1e12;
    s["mfu"] = opts_.peak_flops > 0 ? nlohmann::json(100.0 * opts_.flops_per_token * med / opts_.peak_flops)
                                    : nlohmann::json(nullptr);
    s["hfu"] = opts_.peak_flops > 0 ? nlohmann::json(100.0 * hardware_flops() * med / opts_.peak_flops)
                                    : nlohmann::json(nullptr);
  }
  if (!all_.empty()) {
    s["loss_first"] = all_.front().loss;
    s["loss_final"] = all_.back().loss;
    s["final_step"] = all_.back().step;
  }
  s["mem_peak_bytes"] = run_peak_bytes();
  s["rss_peak_bytes"] = process_peak_rss_bytes();
  s["flops_per_token"] = opts_.flops_per_token;
  s["hardware_flops_per_token"] = hardware_flops();
  s["peak_flops"] = opts_.peak_flops;
  return s;
}

void drop_step_records_after(const std::string& metrics_jsonl, int64_t step) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target = fs::weakly_canonical(metrics_jsonl, ec);
  if (ec || !fs::is_regular_file(target, ec)) return;
  // Whether a line stays: anything but a record of a later step or a last
  // line that a kill cut short (no newline, not JSON).
  const auto keeps = [step](const std::string& line, bool complete) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return complete;
    if (!j.is_object()) return true;
    const auto it = j.find("step");
    return it == j.end() || !it->is_number_integer() || it->get<int64_t>() <= step;
  };
  // Each line, and whether a newline ended it.
  const auto each_line = [&target](const auto& visit) {
    std::ifstream in(target, std::ios::binary);
    std::string line;
    while (std::getline(in, line)) visit(line, !in.eof());
  };
  bool drops = false;
  each_line([&](const std::string& line, bool complete) { drops = drops || !keeps(line, complete); });
  if (!drops) return;
  AtomicFile out(target.string());
  each_line([&](const std::string& line, bool complete) {
    if (keeps(line, complete)) out.write(line + "\n");
  });
  out.commit();
}

void MetricsLogger::write_summary(const std::string& status, const nlohmann::json& extra) const {
  nlohmann::json s = summary(status);
  for (auto it = extra.begin(); it != extra.end(); ++it) s[it.key()] = it.value();
  write_file_atomic((std::filesystem::path(opts_.dump_folder) / "summary.json").string(), s.dump(2) + "\n");
}

}  // namespace ctitan
