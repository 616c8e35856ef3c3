#include "escpod/signal/robust_stats.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cstdint>
#include <cmath>
#include <limits>

#include "pairwise_sum.hpp"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace escpod::signal {

namespace {

// Median of work[0, n) (n >= 1), reordering it. Even n: mean of the two middle values in the
// element type T (for float this equals numpy's float32 mean of two values: halving is exact).
// The reference for the bucketed selection below, and its path for small or non-finite input.
template <typename T>
T median_inplace(std::vector<T>& work) {
  const size_t n = work.size();
  const size_t hi = n / 2;
  std::nth_element(work.begin(), work.begin() + static_cast<std::ptrdiff_t>(hi), work.end());
  const T upper = work[hi];
  if (n % 2 == 1) return upper;
  const T lower = *std::max_element(work.begin(), work.begin() + static_cast<std::ptrdiff_t>(hi));
  return (lower + upper) / T(2);
}

// Exact order statistics of n float32 values by one bucketing pass (the hot path of the boundary
// checks: medians, MADs and percentiles of thousands of samples per read). Values are binned by
// the monotone map bin(v) = min(int((v - min) * scale), n_bins - 1): v < w implies
// bin(v) <= bin(w), so the value of rank r lies in the bin where the cumulative count passes r,
// and only that bin's values are ordered. The result is the exact element std::nth_element would
// place at r (zeros of either sign compare equal there and here). Below kMinBucketed values, or
// when a value is not finite, the caller uses std::nth_element instead (`false` returned).
//
// The passes run four values at a time with SSE2 (part of every x86-64 CPU, so there is no
// dispatch); elsewhere one at a time.
constexpr size_t kMinBucketed = 256;
constexpr size_t kMaxBins = 1024;
constexpr size_t kBlock = 512;  // values binned per block (on the stack)

// Bins for n values: about four values each, 64 to kMaxBins. The histograms are cleared and
// summed bin by bin, so for the shorter spans (the poly(A) checks' ~1,000 samples) 1,024 bins
// cost about as much as binning the values.
size_t bins_for(size_t n) { return std::clamp<size_t>(std::bit_ceil(n / 4), 64, kMaxBins); }

// The values selected from: the samples themselves, or their absolute deviations from m (for the
// MAD, computed on the fly: fabs(x - m) clears the sign bit of x - m, as the SSE2 path does).
struct Samples {
  const float* x;
  float at(size_t i) const { return x[i]; }
#ifdef __SSE2__
  __m128 at4(size_t i) const { return _mm_loadu_ps(x + i); }
#endif
};
struct AbsDeviations {
  const float* x;
  float m;
  float at(size_t i) const { return std::fabs(x[i] - m); }
#ifdef __SSE2__
  __m128 at4(size_t i) const {
    return _mm_andnot_ps(_mm_set1_ps(-0.0f), _mm_sub_ps(_mm_loadu_ps(x + i), _mm_set1_ps(m)));
  }
#endif
};

struct Extent {
  float lo, hi;
  bool finite;
};

// Smallest and largest value and whether all are finite (an infinity would be one of the two).
template <typename Source>
Extent extent_of(size_t n, const Source& src) {
  Extent e{src.at(0), src.at(0), true};
  bool nan = false;
  size_t i = 0;
#ifdef __SSE2__
  // Two sets of accumulators, so that consecutive vectors do not wait on each other.
  __m128 lo0 = _mm_set1_ps(e.lo), hi0 = lo0, lo1 = lo0, hi1 = lo0;
  __m128 nan0 = _mm_setzero_ps(), nan1 = nan0;
  for (; i + 8 <= n; i += 8) {
    const __m128 v0 = src.at4(i), v1 = src.at4(i + 4);
    lo0 = _mm_min_ps(lo0, v0);
    hi0 = _mm_max_ps(hi0, v0);
    nan0 = _mm_or_ps(nan0, _mm_cmpunord_ps(v0, v0));
    lo1 = _mm_min_ps(lo1, v1);
    hi1 = _mm_max_ps(hi1, v1);
    nan1 = _mm_or_ps(nan1, _mm_cmpunord_ps(v1, v1));
  }
  alignas(16) float l[4], h[4];
  _mm_store_ps(l, _mm_min_ps(lo0, lo1));
  _mm_store_ps(h, _mm_max_ps(hi0, hi1));
  nan = _mm_movemask_ps(_mm_or_ps(nan0, nan1)) != 0;
  for (int j = 0; j < 4; ++j) {
    e.lo = std::min(e.lo, l[j]);
    e.hi = std::max(e.hi, h[j]);
  }
#endif
  for (; i < n; ++i) {
    const float v = src.at(i);
    e.lo = std::min(e.lo, v);
    e.hi = std::max(e.hi, v);
    nan = nan || std::isnan(v);
  }
  e.finite = !nan && std::isfinite(e.lo) && std::isfinite(e.hi);
  return e;
}

// The monotone bin map of the values [lo, hi] onto n_bins bins.
struct BinMap {
  float lo, scale, top;  // top: n_bins - 1
  size_t n_bins;
  BinMap(float lo_, float hi_, size_t n_bins_)
      : lo(lo_), scale(static_cast<float>(n_bins_) / (hi_ - lo_)), top(static_cast<float>(n_bins_ - 1)),
        n_bins(n_bins_) {}
  int bin(float v) const { return static_cast<int>(std::min((v - lo) * scale, top)); }
#ifdef __SSE2__
  __m128i bin4(__m128 v) const {
    const __m128 t = _mm_mul_ps(_mm_sub_ps(v, _mm_set1_ps(lo)), _mm_set1_ps(scale));
    return _mm_cvttps_epi32(_mm_min_ps(t, _mm_set1_ps(top)));
  }
#endif
};

// Bins of values [first, first + count) into `out` (bins < kMaxBins fit 16 bits).
template <typename Source>
void bin_block(size_t first, size_t count, const Source& src, const BinMap& map, uint16_t* out) {
  size_t j = 0;
#ifdef __SSE2__
  for (; j + 8 <= count; j += 8) {
    const __m128i lo = map.bin4(src.at4(first + j)), hi = map.bin4(src.at4(first + j + 4));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), _mm_packs_epi32(lo, hi));
  }
#endif
  for (; j < count; ++j) out[j] = static_cast<uint16_t>(map.bin(src.at(first + j)));
}

// The bins of the n values, kept from the counting pass for the gathering one when n is at most
// kMaxKept (32 KiB on the stack): the gather then compares eight bins at once instead of
// mapping every value again.
constexpr size_t kMaxKept = 16384;
using KeptBins = std::array<uint16_t, kMaxKept>;

// Exclusive prefix counts of the bins: start[b] is the rank of bin b's first value,
// start[map.n_bins] = n. Four interleaved histograms, since neighbouring samples often share a bin
// and one counter would serialise on its own increment; only their first n_bins are cleared.
// `kept`: null, or room for the n bins.
template <typename Source>
void bin_starts(size_t n, const Source& src, const BinMap& map, std::array<uint32_t, kMaxBins + 1>& start,
                uint16_t* kept) {
  std::array<std::array<uint32_t, kMaxBins>, 4> counts;
  for (auto& c : counts) std::fill_n(c.begin(), map.n_bins, 0u);
  std::array<uint16_t, kBlock> block;
  for (size_t first = 0; first < n; first += kBlock) {
    const size_t count = std::min(kBlock, n - first);
    uint16_t* bins = kept ? kept + first : block.data();
    bin_block(first, count, src, map, bins);
    size_t j = 0;
    for (; j + 4 <= count; j += 4)
      for (size_t h = 0; h < 4; ++h) ++counts[h][bins[j + h]];
    for (; j < count; ++j) ++counts[0][bins[j]];
  }
  start[0] = 0;
  for (size_t b = 0; b < map.n_bins; ++b)
    start[b + 1] = start[b] + counts[0][b] + counts[1][b] + counts[2][b] + counts[3][b];
}

// The values of bin `b` (count of them) into `gather`, found from the kept bins when there are
// any, else by mapping every value again. A wanted bin holds a small share of the values: several
// are compared at once and the rare matches copied one by one.
template <typename Source>
void gather_bin(size_t n, const Source& src, const BinMap& map, const uint16_t* kept, int b, size_t count,
                std::vector<float>& gather) {
  gather.resize(count);
  size_t m = 0, i = 0;
  if (kept) {
#ifdef __SSE2__
    const __m128i want = _mm_set1_epi16(static_cast<int16_t>(b));
    for (; i + 8 <= n; i += 8) {
      const __m128i bins = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kept + i));
      // Two mask bits per 16-bit lane: keep the low one.
      unsigned hit = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi16(bins, want))) & 0x5555u;
      for (; hit != 0; hit &= hit - 1) gather[m++] = src.at(i + static_cast<size_t>(__builtin_ctz(hit)) / 2);
    }
#endif
    for (; i < n; ++i)
      if (kept[i] == b) gather[m++] = src.at(i);
  } else {
#ifdef __SSE2__
    const __m128i want = _mm_set1_epi32(b);
    for (; i + 4 <= n; i += 4) {
      int hit = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(map.bin4(src.at4(i)), want)));
      for (; hit != 0; hit &= hit - 1) gather[m++] = src.at(i + static_cast<size_t>(__builtin_ctz(hit)));
    }
#endif
    for (; i < n; ++i)
      if (map.bin(src.at(i)) == b) gather[m++] = src.at(i);
  }
  assert(m == count);
}

// The n values binned: the bin map, the prefix counts of the bins, and every value's bin when
// n <= kMaxKept. Built over a finite extent with lo < hi; ok() is false when the map's scale
// overflows (then the caller takes the reference path).
template <typename Source>
class Histogram {
 public:
  Histogram(size_t n, const Source& src, const Extent& e)
      : m_n(n), m_src(src), m_map(e.lo, e.hi, bins_for(n)), m_kept(n <= kMaxKept ? m_kept_bins.data() : nullptr) {
    if (ok()) bin_starts(n, src, m_map, m_start, m_kept);
  }
  bool ok() const { return std::isfinite(m_map.scale); }
  const BinMap& map() const { return m_map; }

  // The values of the given ranks into out, each ordered within its bin only.
  void select(std::span<const size_t> ranks, std::span<float> out, std::vector<float>& gather) const {
    int gathered_bin = -1;
    for (size_t k = 0; k < ranks.size(); ++k) {
      const size_t r = ranks[k];
      const auto last = m_start.begin() + static_cast<std::ptrdiff_t>(m_map.n_bins) + 1;
      const int b = static_cast<int>(std::upper_bound(m_start.begin() + 1, last, r) - m_start.begin()) - 1;
      const size_t first = m_start[static_cast<size_t>(b)];
      if (b != gathered_bin) {
        gather_bin(m_n, m_src, m_map, m_kept, b, m_start[static_cast<size_t>(b) + 1] - first, gather);
        gathered_bin = b;
      }
      const auto at = gather.begin() + static_cast<std::ptrdiff_t>(r - first);
      std::nth_element(gather.begin(), at, gather.end());
      out[k] = *at;
    }
  }

  // How many values lie in bins [centre - radius, centre + radius] (clipped to the bins; none
  // for a negative radius).
  size_t count_around(int centre, int radius) const {
    if (radius < 0) return 0;
    const int top = static_cast<int>(m_map.n_bins) - 1;
    const auto lo = static_cast<size_t>(std::max(centre - radius, 0));
    const auto hi = static_cast<size_t>(std::min(centre + radius, top));
    return m_start[hi + 1] - m_start[lo];
  }

 private:
  size_t m_n;
  const Source& m_src;
  BinMap m_map;
  std::array<uint32_t, kMaxBins + 1> m_start;
  KeptBins m_kept_bins;
  uint16_t* m_kept;
};

// `known`: bounds of the values already known (lo <= every value <= hi, both finite), which
// spares the extent pass.
template <typename Source>
bool select_ranks_bucketed(size_t n, const Source& src, std::span<const size_t> ranks,
                           std::span<float> out, std::vector<float>& gather, const Extent* known = nullptr) {
  if (n < kMinBucketed) return false;
  const Extent e = known ? *known : extent_of(n, src);
  if (!e.finite) return false;
  if (e.lo == e.hi) {
    for (float& o : out) o = e.lo;
    return true;
  }
  const Histogram<Source> histogram(n, src, e);
  if (!histogram.ok()) return false;
  histogram.select(ranks, out, gather);
  return true;
}

// The ranks of the median of n values (n >= 1): both middle ranks, the same one twice for odd n.
std::array<size_t, 2> middle_ranks(size_t n) { return {n / 2, n / 2 - (n % 2 == 0 ? 1 : 0)}; }

// The median from the values of middle_ranks, as median_inplace computes it.
float middle_value(size_t n, const std::array<float, 2>& at) { return n % 2 == 1 ? at[0] : (at[1] + at[0]) / 2.0f; }

// The median of the n values of `src`, as median_inplace computes it.
template <typename Source>
float median_of(size_t n, const Source& src, std::vector<float>& work, const Extent* known = nullptr) {
  const std::array<size_t, 2> ranks = middle_ranks(n);
  std::array<float, 2> at{};
  if (select_ranks_bucketed(n, src, ranks, at, work, known)) return middle_value(n, at);
  work.resize(n);
  for (size_t i = 0; i < n; ++i) work[i] = src.at(i);
  return median_inplace(work);
}

// The MAD's middle ranks of |x - m| found from the samples' own histogram, sparing the binning of
// the deviations. With w the bin width and c the median's bin, a value in bins c +- (R - 1) lies
// within R w of m, and one outside bins c +- R lies beyond R w. So with R the smallest radius whose
// bins c +- (R - 1) hold more values than the higher wanted rank, both wanted deviations lie in
// [(R - 2) w, R w]; one pass counts the deviations below that bracket (widened by half a bin each
// way for rounding) and gathers those inside. The counts then prove the bracket right, or `false`
// sends the caller to binning the deviations.
bool mad_ranks_by_bracket(std::span<const float> x, float m, const Histogram<Samples>& h,
                          const std::array<size_t, 2>& ranks, std::array<float, 2>& out,
                          std::vector<float>& gather) {
  const size_t n = x.size();
  const size_t r_lo = std::min(ranks[0], ranks[1]), r_hi = std::max(ranks[0], ranks[1]);
  const int centre = h.map().bin(m);
  int radius = 1;
  while (h.count_around(centre, radius - 1) <= r_hi) ++radius;
  const float width = 1.0f / h.map().scale;
  const float lo_t = static_cast<float>(std::max(radius - 2.5, 0.0)) * width;
  const float hi_t = (static_cast<float>(radius) + 0.5f) * width;
  // At most the values of bins c +- (R + 1) outside c +- (R - 4) can fall inside the bracket; room
  // for a few more than that, and a miss sends the caller to the full path.
  const size_t room = h.count_around(centre, radius + 1) - h.count_around(centre, radius - 4) + 64;
  gather.resize(room);
  size_t below = 0, inside = 0, i = 0;
  const auto take = [&](size_t at) {
    if (inside < room) gather[inside] = std::fabs(x[at] - m);
    ++inside;
  };
#ifdef __SSE2__
  const AbsDeviations dev{x.data(), m};
  const __m128 lo4 = _mm_set1_ps(lo_t), hi4 = _mm_set1_ps(hi_t);
  // Per-lane counts of the deviations below (a true compare is -1 in its lane; n / 4 < 2^32).
  __m128i below4 = _mm_setzero_si128();
  for (; i + 4 <= n; i += 4) {
    const __m128 d = dev.at4(i);
    const __m128 is_below = _mm_cmplt_ps(d, lo4);
    below4 = _mm_sub_epi32(below4, _mm_castps_si128(is_below));
    int hit = _mm_movemask_ps(_mm_andnot_ps(is_below, _mm_cmple_ps(d, hi4)));
    for (; hit != 0; hit &= hit - 1) take(i + static_cast<size_t>(__builtin_ctz(hit)));
  }
  alignas(16) std::array<uint32_t, 4> lanes;
  _mm_store_si128(reinterpret_cast<__m128i*>(lanes.data()), below4);
  for (uint32_t c : lanes) below += c;
#endif
  for (; i < n; ++i) {
    const float d = std::fabs(x[i] - m);
    if (d < lo_t) {
      ++below;
    } else if (d <= hi_t) {
      take(i);
    }
  }
  if (inside > room || below > r_lo || below + inside <= r_hi) return false;
  gather.resize(inside);
  for (size_t k = 0; k < 2; ++k) {
    const auto at = gather.begin() + static_cast<std::ptrdiff_t>(ranks[k] - below);
    std::nth_element(gather.begin(), at, gather.end());
    out[k] = *at;
  }
  return true;
}

}  // namespace

float median_f32(std::span<const float> values, std::vector<float>& work) {
  if (values.empty()) return 0.0f;
  return median_of(values.size(), Samples{values.data()}, work);
}

MedianMad median_mad_f32(std::span<const float> values, std::vector<float>& work) {
  MedianMad out;
  if (values.empty()) return out;
  const size_t n = values.size();
  const Samples samples{values.data()};
  const Extent e = n >= kMinBucketed ? extent_of(n, samples) : Extent{0.0f, 0.0f, false};
  if (e.finite && e.lo < e.hi) {
    const Histogram<Samples> histogram(n, samples, e);
    if (histogram.ok()) {
      const std::array<size_t, 2> ranks = middle_ranks(n);
      std::array<float, 2> at{};
      histogram.select(ranks, at, work);
      out.median = middle_value(n, at);
      if (mad_ranks_by_bracket(values, out.median, histogram, ranks, at, work)) {
        out.mad = middle_value(n, at);
        return out;
      }
    }
  }
  // Small, constant or non-finite input, or a bracket the rounding defeated: select each in turn.
  out.median = median_of(n, samples, work, e.finite ? &e : nullptr);
  const float m = out.median;
  // Float subtraction is monotone, so no deviation exceeds those of the extremes: the deviations'
  // bounds without a pass over them.
  const Extent dev{0.0f, std::max(std::fabs(e.lo - m), std::fabs(e.hi - m)), true};
  out.mad = median_of(n, AbsDeviations{values.data(), m}, work, e.finite && std::isfinite(dev.hi) ? &dev : nullptr);
  return out;
}

void percentiles_f32(std::span<const float> values, std::span<const double> qs, std::span<double> out,
                     std::vector<float>& work) {
  const size_t n = values.size();
  constexpr size_t kMaxQs = 4;
  assert(qs.size() <= kMaxQs && out.size() == qs.size());
  if (n == 0) {
    for (double& o : out) o = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  std::array<size_t, 2 * kMaxQs> ranks{};
  std::array<float, 2 * kMaxQs> at{};
  std::array<double, kMaxQs> frac{};
  for (size_t k = 0; k < qs.size(); ++k) {
    const double vi = qs[k] / 100.0 * static_cast<double>(n - 1);
    const double lo_d = std::floor(vi);
    const size_t lo = std::min(static_cast<size_t>(lo_d), n - 1);
    ranks[2 * k] = lo;
    ranks[2 * k + 1] = std::min(lo + 1, n - 1);
    frac[k] = vi - lo_d;
  }
  const std::span<const size_t> wanted(ranks.data(), 2 * qs.size());
  if (!select_ranks_bucketed(n, Samples{values.data()}, wanted,
                             std::span<float>(at.data(), wanted.size()), work)) {
    // numpy's partition at lo, then the smallest value above it (the reference path).
    for (size_t k = 0; k < wanted.size(); k += 2) {
      work.assign(values.begin(), values.end());
      const auto lo_it = work.begin() + static_cast<std::ptrdiff_t>(wanted[k]);
      std::nth_element(work.begin(), lo_it, work.end());
      at[k] = *lo_it;
      at[k + 1] = wanted[k + 1] == wanted[k] ? at[k] : *std::min_element(lo_it + 1, work.end());
    }
  }
  for (size_t k = 0; k < qs.size(); ++k) {
    const double a = at[2 * k], b = at[2 * k + 1], t = frac[k];
    const double diff = b - a;
    out[k] = t >= 0.5 ? b - diff * (1.0 - t) : a + diff * t;
  }
}

double median_f64(std::span<const double> values, std::vector<double>& work) {
  if (values.empty()) return 0.0;
  work.assign(values.begin(), values.end());
  return median_inplace(work);
}

double mad_f64(std::span<const double> values, double median, std::vector<double>& work) {
  if (values.empty()) return 0.0;
  work.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) work[i] = std::fabs(values[i] - median);
  return median_inplace(work);
}

double numpy_sum(std::span<const double> values) {
  // add.reduce starts from the identity 0 and adds the pairwise sum of all values.
  return 0.0 + detail::pairwise_sum(values.data(), values.size());
}

double numpy_mean(std::span<const double> values) {
  if (values.empty()) return 0.0;
  return numpy_sum(values) / static_cast<double>(values.size());
}

double numpy_std(std::span<const double> values, double mean, std::vector<double>& work) {
  if (values.empty()) return 0.0;
  work.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double d = values[i] - mean;
    work[i] = d * d;
  }
  return std::sqrt(numpy_sum(work) / static_cast<double>(values.size()));
}

}  // namespace escpod::signal
