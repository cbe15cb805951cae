// Limits shared by every part that takes a world size, so that the trainer,
// the planner and sweeps accept the same ones (one cap, one message).
#pragma once

#include <cstdint>

namespace ctitan {

// The most ranks a run, a plan or a sweep point may have (TorchTitan's
// largest published runs use 512 GPUs; this leaves room for any real one).
inline constexpr int64_t kMaxWorldSize = 65536;

// The longest sequence (training.seq_len, validation.seq_len) a run, a plan
// or a sweep point may have: 2^24 = 16,777,216 tokens. RoPE's positions are
// float32 (torch.arange(seq_len).float() in TorchTitan, and here), and
// float32 holds every whole number only up to 2^24: past it neighbouring
// positions share one angle, so no RoPE model can tell them apart. It is also
// above the longest context window any published model claims (10M tokens).
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 24;

}  // namespace ctitan
