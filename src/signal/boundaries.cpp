// Implementation of escpod/signal/boundaries.hpp, written from docs/demux.md
// §3.1-§3.5 and §3.6.
#include "escpod/signal/boundaries.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "escpod/signal/robust_stats.hpp"
#include "pairwise_sum.hpp"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace escpod::signal {

namespace {

constexpr float kNanF = std::numeric_limits<float>::quiet_NaN();

double to_d(int64_t v) { return static_cast<double>(v); }

// Median / MAD of float32 values with numpy's NaN-free semantics; empty -> NaN (numpy warns and
// returns NaN).
MedianMad med_mad_or_nan(std::span<const float> v, std::vector<float>& work) {
  if (v.empty()) return {kNanF, kNanF};
  return median_mad_f32(v, work);
}

float median_or_nan(std::span<const float> v, std::vector<float>& work) {
  if (v.empty()) return kNanF;
  return median_f32(v, work);
}

std::span<const float> clamp_slice(std::span<const float> sig, int64_t a, int64_t b) {
  const auto n = static_cast<int64_t>(sig.size());
  a = std::clamp<int64_t>(a, 0, n);
  b = std::clamp<int64_t>(b, 0, n);
  if (b <= a) return {};
  return sig.subspan(static_cast<size_t>(a), static_cast<size_t>(b - a));
}

// The statistic over each complete trailing window of `window` values (bottleneck move_mean /
// move_var with min_count = window), into vals: none when no window is complete. Values are
// computed in double and rounded to float32 (bottleneck returns float32 for float32 input). Each
// value depends only on the samples up to its window's end, so the values of a prefix of `seg`
// are a prefix of these.
void moving_stat_values(std::span<const float> seg, int64_t window, bool variance, std::vector<float>& vals) {
  const auto n = static_cast<int64_t>(seg.size());
  vals.clear();
  if (window <= 0 || n < window) return;
  const double ref = seg[0];
  double s1 = 0.0, s2 = 0.0;
  const double inv = 1.0 / to_d(window);
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(seg[static_cast<size_t>(i)]) - ref;
    s1 += x;
    s2 += x * x;
    if (i >= window) {
      const double old = static_cast<double>(seg[static_cast<size_t>(i - window)]) - ref;
      s1 -= old;
      s2 -= old * old;
    }
    if (i >= window - 1) {
      const double m = s1 * inv;
      double v;
      if (variance) {
        v = std::max(0.0, s2 * inv - m * m);
      } else {
        v = m + ref;
      }
      vals.push_back(static_cast<float>(v));
    }
  }
}

double mean_d(std::span<const float> x) {
  if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
  double s = 0.0;
  for (float v : x) s += v;
  return s / static_cast<double>(x.size());
}

double var_d(std::span<const float> x) {
  if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double m = mean_d(x);
  double s = 0.0;
  for (float v : x) s += (v - m) * (v - m);
  return s / static_cast<double>(x.size());
}

// Population std of the non-NaN values (numpy.nanstd); NaN when none.
double nanstd(std::span<const double> x) {
  double s = 0.0;
  size_t n = 0;
  for (double v : x) {
    if (!std::isnan(v)) {
      s += v;
      ++n;
    }
  }
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  const double m = s / static_cast<double>(n);
  double q = 0.0;
  for (double v : x) {
    if (!std::isnan(v)) q += (v - m) * (v - m);
  }
  return std::sqrt(q / static_cast<double>(n));
}

// ADAPTed correct_for_plateau (s = 10, t = 0.9, window 500).
size_t correct_plateau(std::span<const double> g, size_t p) {
  constexpr size_t kS = 10;
  const size_t end = std::min(p + 500, g.size());
  if (end <= p) return p;
  const size_t m = end - p;  // samples in the window
  if (m < 1 + kS) return p;  // n_changes = m - 1 must be >= s for the loop to run
  const size_t nc = m - 1;
  const double level = 0.9 * g[p];
  for (size_t ii = nc - kS + 1; ii-- > 0;) {
    bool nondecreasing = true;
    for (size_t j = ii; j < ii + (kS - 1); ++j) {
      if (!(g[p + j + 1] - g[p + j] >= 0.0)) {
        nondecreasing = false;
        break;
      }
    }
    if (nondecreasing && g[p + ii + (kS - 1)] > level) {
      const size_t plateau_end = ii + (kS - 1);
      return plateau_end > 0 ? p + plateau_end : p;
    }
  }
  return p;
}

// ADAPTed correct_for_split_peak (width 10 at rel_height 0.5, prominence 1.0, window 500,
// t = 0.9).
size_t correct_split_peak(std::span<const double> g, size_t p, BoundaryWork& work) {
  const size_t end = std::min(p + 500, g.size());
  if (end <= p) return p;
  PeakOptions opt;
  opt.min_width = 10.0;
  opt.min_prominence = 1.0;
  opt.rel_height = 0.5;
  find_peaks(g.subspan(p, end - p), opt, work.peak_scratch, work.peaks2);
  if (!work.peaks2.empty() && g[work.peaks2[0] + p] >= 0.9 * g[p]) return work.peaks2[0] + p;
  return p;
}

// Least-squares r^2 of y[i] against i (scipy linregress r squared; 0 for a constant).
double line_r2(std::span<const double> y) {
  const size_t n = y.size();
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  double mx = 0.0, my = 0.0;
  for (size_t i = 0; i < n; ++i) {
    mx += static_cast<double>(i);
    my += y[i];
  }
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxx = 0.0, syy = 0.0, sxy = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double dx = static_cast<double>(i) - mx, dy = y[i] - my;
    sxx += dx * dx;
    syy += dy * dy;
    sxy += dx * dy;
  }
  if (sxx == 0.0 || syy == 0.0) return 0.0;
  double r = sxy / std::sqrt(sxx * syy);
  r = std::clamp(r, -1.0, 1.0);
  return r * r;
}

}  // namespace

// ---- config --------------------------------------------------------------------------------

int64_t BoundaryConfig::sig_preload_size() const {
  int64_t n = max_obs_trace;
  if (mvs_detect_check) n += search_window + std::max(median_shift_window, polyA_window);
  return n;
}

int64_t BoundaryConfig::cnn_input_len() const {
  const int64_t d = std::max<int64_t>(downscale_factor, 1);
  const int64_t w = std::max<int64_t>(sig_preload_size() - min_obs_adapter, 0);
  return (w + d - 1) / d;
}

// ---- numpy helpers -------------------------------------------------------------------------

float numpy_sum_f32(std::span<const float> x) { return 0.0f + detail::pairwise_sum(x.data(), x.size()); }

void block_means_f32(std::span<const float> x, int64_t factor, bool pad_partial,
                     std::vector<float>& out) {
  const size_t d = static_cast<size_t>(std::max<int64_t>(factor, 1));
  const size_t full = x.size() / d;
  const size_t rem = x.size() % d;
  const size_t n_out = full + ((pad_partial && rem) ? 1 : 0);
  out.resize(n_out);
  const float fd = static_cast<float>(d);
  for (size_t b = 0; b < full; ++b) out[b] = numpy_sum_f32(x.subspan(b * d, d)) / fd;
  if (pad_partial && rem) {
    float tmp[256];
    std::vector<float> big;
    float* buf = tmp;
    if (d > 256) {
      big.resize(d);
      buf = big.data();
    }
    std::memset(buf, 0, d * sizeof(float));
    std::memcpy(buf, x.data() + full * d, rem * sizeof(float));
    out[full] = numpy_sum_f32(std::span<const float>(buf, d)) / fd;
  }
}

namespace {

// numpy's percentile(x, 85) - percentile(x, 15), the local-range statistic of the checks.
double local_range_85_15(std::span<const float> x, std::vector<float>& work) {
  const std::array<double, 2> qs{85.0, 15.0};
  std::array<double, 2> p{};
  percentiles_f32(x, qs, p, work);
  return p[0] - p[1];
}

}  // namespace

// ---- CNN -----------------------------------------------------------------------------------

void cnn_prepare_input(std::span<const float> sig, const BoundaryConfig& cfg, std::span<float> out,
                       BoundaryWork& work) {
  const int64_t d = std::max<int64_t>(cfg.downscale_factor, 1);
  const int64_t preload = cfg.sig_preload_size();
  const int64_t n_sig = std::min<int64_t>(static_cast<int64_t>(sig.size()), preload);
  const int64_t start = cfg.min_obs_adapter;
  const int64_t len = std::max<int64_t>(preload - start, 0);
  // The preload window [start, preload) with NaN past the signal.
  std::vector<float>& win = work.f1;
  win.assign(static_cast<size_t>(len), kNanF);
  if (n_sig > start) {
    std::copy(sig.begin() + start, sig.begin() + n_sig, win.begin());
  }
  std::vector<float>& x = work.f2;
  block_means_f32(win, d, /*pad_partial=*/true, x);
  // nanmedian / MAD over the finite-or-inf (non-NaN) blocks.
  std::vector<float>& vals = work.f3;
  vals.clear();
  for (float v : x) {
    if (!std::isnan(v)) vals.push_back(v);
  }
  float med = kNanF, mad = kNanF;
  if (!vals.empty()) {
    med = median_f32(vals, work.f4);
    for (float& v : vals) v = std::fabs(v - med);
    mad = median_f32(vals, work.f4);
  }
  const size_t n_out = std::min(out.size(), x.size());
  for (size_t i = 0; i < n_out; ++i) {
    float z = (x[i] - med) / mad;
    if (std::isnan(z)) {
      z = cfg.cnn_pad_value;
    } else if (std::isinf(z)) {
      z = z > 0 ? std::numeric_limits<float>::max() : std::numeric_limits<float>::lowest();
    }
    out[i] = z;
  }
  for (size_t i = n_out; i < out.size(); ++i) out[i] = cfg.cnn_pad_value;
}

int64_t cnn_decode(std::span<const float> adapter_scores, std::span<const float> polya_scores,
                   const BoundaryConfig& cfg, std::vector<int64_t>& polya_candidates,
                   BoundaryWork& work) {
  const int64_t d = std::max<int64_t>(cfg.downscale_factor, 1);
  const size_t n_out = polya_scores.size();
  // 1. adapter position: argmax of channel 0 over [0, (max - min)/d), NaN wins (numpy argmax).
  const size_t search = std::min<size_t>(
      adapter_scores.size(),
      static_cast<size_t>(std::max<int64_t>((cfg.max_obs_adapter - cfg.min_obs_adapter) / d, 0)));
  auto argmax = [](std::span<const double> v) -> size_t {
    size_t best = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::isnan(v[i])) return i;
      if (v[i] > v[best]) best = i;
    }
    return best;
  };
  std::vector<double>& ch0 = work.d1;
  ch0.assign(adapter_scores.begin(), adapter_scores.begin() + static_cast<std::ptrdiff_t>(search));
  const size_t a = search ? argmax(ch0) : 0;
  const auto k = cfg.polya_cand_k;
  polya_candidates.assign(static_cast<size_t>(std::max<int64_t>(k, 1)), 0);
  std::vector<size_t> cand_pos;
  if (k >= 1 && n_out > 0) {
    std::vector<double>& ch1 = work.d2;
    ch1.assign(polya_scores.begin(), polya_scores.end());
    const double excl = static_cast<double>(cfg.cnn_pad_value);
    for (size_t i = 0; i < std::min(a, n_out); ++i) ch1[i] = excl;
    const size_t p = argmax(ch1);
    if (k == 1) {
      cand_pos.push_back(p);
    } else {
      for (size_t i = p + 1; i < n_out; ++i) ch1[i] = excl;
      PeakOptions opt;
      opt.min_distance = 5.0;
      find_peaks(ch1, opt, work.peak_scratch, work.peaks);
      cand_pos.assign(work.peaks.begin(), work.peaks.end());
      std::stable_sort(cand_pos.begin(), cand_pos.end(),
                       [&](size_t l, size_t r) { return -ch1[l] < -ch1[r]; });
      if (cand_pos.size() > static_cast<size_t>(k)) cand_pos.resize(static_cast<size_t>(k));
    }
  }
  auto to_samples = [&](size_t pos) -> int64_t {
    const int64_t s = static_cast<int64_t>(pos) * d + cfg.min_obs_adapter;
    return s == cfg.min_obs_adapter ? 0 : s;
  };
  for (size_t j = 0; j < cand_pos.size() && j < polya_candidates.size(); ++j) {
    polya_candidates[j] = to_samples(cand_pos[j]);
  }
  return to_samples(a);
}

// ---- validation ----------------------------------------------------------------------------

int64_t open_pore_adapter_start(std::span<const float> sig, int64_t start, int64_t end,
                                const BoundaryConfig& cfg) {
  const auto r = clamp_slice(sig, start, end);
  const int64_t base = std::clamp<int64_t>(start, 0, static_cast<int64_t>(sig.size()));
  int64_t first = -1, prev = -1, last = -1, last_kept = -1;
  size_t count = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (static_cast<double>(r[i]) >= cfg.open_pore_pa) {
      const auto pos = static_cast<int64_t>(i);
      if (count == 0) {
        first = pos;
      } else if (pos - prev >= cfg.open_pore_min_gap) {
        last_kept = pos;
      }
      prev = pos;
      last = pos;
      ++count;
    }
  }
  if (count == 0) return -1;
  if (count == 1) return base + first;
  return base + (last_kept >= 0 ? last_kept : last);
}

bool real_signal_check(std::span<const float> r, const BoundaryConfig& cfg, BoundaryWork& work) {
  const auto n = static_cast<int64_t>(r.size());
  const int64_t w = cfg.mean_window;
  if (n < 2 * w) return false;
  if (!cfg.mean_start_range.unbounded() &&
      !cfg.mean_start_range.contains(mean_d(r.first(static_cast<size_t>(w))))) {
    return false;
  }
  if (!cfg.mean_end_range.unbounded() &&
      !cfg.mean_end_range.contains(mean_d(r.last(static_cast<size_t>(w))))) {
    return false;
  }
  const auto tail = r.last(static_cast<size_t>(std::min<int64_t>(cfg.max_obs_local_range, n)));
  if (tail.empty()) return cfg.local_range.contains(std::numeric_limits<double>::quiet_NaN());
  const double lr = local_range_85_15(tail, work.f3);
  return cfg.local_range.contains(lr);
}

namespace {

// The median shift across the adapter end: median of the median_shift_window samples after it
// minus that of those before it (a function of the adapter end alone, so the candidates of one
// read share it).
double median_shift(std::span<const float> sig, int64_t adapter_end, const BoundaryConfig& cfg,
                    BoundaryWork& work) {
  const auto n = static_cast<int64_t>(sig.size());
  const float after = median_or_nan(
      clamp_slice(sig, adapter_end, std::min(adapter_end + cfg.median_shift_window, n)), work.f3);
  const float before = median_or_nan(
      clamp_slice(sig, std::max<int64_t>(adapter_end - cfg.median_shift_window, 0), adapter_end),
      work.f3);
  return static_cast<double>(after - before);
}

// What the poly(A) candidates of one read (one adapter end) share, each part computed on first
// use: the median shift, and the moving variances (work.f1) and means (work.f4) over the
// segment up to the furthest candidate, of which each candidate's are a prefix.
struct CandidateShared {
  int64_t furthest = 0;
  std::optional<double> shift;
  bool moving_ready = false;
};

// The median of the moving statistic over seg = sig[adapter_end, ...): a prefix of the shared
// values (NaN when no window is complete, as nanmedian of nothing).
double moving_median(std::span<const float> sig, int64_t adapter_end, std::span<const float> seg, bool variance,
                     const BoundaryConfig& cfg, BoundaryWork& work, CandidateShared& shared) {
  if (!shared.moving_ready) {
    const auto full = clamp_slice(sig, adapter_end, shared.furthest);
    moving_stat_values(full, cfg.pA_var_window, true, work.f1);
    moving_stat_values(full, cfg.pA_mean_window, false, work.f4);
    shared.moving_ready = true;
  }
  const int64_t window = variance ? cfg.pA_var_window : cfg.pA_mean_window;
  const std::vector<float>& values = variance ? work.f1 : work.f4;
  const auto n = static_cast<int64_t>(seg.size());
  const size_t count = window <= 0 || n < window ? 0 : static_cast<size_t>(n - window + 1);
  return static_cast<double>(median_or_nan(std::span<const float>(values.data(), count), work.f3));
}

// mvs_polya_check with what the read's candidates share.
MvsResult mvs_polya_check_sharing(std::span<const float> sig, int64_t adapter_end, int64_t polya_end,
                                  const BoundaryConfig& cfg, const Range& mean_range, BoundaryWork& work,
                                  CandidateShared& shared) {
  MvsResult res;
  const auto n = static_cast<int64_t>(sig.size());
  if (polya_end == 0 || adapter_end == 0 || polya_end < adapter_end ||
      polya_end - adapter_end <= 2 || n < adapter_end + cfg.median_shift_window) {
    res.not_enough_signal = true;
    return res;
  }
  const auto seg = clamp_slice(sig, adapter_end, polya_end);
  const int64_t span_len = polya_end - adapter_end;
  double var, mean;
  if (span_len <= cfg.pA_var_window + 2) {
    var = var_d(seg);
  } else {
    var = moving_median(sig, adapter_end, seg, true, cfg, work, shared);
  }
  if (span_len <= cfg.pA_mean_window + 2) {
    mean = mean_d(seg);
  } else {
    mean = moving_median(sig, adapter_end, seg, false, cfg, work, shared);
  }
  res.mean = mean;
  res.var = var;
  // Median and local range of the poly(A) segment: only computed when bounded (unbounded ranges
  // accept every finite value, and seg is non-empty here).
  if (!cfg.polyA_med_range.unbounded()) {
    res.polya_med = static_cast<double>(median_or_nan(seg, work.f3));
    res.med_ok = cfg.polyA_med_range.contains(res.polya_med);
  } else {
    res.med_ok = !seg.empty();
  }
  if (!cfg.polyA_local_range.unbounded()) {
    res.polya_local_range = seg.empty() ? std::numeric_limits<double>::quiet_NaN()
                                        : local_range_85_15(seg, work.f3);
    res.range_ok = cfg.polyA_local_range.contains(res.polya_local_range);
  } else {
    res.range_ok = !seg.empty();
  }
  if (!shared.shift) shared.shift = median_shift(sig, adapter_end, cfg, work);
  res.med_shift = *shared.shift;
  res.mean_ok = mean_range.contains(res.mean);
  res.var_ok = cfg.pA_var_range.contains(res.var);
  res.shift_ok = cfg.median_shift_range.contains(res.med_shift);
  res.pass = res.mean_ok && res.var_ok && res.med_ok && res.range_ok && res.shift_ok;
  res.not_enough_signal = !res.pass && res.mean == 0.0;
  return res;
}

}  // namespace

MvsResult mvs_polya_check(std::span<const float> sig, int64_t adapter_end, int64_t polya_end,
                          const BoundaryConfig& cfg, const Range& mean_range, BoundaryWork& work) {
  CandidateShared shared;
  shared.furthest = polya_end;
  return mvs_polya_check_sharing(sig, adapter_end, polya_end, cfg, mean_range, work, shared);
}

namespace {

// Whether any value is NaN; one pass without an early exit, which the compiler vectorises.
// Eight values per step with SSE2 (every x86-64 CPU has it): the check runs over the whole
// signal on every validation, and the plain loop compared one value at a time.
bool contains_nan(std::span<const float> x) {
  size_t i = 0;
  bool nan = false;
#ifdef __SSE2__
  __m128 any0 = _mm_setzero_ps(), any1 = _mm_setzero_ps();
  for (; i + 8 <= x.size(); i += 8) {
    const __m128 v0 = _mm_loadu_ps(x.data() + i), v1 = _mm_loadu_ps(x.data() + i + 4);
    any0 = _mm_or_ps(any0, _mm_cmpunord_ps(v0, v0));
    any1 = _mm_or_ps(any1, _mm_cmpunord_ps(v1, v1));
  }
  nan = _mm_movemask_ps(_mm_or_ps(any0, any1)) != 0;
#endif
  for (; i < x.size(); ++i) nan |= x[i] != x[i];
  return nan;
}

// "MVS polya check failed: ..." naming the checks `r` failed.
std::string mvs_fail_reason(const MvsResult& r) {
  if (r.not_enough_signal) return "MVS polya check failed: not enough signal";
  std::string s;
  if (!r.mean_ok) s += "mean ";
  if (!r.var_ok) s += "var ";
  if (!r.med_ok) s += "med ";
  if (!r.range_ok) s += "range ";
  if (!r.shift_ok) s += "shift";
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return "MVS polya check failed: " + s;
}

// The poly(A) mean range: pA_mean_range, or when that is unbounded, the adapter median scaled by
// pA_mean_adapter_med_scale_range (when that is bounded).
Range polya_mean_range(const BoundaryConfig& cfg, float adapter_med) {
  Range mean_range = cfg.pA_mean_range;
  if (mean_range.unbounded() && !cfg.pA_mean_adapter_med_scale_range.unbounded()) {
    const double med = static_cast<double>(adapter_med);
    mean_range.lo = cfg.pA_mean_adapter_med_scale_range.lo * med;
    mean_range.hi = cfg.pA_mean_adapter_med_scale_range.hi * med;
  }
  return mean_range;
}

// The MVS check of the non-zero candidates in order: true when the first passes (v.polya_end set
// to it). After a failure the rest are still checked, as WarpDemuX does, so the reason given is
// that of the last failing candidate.
bool check_polya_candidates(std::span<const float> sig, int64_t adapter_end,
                            std::span<const int64_t> polya_candidates, const BoundaryConfig& cfg,
                            const Range& mean_range, BoundaryWork& work, Validation& v) {
  bool success = true;
  CandidateShared shared;
  for (int64_t c : polya_candidates) {
    if (c == 0) break;
    shared.furthest = std::max(shared.furthest, c);
  }
  for (int64_t c : polya_candidates) {
    if (c == 0) break;
    const MvsResult r = mvs_polya_check_sharing(sig, adapter_end, c, cfg, mean_range, work, shared);
    if (!r.pass) {
      success = false;
      v.fail_reason = mvs_fail_reason(r);
    }
    if (success) {
      v.polya_end = c;
      break;
    }
  }
  return success;
}

}  // namespace

Validation validate_boundaries(std::span<const float> sig, int64_t adapter_end,
                               std::span<const int64_t> polya_candidates,
                               const BoundaryConfig& cfg, BoundaryWork& work) {
  Validation v;
  if (contains_nan(sig)) {
    v.exception = true;
    v.fail_reason = "Validate boundaries failed: Signal contains nan values";
    return v;
  }
  v.adapter_start = 0;
  v.adapter_end = adapter_end;
  v.polya_end = polya_candidates.empty() ? 0 : polya_candidates[0];
  bool success = true;
  float adapter_med = kNanF;
  if (adapter_end == 0) {
    success = false;
    v.fail_reason = "No adapter detected (primary)";
  } else {
    const MedianMad mm = med_mad_or_nan(clamp_slice(sig, v.adapter_start, adapter_end), work.f3);
    adapter_med = mm.median;
    // `if adapter_mad and not in_range(...)`: 0 skips the check, NaN is truthy and fails it.
    if (mm.mad != 0.0f && !cfg.adapter_mad_range.contains(static_cast<double>(mm.mad))) {
      success = false;
      v.fail_reason = "adapter MAD check failed";
    }
  }
  if (success && cfg.detect_open_pores) {
    const int64_t s = open_pore_adapter_start(sig, v.adapter_start, adapter_end, cfg);
    if (s >= 0) {
      v.adapter_start = s;
      if (adapter_end - v.adapter_start < cfg.min_obs_adapter) {
        success = false;
        v.fail_reason = "Open pore too close to boundary";
      }
    }
  }
  if (success && cfg.real_signal_check) {
    if (!real_signal_check(clamp_slice(sig, v.adapter_start, adapter_end), cfg, work)) {
      success = false;
      v.fail_reason = "Real signal check failed";
    }
  }
  if (success && cfg.mvs_detect_check) {
    if (v.polya_end == 0) {
      success = false;
      v.fail_reason = "No polya detected (primary)";
    } else {
      success = check_polya_candidates(sig, adapter_end, polya_candidates, cfg,
                                       polya_mean_range(cfg, adapter_med), work, v);
    }
  }
  v.success = success;
  if (success) v.fail_reason.clear();
  return v;
}

// ---- LLR -----------------------------------------------------------------------------------

bool winsor_mad_normalise(std::span<const float> x, double outlier_thresh, std::vector<float>& out,
                          BoundaryWork& work) {
  out.assign(x.begin(), x.end());
  if (x.empty()) return true;
  const MedianMad mm = median_mad_f32(x, work.f3);
  if (mm.mad == 0.0f) return false;
  const double m = mm.median, d = mm.mad;
  const auto lo = static_cast<float>(m - outlier_thresh * d);
  const auto hi = static_cast<float>(m + outlier_thresh * d);
  for (float& v : out) {
    v = std::min(std::max(v, lo), hi);
    v = (v - mm.median) / mm.mad;
  }
  return true;
}

void llr_prefix_sums(std::span<const double> s, std::vector<double>& c1, std::vector<double>& c2) {
  c1.resize(s.size());
  c2.resize(s.size());
  double a = 0.0, b = 0.0;
  for (size_t i = 0; i < s.size(); ++i) {
    a += s[i];
    b += s[i] * s[i];
    c1[i] = a;
    c2[i] = b;
  }
}

void llr_trace(std::span<const double> c1, std::span<const double> c2, int64_t start, int64_t end,
               int64_t head, int64_t tail, std::vector<double>& trace) {
  const auto n = static_cast<int64_t>(c1.size());
  trace.assign(c1.size(), 0.0);
  auto pre = [&](std::span<const double> c, int64_t idx) {
    return idx < 0 ? 0.0 : c[static_cast<size_t>(idx)];
  };
  auto seg_var = [&](int64_t a, int64_t b) {
    const double len = to_d(b - a);
    const double m = (pre(c1, b - 1) - pre(c1, a - 1)) / len;
    return (pre(c2, b - 1) - pre(c2, a - 1)) / len - m * m;
  };
  if (end > n || start < 0 || end <= start) return;
  const double total = to_d(end - start) * std::log(seg_var(start, end));
  const int64_t i0 = std::max<int64_t>(start + head, 0);
  const int64_t i1 = std::min<int64_t>(end - tail, n);
  for (int64_t i = i0; i < i1; ++i) {
    if (i <= start || i >= end) continue;
    trace[static_cast<size_t>(i)] = total - to_d(i - start) * std::log(seg_var(start, i)) -
                                    to_d(end - i) * std::log(seg_var(i, end));
  }
}

int64_t llr_adapter_end(std::span<const double> trace, double prominence, double rel_height,
                        double width, BoundaryWork& work) {
  const size_t n = trace.size();
  if (n == 0) return 0;
  auto positive = [](double v) { return !(v <= 0.0); };  // NaN counts as positive
  size_t lo = 0, hi = n - 1;
  for (size_t i = 0; i < n; ++i) {
    if (positive(trace[i])) {
      lo = i;
      break;
    }
  }
  for (size_t i = n; i-- > 0;) {
    if (positive(trace[i])) {
      hi = i;
      break;
    }
  }
  if (hi <= lo) return 0;
  const auto clip = trace.subspan(lo, hi - lo);
  PeakOptions opt;
  opt.min_width = width;
  opt.min_prominence = prominence * nanstd(clip);
  opt.rel_height = rel_height;
  find_peaks(clip, opt, work.peak_scratch, work.peaks);
  if (work.peaks.empty()) return 0;
  // Only the first corrected peak is used; the corrections of the others do not affect it.
  size_t p = work.peaks[0] + lo;
  p = correct_plateau(trace, p);
  p = correct_split_peak(trace, p, work);
  return static_cast<int64_t>(p);
}

int64_t llr_polya_end(std::span<const double> trace, BoundaryWork& work) {
  std::vector<double>& g = work.d5;
  g.assign(trace.begin(), trace.end());
  for (double& v : g) {
    if (std::isnan(v)) v = 0.0;
  }
  PeakOptions opt;
  opt.min_distance = 10.0;
  opt.min_prominence = 1.0;
  opt.min_width = 10.0;
  opt.rel_height = 0.5;
  find_peaks(g, opt, work.peak_scratch, work.peaks);
  if (work.peaks.empty()) return 0;
  if (work.peaks.size() == 1) return static_cast<int64_t>(work.peaks[0]);
  const size_t p0 = work.peaks[0], p1 = work.peaks[1];
  if (g[p1] > g[p0]) return static_cast<int64_t>(p1);
  if (g[p1] < 0.5 * g[p0]) return static_cast<int64_t>(p0);
  size_t m = p0;
  for (size_t i = p0; i < p1; ++i) {
    if (g[i] < g[m]) m = i;
  }
  const double r2 = line_r2(std::span<const double>(g).subspan(m, p1 - m));
  return r2 >= 0.99 ? static_cast<int64_t>(p1) : 0;
}

LlrBoundaries llr_detect_downscaled(std::span<const double> s, const BoundaryConfig& cfg,
                                    BoundaryWork& work) {
  LlrBoundaries out;
  const int64_t d = std::max<int64_t>(cfg.downscale_factor, 1);
  const auto n = static_cast<int64_t>(s.size());
  if (n < 2) return out;
  llr_prefix_sums(s, work.d1, work.d2);
  llr_trace(work.d1, work.d2, 0, n - 1, 1 + cfg.min_obs_adapter / d, 1, work.d3);
  const int64_t p =
      llr_adapter_end(work.d3, cfg.adapter_peak_prominence, cfg.adapter_peak_rel_height,
                      to_d(cfg.adapter_peak_width / d), work);
  if (p <= 0) return out;
  out.adapter_end = p * d;
  llr_trace(work.d1, work.d2, p, n - 1, 1, 1, work.d4);
  const int64_t q = llr_polya_end(work.d4, work);
  if (q > 0) out.polya_end = q * d;
  return out;
}

int64_t llr_short_read_polya(std::span<const float> u_window, const BoundaryConfig& cfg,
                             BoundaryWork& work) {
  block_means_f32(u_window, cfg.downscale_factor, /*pad_partial=*/true, work.f2);
  size_t n_nan = 0;
  for (float v : work.f2) n_nan += std::isnan(v) ? 1 : 0;
  work.f2.resize(work.f2.size() - n_nan);
  std::vector<double>& s = work.d3;
  s.assign(work.f2.begin(), work.f2.end());
  const auto n = static_cast<int64_t>(s.size());
  if (n < 2) return 0;
  llr_prefix_sums(s, work.d1, work.d2);
  llr_trace(work.d1, work.d2, 0, n - 1, 5, 5, work.d4);
  return llr_polya_end(work.d4, work);
}

// ---- escapepod LLR-only ---------------------------------------------------------------------

namespace {

struct Split {
  bool found = false;
  int64_t pos = 0;
  double gain = 0.0;
};

struct PrefixVar {
  std::span<const double> p1, p2;  // p[k] = sum of x[0, k)
  double var(int64_t a, int64_t b) const {
    if (b <= a) return 0.0;
    const double len = static_cast<double>(b - a);
    const double m = (p1[static_cast<size_t>(b)] - p1[static_cast<size_t>(a)]) / len;
    return (p2[static_cast<size_t>(b)] - p2[static_cast<size_t>(a)]) / len - m * m;
  }
};

Split best_split(const PrefixVar& pv, int64_t len, int64_t a, int64_t b, int64_t lo, int64_t hi) {
  Split best;
  if (b > len || a < 0 || b <= a) return best;
  const double vab = pv.var(a, b);
  if (!(vab > 0.0)) return best;
  const double total = static_cast<double>(b - a) * std::log(vab);
  for (int64_t i = a + lo; i < b - hi; ++i) {
    const double v1 = pv.var(a, i), v2 = pv.var(i, b);
    if (!(v1 > 0.0) || !(v2 > 0.0)) continue;
    const double gain = total - static_cast<double>(i - a) * std::log(v1) -
                        static_cast<double>(b - i) * std::log(v2);
    if (gain > 0.0 && (!best.found || gain > best.gain)) {
      best.found = true;
      best.pos = i;
      best.gain = gain;
    }
  }
  return best;
}

}  // namespace

LlrOnlyResult llr_only_detect(std::span<const float> signal, int64_t min_adapter,
                              int64_t border_trim, int64_t downscale, BoundaryWork& work) {
  LlrOnlyResult out;
  const int64_t d = std::max<int64_t>(downscale, 1);
  std::vector<float>& x = work.f1;
  if (d > 1) {
    block_means_f32(signal, d, /*pad_partial=*/false, x);
  } else {
    x.assign(signal.begin(), signal.end());
  }
  if (x.size() > 10) {
    const MedianMad mm = median_mad_f32(x, work.f3);
    for (float& v : x) v = mm.mad > 0.0f ? (v - mm.median) / mm.mad : v - mm.median;
  }
  const auto len = static_cast<int64_t>(x.size());
  const int64_t min_obs = std::max<int64_t>(min_adapter / d, 1);
  const int64_t trim = std::max<int64_t>(border_trim / d, 1);
  std::vector<double>& p1 = work.d1;
  std::vector<double>& p2 = work.d2;
  p1.assign(x.size() + 1, 0.0);
  p2.assign(x.size() + 1, 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    p1[i + 1] = p1[i] + v;
    p2[i + 1] = p2[i] + v * v;
  }
  const PrefixVar pv{p1, p2};
  const Split s1 = best_split(pv, len, 0, len, min_obs + trim, trim);
  if (!s1.found) return out;
  const int64_t x1 = s1.pos;
  const Split sh = best_split(pv, len, 0, x1, trim, min_obs);
  const Split st = best_split(pv, len, x1, len, min_obs, trim);
  const int64_t xh = sh.found ? sh.pos : 1;
  const double gh = sh.found ? sh.gain : 0.0;
  const int64_t xt = st.found ? st.pos : x1 + 1;
  const double gt = st.found ? st.gain : 0.0;
  std::vector<double>& seg = work.d3;
  auto med = [&](int64_t a, int64_t b) {
    a = std::clamp<int64_t>(a, 0, len);
    b = std::clamp<int64_t>(b, a, len);
    seg.assign(x.begin() + a, x.begin() + b);
    return median_f64(seg, work.d4);
  };
  const double m0 = med(0, xh), m1 = med(xh, x1), m2 = med(x1, xt), m3 = med(xt, len);
  const double mm = (m0 + m1 + m2 + m3) / 4.0;
  if (m2 - m1 > 0.0) {
    out.adapter_start = m0 >= mm ? xh * d : 0;
    out.adapter_end = x1 * d;
  } else if (gt > gh) {
    out.adapter_start = x1 * d;
    out.adapter_end = xt * d;
  }
  return out;
}

}  // namespace escpod::signal
