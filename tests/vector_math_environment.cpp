// Every test binary settles ATen's CPU vector math before its first test
// (trainer/cpu_vector_math.h), as `ctitan train` does at start: otherwise
// the first exp/log/... of the process may run at low accuracy on one
// thread, and a test comparing two computations in one process sees the
// first differ from the second.
#include <gtest/gtest.h>

#include "trainer/cpu_vector_math.h"

namespace {

class SettleCpuVectorMath : public ::testing::Environment {
 public:
  void SetUp() override { ctitan::settle_cpu_vector_math(); }
};

const ::testing::Environment* const settle_environment =
    ::testing::AddGlobalTestEnvironment(new SettleCpuVectorMath);

}  // namespace
