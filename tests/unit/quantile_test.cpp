// common/quantile: the definition summary.json and the reports share, checked
// against numpy.quantile (method="linear", its default) at the edges the
// report's median/IQR paths reach: one value, the extremes, unsorted input.
#include "common/quantile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

TEST(Quantile, MatchesNumpyLinear) {
  const std::vector<double> v = {7, 1, 4, 10};  // sorted: 1 4 7 10
  // numpy.quantile([7, 1, 4, 10], [0, 0.1, 0.5, 0.9, 1]) = 1, 1.9, 5.5, 9.1, 10
  EXPECT_DOUBLE_EQ(ctitan::quantile(v, 0.0), 1);
  EXPECT_NEAR(ctitan::quantile(v, 0.1), 1.9, 1e-12);
  EXPECT_DOUBLE_EQ(ctitan::quantile(v, 0.5), 5.5);
  EXPECT_NEAR(ctitan::quantile(v, 0.9), 9.1, 1e-12);
  EXPECT_DOUBLE_EQ(ctitan::quantile(v, 1.0), 10);
}

TEST(Quantile, OneValueIsEveryQuantileAndNoValueIsNaN) {
  EXPECT_DOUBLE_EQ(ctitan::quantile({3.5}, 0.9), 3.5);
  EXPECT_TRUE(std::isnan(ctitan::quantile({}, 0.5)));
}

}  // namespace
