// Per-read signal computations of the adapter / poly(A) boundary detector of ADAPTed as WarpDemuX
// runs it on RNA004 (docs/demux.md §2, §3.0-§3.5), without the
// network: CNN input preparation and output decoding, the validation checks (adapter MAD, open
// pores, real signal, MVS poly(A) check), the LLR traces with their peak pickers (the fallbacks),
// and escapepod's LLR-only best-split detector (docs/demux.md §3.6).
//
// The pipeline's BoundaryDetector (include/escpod/pipeline/detect/boundary_detector.hpp) combines
// these with the boundary CNN. Everything here is reentrant; buffers are the caller's (BoundaryWork).
//
// Float semantics: the CNN input (block means, median/MAD normalisation) and the medians/MADs of
// the validation follow numpy float32 exactly (pairwise float32 block sums, float32 medians).
// Moving means/variances, percentiles and the LLR traces are computed in double (bottleneck
// accumulates float32 running sums; the difference is a few ulp of a pA value, far from any
// threshold).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "escpod/signal/peaks.hpp"

namespace escpod::signal {

// Closed interval [lo, hi]; an unset side is infinite. contains(NaN) is false (ADAPTed in_range).
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool contains(double v) const { return lo <= v && v <= hi; }
  bool unbounded() const { return lo == -hi && hi == std::numeric_limits<double>::infinity(); }
};

// The effective signal-processing configuration (the model JSON's `signal_processing` block).
// Defaults are the RNA004 values of docs/demux.md §3.0.
struct BoundaryConfig {
  // core
  int64_t min_obs_adapter = 1000;
  int64_t max_obs_adapter = 6500;
  int64_t min_obs_polya = 100;  // parsed, unused on this path
  int64_t downscale_factor = 10;
  int64_t max_obs_trace = 10000;
  double sig_norm_outlier_thresh = 5.0;
  // cnn_boundaries
  bool cnn_detect = true;
  int64_t polya_cand_k = 5;
  bool fallback_to_llr_short_reads = true;
  bool fallback_to_llr = true;
  // llr_boundaries (the poly(A) peak picker has fixed parameters, see llr_polya_end)
  bool llr_detect = false;
  double adapter_peak_prominence = 1.0;
  double adapter_peak_rel_height = 1.0;
  int64_t adapter_peak_width = 1000;  // in samples; divided by downscale_factor
  // mvs_polya
  bool mvs_detect_check = true;
  int64_t search_window = 500;  // only enters the preload size
  int64_t pA_mean_window = 20;
  Range pA_mean_range;  // unbounded: derived from pA_mean_adapter_med_scale_range x adapter median
  int64_t pA_var_window = 100;
  Range pA_var_range{-std::numeric_limits<double>::infinity(), 30.0};
  int64_t median_shift_window = 1000;
  Range median_shift_range{5.0, std::numeric_limits<double>::infinity()};
  int64_t polyA_window = 300;  // only enters the preload size
  Range polyA_med_range;
  Range polyA_local_range;
  Range pA_mean_adapter_med_scale_range{1.3, std::numeric_limits<double>::infinity()};
  // real_range
  bool detect_open_pores = true;
  bool real_signal_check = true;
  int64_t mean_window = 300;
  Range mean_start_range;
  Range mean_end_range;
  int64_t max_obs_local_range = 5000;
  Range local_range{7.0, 35.0};
  Range adapter_mad_range{3.0, 12.0};
  // Fixed in ADAPTed (not configuration keys): open-pore level and minimum gap between open-pore
  // samples (anomalies), CNN pad value for NaN inputs.
  double open_pore_pa = 200.0;
  int64_t open_pore_min_gap = 10;
  float cnn_pad_value = -5.0f;
  // escapepod's LLR-only detector (DetectMethod::kLlr; docs/demux.md §3.6 and the CLI's
  // --min-adapter / --border-trim / --downscale); not part of the signal_processing block.
  int64_t llr_only_min_adapter = 200;
  int64_t llr_only_border_trim = 50;
  int64_t llr_only_downscale = 10;

  // Samples of each read the WarpDemuX path looks at: max_obs_trace, plus search_window +
  // max(median_shift_window, polyA_window) when mvs_detect_check is on (11 500 for RNA004).
  int64_t sig_preload_size() const;
  // CNN input length: ceil((sig_preload_size - min_obs_adapter) / downscale_factor) (1050).
  int64_t cnn_input_len() const;
};

// Per-worker buffers for the functions below. Grow to the largest read, then stay.
struct BoundaryWork {
  std::vector<float> f1, f2, f3, f4;
  std::vector<double> d1, d2, d3, d4, d5;
  std::vector<size_t> peaks, peaks2;
  PeakScratch peak_scratch;
};

// ---- numpy helpers -------------------------------------------------------------------------

// numpy's float32 add.reduce of `x` (pairwise summation, 8-way unrolled base case).
float numpy_sum_f32(std::span<const float> x);

// Non-overlapping block means of `x` in float32 as numpy's reshape(-1, factor).mean(axis) does.
// A trailing partial block is averaged as if zero-padded (sum / factor) when `pad_partial`,
// dropped otherwise. NaN propagates to its block. out is resized.
void block_means_f32(std::span<const float> x, int64_t factor, bool pad_partial,
                     std::vector<float>& out);

// ---- CNN input and output ------------------------------------------------------------------

// Section 3.1 input preparation for one read. `sig` is the read's calibrated prefix (samples
// past sig.size() count as absent = NaN, like the preload padding of short reads). Writes
// cfg.cnn_input_len() values to `out`: block means of samples [min_obs_adapter, preload) by
// downscale_factor, then (x - median)/MAD over the non-NaN blocks in float32, NaN -> pad value,
// +-inf -> +-FLT_MAX (torch nan_to_num).
void cnn_prepare_input(std::span<const float> sig, const BoundaryConfig& cfg, std::span<float> out,
                       BoundaryWork& work);

// Section 3.1 decoding of one read's network output (channel 0 and channel 1, each L_out long).
// Returns the adapter end A in samples (0 = none) and fills `polya_candidates` with
// max(polya_cand_k, 1) values in samples (0 = none, padding). Peaks are searched per read (the
// cross-read minibatch quirk of ADAPTed is not reproduced). Ties in height keep index order
// (ADAPTed's stable lexsort).
int64_t cnn_decode(std::span<const float> adapter_scores, std::span<const float> polya_scores,
                   const BoundaryConfig& cfg, std::vector<int64_t>& polya_candidates,
                   BoundaryWork& work);

// ---- validation (section 3.2) --------------------------------------------------------------

struct MvsResult {
  bool pass = false;
  bool not_enough_signal = false;  // mean == 0 (ADAPTed's marker for the early exits)
  double mean = 0.0, var = 0.0, polya_med = 0.0, polya_local_range = 0.0, med_shift = 0.0;
  bool mean_ok = false, var_ok = false, med_ok = false, range_ok = false, shift_ok = false;
};

// mean_var_shift_polyA_check on sig (the whole validated signal) for adapter end A and poly(A)
// end c, with the mean range `mean_range` (already derived from the adapter median).
MvsResult mvs_polya_check(std::span<const float> sig, int64_t adapter_end, int64_t polya_end,
                          const BoundaryConfig& cfg, const Range& mean_range, BoundaryWork& work);

// Open-pore rule of 3.2 step 3 on sig[start, end): the new adapter start, or -1 when there is no
// sample >= open_pore_pa.
int64_t open_pore_adapter_start(std::span<const float> sig, int64_t start, int64_t end,
                                const BoundaryConfig& cfg);

// Real-signal check of 3.2 step 4 on r = the adapter samples.
bool real_signal_check(std::span<const float> r, const BoundaryConfig& cfg, BoundaryWork& work);

struct Validation {
  bool success = false;
  int64_t adapter_start = 0;
  int64_t adapter_end = 0;
  int64_t polya_end = 0;  // c_0, or the candidate that passed
  std::string fail_reason;  // WarpDemuX's words; empty on success
  bool exception = false;   // the Python code raised: the read fails with zeros and no fallback
};

// validate_boundaries (3.2). `sig`: calibrated samples [0, min(num_samples, preload)).
// `polya_candidates`: c_0.. (c_0 is the reported poly(A) end; stops at the first 0).
Validation validate_boundaries(std::span<const float> sig, int64_t adapter_end,
                               std::span<const int64_t> polya_candidates,
                               const BoundaryConfig& cfg, BoundaryWork& work);

// ---- LLR (sections 3.3, 3.4) ---------------------------------------------------------------

// Winsorised MAD normalisation of 3.3 step 1 in float32: clip to median +- thresh*MAD, then
// (x - median)/MAD. Returns false when the MAD is 0 ("MAD normalization failed: scale is 0").
bool winsor_mad_normalise(std::span<const float> x, double outlier_thresh, std::vector<float>& out,
                          BoundaryWork& work);

// Prefix sums C1, C2 (double) of s.
void llr_prefix_sums(std::span<const double> s, std::vector<double>& c1, std::vector<double>& c2);

// LLR gain trace (3.4 steps 2-3): trace[i] = G(i) for i in [start + head, end - tail), splitting
// [start, end); 0 elsewhere; trace.size() == c1.size(). Infinite/NaN gains (zero variances) are
// kept as the C code produces them.
void llr_trace(std::span<const double> c1, std::span<const double> c2, int64_t start, int64_t end,
               int64_t head, int64_t tail, std::vector<double>& trace);

// Adapter end (downscaled index, 0 = none) from the adapter trace (3.4 step 5): peaks of
// G[lo, hi) with prominence >= prominence x nanstd and width >= width at rel_height, then the
// plateau and split-peak corrections; first corrected peak.
int64_t llr_adapter_end(std::span<const double> trace, double prominence, double rel_height,
                        double width, BoundaryWork& work);

// Poly(A) peak picker with the spike rule (3.4 step 6); `trace` NaN is read as 0. Downscaled
// index, 0 = none.
int64_t llr_polya_end(std::span<const double> trace, BoundaryWork& work);

// 3.4 steps 1-6 on the downscaled normalised signal s: adapter end and poly(A) end in samples
// (multiplied by downscale_factor), 0 = none.
struct LlrBoundaries {
  int64_t adapter_end = 0;
  int64_t polya_end = 0;
};
LlrBoundaries llr_detect_downscaled(std::span<const double> s, const BoundaryConfig& cfg,
                                    BoundaryWork& work);

// 3.3 steps 2-3: poly(A) end re-estimate (downscaled index q relative to the window, 0 = none)
// from u_window = the normalised signal [A, c_0).
int64_t llr_short_read_polya(std::span<const float> u_window, const BoundaryConfig& cfg,
                             BoundaryWork& work);

// escapepod's LLR-only detector (docs/demux.md §3.6) on a whole read (pA or ADC; the
// method is invariant to positive affine maps up to rounding). Returns {adapter_start,
// adapter_end} in samples; {0, 0} = none.
struct LlrOnlyResult {
  int64_t adapter_start = 0;
  int64_t adapter_end = 0;
};
LlrOnlyResult llr_only_detect(std::span<const float> signal, int64_t min_adapter,
                              int64_t border_trim, int64_t downscale, BoundaryWork& work);

}  // namespace escpod::signal
