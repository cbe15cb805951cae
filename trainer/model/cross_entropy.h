// The model's loss: mean token cross-entropy in fp32 without materialising
// fp32 logits. Its implementation is pure tensor math with no model in it,
// so it lives below the model, in kernels/ (where the fused loss falls back
// to it); see trainer/kernels/chunked_cross_entropy.h and docs/layers.md.
#pragma once

#include "trainer/kernels/chunked_cross_entropy.h"
