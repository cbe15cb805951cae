// What the training techniques ask of a model, decided once before it
// runs: TorchTitan applies activation checkpointing, torch.compile and the
// Float8 converter to the model in parallelize; parallelize_model builds
// this from the config (activation_checkpoint.*, compile.*,
// model.converters + quantize.linear.float8.*, the pipeline schedule) and
// hands it to the Transformer's constructor. Nothing here changes after.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainer/float8/float8_gemms.h"
#include "trainer/model/activation_checkpoint.h"

namespace ctitan {

struct ModelTechniques {
  // Which TransformerBlocks recompute their activations in backward.
  ActivationCheckpointPolicy activation_checkpointing;
  // compile.enable: ctitan's fused kernels for the block ops ("model") and
  // the loss ("loss"); on a device without them the ATen ops run.
  bool compile_model = false;
  bool compile_loss = false;
  // Float8 linears (none when unset).
  std::optional<Float8Options> float8;
  // Zero-bubble pipeline schedules: the GEMMs queue their weight gradients
  // inside a DeferWeightGrads scope (weight_grad.h).
  bool split_backward = false;
};

}  // namespace ctitan
