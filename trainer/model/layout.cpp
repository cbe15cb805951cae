#include "trainer/model/layout.h"

namespace ctitan {

std::string TensorParallelOptions::describe() const {
  if (!on()) return "no tensor parallelism";
  std::string s = "TP " + std::to_string(size()) + " (";
  s += sequence_parallel ? "sequence parallel" : "no sequence parallel";
  s += loss_parallel ? ", loss parallel" : ", logits gathered for the loss";
  if (async) s += ", async";
  return s + ")";
}

std::string ContextParallelOptions::describe() const {
  return "CP " + std::to_string(size()) + " (" + rotate_method + ", " + load_balancer + ")";
}

}  // namespace ctitan
