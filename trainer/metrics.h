// Training metrics in TorchTitan's names and formulas.
//
// Per logged step: loss, grad_norm, tps (tokens/s per device), TFLOPs,
// MFU % (flops_per_token · tps / peak), HFU % (the same with the hardware
// FLOPs per token, which add what activation checkpointing recomputes; in
// metrics.jsonl and summary.json), peak memory, step time and
// data-loading time, averaged over the steps since the previous log line
// (as TorchTitan does). Lines go to the console and, as JSON, to
// <dump_folder>/metrics.jsonl. Every step's tps is also kept in memory for
// summary.json's steady-state statistics.
//
// With a TensorBoard folder, each logged step is also written as
// TensorBoard scalars under TorchTitan's tags (loss_metrics/global_avg_loss,
// grad_norm, throughput(tps), ..., lr; validation_metrics/... for
// log_validation), flushed at every log; the file is synced and closed when
// the logger is destroyed.
#pragma once

#include "profiling/device_monitor.h"

#include <algorithm>
#include <cstdint>
#include <fstream>

#include "common/file_io.h"
#include <limits>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/metrics_defaults.h"

namespace ctitan {

struct ModelArgs;
struct ActivationCheckpointPolicy;
class TensorBoardWriter;

// Hardware FLOPs per token: the model FLOPs (TorchTitan's flops_per_token)
// plus the forward FLOPs that activation checkpointing runs again in
// backward. One block's forward is 2·(block parameters) + 4·H·Dh·S per token
// (one third of each term of TorchTitan's formula). "full" recomputes every
// block, selective "N" every Nth block (checkpoints_layer), "op" only the
// GEMMs whose outputs it does not keep (wo and w2) and attention when its
// output is not kept (attention_kept = false) — an estimate that leaves out
// element-wise ops (norms, RoPE, SwiGLU), which are a rounding error in FLOPs.
double hardware_flops_per_token(const ModelArgs& a, int64_t seq_len, const ActivationCheckpointPolicy& ac,
                                bool attention_kept);

// MFU that names its peaks: FLOPs per token that run at one peak each
// (the compute dtype's GEMMs and attention at its peak, the float8 GEMMs at
// the fp8 peak); 100 · tps · Σ flops / peak. nullopt when a share with
// FLOPs has no known peak (0): no MFU rather than a guessed one.
struct FlopsAtPeak {
  double flops_per_token = 0;
  double peak_flops = 0;
};
std::optional<double> mfu_at_peaks(double tps, const std::vector<FlopsAtPeak>& shares);

// TorchTitan's flops_per_token with attention counted over the (query,
// key) pairs it computes: its attention term (which counts every pair of
// the S x S square) times the causal share (S + 1) / 2S, `density`, the
// share of causal pairs the document mask leaves (1 without documents),
// and the sliding windows' share (window_attention_share).
double useful_flops_per_token(const ModelArgs& a, int64_t seq_len, double density);

// Sliding windows (GPT-OSS): a windowed layer's queries see at most
// `window` keys, so its attention work is its visible pairs
// (window_visible_pairs), not causal's S(S+1)/2. The layers' mean share of
// causal's pairs (1 without a window). With documents as well the shares
// multiply (an approximation: a window inside a document sees no fewer
// pairs than the window's).
double window_attention_share(const ModelArgs& a, int64_t seq_len);

struct StepRecord {
  int64_t step = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  double step_time_s = 0, data_time_s = 0;
  int64_t tokens = 0;
  // TorchTitan's global_max_loss: the largest data-parallel rank's loss
  // (NaN: not read this step).
  double max_loss = std::numeric_limits<double>::quiet_NaN();
};

struct MetricsOptions {
  std::string dump_folder;
  int64_t log_freq = 10;
  bool color = true;
  double flops_per_token = 0;
  double hardware_flops_per_token = 0;  // 0: equal to flops_per_token (no recomputation)
  double peak_flops = 0;        // 0: MFU and HFU not reported
  int64_t warmup_steps = kDefaultMetricsWarmupSteps;  // excluded from the summary statistics
  bool write_files = true;      // metrics.jsonl (rank 0 only in a multi-rank run)
  std::string tensorboard_folder;  // where this rank writes TensorBoard events; empty: none
  DeviceMonitor monitor;        // where memory is read (CPU by default)
};

// TorchTitan's TensorBoard folder: <dump_folder>/<save_tb_folder>/<local
// time as %Y%m%d-%H%M>, then rank_<rank> when every rank writes its own
// (rank >= 0; -1: rank 0 alone writes, in the folder itself).
std::string tensorboard_folder(const std::string& dump_folder, const std::string& save_tb_folder, int64_t unix_time,
                               int rank);

class MetricsLogger {
 public:
  // Throws InputError (one line, nothing left behind) when the TensorBoard
  // folder cannot be written.
  explicit MetricsLogger(MetricsOptions opts);
  ~MetricsLogger();
  // Records one step; logs when step % log_freq == 0 or `force`.
  void record(const StepRecord& r, bool force);
  bool logs_step(int64_t step, bool force) const { return force || step % opts_.log_freq == 0; }
  // One validation pass at `step`: its mean loss over `tokens` tokens (per
  // device, as tps) that took `seconds`. A console line, a metrics.jsonl line
  // {"step", "validation_loss", "validation_perplexity", ...} and TorchTitan's
  // validation_metrics/* TensorBoard scalars. Resets the memory peak, as
  // TorchTitan's log_validation does.
  // `train_tokens`: the global batch's tokens trained through `step`;
  // `elapsed_s`: the run's wall clock from its first step to this pass's end.
  void log_validation(int64_t step, double loss, int64_t tokens, double seconds, int64_t train_tokens, double elapsed_s);
  // Adds key: value to the next metrics.jsonl line (e.g. float8 SQNR).
  void attach(const std::string& key, nlohmann::json value) { pending_[key] = std::move(value); }
  // summary.json: steady-state tps median/p10/p90, MFU, HFU, memory, final loss.
  nlohmann::json summary(const std::string& status) const;
  void write_summary(const std::string& status, const nlohmann::json& extra) const;
  // The steady steps' median tokens/s per device (summary.json's tps_median); nullopt before any.
  std::optional<double> steady_tps_median() const;
  double flops_per_token() const { return opts_.flops_per_token; }
  // This process's peak of live tensor bytes over the run (each logged
  // interval resets the monitor's peak).
  int64_t run_peak_bytes() const { return std::max(run_peak_bytes_, opts_.monitor.memory().peak_bytes); }

 private:
  void log_interval();
  std::vector<const StepRecord*> steady_steps() const;  // the records after metrics.warmup_steps
  // TorchTitan's memory/* scalars under `prefix` (empty or "validation_metrics/").
  void add_memory_scalars(const std::string& prefix, const MemoryStats& mem, int64_t step);
  double hardware_flops() const {
    return opts_.hardware_flops_per_token > 0 ? opts_.hardware_flops_per_token : opts_.flops_per_token;
  }
  MetricsOptions opts_;
  CheckedAppender jsonl_;
  std::unique_ptr<TensorBoardWriter> tb_;
  std::vector<StepRecord> all_;
  std::vector<StepRecord> interval_;
  int64_t run_peak_bytes_ = 0;  // max over logged intervals
  int64_t reported_retries_ = 0;  // CUDA allocator retries already warned about
  nlohmann::json pending_ = nlohmann::json::object();
};

// A run that starts after `step` (the checkpoint it resumed, 0 for a fresh
// start) in a folder whose metrics.jsonl already holds records of later
// steps — a run killed after its last complete checkpoint, or an earlier
// run in the same job.dump_folder — logs those steps again: their records
// (training and validation: every line whose "step" is above `step`) are
// dropped, and so is a last line cut short by a kill, so that each step is
// in the file once. Other lines stay as they are. The file is rewritten
// atomically (through a symbolic link: its target), and only when a line
// goes; a file that is missing or not a regular file is left alone.
void drop_step_records_after(const std::string& metrics_jsonl, int64_t step);

// 1234567 -> "1,234,567".
std::string with_commas(int64_t n);

}  // namespace ctitan
