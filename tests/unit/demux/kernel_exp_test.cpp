#include "demux/kernel_exp.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

namespace escpod::demux::detail {
namespace {

// The vector exponential against std::exp rounded to float: the same float, or (where exp(x)
// sits within ~1e-15 of a float rounding midpoint) its neighbour; over the kernel's whole range,
// plus the lanes that must take std::exp (huge, tiny, NaN, inf) and odd tail lengths.
TEST(KernelExp, MatchesStdExpRoundedToFloat) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> wide(-120.0f, 5.0f);
  std::vector<float> x;
  for (int i = 0; i < 200000; ++i) x.push_back(wide(rng));
  for (float v = -20.0f; v <= 0.0f; v += 1.0f / 1024) x.push_back(v);  // where kernels live
  for (float v : {0.0f, -0.0f, -87.3f, -103.9f, -104.0f, -150.0f, -700.5f, -800.0f, 88.0f, 89.0f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), 1e-30f, -1e-30f})
    x.push_back(v);
  x.push_back(-1.0f);  // odd length: a scalar tail
  std::vector<double> fast(x.size()), ref(x.size());
  exp_to_float(x.data(), x.size(), fast.data());
  exp_to_float_scalar(x.data(), x.size(), ref.data());
  size_t same = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(ref[i])) {
      EXPECT_TRUE(std::isnan(fast[i])) << "x = " << x[i];
      ++same;
      continue;
    }
    if (fast[i] == ref[i]) {
      ++same;
      continue;
    }
    const auto r = static_cast<float>(ref[i]);
    const float up = std::nextafter(r, std::numeric_limits<float>::infinity());
    const float down = std::nextafter(r, -std::numeric_limits<float>::infinity());
    EXPECT_TRUE(static_cast<float>(fast[i]) == up || static_cast<float>(fast[i]) == down)
        << "x = " << x[i] << ": " << fast[i] << " vs " << ref[i];
  }
  std::printf("[kernel_exp] %zu of %zu values identical to float(std::exp)\n", same, x.size());
  EXPECT_GE(static_cast<double>(same), 0.9999 * static_cast<double>(x.size()));
}

}  // namespace
}  // namespace escpod::demux::detail
