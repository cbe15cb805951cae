// GPT-OSS (TorchTitan's torchtitan/models/gpt_oss): flavors debugmodel, 20b
// and 120b, and ctitan's tiny for tests.
#pragma once

#include "trainer/models/family.h"

namespace ctitan {

const ModelFamily& gpt_oss_family();

}  // namespace ctitan
