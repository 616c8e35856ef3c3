#include "escpod/demux/dtw.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace escpod::demux {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Column range [lo, hi) of row i, dtaidistance's band for lengths n (rows) and m (columns).
struct Band {
  size_t window;   // effective W (>= 1)
  size_t extra_lo; // max(0, n - m)
  size_t extra_hi; // max(0, m - n)
  size_t m;
  size_t lo(size_t i) const {
    const size_t back = extra_lo + window - 1;
    return i > back ? i - back : 0;
  }
  size_t hi(size_t i) const { return std::min(m, i + extra_hi + window); }
};

// One band row for DtwBank::kLanes references at once: cells j in [lo, hi) of `cur` from `prev`
// (both laid out [column + 1][lane]). The same operations per lane as dtw_distance; the
// left-neighbour chain is carried in a local array so the compiler can keep it in registers and
// vectorise across lanes (prev is only read, cur only written: no aliasing).
void band_row_lanes(double qi, const double* __restrict ref, const double* __restrict prev,
                    double* __restrict cur, size_t lo, size_t hi, double p2) {
  constexpr size_t L = DtwBank::kLanes;
#if defined(__SSE2__)
  // _mm_min_pd(a, b) is a < b ? a : b per lane, exactly the scalar expression below, so the
  // results are bit-identical to dtw_distance (tests compare every bank distance to it).
  static_assert(L == 8);
  const __m128d q = _mm_set1_pd(qi), pen = _mm_set1_pd(p2);
  __m128d left[4];
  for (auto& v : left) v = _mm_set1_pd(kInf);
  for (size_t j = lo; j < hi; ++j) {
    const double* rj = ref + j * L;
    const double* diag = prev + j * L;
    const double* up = prev + (j + 1) * L;
    double* dst = cur + (j + 1) * L;
    for (size_t v = 0; v < 4; ++v) {
      const __m128d d = _mm_sub_pd(q, _mm_loadu_pd(rj + 2 * v));
      __m128d best = _mm_loadu_pd(diag + 2 * v);
      best = _mm_min_pd(_mm_add_pd(_mm_loadu_pd(up + 2 * v), pen), best);
      best = _mm_min_pd(_mm_add_pd(left[v], pen), best);
      left[v] = _mm_add_pd(_mm_mul_pd(d, d), best);
      _mm_storeu_pd(dst + 2 * v, left[v]);
    }
  }
#else
  double left[L];
  for (size_t l = 0; l < L; ++l) left[l] = kInf;
  for (size_t j = lo; j < hi; ++j) {
    const double* rj = ref + j * L;
    const double* diag = prev + j * L;
    const double* up = prev + (j + 1) * L;
    double* dst = cur + (j + 1) * L;
    for (size_t l = 0; l < L; ++l) {
      const double d = qi - rj[l];
      double best = diag[l];
      const double u = up[l] + p2;
      best = u < best ? u : best;
      const double lf = left[l] + p2;
      best = lf < best ? lf : best;
      const double v = d * d + best;
      left[l] = v;
      dst[l] = v;
    }
  }
#endif
}

Band make_band(size_t n, size_t m, size_t window) {
  Band b;
  b.window = window == 0 ? std::max(n, m) : window;
  b.extra_lo = n > m ? n - m : 0;
  b.extra_hi = m > n ? m - n : 0;
  b.m = m;
  return b;
}

}  // namespace

double dtw_distance(std::span<const double> a, std::span<const double> b, const DtwParams& params,
                    std::span<double> scratch) {
  const size_t n = a.size(), m = b.size();
  if (n == 0 || m == 0) return kInf;
  assert(scratch.size() >= dtw_scratch_size(m));
  const double p2 = params.penalty * params.penalty;
  const Band band = make_band(n, m, params.window);
  // prev/cur hold D[i-1][j-1 .. ] shifted by one: index j+1 is column j, index 0 is column -1.
  double* prev = scratch.data();
  double* cur = prev + (m + 1);
  std::fill(prev, prev + 2 * (m + 1), kInf);
  prev[0] = 0.0;  // D[-1][-1]
  for (size_t i = 0; i < n; ++i) {
    const size_t lo = band.lo(i), hi = band.hi(i);
    cur[lo] = kInf;  // the cell left of the band (stale from two rows ago otherwise)
    if (i > 0) prev[0] = kInf;
    const double ai = a[i];
    for (size_t j = lo; j < hi; ++j) {
      const double d = ai - b[j];
      double best = prev[j];
      const double up = prev[j + 1] + p2;
      if (up < best) best = up;
      const double left = cur[j] + p2;
      if (left < best) best = left;
      cur[j + 1] = d * d + best;
    }
    std::swap(prev, cur);
  }
  return std::sqrt(prev[m]);
}

double dtw_distance(std::span<const double> a, std::span<const double> b, const DtwParams& params) {
  std::vector<double> scratch(dtw_scratch_size(b.size()));
  return dtw_distance(a, b, params, scratch);
}

DtwBank::DtwBank(std::span<const double> rows, size_t n_rows, size_t length)
    : m_n_rows(n_rows), m_length(length) {
  assert(rows.size() == n_rows * length);
  const size_t n_blocks = (n_rows + kLanes - 1) / kLanes;
  m_interleaved.assign(n_blocks * length * kLanes, 0.0);
  for (size_t r = 0; r < n_rows; ++r) {
    const size_t blk = r / kLanes, lane = r % kLanes;
    for (size_t j = 0; j < length; ++j) {
      m_interleaved[(blk * length + j) * kLanes + lane] = rows[r * length + j];
    }
  }
}

void DtwBank::distances_to(std::span<const double> query, const DtwParams& params,
                           std::span<double> scratch, std::span<double> out) const {
  const size_t len = m_length;
  assert(query.size() == len);
  assert(out.size() == m_n_rows);
  assert(scratch.size() >= scratch_size());
  if (len == 0) {
    std::fill(out.begin(), out.end(), kInf);
    return;
  }
  constexpr size_t L = kLanes;
  const double p2 = params.penalty * params.penalty;
  const Band band = make_band(len, len, params.window);
  const size_t n_blocks = (m_n_rows + L - 1) / L;
  for (size_t blk = 0; blk < n_blocks; ++blk) {
    const double* ref = m_interleaved.data() + blk * len * L;
    double* prev = scratch.data();
    double* cur = prev + (len + 1) * L;
    std::fill(prev, prev + 2 * (len + 1) * L, kInf);
    for (size_t l = 0; l < L; ++l) prev[l] = 0.0;
    for (size_t i = 0; i < len; ++i) {
      const size_t lo = band.lo(i), hi = band.hi(i);
      for (size_t l = 0; l < L; ++l) cur[lo * L + l] = kInf;
      if (i > 0)
        for (size_t l = 0; l < L; ++l) prev[l] = kInf;
      band_row_lanes(query[i], ref, prev, cur, lo, hi, p2);
      std::swap(prev, cur);
    }
    const size_t base = blk * L;
    const size_t n_here = std::min(L, m_n_rows - base);
    for (size_t l = 0; l < n_here; ++l) out[base + l] = std::sqrt(prev[len * L + l]);
  }
}

}  // namespace escpod::demux
