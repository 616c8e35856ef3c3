#include "escpod/signal/robust_stats.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace escpod::signal {
namespace {

// x_i = v_i * 0.001 + 1234.5 with v_i from a 64-bit LCG: every step is one correctly rounded
// IEEE operation, so numpy (which produced the expected values below) sees the same doubles.
std::vector<double> lcg_values(size_t n, uint64_t seed) {
  std::vector<double> out;
  uint64_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto v = static_cast<int64_t>((s >> 33) % 2000001) - 1000000;
    out.push_back(static_cast<double>(v) * 0.001 + 1234.5);
  }
  return out;
}

struct NumpyCase {
  size_t n;
  double sum, mean, std, median_f32, mad_f32;
};

// numpy 2.4.6: np.sum, np.mean, np.std of the doubles; np.median and MAD of astype(float32).
const NumpyCase kCases[] = {
    {7, 0x1.fc66083126e97p+12, 0x1.228372653ace9p+10, 0x1.10e39689a7053p+9, 0x1.5dcff00000000p+10,
     0x1.34f8100000000p+8},
    {111, 0x1.16d55353f7ceep+17, 0x1.418999bf62f33p+10, 0x1.2b612357934aep+9,
     0x1.59b3e80000000p+10, 0x1.022ac20000000p+9},
    {300, 0x1.6f33972b020c4p+18, 0x1.395865b0a5966p+10, 0x1.2b513b5be30efp+9,
     0x1.4b17840000000p+10, 0x1.042c080000000p+9},
    {1001, 0x1.2a80310624dd4p+20, 0x1.315c02120ca60p+10, 0x1.1a5278a0c6332p+9,
     0x1.2dc73c0000000p+10, 0x1.cd199c0000000p+8},
};

TEST(RobustStats, MatchesNumpyBitForBit) {
  std::vector<double> work_d;
  std::vector<float> work_f;
  for (const auto& c : kCases) {
    SCOPED_TRACE("n=" + std::to_string(c.n));
    const auto x = lcg_values(c.n, c.n);
    EXPECT_EQ(numpy_sum(x), c.sum);
    const double mean = numpy_mean(x);
    EXPECT_EQ(mean, c.mean);
    EXPECT_EQ(numpy_std(x, mean, work_d), c.std);
    std::vector<float> xf(x.begin(), x.end());
    for (size_t i = 0; i < x.size(); ++i) xf[i] = static_cast<float>(x[i]);
    const MedianMad mm = median_mad_f32(xf, work_f);
    EXPECT_EQ(static_cast<double>(mm.median), c.median_f32);
    EXPECT_EQ(static_cast<double>(mm.mad), c.mad_f32);
  }
}

TEST(RobustStats, PairwiseSumDiffersFromSequentialWhereNumpyDoes) {
  // For n = 111 numpy's pairwise order gives ...cee, a plain loop ...cf0: we must give numpy's.
  const auto x = lcg_values(111, 111);
  double seq = 0.0;
  for (double v : x) seq += v;
  EXPECT_NE(seq, numpy_sum(x));
}

TEST(RobustStats, MedianEvenOddEmpty) {
  std::vector<double> work;
  const std::vector<double> odd = {5, 1, 3};
  const std::vector<double> even = {4, 1, 3, 2};
  EXPECT_EQ(median_f64(odd, work), 3.0);
  EXPECT_EQ(median_f64(even, work), 2.5);
  EXPECT_EQ(median_f64({}, work), 0.0);
  EXPECT_EQ(mad_f64(even, 2.5, work), 1.0);
}

}  // namespace
}  // namespace escpod::signal
