// Qwen3 (TorchTitan's torchtitan/models/qwen3): dense flavors 0.6B … 32B
// and the MoE flavors debugmodel_moe, 30B-A3B, 235B-A22B.
#pragma once

#include "trainer/models/family.h"

namespace ctitan {

const ModelFamily& qwen3_family();

}  // namespace ctitan
