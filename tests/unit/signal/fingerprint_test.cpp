#include "escpod/signal/fingerprint.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "escpod/signal/robust_stats.hpp"

namespace escpod::signal {
namespace {

struct Synthetic {
  std::vector<float> signal;
  std::vector<size_t> borders;  // 0, change points..., N
  std::vector<double> levels;
};

// 111 events with random dwell in [min_dwell, max_dwell] and levels alternating above and below
// 100 pA by 4-10 pA (adjacent events differ by >= 8 pA, so every border is a clear t-statistic
// peak, and no level is winsorised), plus small Gaussian noise.
Synthetic make_read(uint32_t seed, size_t n_events = 111, size_t min_dwell = 20,
                    size_t max_dwell = 45, double noise = 0.5) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> dwell(min_dwell, max_dwell);
  std::uniform_real_distribution<double> step(4.0, 10.0);
  std::normal_distribution<double> gauss(0.0, noise);
  Synthetic s;
  s.borders.push_back(0);
  for (size_t e = 0; e < n_events; ++e) {
    const double level = 100.0 + (e % 2 ? -1.0 : 1.0) * step(rng);
    s.levels.push_back(level);
    const size_t len = dwell(rng);
    for (size_t i = 0; i < len; ++i) s.signal.push_back(static_cast<float>(level + gauss(rng)));
    s.borders.push_back(s.signal.size());
  }
  return s;
}

TEST(Fingerprint, WindowRange) {
  FingerprintParams p;
  auto r = barcode_window(0, 4000, 20000, p);
  EXPECT_EQ(r.begin, 0u);
  EXPECT_EQ(r.end, 4100u);
  r = barcode_window(500, 4000, 4050, p);
  EXPECT_EQ(r.begin, 400u);
  EXPECT_EQ(r.end, 4050u);
  r = barcode_window(0, 11450, 20000, p);
  EXPECT_EQ(r.end, 11500u);  // preload limit
  EXPECT_EQ(barcode_window(10, 10, 100, p).size(), 0u);
}

TEST(Fingerprint, TStatisticDefinition) {
  const std::vector<float> x = {1, 2, 3, 10, 11, 12, 5};
  std::vector<double> t(x.size() - 2 * 3);
  windowed_t_statistic(x, 3, t);
  // j = 0: L = {1,2,3} mean 2 SS 2; R = {10,11,12} mean 11 SS 2 -> 9 / 2.
  EXPECT_DOUBLE_EQ(t[0], 4.5);
  // Flat halves -> 0.
  const std::vector<float> flat(10, 3.0f);
  std::vector<double> tf(4);
  windowed_t_statistic(flat, 3, tf);
  for (double v : tf) EXPECT_EQ(v, 0.0);
}

// The blocked computation against the definition computed one output at a time (the order of
// every double sum is the same, so the values are equal bit for bit), for window widths around
// the block of eight outputs and lengths with and without a partial block.
TEST(Fingerprint, TStatisticEqualsThePlainLoop) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(80.0f, 6.0f);
  for (size_t w : {1u, 2u, 3u, 7u, 8u, 9u, 25u}) {
    for (size_t n : {2 * w, 2 * w + 1, 2 * w + 8, 2 * w + 13, size_t{500}}) {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = i % 50 < 3 ? 80.0f : std::round(g(rng) * 4.0f) / 4.0f;  // flat runs, ties
      std::vector<double> got(n - 2 * w, -1.0), want(n - 2 * w);
      windowed_t_statistic(x, w, got);
      for (size_t j = 0; j < want.size(); ++j) {
        double sum_l = 0.0, sum_r = 0.0, ss = 0.0;
        for (size_t k = 0; k < w; ++k) {
          sum_l += x[j + k];
          sum_r += x[j + w + k];
        }
        const double mean_l = sum_l * (1.0 / static_cast<double>(w)), mean_r = sum_r * (1.0 / static_cast<double>(w));
        for (size_t k = 0; k < w; ++k) {
          const double dl = x[j + k] - mean_l, dr = x[j + w + k] - mean_r;
          ss += dl * dl + dr * dr;
        }
        want[j] = ss > 0.0 ? std::fabs(mean_l - mean_r) / std::sqrt(ss) : 0.0;
      }
      ASSERT_EQ(got, want) << "w " << w << " n " << n;
    }
  }
}

TEST(Fingerprint, RecoversPlantedEventsExactly) {
  FingerprintScratch scratch;
  FingerprintParams p;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Synthetic s = make_read(seed);
    std::vector<double> fp(p.barcode_num_events);
    FingerprintStats st;
    ASSERT_EQ(barcode_fingerprint(s.signal, p, scratch, fp, &st), FingerprintError::kNone);
    EXPECT_EQ(st.n_samples, s.signal.size());
    ASSERT_GE(s.signal.size(), 2200u);  // windows of >= 1265 samples use the full widths
    EXPECT_EQ(st.stat_width, 12u);
    EXPECT_EQ(st.min_gap, 6u);
    // The change points are the planted borders.
    ASSERT_EQ(scratch.borders.size(), s.borders.size());
    EXPECT_EQ(scratch.borders, s.borders);
    // The fingerprint is the z-scored means of the last 25 planted events (up to the noise).
    double mean = 0;
    for (double l : s.levels) mean += l;
    mean /= static_cast<double>(s.levels.size());
    double var = 0;
    for (double l : s.levels) var += (l - mean) * (l - mean);
    const double sd = std::sqrt(var / static_cast<double>(s.levels.size()));
    for (size_t i = 0; i < 25; ++i) {
      EXPECT_NEAR(fp[i], (s.levels[s.levels.size() - 25 + i] - mean) / sd, 0.05) << i;
    }
    // Exactly z-scored over all 111 events: recompute from the event means.
    std::vector<double> work;
    const double m = numpy_mean(scratch.means);
    EXPECT_EQ(m, st.event_mean);
    EXPECT_EQ(fp[24], (scratch.means[110] - st.event_mean) / st.event_std);
    EXPECT_GT(st.dwell_median, 19.0);
    EXPECT_LT(st.dwell_median, 46.0);
  }
}

TEST(Fingerprint, WinsorisingClipsSpikes) {
  Synthetic s = make_read(3);
  FingerprintScratch scratch;
  FingerprintParams p;
  std::vector<double> clean(25), spiked(25);
  ASSERT_EQ(barcode_fingerprint(s.signal, p, scratch, clean), FingerprintError::kNone);
  // A 1e4 pA spike is clipped to exactly float(median + 5 MAD). Only change points within one
  // t-statistic window of it may move; the rest of the segmentation is unaffected.
  const std::vector<size_t> borders = scratch.borders;
  s.signal[s.borders[50] + 10] = 1e4f;
  FingerprintStats st;
  ASSERT_EQ(barcode_fingerprint(s.signal, p, scratch, spiked, &st), FingerprintError::kNone);
  float mx = 0;
  for (float v : scratch.window) mx = std::max(mx, v);
  EXPECT_EQ(mx, static_cast<float>(static_cast<double>(st.window_median) +
                                   5.0 * static_cast<double>(st.window_mad)));
  size_t moved = 0;
  for (size_t i = 0; i < borders.size(); ++i) {
    if (scratch.borders[i] == borders[i]) continue;
    ++moved;
    EXPECT_LE(std::max(scratch.borders[i], borders[i]) - std::min(scratch.borders[i], borders[i]),
              24u);
  }
  EXPECT_LE(moved, 2u);
  for (double v : spiked) EXPECT_TRUE(std::isfinite(v));
}

TEST(Fingerprint, ShortWindowWidthsRoundHalfToEven) {
  FingerprintScratch scratch;
  FingerprintParams p;
  std::vector<double> fp(25);
  FingerprintStats st;
  // N = 1155: N/110 = 10.5 -> 10 (Python round), N/220 = 5.25 -> 5.
  Synthetic s = make_read(5, 111, 10, 11);
  s.signal.resize(1155, s.signal.back());
  (void)barcode_fingerprint(s.signal, p, scratch, fp, &st);
  EXPECT_EQ(st.stat_width, 10u);
  EXPECT_EQ(st.min_gap, 5u);
  // N = 1265: 11.5 -> 12, 5.75 -> 6.
  s = make_read(5, 111, 11, 12);
  s.signal.resize(1265, s.signal.back());
  (void)barcode_fingerprint(s.signal, p, scratch, fp, &st);
  EXPECT_EQ(st.stat_width, 12u);
  EXPECT_EQ(st.min_gap, 6u);
}

TEST(Fingerprint, BadReadsBecomeReasonsNotCrashes) {
  FingerprintScratch scratch;
  FingerprintParams p;
  std::vector<double> fp(25);

  const std::vector<float> flat(3000, 87.5f);
  EXPECT_EQ(barcode_fingerprint(flat, p, scratch, fp), FingerprintError::kMadZero);
  EXPECT_TRUE(std::isnan(fp[0]));

  Synthetic s = make_read(9);
  s.signal[100] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(barcode_fingerprint(s.signal, p, scratch, fp), FingerprintError::kNonFinite);
  s.signal[100] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(barcode_fingerprint(s.signal, p, scratch, fp), FingerprintError::kNonFinite);

  EXPECT_EQ(barcode_fingerprint({}, p, scratch, fp), FingerprintError::kWindowTooShort);
  const std::vector<float> tiny = {1, 2, 3, 4, 5};
  EXPECT_EQ(barcode_fingerprint(tiny, p, scratch, fp), FingerprintError::kWindowTooShort);

  // Too few events for 110 change points: 40 clean steps in 3000 samples.
  Synthetic few = make_read(4, 40, 70, 80, 0.0);
  EXPECT_EQ(barcode_fingerprint(few.signal, p, scratch, fp),
            FingerprintError::kSegmentationFailed);

  // Two-level signal with MAD > 0 but mostly flat: segmentation fails, no crash.
  std::vector<float> two(3000, 80.0f);
  for (size_t i = 1500; i < 3000; ++i) two[i] = 90.0f;
  EXPECT_EQ(barcode_fingerprint(two, p, scratch, fp), FingerprintError::kSegmentationFailed);

  for (auto e : {FingerprintError::kWindowTooShort, FingerprintError::kNonFinite,
                 FingerprintError::kMadZero, FingerprintError::kSegmentationFailed,
                 FingerprintError::kSegmentStdZero}) {
    EXPECT_FALSE(fingerprint_error_reason(e).empty());
  }
  EXPECT_EQ(fingerprint_error_reason(FingerprintError::kSegmentationFailed),
            "event segmentation failed");
}

TEST(Fingerprint, RandomNoiseNeverCrashes) {
  // Property: any finite input of any length gives kNone or a reason, and kNone fingerprints are
  // finite with the z-score property over all events.
  std::mt19937 rng(42);
  std::normal_distribution<float> g(90.0f, 10.0f);
  FingerprintScratch scratch;
  FingerprintParams p;
  std::vector<double> fp(25);
  for (size_t n : {0u, 1u, 50u, 111u, 500u, 1100u, 2000u, 5000u, 11500u}) {
    std::vector<float> x(n);
    for (float& v : x) v = g(rng);
    const auto err = barcode_fingerprint(x, p, scratch, fp);
    if (err == FingerprintError::kNone) {
      for (double v : fp) EXPECT_TRUE(std::isfinite(v));
    } else {
      EXPECT_FALSE(fingerprint_error_reason(err).empty());
    }
  }
}

}  // namespace
}  // namespace escpod::signal
