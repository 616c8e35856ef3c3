#include "escpod/signal/robust_stats.hpp"

#include <algorithm>
#include <cmath>

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

namespace {

double pairwise_sum(const double* a, size_t n) {
  if (n < 8) {
    double res = 0.0;
    for (size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (size_t j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

}  // namespace

double numpy_sum(std::span<const double> values) {
  // add.reduce starts from the identity 0 and adds the pairwise sum of all values.
  return 0.0 + pairwise_sum(values.data(), values.size());
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
