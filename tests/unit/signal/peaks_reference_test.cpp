// find_peaks against a plain reference: the algorithm as it stood before the SIMD candidate scan,
// the per-cluster distance filter and the prominence walks that jump over smaller peaks, written
// as directly as docs/demux.md §3.5 reads. Peaks and every property must agree bit for bit on
// random traces of the kinds the callers pass (random walks, smooth t-statistic-like traces,
// quantised values with ties, flat tops and zeros of both signs, long ramps, NaN and
// infinities), under all option combinations.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "escpod/signal/peaks.hpp"

namespace escpod::signal {
namespace {

struct Result {
  std::vector<size_t> peaks;
  PeakProperties props;
};

// Local maxima; a flat top is reported at its middle (rounded down).
std::vector<size_t> reference_candidates(const std::vector<double>& x) {
  std::vector<size_t> out;
  const size_t n = x.size();
  for (size_t i = 1; i + 1 < n; ++i) {
    if (!(x[i - 1] < x[i])) continue;
    size_t ahead = i + 1;
    while (ahead < n - 1 && x[ahead] == x[i]) ++ahead;
    if (x[ahead] < x[i]) {
      out.push_back((i + ahead - 1) / 2);
      i = ahead;
    }
  }
  return out;
}

// Highest first (a stable ascending sort by height walked backwards: the later of equal heights
// first); each kept peak removes every other one closer than ceil(distance).
std::vector<size_t> reference_distance(const std::vector<double>& x, std::vector<size_t> c,
                                       double distance) {
  const auto d = static_cast<size_t>(std::ceil(distance));
  std::vector<size_t> order(c.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return x[c[a]] < x[c[b]]; });
  std::vector<bool> keep(c.size(), true);
  for (size_t r = order.size(); r-- > 0;) {
    const size_t k = order[r];
    if (!keep[k]) continue;
    for (size_t j = 0; j < c.size(); ++j) {
      const size_t gap = c[j] > c[k] ? c[j] - c[k] : c[k] - c[j];
      if (j != k && gap < d) keep[j] = false;
    }
  }
  std::vector<size_t> out;
  for (size_t k = 0; k < c.size(); ++k)
    if (keep[k]) out.push_back(c[k]);
  return out;
}

// Walks away from the peak while samples are <= its height; the base is the lowest sample met,
// the first one met on ties.
void reference_prominence(const std::vector<double>& x, size_t peak, PeakProperties& p) {
  const double h = x[peak];
  double left_min = h, right_min = h;
  size_t left = peak, right = peak;
  for (size_t i = peak + 1; i-- > 0 && x[i] <= h;) {
    if (x[i] < left_min) {
      left_min = x[i];
      left = i;
    }
  }
  for (size_t i = peak; i < x.size() && x[i] <= h; ++i) {
    if (x[i] < right_min) {
      right_min = x[i];
      right = i;
    }
  }
  p.prominences.push_back(h - std::max(left_min, right_min));
  p.left_bases.push_back(left);
  p.right_bases.push_back(right);
}

// Width at peak - rel_height * prominence, between linearly interpolated crossings.
double reference_width(const std::vector<double>& x, size_t peak, double prominence, size_t left,
                       size_t right, double rel_height) {
  const double height = x[peak] - prominence * rel_height;
  size_t i = peak;
  while (left < i && height < x[i]) --i;
  double left_ip = static_cast<double>(i);
  if (x[i] < height) left_ip += (height - x[i]) / (x[i + 1] - x[i]);
  i = peak;
  while (i < right && height < x[i]) ++i;
  double right_ip = static_cast<double>(i);
  if (x[i] < height) right_ip -= (height - x[i]) / (x[i - 1] - x[i]);
  return right_ip - left_ip;
}

// Keeps entry k of the peaks and of the filled properties where keep[k].
void keep_only(const std::vector<bool>& keep, Result& r) {
  Result out;
  for (size_t k = 0; k < keep.size(); ++k) {
    if (!keep[k]) continue;
    out.peaks.push_back(r.peaks[k]);
    out.props.prominences.push_back(r.props.prominences[k]);
    out.props.left_bases.push_back(r.props.left_bases[k]);
    out.props.right_bases.push_back(r.props.right_bases[k]);
    if (!r.props.widths.empty()) out.props.widths.push_back(r.props.widths[k]);
  }
  r = out;
}

Result reference_find_peaks(const std::vector<double>& x, const PeakOptions& o) {
  Result r;
  r.peaks = reference_candidates(x);
  if (o.min_distance > 1.0 && r.peaks.size() > 1) {
    r.peaks = reference_distance(x, r.peaks, o.min_distance);
  }
  if (o.min_prominence >= 0.0 || o.min_width >= 0.0) {
    for (size_t peak : r.peaks) reference_prominence(x, peak, r.props);
    if (o.min_prominence >= 0.0) {
      std::vector<bool> keep;
      for (double p : r.props.prominences) keep.push_back(p >= o.min_prominence);
      keep_only(keep, r);
    }
  }
  if (o.min_width >= 0.0) {
    const PeakProperties& p = r.props;
    std::vector<bool> keep;
    for (size_t k = 0; k < r.peaks.size(); ++k) {
      r.props.widths.push_back(reference_width(x, r.peaks[k], p.prominences[k], p.left_bases[k],
                                               p.right_bases[k], o.rel_height));
      keep.push_back(r.props.widths[k] >= o.min_width);
    }
    keep_only(keep, r);
  }
  return r;
}

// ---- Random traces ----------------------------------------------------------------------------

enum class Kind { kWalk, kSmooth, kQuantised, kLevels, kRamps, kCount };

std::vector<double> make_trace(std::mt19937_64& rng, Kind kind, size_t n) {
  std::normal_distribution<double> g(0.0, 1.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> x(n);
  double v = 0.0;
  std::vector<double> noise(n + 8);
  for (double& e : noise) e = g(rng);
  size_t ramp_left = 0;
  double slope = 0.0;
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case Kind::kWalk: v += g(rng); break;
      case Kind::kSmooth:  // moving mean of 8: dense peaks, many closer than the distance
        v = std::accumulate(noise.begin() + static_cast<std::ptrdiff_t>(i),
                            noise.begin() + static_cast<std::ptrdiff_t>(i + 8), 0.0) / 8.0;
        break;
      case Kind::kQuantised: v += g(rng); break;  // rounded below: flat tops, ties, -0.0
      case Kind::kLevels: v = std::floor(u(rng) * 4.0); break;
      case Kind::kRamps:  // long monotone stretches: long prominence walks, shallow plateaus
        if (ramp_left == 0) {
          ramp_left = 1 + static_cast<size_t>(u(rng) * 200.0);
          slope = u(rng) < 0.15 ? 0.0 : g(rng);
        }
        --ramp_left;
        v += slope + 0.05 * g(rng);
        break;
      case Kind::kCount: break;
    }
    x[i] = v;
  }
  if (kind == Kind::kQuantised) {
    const double step = u(rng) < 0.5 ? 1.0 : 3.0;
    for (double& e : x) e = std::round(e / step) * 0.5;  // std::round(-0.3) is -0.0
  }
  return x;
}

// Sprinkles NaN and infinities (LLR traces carry both), sometimes in runs.
void add_specials(std::mt19937_64& rng, std::vector<double>& x) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double nan_rate = u(rng) < 0.5 ? 0.0 : 0.03 * u(rng);
  const double inf_rate = u(rng) < 0.7 ? 0.0 : 0.01 * u(rng);
  for (size_t i = 0; i < x.size(); ++i) {
    if (u(rng) < nan_rate) {
      const size_t run = u(rng) < 0.8 ? 1 : 1 + static_cast<size_t>(u(rng) * 10.0);
      for (size_t j = i; j < std::min(x.size(), i + run); ++j)
        x[j] = std::numeric_limits<double>::quiet_NaN();
    } else if (u(rng) < inf_rate) {
      x[i] = (u(rng) < 0.5 ? 1.0 : -1.0) * std::numeric_limits<double>::infinity();
    }
  }
}

PeakOptions random_options(std::mt19937_64& rng, const std::vector<double>& x) {
  std::uniform_int_distribution<size_t> pick(0, 1000);
  const double distances[] = {0.0, 1.0, 0.5, 1.5, 2.0, 2.5, 3.0, 5.0, 6.0, 10.0, 17.3, 64.0};
  const double widths[] = {-1.0, -1.0, 0.0, 1.5, 3.0, 10.0};
  const double rel_heights[] = {0.5, 1.0, 0.0, 0.25, 1.5};
  PeakOptions o;
  o.min_distance = distances[pick(rng) % std::size(distances)];
  switch (pick(rng) % 4) {
    case 0: o.min_prominence = -1.0; break;
    case 1: o.min_prominence = 0.0; break;
    case 2: o.min_prominence = 0.5; break;
    default: {  // a threshold of the trace's scale (as the LLR picker's prominence x std)
      double lo = 0.0, hi = 0.0;
      for (double v : x) {
        if (!std::isfinite(v)) continue;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      o.min_prominence = 0.1 * (hi - lo);
    }
  }
  o.min_width = widths[pick(rng) % std::size(widths)];
  o.rel_height = rel_heights[pick(rng) % std::size(rel_heights)];
  return o;
}

// Bit patterns, so that NaN results compare (and -0.0 differs from 0.0).
std::vector<uint64_t> bits(const std::vector<double>& v) {
  std::vector<uint64_t> out;
  for (double d : v) out.push_back(std::bit_cast<uint64_t>(d));
  return out;
}

TEST(PeaksReference, RandomTracesMatchBitForBit) {
  std::mt19937_64 rng(20240611);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  PeakScratch scratch;  // one scratch and output for all calls, as a worker reuses them
  std::vector<size_t> peaks;
  for (int trial = 0; trial < 4000; ++trial) {
    const auto kind = static_cast<Kind>(trial % static_cast<int>(Kind::kCount));
    const double size_class = u(rng);  // short, the callers' usual 1,000-3,000, or up to 12,000
    const double max_n = size_class < 0.45 ? 40.0 : size_class < 0.97 ? 3000.0 : 12000.0;
    const auto n = static_cast<size_t>(u(rng) * max_n);
    std::vector<double> x = make_trace(rng, kind, n);
    if (trial % 3 == 0) add_specials(rng, x);
    const PeakOptions o = random_options(rng, x);
    find_peaks(x, o, scratch, peaks);
    const Result want = reference_find_peaks(x, o);
    const std::string where = "trial " + std::to_string(trial) + " kind " +
                              std::to_string(trial % static_cast<int>(Kind::kCount)) + " n " +
                              std::to_string(n) + " distance " + std::to_string(o.min_distance) +
                              " prominence " + std::to_string(o.min_prominence) + " width " +
                              std::to_string(o.min_width) + " rel_height " +
                              std::to_string(o.rel_height);
    ASSERT_EQ(peaks, want.peaks) << where;
    const PeakProperties& got = scratch.props;
    ASSERT_EQ(bits(got.prominences), bits(want.props.prominences)) << where;
    ASSERT_EQ(got.left_bases, want.props.left_bases) << where;
    ASSERT_EQ(got.right_bases, want.props.right_bases) << where;
    ASSERT_EQ(bits(got.widths), bits(want.props.widths)) << where;
  }
}

// Ties in the distance filter: equal heights (zeros of both signs among them) in clusters of
// every size, where only the later-first visiting order decides.
TEST(PeaksReference, DistanceTiesAndSignedZeros) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> level(0, 2);
  PeakScratch scratch;
  std::vector<size_t> peaks;
  for (int trial = 0; trial < 3000; ++trial) {
    // Peaks every 2-4 samples on a floor of -1, heights from {-0.0, 0.0, 1.0}.
    std::vector<double> x = {-1.0};
    while (x.size() < 200) {
      const int l = level(rng);
      x.push_back(l == 0 ? -0.0 : l == 1 ? 0.0 : 1.0);
      for (int f = 0; f < 1 + trial % 3; ++f) x.push_back(-1.0);
    }
    PeakOptions o;
    o.min_distance = 2.0 + trial % 9;
    if (trial % 2) o.min_prominence = 0.0;
    find_peaks(x, o, scratch, peaks);
    const Result want = reference_find_peaks(x, o);
    ASSERT_EQ(peaks, want.peaks) << "trial " << trial;
    ASSERT_EQ(bits(scratch.props.prominences), bits(want.props.prominences)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace escpod::signal
