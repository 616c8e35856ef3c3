// Internal to the signal layer: numpy's pairwise summation (umath loops, PW_BLOCKSIZE 128,
// 8-way unroll), shared by boundaries.cpp (float32) and robust_stats.cpp (float64).
#pragma once

#include <cstddef>

namespace escpod::signal::detail {

// Sum of a[0, n) in numpy's exact association order with accumulator type T, so results are
// bit-identical to numpy's add.reduce over a contiguous T array (golden tests depend on this).
// Recursion depth is log2(n / 128).
template <typename T>
T pairwise_sum(const T* a, size_t n) {
  if (n < 8) {
    T res = T(0);
    for (size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    T r[8];
    for (size_t j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

}  // namespace escpod::signal::detail
