// The parallelisms' implementation of the model's seams (model/layout.h):
// each seam forwards to its parallelism's own function (tensor_parallel.h,
// context_parallel.h, expert_parallel.h). parallelize_model installs them;
// so can a test that builds a parallel model by hand.
#pragma once

#include <memory>

#include "trainer/model/layout.h"

namespace ctitan {

// The seams (one stateless instance, shared).
std::shared_ptr<const LayoutSeams> parallel_seams();

// A layout with the parallelisms' seams installed.
ParallelLayout parallel_layout(TensorParallelOptions tp = {}, ExpertParallelOptions ep = {},
                               ContextParallelOptions cp = {});

}  // namespace ctitan
