// "Did you mean": the valid key nearest to an unknown one, so a typo or a key
// from an older TorchTitan points at the key the user wanted.
#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "trainer/config/config_registry.h"

namespace ctitan::config {
namespace {

// Keys older TorchTitan versions spelled differently (old -> current), so a
// recipe written for them is pointed at the current key.
const std::unordered_map<std::string, std::string>& renames() {
  static const std::unordered_map<std::string, std::string> m = {
      {"checkpoint.enable_checkpoint", "checkpoint.enable"},
      {"checkpoint.model_weights_only", "checkpoint.last_save_model_only"},
      {"checkpoint.last_save_model_weights_only", "checkpoint.last_save_model_only"},
      {"checkpoint.initial_load_model_weights_only", "checkpoint.initial_load_model_only"},
      {"job.print_args", "job.print_config"},
      {"training.batch_size", "training.local_batch_size"},
      {"training.warmup_steps", "lr_scheduler.warmup_steps"},
      {"training.compile", "compile.enable"},
      {"training.seed", "debug.seed"},
      {"training.deterministic", "debug.deterministic"},
      {"lr_scheduler.lr_min", "lr_scheduler.min_lr_factor"},
      {"validation.enabled", "validation.enable"},
      {"memory_estimation.enabled", "memory_estimation.enable"},
  };
  return m;
}

// Keys TorchTitan added after v0.2.2 (torchtitan/config/configs.py on its
// main branch, b5bcd76), which ctitan does not read, and what says the same
// in v0.2.2 ("" where nothing does).
const std::unordered_map<std::string, std::string>& later_keys() {
  static const std::unordered_map<std::string, std::string> m = {
      {"training.num_tokens_per_microbatch_per_dp_rank", "training.local_batch_size x training.seq_len"},
      {"training.num_tokens_per_train_step", "training.global_batch_size x training.seq_len"},
      {"training.max_context_length", "training.seq_len"},
      {"training.disable_cuda_graphs", ""},
      {"parallelism.enable_fsdp_symm_mem", ""},
      {"parallelism.spmd_backend", ""},
      {"parallelism.num_pp_microbatches", "parallelism.pipeline_parallel_microbatch_size"},
      {"parallelism.context_parallel_ptrr_mask_key", ""},
      {"compile.enable_async_tensor_parallel", "parallelism.enable_async_tensor_parallel"},
      {"debug.spmd_typechecking", ""},
      {"debug.detect_anomaly", ""},
      {"debug.batch_invariant", ""},
      {"debug.print_config", "job.print_config"},
      {"debug.save_config_file", ""},
      {"debug.enable_structured_logging", ""},
  };
  return m;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string last_component(const std::string& key) { return key.substr(key.rfind('.') + 1); }

}  // namespace

std::string nearest_key(const std::string& unknown) {
  auto renamed = renames().find(unknown);
  if (renamed != renames().end()) return renamed->second;
  // TorchTitan v0.1's [float8] section moved under [quantize.linear.float8].
  if (unknown.rfind("float8.", 0) == 0 && find_field("quantize.linear." + unknown)) {
    return "quantize.linear." + unknown;
  }
  const FieldSpec* best = nullptr;
  const FieldSpec* best_same_name = nullptr;
  size_t best_d = SIZE_MAX, best_same_d = SIZE_MAX;
  const std::string name = last_component(unknown);
  for (const FieldSpec& f : registry()) {
    size_t d = edit_distance(unknown, f.key);
    if (d < best_d) best_d = d, best = &f;
    if (f.name() == name && d < best_same_d) best_same_d = d, best_same_name = &f;
  }
  // A far spelling with an exact key name is usually a key in the wrong
  // section (training.warmup_steps); a close spelling is usually a typo.
  if (best_same_name && best_d > 2) return best_same_name->key;
  return best ? best->key : "";
}

std::string unknown_key_advice(const std::string& unknown, const std::string& prefix) {
  const auto later = later_keys().find(unknown);
  if (later == later_keys().end()) return "did you mean '" + prefix + nearest_key(unknown) + "'?";
  std::string advice = "it is a key of a TorchTitan later than v0.2.2, which ctitan does not read (it reads "
                       "v0.2.x's recipe keys); remove it";
  if (!later->second.empty()) advice += " and say the same with v0.2.2's " + later->second;
  return advice;
}

std::string nearest_section(const std::string& unknown) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const FieldSpec& f : registry()) {
    size_t d = edit_distance(unknown, f.section());
    if (d < best_d) best_d = d, best = f.section();
  }
  return best;
}

}  // namespace ctitan::config
