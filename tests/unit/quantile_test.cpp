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

// Student's t at 0.90 from a table (scipy.stats.t.ppf(0.9, dof)).
TEST(Quantile, T90IsStudentsT) {
  EXPECT_NEAR(ctitan::t90(1), 3.0777, 1e-4);
  EXPECT_NEAR(ctitan::t90(4), 1.5332, 1e-4);
  EXPECT_NEAR(ctitan::t90(30), 1.3104, 1e-4);
  EXPECT_NEAR(ctitan::t90(1000), 1.2816, 1e-4);
}

// Log errors 0.1, -0.1, 0.0 and a NaN (left out): mean 0, s = 0.1, n = 3;
// the 80 % interval of a prediction of 100 is 100·exp(∓ 1.8856 · 0.1 · √(4/3))
// = 100·exp(∓0.217730) = 80.4342 .. 124.3252 (python: math.exp).
TEST(Quantile, LogSpreadGivesStudentsTIntervalFromThreeErrors) {
  const ctitan::LogSpread s = ctitan::log_spread({0.1, -0.1, 0.0, std::nan("")});
  EXPECT_EQ(s.n, 3);
  EXPECT_NEAR(s.mean, 0.0, 1e-15);
  EXPECT_NEAR(s.sd, 0.1, 1e-15);
  const auto iv = ctitan::interval80(100.0, s);
  ASSERT_TRUE(iv.has_value());
  EXPECT_NEAR(iv->first, 80.4342, 1e-3);
  EXPECT_NEAR(iv->second, 124.3252, 1e-3);
  // A bias moves the interval: mean log 0.2 centres it on 100·e^0.2.
  const auto biased = ctitan::interval80(100.0, {3, 0.2, 0.1});
  EXPECT_NEAR(std::sqrt(biased->first * biased->second), 100.0 * std::exp(0.2), 1e-9);
  EXPECT_FALSE(ctitan::interval80(100.0, ctitan::log_spread({0.1, -0.1})).has_value()) << "two errors give none";
  EXPECT_FALSE(ctitan::interval80(0.0, s).has_value()) << "no interval around a zero prediction";
}

TEST(Quantile, OneValueIsEveryQuantileAndNoValueIsNaN) {
  EXPECT_DOUBLE_EQ(ctitan::quantile({3.5}, 0.9), 3.5);
  EXPECT_TRUE(std::isnan(ctitan::quantile({}, 0.5)));
}

}  // namespace
