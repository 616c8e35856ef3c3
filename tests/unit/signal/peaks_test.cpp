// Expected values worked out by hand from scipy.signal.find_peaks' documented rules
// (docs/demux.md §3.5).
#include "escpod/signal/peaks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace escpod::signal {
namespace {

std::vector<size_t> peaks_of(const std::vector<double>& x, const PeakOptions& o = {}) {
  PeakScratch s;
  std::vector<size_t> p;
  find_peaks(x, o, s, p);
  return p;
}

TEST(Peaks, LocalMaximaAndPlateaus) {
  EXPECT_EQ(peaks_of({0, 1, 0}), (std::vector<size_t>{1}));
  EXPECT_EQ(peaks_of({0, 1, 1, 0}), (std::vector<size_t>{1}));        // (1 + 2) / 2
  EXPECT_EQ(peaks_of({0, 1, 1, 1, 0}), (std::vector<size_t>{2}));
  EXPECT_EQ(peaks_of({0, 1, 1, 1, 1, 0}), (std::vector<size_t>{2}));  // (1 + 4) / 2
  EXPECT_EQ(peaks_of({2, 1, 0}), (std::vector<size_t>{}));            // edges never count
  EXPECT_EQ(peaks_of({0, 1, 2}), (std::vector<size_t>{}));
  EXPECT_EQ(peaks_of({0, 1, 1}), (std::vector<size_t>{}));            // plateau to the end
  EXPECT_EQ(peaks_of({0, 2, 1, 3, 1, 3, 3, 0}), (std::vector<size_t>{1, 3, 5}));
  EXPECT_EQ(peaks_of({0, NAN, 0, 1, 0}), (std::vector<size_t>{3}));
  EXPECT_EQ(peaks_of({}), (std::vector<size_t>{}));
}

TEST(Peaks, DistanceKeepsHighestFirst) {
  const std::vector<double> x = {0, 3, 0, 5, 0, 4, 0, 1, 0, 2, 0};  // peaks 1 3 5 7 9
  PeakOptions o;
  o.min_distance = 3;  // removes neighbours closer than 3
  // 5 (at 3) removes 1 and 5; then 2 (at 9) removes 7.
  EXPECT_EQ(peaks_of(x, o), (std::vector<size_t>{3, 9}));
  o.min_distance = 2.5;  // ceil -> 3, same
  EXPECT_EQ(peaks_of(x, o), (std::vector<size_t>{3, 9}));
  o.min_distance = 1;
  EXPECT_EQ(peaks_of(x, o), (std::vector<size_t>{1, 3, 5, 7, 9}));
  // Equal heights: the later index is visited first and wins.
  const std::vector<double> tie = {0, 2, 0, 2, 0};
  o.min_distance = 3;
  EXPECT_EQ(peaks_of(tie, o), (std::vector<size_t>{3}));
}

TEST(Peaks, ProminenceAndWidth) {
  PeakScratch s;
  std::vector<size_t> p;
  PeakOptions o;
  o.min_prominence = 0.0;
  o.min_width = 0.0;
  o.rel_height = 0.5;
  find_peaks(std::vector<double>{0, 1, 0}, o, s, p);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_DOUBLE_EQ(s.props.prominences[0], 1.0);
  EXPECT_DOUBLE_EQ(s.props.widths[0], 1.0);  // crossings at 0.5 and 1.5
  EXPECT_EQ(s.props.left_bases[0], 0u);
  EXPECT_EQ(s.props.right_bases[0], 2u);

  // Peak 4 at index 2 between minima 1 (left, index 0) and 2 (right, index 4, before the higher
  // 5): prominence 4 - max(1, 2) = 2; reference level at rel_height 1: 2; left crossing between
  // indices 0 and 1 ((2-1)/(3-1) = 0.5), right crossing at index 4 exactly -> width 3.5.
  const std::vector<double> x = {1, 3, 4, 3, 2, 5, 0};
  o.rel_height = 1.0;
  find_peaks(x, o, s, p);
  ASSERT_EQ(p, (std::vector<size_t>{2, 5}));
  EXPECT_DOUBLE_EQ(s.props.prominences[0], 2.0);
  EXPECT_EQ(s.props.left_bases[0], 0u);
  EXPECT_EQ(s.props.right_bases[0], 4u);
  EXPECT_DOUBLE_EQ(s.props.widths[0], 3.5);
  EXPECT_DOUBLE_EQ(s.props.prominences[1], 4.0);  // 5 - max(min left 1, min right 0)
  EXPECT_DOUBLE_EQ(s.props.widths[1], 5.8);        // level 1: crossings at 0 and 6 - 1/5

  o.min_prominence = 2.5;
  find_peaks(x, o, s, p);
  EXPECT_EQ(p, (std::vector<size_t>{5}));
  o.min_prominence = 0.0;
  o.min_width = 3.6;
  find_peaks(x, o, s, p);
  EXPECT_EQ(p, (std::vector<size_t>{5}));  // peak 5: bases 0 and 6, level 0 -> wide
}

TEST(Peaks, RandomAgreesWithBruteForceDefinition) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(0, 5);
  PeakScratch s;
  std::vector<size_t> p;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> x(static_cast<size_t>(3 + trial % 40));
    for (double& v : x) v = level(rng);
    find_peaks(x, {}, s, p);
    // Brute force: maximal flat runs [l, r] with a lower neighbour on both sides.
    std::vector<size_t> expect;
    for (size_t l = 1; l + 1 < x.size(); ++l) {
      if (!(x[l - 1] < x[l])) continue;
      size_t r = l;
      while (r + 1 < x.size() && x[r + 1] == x[l]) ++r;
      if (r + 1 < x.size() && x[r + 1] < x[l]) expect.push_back((l + r) / 2);
    }
    EXPECT_EQ(p, expect) << "trial " << trial << " (seed 7)";
  }
}

}  // namespace
}  // namespace escpod::signal
