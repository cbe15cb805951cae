// Settles the CPU vector math ATen hands to MKL's VML before any op runs
// it on several intra-op threads at once.
//
// ATen runs contiguous float/double exp, log, sqrt, tanh, ... as MKL VML
// calls (vmsExp(n, in, out, VML_HA | ...)), one per intra-op thread on its
// chunk (ATen/cpu/vml.h). oneMKL 2024.2 (the MKL inside the torch wheels,
// Build 20240605 here) picks each VML function's kernel lazily on its first
// call; when that first call runs on two threads at once, one thread may run
// a low-accuracy kernel for its whole chunk of that one call despite VML_HA
// (pytorch/pytorch#188792, open). Seen here: the first logsumexp of a
// process gave relative errors up to 1.5e-4 in the second thread's rows in
// about 3 % of processes started three at a time on 2 cores, so two runs
// of one recipe disagreed from step 1 and a model's first gradient differed
// from its second; one serial call of each function first removed it.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace ctitan {

struct VectorMathOp {
  std::string name;
  at::Tensor (*run)(const at::Tensor&);
};

// The ops ATen routes to MKL VML for float and double (ATen/cpu/vml.h).
const std::vector<VectorMathOp>& vml_routed_ops();

// Runs each of vml_routed_ops() once, on one element of float and of double,
// on the calling thread; once per process (later calls return at once).
// Call before the first op that may run on several threads; a no-op when
// LibTorch has no MKL.
void settle_cpu_vector_math();

}  // namespace ctitan
