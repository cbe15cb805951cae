// The Float8 converter's state inside one model: which of its GEMMs run in
// float8 (decided once, when the model is built), the float8 weights FSDP's
// all-gather hands in, and the SQNR probe. The model names its GEMMs
// ("layers.3.attention.wq|wk|wv", "output"); this class knows no model.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trainer/float8/float8_linear.h"

namespace ctitan {

// model.converters = ["quantize.linear.float8"]: linears whose FQN contains
// no filter_fqns entry run float8_linear (the fused wq|wk|wv and w1|w3 GEMMs
// are one unit each: float8 only if none of their modules is filtered).
struct Float8Options {
  Float8Recipe recipe = Float8Recipe::kTensorwise;
  bool emulate = true;
  std::vector<std::string> filter_fqns;
};

// One GEMM that runs in float8, over consecutive storage slots (wq|wk|wv,
// wo, w1|w3, w2, output); `name` is the SQNR/probe name.
struct Float8Gemm {
  std::string name;           // "layers.3.attention.wq|wk|wv", "output"
  std::vector<size_t> slots;  // indices into the model's slots, consecutive
};

class Float8Gemms {
 public:
  Float8Gemms() = default;  // off: every GEMM in the compute dtype
  explicit Float8Gemms(Float8Options options);

  bool on() const { return on_; }
  Float8Recipe recipe() const { return options_.recipe; }
  bool emulate() const { return options_.emulate; }
  bool tensorwise() const { return on_ && options_.recipe == Float8Recipe::kTensorwise; }

  // --- choosing, while the model is built ---
  // Whether a filter entry names the module `fqn` (substring, as
  // TorchTitan); the entries that do count as matched.
  bool filtered(const std::string& fqn);
  // GEMM `name` runs in float8 over `slots`, in the order added.
  void add(std::string name, std::vector<size_t> slots);
  // InputError for the first filter entry that matched no module.
  void check_every_entry_matched() const;

  const std::vector<Float8Gemm>& gemms() const { return gemms_; }
  bool runs(const std::string& name) const { return on_ && names_.count(name) > 0; }

  // GEMM `name` (one that runs()) on x: float8_linear, with the weight FSDP
  // handed in when there is one; recorded by an open probe.
  at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const std::string& name, Float8TpSharding tp) const;

  // FSDP's float8 all-gather hands in a GEMM's weight already in float8
  // (tensorwise); linear() uses it instead of quantising the weight.
  // Cleared when the unit is freed.
  void set_weight(const std::string& gemm, Float8Tensor q) { weights_[gemm] = std::move(q); }
  void clear_weight(const std::string& gemm) { weights_.erase(gemm); }

  // While a probe is open, every float8 GEMM appends (name, SQNR in dB of
  // its output against the same GEMM in the compute dtype) to `out`.
  using Sqnr = std::vector<std::pair<std::string, double>>;
  void open_probe(Sqnr* out) { probe_ = out; }
  void close_probe() { probe_ = nullptr; }

 private:
  bool on_ = false;
  Float8Options options_;
  std::vector<bool> matched_;  // per filter entry
  std::vector<Float8Gemm> gemms_;
  std::set<std::string> names_;  // gemms_' names
  std::map<std::string, Float8Tensor> weights_;  // by Float8Gemm::name
  Sqnr* probe_ = nullptr;
};

}  // namespace ctitan
