// Which part of the model one rank (pipeline stage) holds, and the part's
// parameters as whole tensors: what the engine (pipeline, FSDP, checkpoints)
// and the planner need to know about a model without building one.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/model/model_args.h"
#include "trainer/model/param_spec.h"

namespace ctitan {

// A model part is the embedding or not, a range of TransformerBlocks with
// their global indices (layers.7.* keeps its name in a later pipeline
// stage), and the head (norm, output, loss) or not; the whole model is one
// part.
struct ModelPart {
  bool embedding = true;    // tok_embeddings
  int64_t first_layer = 0;  // global index of the first TransformerBlock
  int64_t n_layers = -1;    // -1: through the last layer
  bool head = true;         // norm, output and the loss
  // InputError when the range does not fit args.n_layers or the part is empty.
  ModelPart resolved(const ModelArgs& args) const;
};

// The part's parameters as whole tensors (FQN, global shape), in forward
// order: the embedding, each block's wq wk wv wo w1 w3 w2 attention_norm
// ffn_norm, then norm and output. (Tensor parallelism narrows them later.)
std::vector<ParamSpec> model_param_specs(const ModelArgs& args, const ModelPart& part);
// Several parts (pipeline stages of one rank), one after the other.
std::vector<ParamSpec> model_param_specs(const ModelArgs& args, const std::vector<ModelPart>& parts);

}  // namespace ctitan
