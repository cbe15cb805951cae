// DeepSeek-V3 (TorchTitan's torchtitan/models/deepseek_v3): multi-head
// latent attention with YaRN RoPE, the first n_dense_layers dense, then MoE
// layers with routed and shared experts.
#pragma once

#include "trainer/models/family.h"

namespace ctitan {

const ModelFamily& deepseek_v3_family();

}  // namespace ctitan
