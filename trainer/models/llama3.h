// Llama 3: TorchTitan's flavors ("debugmodel", "8B", "70B", "405B") and
// ctitan's "tiny" and "125M".
#pragma once

#include <string>
#include <vector>

#include "trainer/models/family.h"

namespace ctitan {

// Throws InputError naming the known flavors when `flavor` is unknown.
// n_layers > 0 replaces the flavor's layer count (model.n_layers: an
// 8B-shaped model that fits one GPU, say); 0 keeps it.
ModelArgs llama3_flavor(const std::string& flavor, int64_t n_layers = 0);
std::vector<std::string> llama3_flavor_names();

const ModelFamily& llama3_family();

}  // namespace ctitan
