// Limits shared by every part that takes a world size, so that the trainer,
// the planner and sweeps accept the same ones (one cap, one message).
#pragma once

#include <cstdint>

namespace ctitan {

// The most ranks a run, a plan or a sweep point may have (TorchTitan's
// largest published runs use 512 GPUs; this leaves room for any real one).
inline constexpr int64_t kMaxWorldSize = 65536;

}  // namespace ctitan
