// WarpDemuX barcode fingerprint of one read: the adapter window is winsorised, cut into events at
// t-statistic change points, and the z-scored means of the last events form the fingerprint the
// DTW-SVM classifiers take. Specified in docs/demux.md §4 (defaults
// from the effective RNA004 configuration, section 3.0); escapepod calls this its
// "WarpDemuX-compatible" mode (docs/demux.md §4).
//
// A read that cannot be fingerprinted (too short, flat, MAD 0, NaN/inf samples, too few change
// points) is not an error of the run: the function reports a FingerprintError whose reason()
// becomes the read's "unclassified" reason. Nothing here allocates once the scratch has grown to
// the largest window seen.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "escpod/signal/peaks.hpp"

namespace escpod::signal {

struct FingerprintParams {
  size_t padding_samples = 100;        // sig_extract.padding: window = [S - pad, A + pad)
  size_t max_window_end = 11500;       // derived.sig_preload_size: the window never reaches past
  double outlier_mads = 5.0;           // core.sig_norm_outlier_thresh: clip to median +- k*MAD
  size_t num_events = 110;             // segmentation.num_events: change points (events + 1 = 111)
  size_t max_stat_width = 12;          // segmentation.running_stat_width
  size_t max_min_gap = 6;              // segmentation.min_obs_per_base
  size_t barcode_num_events = 25;      // segmentation.barcode_num_events: fingerprint length
};

// Half-open sample range [begin, end).
struct SampleRange {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end > begin ? end - begin : 0; }
};

// The fingerprint window of a read with adapter [adapter_start, adapter_end):
// [max(0, adapter_start - pad), min(n_samples, max_window_end, adapter_end + pad)).
// n_samples is the number of calibrated samples available. Empty when adapter_end <=
// adapter_start.
SampleRange barcode_window(size_t adapter_start, size_t adapter_end, size_t n_samples,
                           const FingerprintParams& params);

enum class FingerprintError {
  kNone = 0,
  kWindowTooShort,      // the window cannot hold num_events change points
  kNonFinite,           // a NaN or infinite sample in the window
  kMadZero,             // MAD of the window is 0 (flat or nearly flat signal)
  kSegmentationFailed,  // fewer than num_events t-statistic peaks (WarpDemuX's reason)
  kSegmentStdZero,      // all event means equal: cannot z-score
};

// Fixed text for the failed-read report, e.g. "event segmentation failed". Never allocates.
std::string_view fingerprint_error_reason(FingerprintError error);

// Statistics WarpDemuX records beside the fingerprint (section 4 step 9), over all events.
struct FingerprintStats {
  size_t n_samples = 0;     // window length N
  size_t stat_width = 0;    // t-statistic half-window used
  size_t min_gap = 0;       // minimum change-point spacing used
  float window_median = 0;  // winsorising centre (pA)
  float window_mad = 0;     // winsorising MAD (pA)
  double dwell_median = 0, dwell_mad = 0;                         // event lengths (samples)
  double event_mean = 0, event_std = 0, event_median = 0, event_mad = 0;  // raw event means (pA)
};

// Per-worker buffers for barcode_fingerprint; grows to the largest window, then stays.
struct FingerprintScratch {
  std::vector<float> window;    // winsorised copy of the input
  std::vector<float> work_f;    // median/MAD work
  std::vector<double> tstat;    // T[j], j in [0, N - 2*stat_width)
  std::vector<size_t> peaks;
  std::vector<size_t> order;
  std::vector<size_t> borders;  // num_events + 2 event borders
  std::vector<double> means;    // event means (raw, then z-scored)
  std::vector<double> dwells;
  std::vector<double> work_d;
  PeakScratch peak_scratch;
};

// Windowed t-statistic (Tombo style, double): for j in [0, N - 2w),
// T[j] = |mean(x[j, j+w)) - mean(x[j+w, j+2w))| / sqrt(SS_left + SS_right), SS being sums of
// squared deviations from each half's own mean; 0 when both are 0. `out` must hold
// N - 2w values (nothing is written when N < 2w). Precondition: w >= 1.
void windowed_t_statistic(std::span<const float> x, size_t w, std::span<double> out);

// Fingerprint of one window of calibrated picoamps (the output of barcode_window applied to the
// read's float32 pA samples):
//  1. every sample must be finite (kNonFinite);
//  2. winsorise to [m - k*MAD, m + k*MAD] (float32 median/MAD, bounds in double; kMadZero if the
//     MAD is 0);
//  3. w = min(max_stat_width, round_half_even(N / num_events)),
//     gap = min(max_min_gap, round_half_even(N / num_events / 2)); kWindowTooShort if either is 0
//     (N < 111 with the defaults);
//  4. change points: the num_events highest peaks of T (distance >= gap), shifted by w
//     (kSegmentationFailed if fewer exist); events are the num_events + 1 ranges between them;
//  5. event means (double, sequential sums) z-scored with numpy mean/std over all events
//     (kSegmentStdZero if the std is 0); the last barcode_num_events of them go to
//     `fingerprint` (whose size must equal params.barcode_num_events, asserted).
// `stats`, when non-null, receives the recorded statistics (filled as far as the function got).
// On failure `fingerprint` is filled with NaN. Thread safety: reentrant with a scratch per thread.
FingerprintError barcode_fingerprint(std::span<const float> window_pa,
                                     const FingerprintParams& params, FingerprintScratch& scratch,
                                     std::span<double> fingerprint,
                                     FingerprintStats* stats = nullptr);

}  // namespace escpod::signal
