// Order statistics and sums with numpy's exact semantics, for the few places where a
// re-implementation must reproduce a Python reference bit for bit (WarpDemuX fingerprints, the
// ADAPTed boundary checks). One function per statistic; every caller in the signal and demux
// layers uses these, never a private copy.
//
// The float32 selections are exact and run in linear time: values are binned once and only the
// bin holding a wanted rank is ordered (the boundary checks take medians and percentiles of
// thousands of samples per read; bench: detect_bench's OrderStats rows against std::nth_element).
//
// Conventions (docs/demux.md §1.4): the median of an even-sized set
// is the mean of the two middle values; MAD is the median of absolute deviations from the median
// with no 1.4826 factor; std is the population std (divide by n).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace escpod::signal {

// Median of `values` as numpy.median computes it for a float32 array: the two middle values of an
// even-sized set are averaged in float32. NaN is NOT special-cased: callers check finiteness first
// (numpy would return NaN). `work` is resized to values.size() (no allocation once its capacity
// is large enough) and its contents are clobbered. Empty input returns 0.
// Thread safety: reentrant; `work` must not be shared between threads.
float median_f32(std::span<const float> values, std::vector<float>& work);

// Median and MAD of a float32 array, numpy float32 semantics: m = median_f32(values), deviations
// |v - m| rounded to float32, MAD = median_f32(deviations). Same `work` contract as median_f32.
struct MedianMad {
  float median = 0.0f;
  float mad = 0.0f;
};
MedianMad median_mad_f32(std::span<const float> values, std::vector<float>& work);

// Percentiles of float32 values as numpy.percentile(values, q) computes them (method "linear":
// the values of ranks floor(v) and floor(v) + 1, v = q/100 * (n - 1), interpolated in double as
// numpy's _lerp does); out[i] for qs[i] (at most 4 at once, sharing one pass). Same `work`
// contract as median_f32; empty input gives NaN.
void percentiles_f32(std::span<const float> values, std::span<const double> qs,
                     std::span<double> out, std::vector<float>& work);

// Median / MAD of a double array (even size: mean of the two middle values in double). `work` as
// above. Empty input returns 0.
double median_f64(std::span<const double> values, std::vector<double>& work);
double mad_f64(std::span<const double> values, double median, std::vector<double>& work);

// numpy's float64 `add.reduce` (pairwise summation with an 8-way unrolled base case of up to 128
// values), so that sums, means and stds of double vectors equal numpy's bits.
double numpy_sum(std::span<const double> values);

// numpy.mean and numpy.std (population) of a double vector, bit-compatible with numpy 1.x.
// Empty input: 0 for both. `work` receives the squared deviations (resized to values.size()).
double numpy_mean(std::span<const double> values);
double numpy_std(std::span<const double> values, double mean, std::vector<double>& work);

}  // namespace escpod::signal
