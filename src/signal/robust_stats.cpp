#include "escpod/signal/robust_stats.hpp"

#include <algorithm>
#include <cmath>

#include "pairwise_sum.hpp"

namespace escpod::signal {

namespace {

// Median of work[0, n) (n >= 1), reordering it. Even n: mean of the two middle values in the
// element type T (for float this equals numpy's float32 mean of two values: halving is exact).
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

}  // namespace

float median_f32(std::span<const float> values, std::vector<float>& work) {
  if (values.empty()) return 0.0f;
  work.assign(values.begin(), values.end());
  return median_inplace(work);
}

MedianMad median_mad_f32(std::span<const float> values, std::vector<float>& work) {
  MedianMad out;
  if (values.empty()) return out;
  out.median = median_f32(values, work);
  for (size_t i = 0; i < values.size(); ++i) work[i] = std::fabs(values[i] - out.median);
  out.mad = median_inplace(work);
  return out;
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
