#include "escpod/signal/peaks.hpp"

#include <algorithm>
#include <cmath>

namespace escpod::signal {

namespace {

// Local maxima, flat tops at their middle (rounded down).
void local_maxima(std::span<const double> x, std::vector<size_t>& out) {
  out.clear();
  const size_t n = x.size();
  if (n < 3) return;
  const size_t i_max = n - 1;
  size_t i = 1;
  while (i < i_max) {
    if (x[i - 1] < x[i]) {
      size_t ahead = i + 1;
      while (ahead < i_max && x[ahead] == x[i]) ++ahead;
      if (x[ahead] < x[i]) {
        out.push_back((i + ahead - 1) / 2);
        i = ahead;
      }
    }
    ++i;
  }
}

void select_by_distance(std::span<const double> x, double distance, PeakScratch& s) {
  auto& peaks = s.candidates;
  const size_t n = peaks.size();
  const auto d = static_cast<size_t>(std::ceil(distance));
  s.order.resize(n);
  for (size_t k = 0; k < n; ++k) s.order[k] = k;
  // By height, ties in position order (as a stable sort by height gives them), without the
  // buffer std::stable_sort allocates per call.
  std::sort(s.order.begin(), s.order.end(), [&](size_t a, size_t b) {
    const double ha = x[peaks[a]], hb = x[peaks[b]];
    return ha < hb || (ha == hb && a < b);
  });
  s.keep.assign(n, 1);
  for (size_t r = n; r-- > 0;) {
    const size_t k = s.order[r];
    if (!s.keep[k]) continue;
    for (size_t j = k; j-- > 0 && peaks[k] - peaks[j] < d;) s.keep[j] = 0;
    for (size_t j = k + 1; j < n && peaks[j] - peaks[k] < d; ++j) s.keep[j] = 0;
  }
  size_t w = 0;
  for (size_t k = 0; k < n; ++k)
    if (s.keep[k]) peaks[w++] = peaks[k];
  peaks.resize(w);
}

void compute_prominences(std::span<const double> x, PeakScratch& s) {
  auto& p = s.props;
  const size_t n = s.candidates.size();
  p.prominences.resize(n);
  p.left_bases.resize(n);
  p.right_bases.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const size_t peak = s.candidates[k];
    const double h = x[peak];
    double left_min = h;
    size_t left_base = peak;
    for (size_t i = peak + 1; i-- > 0 && x[i] <= h;) {
      if (x[i] < left_min) {
        left_min = x[i];
        left_base = i;
      }
    }
    double right_min = h;
    size_t right_base = peak;
    for (size_t i = peak; i < x.size() && x[i] <= h; ++i) {
      if (x[i] < right_min) {
        right_min = x[i];
        right_base = i;
      }
    }
    p.left_bases[k] = left_base;
    p.right_bases[k] = right_base;
    p.prominences[k] = h - std::max(left_min, right_min);
  }
}

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
