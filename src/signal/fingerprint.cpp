#include "escpod/signal/fingerprint.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>

#include "escpod/signal/robust_stats.hpp"

namespace escpod::signal {

SampleRange barcode_window(size_t adapter_start, size_t adapter_end, size_t n_samples,
                           const FingerprintParams& params) {
  SampleRange r;
  if (adapter_end <= adapter_start) return r;
  r.begin = adapter_start > params.padding_samples ? adapter_start - params.padding_samples : 0;
  r.end = std::min({n_samples, params.max_window_end, adapter_end + params.padding_samples});
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

std::string_view fingerprint_error_reason(FingerprintError error) {
  switch (error) {
    case FingerprintError::kNone: return "";
    case FingerprintError::kWindowTooShort: return "event segmentation failed: window too short";
    case FingerprintError::kNonFinite: return "signal normalization failed: non-finite sample";
    case FingerprintError::kMadZero: return "signal normalization failed: MAD is 0";
    case FingerprintError::kSegmentationFailed: return "event segmentation failed";
    case FingerprintError::kSegmentStdZero: return "segment normalization failed: std is 0";
  }
  return "unknown fingerprint error";
}

namespace {

// T for the L consecutive outputs from x[0] on. Each output sums in the one-at-a-time order (k
// ascending, in double), so the values are those of the plain loop; the L sums are independent,
// so they vectorise and do not wait on each other's additions.
template <size_t L>
void t_statistic_block(const float* x, size_t w, double inv_w, double* out) {
  std::array<double, L> sum_l{}, sum_r{}, ss{};
  for (size_t k = 0; k < w; ++k) {
    for (size_t u = 0; u < L; ++u) {
      sum_l[u] += x[u + k];
      sum_r[u] += x[u + w + k];
    }
  }
  std::array<double, L> mean_l, mean_r;
  for (size_t u = 0; u < L; ++u) {
    mean_l[u] = sum_l[u] * inv_w;
    mean_r[u] = sum_r[u] * inv_w;
  }
  for (size_t k = 0; k < w; ++k) {
    for (size_t u = 0; u < L; ++u) {
      const double dl = x[u + k] - mean_l[u];
      const double dr = x[u + w + k] - mean_r[u];
      ss[u] += dl * dl + dr * dr;
    }
  }
  for (size_t u = 0; u < L; ++u) out[u] = ss[u] > 0.0 ? std::fabs(mean_l[u] - mean_r[u]) / std::sqrt(ss[u]) : 0.0;
}

}  // namespace

void windowed_t_statistic(std::span<const float> x, size_t w, std::span<double> out) {
  assert(w >= 1);
  if (x.size() < 2 * w) return;
  const size_t n_out = x.size() - 2 * w;
  assert(out.size() >= n_out);
  const double inv_w = 1.0 / static_cast<double>(w);
  constexpr size_t kBlock = 8;
  size_t j = 0;
  for (; j + kBlock <= n_out; j += kBlock) t_statistic_block<kBlock>(x.data() + j, w, inv_w, out.data() + j);
  for (; j < n_out; ++j) t_statistic_block<1>(x.data() + j, w, inv_w, out.data() + j);
}

namespace {

// Python's round() of a non-negative double to an integer (halves to even).
size_t round_half_even(double v) {
  const double r = std::nearbyint(v);  // default rounding mode: to nearest, ties to even
  return r <= 0.0 ? 0 : static_cast<size_t>(r);
}

// 2. Winsorise: s.window = window_pa clipped to median +- outlier_mads * MAD.
FingerprintError winsorise(std::span<const float> window_pa, const FingerprintParams& params,
                           FingerprintScratch& s, FingerprintStats& st) {
  const MedianMad mm = median_mad_f32(window_pa, s.work_f);
  st.window_median = mm.median;
  st.window_mad = mm.mad;
  const size_t n = window_pa.size();
  if (n == 0) return FingerprintError::kWindowTooShort;
  if (!(mm.mad > 0.0f)) return FingerprintError::kMadZero;
  const double lo = static_cast<double>(mm.median) - params.outlier_mads * static_cast<double>(mm.mad);
  const double hi = static_cast<double>(mm.median) + params.outlier_mads * static_cast<double>(mm.mad);
  const auto lo_f = static_cast<float>(lo);
  const auto hi_f = static_cast<float>(hi);
  s.window.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float v = window_pa[i];
    s.window[i] = v < lo ? lo_f : (v > hi ? hi_f : v);
  }
  return FingerprintError::kNone;
}

// 4. Change points: s.borders = 0, the num_events strongest t-statistic peaks (shifted by the
// statistic's width w, ascending), n.
FingerprintError event_borders(const FingerprintParams& params, size_t w, size_t gap,
                               FingerprintScratch& s) {
  const size_t n = s.window.size();
  const size_t n_t = n - 2 * w;
  s.tstat.resize(n_t);
  windowed_t_statistic(s.window, w, s.tstat);
  PeakOptions popt;
  popt.min_distance = static_cast<double>(gap);
  find_peaks(s.tstat, popt, s.peak_scratch, s.peaks);
  const size_t k = params.num_events;
  if (s.peaks.size() < k) return FingerprintError::kSegmentationFailed;
  // The k largest T values; among equal values the later peak ranks higher (stable ascending
  // order, as numpy's argsort would give for distinct keys).
  s.order.resize(s.peaks.size());
  for (size_t i = 0; i < s.peaks.size(); ++i) s.order[i] = i;
  std::stable_sort(s.order.begin(), s.order.end(), [&](size_t a, size_t b) {
    return s.tstat[s.peaks[a]] < s.tstat[s.peaks[b]];
  });
  s.borders.clear();
  s.borders.push_back(0);
  for (size_t i = s.order.size() - k; i < s.order.size(); ++i) {
    s.borders.push_back(s.peaks[s.order[i]] + w);
  }
  std::sort(s.borders.begin() + 1, s.borders.end());
  s.borders.push_back(n);
  return FingerprintError::kNone;
}

// 5. Event means and dwells between the borders, and their statistics.
void event_statistics(FingerprintScratch& s, FingerprintStats& st) {
  const size_t n_events = s.borders.size() - 1;
  s.means.resize(n_events);
  s.dwells.resize(n_events);
  for (size_t e = 0; e < n_events; ++e) {
    const size_t b = s.borders[e], end = s.borders[e + 1];
    double sum = 0.0;
    for (size_t i = b; i < end; ++i) sum += s.window[i];
    const auto len = static_cast<double>(end - b);
    s.means[e] = sum / len;
    s.dwells[e] = len;
  }
  st.dwell_median = median_f64(s.dwells, s.work_d);
  st.dwell_mad = mad_f64(s.dwells, st.dwell_median, s.work_d);
  st.event_median = median_f64(s.means, s.work_d);
  st.event_mad = mad_f64(s.means, st.event_median, s.work_d);
  st.event_mean = numpy_mean(s.means);
  st.event_std = numpy_std(s.means, st.event_mean, s.work_d);
}

}  // namespace

FingerprintError barcode_fingerprint(std::span<const float> window_pa,
                                     const FingerprintParams& params, FingerprintScratch& s,
                                     std::span<double> fingerprint, FingerprintStats* stats) {
  assert(fingerprint.size() == params.barcode_num_events);
  std::fill(fingerprint.begin(), fingerprint.end(), std::numeric_limits<double>::quiet_NaN());
  FingerprintStats local;
  FingerprintStats& st = stats ? *stats : local;
  st = FingerprintStats{};
  const size_t n = window_pa.size();
  st.n_samples = n;

  for (float v : window_pa) {
    if (!std::isfinite(v)) return FingerprintError::kNonFinite;
  }
  if (params.num_events == 0 || params.barcode_num_events == 0) {
    return FingerprintError::kWindowTooShort;
  }
  if (const FingerprintError e = winsorise(window_pa, params, s, st); e != FingerprintError::kNone) return e;

  // 3. Segmentation widths.
  const double per_event = static_cast<double>(n) / static_cast<double>(params.num_events);
  const size_t w = std::min(params.max_stat_width, round_half_even(per_event));
  const size_t gap = std::min(params.max_min_gap, round_half_even(per_event / 2.0));
  st.stat_width = w;
  st.min_gap = gap;
  if (w == 0 || gap == 0 || n <= 2 * w) return FingerprintError::kWindowTooShort;

  if (const FingerprintError e = event_borders(params, w, gap, s); e != FingerprintError::kNone) return e;
  event_statistics(s, st);
  if (!(st.event_std > 0.0)) return FingerprintError::kSegmentStdZero;

  // (end of 5) The last barcode_num_events event means, z-scored over all events.
  const size_t n_events = s.means.size();
  if (n_events < params.barcode_num_events) return FingerprintError::kSegmentationFailed;
  const size_t first = n_events - params.barcode_num_events;
  for (size_t i = 0; i < params.barcode_num_events; ++i) {
    fingerprint[i] = (s.means[first + i] - st.event_mean) / st.event_std;
  }
  return FingerprintError::kNone;
}

}  // namespace escpod::signal
