// The train loop, read top to bottom in train.cpp: threads → model → data →
// optimizer → checkpoint → loop { batch, forward, backward, clip, step,
// metrics, checkpoint } → summary.
#pragma once

#include "trainer/config/job_config.h"

namespace ctitan {

// Runs one training job. Returns the process exit code (0 ok, 130 when
// interrupted by SIGINT/SIGTERM). Bad input throws InputError.
int train(const JobConfig& cfg);

// OMP_NUM_THREADS when set, else every core (LibTorch may default lower);
// then settle_cpu_vector_math(), before any op runs on several threads.
void configure_threads();

}  // namespace ctitan
