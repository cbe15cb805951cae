// Mean token cross-entropy over [N,V] logits, computed in fp32 (fp64 for
// fp64 logits) as TorchTitan does, without materialising fp32 logits.
//
// TorchTitan casts the whole logits tensor to fp32 and calls cross_entropy;
// at vocab 32k and 2048 tokens that is a 262 MB tensor written, read by
// log_softmax, and a second one for its gradient, which on a CPU is more time
// than the rest of the loss. Here rows are processed in chunks (cache-sized
// on a CPU; on a GPU up to 256 MB of fp32, so a step launches a few large
// kernels, not thousands of small ones):
// forward keeps only the per-row log-sum-exp, backward recomputes softmax
// per chunk and writes the gradient straight in the logits' dtype. Same math;
// the gradient is rounded once, to the logits' dtype.
#pragma once

#include <torch/torch.h>

namespace ctitan {

// logits: [N,V] float/bfloat16/double; labels: [N] int64 in [0,V).
at::Tensor chunked_cross_entropy(const at::Tensor& logits, const at::Tensor& labels);

// Rows of [N,V] logits on `device` that one chunk holds, and the chunks N
// rows take: a CPU's 2^20 fp32 elements (4 MB), any other device's 2^26.
int64_t cross_entropy_rows_per_chunk(const c10::Device& device, int64_t vocab);
int64_t cross_entropy_chunks(const c10::Device& device, int64_t rows, int64_t vocab);

}  // namespace ctitan
