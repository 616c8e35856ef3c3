#include "escpod/signal/peaks.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace escpod::signal {

namespace {

// ---- Candidates ------------------------------------------------------------------------------

// The peak a rise starts, if any. Precondition: 1 <= i <= n - 2 and x[i - 1] < x[i]. The flat run
// x[i] == x[i + 1] == ... (ending at n - 1 at the latest) is a peak when the sample after it is
// lower; its middle, rounded down, is appended.
inline void peak_at_rise(std::span<const double> x, size_t i, std::vector<size_t>& out) {
  const size_t i_max = x.size() - 1;
  size_t ahead = i + 1;
  while (ahead < i_max && x[ahead] == x[i]) ++ahead;
  if (x[ahead] < x[i]) out.push_back((i + ahead - 1) / 2);
}

// Local maxima, flat tops at their middle (rounded down), ascending. Every peak begins at a rise
// (x[i - 1] < x[i]) whose next sample is not higher (x[i + 1] <= x[i]), and no rise lies inside a
// flat run, so each such rise is tested on its own. Most samples are no such rise: the screen
// runs eight samples at a time with SSE2 (part of every x86-64 CPU, so there is no dispatch).
// NaN fails every comparison, so it is never a rise, nor lets one through.
void local_maxima(std::span<const double> x, std::vector<size_t>& out) {
  out.clear();
  const size_t n = x.size();
  if (n < 3) return;
  size_t i = 1;
#ifdef __SSE2__
  for (; i + 8 < n; i += 8) {  // samples i .. i + 7, all <= n - 2
    unsigned mask = 0;
    for (size_t v = 0; v < 8; v += 2) {
      const double* p = x.data() + i + v;
      const __m128d mid = _mm_loadu_pd(p);
      const __m128d rise = _mm_cmplt_pd(_mm_loadu_pd(p - 1), mid);
      const __m128d not_higher = _mm_cmple_pd(_mm_loadu_pd(p + 1), mid);
      mask |= static_cast<unsigned>(_mm_movemask_pd(_mm_and_pd(rise, not_higher))) << v;
    }
    for (; mask != 0; mask &= mask - 1) peak_at_rise(x, i + std::countr_zero(mask), out);
  }
#endif
  for (; i + 1 < n; ++i) {
    if (x[i - 1] < x[i] && x[i + 1] <= x[i]) peak_at_rise(x, i, out);
  }
}

// ---- Distance filter -------------------------------------------------------------------------

// The greedy rule on the candidates [b, e): by height, highest first, ties by the later index (a
// stable ascending sort walked backwards); each kept one clears keep[] for the others closer than
// d. Heights are never NaN (a peak is higher than its neighbour), so (height, index) pairs sort
// in exactly that order.
void select_in_cluster(std::span<const double> x, size_t d, size_t b, size_t e, PeakScratch& s) {
  const auto& peaks = s.candidates;
  auto& by_height = s.by_height;
  by_height.clear();
  for (size_t k = b; k < e; ++k) by_height.emplace_back(x[peaks[k]], k);
  std::sort(by_height.begin(), by_height.end());
  for (size_t r = by_height.size(); r-- > 0;) {
    const size_t k = by_height[r].second;
    if (!s.keep[k]) continue;
    for (size_t j = k; j-- > b && peaks[k] - peaks[j] < d;) s.keep[j] = 0;
    for (size_t j = k + 1; j < e && peaks[j] - peaks[k] < d; ++j) s.keep[j] = 0;
  }
}

// Keeps the candidates the greedy rule keeps (see PeakOptions::min_distance). A kept peak clears
// only candidates closer than d, so runs of candidates separated by gaps >= d ("clusters") never
// interact: each is decided on its own (the order within it is the global order's restriction),
// and a lone candidate is kept without sorting. On the real traces clusters hold a few to a few
// dozen candidates, so this sorts short runs instead of all candidates at once.
void select_by_distance(std::span<const double> x, double distance, PeakScratch& s) {
  auto& peaks = s.candidates;
  const size_t n = peaks.size();
  const auto d = static_cast<size_t>(std::ceil(distance));
  s.keep.assign(n, 1);
  for (size_t b = 0, e = 0; b < n; b = e) {
    for (e = b + 1; e < n && peaks[e] - peaks[e - 1] < d;) ++e;
    if (e - b > 1) select_in_cluster(x, d, b, e, s);
  }
  size_t w = 0;
  for (size_t k = 0; k < n; ++k)
    if (s.keep[k]) peaks[w++] = peaks[k];
  peaks.resize(w);
}

// ---- Prominence ------------------------------------------------------------------------------

// Prominence bases (scipy's rule): walking left (right) from a peak of height h while samples are
// <= h (a NaN or higher sample, or the end of x, stops the walk), the base is the lowest sample
// of the walk, the one nearest the peak on ties; the peak itself when none is lower.
//
// The walks of tall peaks cross many smaller peaks (~150 samples per peak on the LLR traces), so
// no walk is repeated. The candidates are visited in order (left to right for the left walks),
// and each walk's far end and base are kept. A walk that reaches an earlier candidate j no higher
// than its own peak crosses all of j's walk (every sample there is <= x[j] <= h): it takes j's
// base if that is lower (strictly: on ties its own is nearer) and resumes where j's walk ended.
// Between candidates it tests samples one by one. A sample is tested by the first walk that
// crosses it only (the later ones jump over it), so each direction costs O(n + candidates).

// Left bases of all candidates. Walk k covers samples [edge[k], peak k]; candidates
// [0, before[k]) lie left of it.
void left_bases(std::span<const double> x, PeakScratch& s) {
  const auto& c = s.candidates;
  auto& base = s.props.left_bases;
  auto& edge = s.walk_edge;
  auto& before = s.walk_beyond;
  for (size_t k = 0; k < c.size(); ++k) {
    const double h = x[c[k]];
    double low = h;
    size_t b = c[k], e = c[k], j = k;
    for (;;) {
      // The samples down to the next candidate on the left (j - 1, at stop - 1), one by one.
      const size_t stop = j > 0 ? c[j - 1] + 1 : 0;
      for (; e > stop && x[e - 1] <= h; --e) {
        if (x[e - 1] < low) {
          b = e - 1;
          low = x[b];
        }
      }
      // Stopped by a sample above h or NaN, by the start of x, or by a higher candidate.
      if (e > stop || j == 0 || !(x[c[j - 1]] <= h)) break;
      --j;  // cross candidate j's walk
      if (x[base[j]] < low) {
        b = base[j];
        low = x[b];
      }
      e = edge[j];
      j = before[j];
    }
    base[k] = b;
    edge[k] = e;
    before[k] = j;
  }
}

// Right bases, the mirror image: walk k covers [peak k, edge[k]); candidates [after[k], K) lie
// right of it.
void right_bases(std::span<const double> x, PeakScratch& s) {
  const auto& c = s.candidates;
  const size_t n_cand = c.size();
  auto& base = s.props.right_bases;
  auto& edge = s.walk_edge;
  auto& after = s.walk_beyond;
  for (size_t k = n_cand; k-- > 0;) {
    const double h = x[c[k]];
    double low = h;
    size_t b = c[k], e = c[k] + 1, j = k + 1;
    for (;;) {
      const size_t stop = j < n_cand ? c[j] : x.size();  // the next candidate on the right
      for (; e < stop && x[e] <= h; ++e) {
        if (x[e] < low) {
          b = e;
          low = x[b];
        }
      }
      if (e < stop || j == n_cand || !(x[c[j]] <= h)) break;
      if (x[base[j]] < low) {  // cross candidate j's walk
        b = base[j];
        low = x[b];
      }
      e = edge[j];
      j = after[j];
    }
    base[k] = b;
    edge[k] = e;
    after[k] = j;
  }
}

void compute_prominences(std::span<const double> x, PeakScratch& s) {
  auto& p = s.props;
  const size_t n = s.candidates.size();
  p.prominences.resize(n);
  p.left_bases.resize(n);
  p.right_bases.resize(n);
  s.walk_edge.resize(n);
  s.walk_beyond.resize(n);
  left_bases(x, s);
  right_bases(x, s);
  for (size_t k = 0; k < n; ++k) {
    p.prominences[k] = x[s.candidates[k]] - std::max(x[p.left_bases[k]], x[p.right_bases[k]]);
  }
}

// ---- Width -----------------------------------------------------------------------------------

void compute_widths(std::span<const double> x, double rel_height, PeakScratch& s) {
  auto& p = s.props;
  const size_t n = s.candidates.size();
  p.widths.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const size_t peak = s.candidates[k];
    const double height = x[peak] - p.prominences[k] * rel_height;
    size_t i = peak;
    while (p.left_bases[k] < i && height < x[i]) --i;
    double left_ip = static_cast<double>(i);
    if (x[i] < height) left_ip += (height - x[i]) / (x[i + 1] - x[i]);
    i = peak;
    while (i < p.right_bases[k] && height < x[i]) ++i;
    double right_ip = static_cast<double>(i);
    if (x[i] < height) right_ip -= (height - x[i]) / (x[i - 1] - x[i]);
    p.widths[k] = right_ip - left_ip;
  }
}

// Keeps the entries of candidates (and of the computed properties) where keep[k] is set.
void compact(PeakScratch& s, bool with_widths) {
  auto& p = s.props;
  size_t w = 0;
  for (size_t k = 0; k < s.candidates.size(); ++k) {
    if (!s.keep[k]) continue;
    s.candidates[w] = s.candidates[k];
    p.prominences[w] = p.prominences[k];
    p.left_bases[w] = p.left_bases[k];
    p.right_bases[w] = p.right_bases[k];
    if (with_widths) p.widths[w] = p.widths[k];
    ++w;
  }
  s.candidates.resize(w);
  p.prominences.resize(w);
  p.left_bases.resize(w);
  p.right_bases.resize(w);
  if (with_widths) p.widths.resize(w);
}

}  // namespace

void find_peaks(std::span<const double> x, const PeakOptions& options, PeakScratch& scratch,
                std::vector<size_t>& peaks) {
  auto& s = scratch;
  s.props.prominences.clear();
  s.props.left_bases.clear();
  s.props.right_bases.clear();
  s.props.widths.clear();
  local_maxima(x, s.candidates);
  if (options.min_distance > 1.0 && s.candidates.size() > 1) {
    select_by_distance(x, options.min_distance, s);
  }
  const bool want_prominence = options.min_prominence >= 0.0 || options.min_width >= 0.0;
  if (want_prominence) {
    compute_prominences(x, s);
    if (options.min_prominence >= 0.0) {
      s.keep.resize(s.candidates.size());
      for (size_t k = 0; k < s.candidates.size(); ++k)
        s.keep[k] = s.props.prominences[k] >= options.min_prominence;
      compact(s, false);
    }
  }
  if (options.min_width >= 0.0) {
    compute_widths(x, options.rel_height, s);
    s.keep.resize(s.candidates.size());
    for (size_t k = 0; k < s.candidates.size(); ++k)
      s.keep[k] = s.props.widths[k] >= options.min_width;
    compact(s, true);
  }
  peaks.assign(s.candidates.begin(), s.candidates.end());
}

}  // namespace escpod::signal
