// The dry run (training.device = meta, or comm.mode = "fake_backend" with
// NGPU=N): rank 0's TrainModel of any recipe at any scale, built on the meta
// device without allocating, one forward and backward on meta to check
// every shape, then the layout (each parameter's global and local shape and
// placement) and the per-rank memory of parameters, gradients and optimizer
// state, with an activation estimate. Nothing is written to the run
// directory.
#pragma once

#include <cstdint>

#include "trainer/config/job_config.h"
#include "trainer/model/model_args.h"
#include "trainer/optim/adamw.h"
#include "trainer/parallel/train_model.h"
#include "trainer/runtime.h"

namespace ctitan {

int dry_run(const JobConfig& cfg, const Runtime& rt, TrainModel& tm, AdamW& optimizer);

// Bytes of activations one micro-batch keeps for backward on one rank, in
// the compute dtype, under the activation checkpointing policy: the saved
// tensors of each TransformerBlock (inputs of every GEMM, attention's
// q/k/v/output, the SwiGLU inputs, residuals), the block input alone for a
// checkpointed block plus one block's worth during its recomputation, and
// the logits. An estimate: element-wise temporaries are left out.
int64_t activation_bytes_estimate(const ModelArgs& a, int64_t batch, int64_t seq_len, int64_t dtype_bytes,
                                  const ActivationCheckpointPolicy& ac);

}  // namespace ctitan
