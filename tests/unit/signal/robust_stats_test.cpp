#include "escpod/signal/robust_stats.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
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

// ---- the float32 selections against the plain std::nth_element versions they replaced -----------

float reference_median(std::vector<float> v) {
  const size_t hi = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(hi), v.end());
  const float upper = v[hi];
  if (v.size() % 2 == 1) return upper;
  return (*std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(hi)) + upper) / 2.0f;
}

MedianMad reference_median_mad(const std::vector<float>& x) {
  MedianMad out;
  out.median = reference_median(x);
  std::vector<float> dev(x.size());
  for (size_t i = 0; i < x.size(); ++i) dev[i] = std::fabs(x[i] - out.median);
  out.mad = reference_median(dev);
  return out;
}

// numpy.percentile(x, q), linear: partition at floor(v), the smallest value above it, _lerp.
double reference_percentile(std::vector<float> v, double q) {
  const size_t n = v.size();
  const double vi = q / 100.0 * static_cast<double>(n - 1);
  const double lo_d = std::floor(vi);
  const size_t lo = std::min(static_cast<size_t>(lo_d), n - 1);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(lo), v.end());
  const double a = v[lo];
  const double b = lo + 1 < n ? *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(lo) + 1, v.end()) : a;
  const double t = vi - lo_d, diff = b - a;
  return t >= 0.5 ? b - diff * (1.0 - t) : a + diff * t;
}

// Signals like the boundary checks see: ADC steps calibrated to pA (many ties), a level change,
// spikes; or wide-range noise; or a near-constant run; a tight cluster among huge outliers; steps
// of subnormals; sizes around the bucketed path's threshold (256), up to a read prefix and past
// the 16,384 values whose bins are kept for the gather.
std::vector<float> signal_like(std::mt19937& rng, size_t n, int kind) {
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    double v;
    switch (kind) {
      case 0: v = std::round((i < n / 3 ? 90.0 : 115.0) + 6.0 * g(rng)) * 0.1762 + 3.5; break;
      case 1: v = 1e4 * g(rng); break;
      case 2: v = i % 97 == 0 ? -0.0 : 0.0; break;
      case 4: v = i % 733 == 0 ? 3e38 * (i % 2 == 0 ? 1.0 : -1.0) : 80.0 + g(rng); break;  // bins ~1e36 wide
      case 5: v = static_cast<double>(i % 37) * 1e-44; break;  // subnormal steps: the bin scale overflows
      default: v = 80.0 + g(rng) + (i % 501 == 0 ? 900.0 : 0.0); break;
    }
    x[i] = static_cast<float>(v);
  }
  return x;
}

TEST(RobustStats, SelectionsEqualTheNthElementReference) {
  std::mt19937 rng(20261207);
  std::vector<float> work;
  const size_t sizes[] = {1, 2, 3, 255, 256, 257, 300, 1000, 1001, 2000, 4096, 11500, 16384, 16385, 40001};
  for (size_t n : sizes) {
    for (int kind = 0; kind < 6; ++kind) {
      SCOPED_TRACE("n=" + std::to_string(n) + " kind=" + std::to_string(kind));
      const auto x = signal_like(rng, n, kind);
      const MedianMad got = median_mad_f32(x, work), want = reference_median_mad(x);
      EXPECT_EQ(got.median, want.median);
      EXPECT_EQ(got.mad, want.mad);
      EXPECT_EQ(median_f32(x, work), want.median);
      const double qs[] = {85.0, 15.0, 0.0, 100.0};
      double p[4];
      percentiles_f32(x, qs, p, work);
      for (size_t k = 0; k < 4; ++k) EXPECT_EQ(p[k], reference_percentile(x, qs[k])) << "q=" << qs[k];
    }
  }
}

double percentiles_f32_one(const std::vector<float>& x, double q, std::vector<float>& work) {
  double p = 0.0;
  percentiles_f32(x, std::span<const double>(&q, 1), std::span<double>(&p, 1), work);
  return p;
}

TEST(RobustStats, NonFiniteValuesTakeTheReferencePath) {
  std::mt19937 rng(7);
  std::vector<float> work;
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    auto x = signal_like(rng, 3000, 0);
    x[1234] = bad;
    const MedianMad got = median_mad_f32(x, work), want = reference_median_mad(x);
    EXPECT_EQ(got.median, want.median);
    EXPECT_EQ(got.mad, want.mad);
    EXPECT_EQ(percentiles_f32_one(x, 85.0, work), reference_percentile(x, 85.0));
  }
  // A NaN: the median is still the reference's (whatever nth_element makes of it), never a crash.
  auto x = signal_like(rng, 3000, 0);
  x[10] = std::numeric_limits<float>::quiet_NaN();
  const float got = median_f32(x, work), want = reference_median(x);
  EXPECT_TRUE(got == want || (std::isnan(got) && std::isnan(want)));
}

TEST(RobustStats, PercentilesOfNothingAreNan) {
  std::vector<float> work;
  const double q = 50.0;
  double p = 0.0;
  percentiles_f32({}, std::span<const double>(&q, 1), std::span<double>(&p, 1), work);
  EXPECT_TRUE(std::isnan(p));
}

}  // namespace
}  // namespace escpod::signal
