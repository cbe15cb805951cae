#include "trainer/float8/float8_gemms.h"

#include "common/errors.h"

namespace ctitan {

Float8Gemms::Float8Gemms(Float8Options options)
    : on_(true), options_(std::move(options)), matched_(options_.filter_fqns.size(), false) {}

bool Float8Gemms::filtered(const std::string& fqn) {
  bool hit = false;
  for (size_t i = 0; i < options_.filter_fqns.size(); ++i)
    if (fqn.find(options_.filter_fqns[i]) != std::string::npos) hit = matched_[i] = true;
  return hit;
}

void Float8Gemms::add(std::string name, std::vector<size_t> slots) {
  names_.insert(name);
  gemms_.push_back({std::move(name), std::move(slots)});
}

void Float8Gemms::check_every_entry_matched() const {
  for (size_t i = 0; i < matched_.size(); ++i)
    if (!matched_[i])
      throw InputError("quantize.linear.float8.filter_fqns entry '" + options_.filter_fqns[i] +
                       "' matches no linear layer (names look like layers.0.attention.wq, output)");
}

at::Tensor Float8Gemms::linear(const at::Tensor& x, const at::Tensor& w, const std::string& name,
                               Float8TpSharding tp) const {
  const auto pre = weights_.find(name);
  at::Tensor y = float8_linear(x, w, options_.recipe, options_.emulate, pre == weights_.end() ? nullptr : &pre->second, tp);
  if (probe_) probe_->emplace_back(name, sqnr_db(at::linear(x, w), y));
  return y;
}

}  // namespace ctitan
