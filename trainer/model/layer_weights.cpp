#include "trainer/model/layer_weights.h"

namespace ctitan {
namespace {

// f(tensor) for each of a layer's weight slots, in list()'s fixed order
// (W: LayerWeights, const or not).
template <typename W, typename F>
void each_layer_weight(W& w, F&& f) {
  for (auto* t : {&w.attention_norm, &w.wqkv, &w.wo, &w.ffn_norm, &w.w13, &w.w2, &w.q_norm, &w.k_norm, &w.moe.router,
                  &w.moe.w1, &w.moe.w2, &w.moe.w3, &w.moe.shared_w1, &w.moe.shared_w2, &w.moe.shared_w3, &w.mla.wq,
                  &w.mla.wq_a, &w.mla.q_norm, &w.mla.wq_b, &w.mla.wkv_a, &w.mla.kv_norm, &w.mla.wkv_b, &w.bqkv, &w.bo, &w.sinks,
                  &w.moe.router_bias, &w.moe.b1, &w.moe.b2, &w.moe.b3})
    f(*t);
}

}  // namespace

std::vector<at::Tensor> LayerWeights::list() const {
  std::vector<at::Tensor> out;
  each_layer_weight(*this, [&](const at::Tensor& t) {
    if (t.defined()) out.push_back(t);
  });
  return out;
}

LayerWeights LayerWeights::with(const std::vector<at::Tensor>& in, size_t first) const {
  LayerWeights w = *this;
  size_t i = first;
  each_layer_weight(w, [&](at::Tensor& t) {
    if (t.defined()) t = in.at(i++);
  });
  return w;
}

}  // namespace ctitan
