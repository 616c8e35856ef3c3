#include "demux/kernel_exp.hpp"

#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace escpod::demux::detail {

void exp_to_float_scalar(const float* x, size_t n, double* out) {
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<double>(static_cast<float>(std::exp(static_cast<double>(x[i]))));
}

#if defined(__x86_64__)
namespace {

// exp(x) = 2^k * exp(r), k = round(x / ln 2), r = x - k ln 2 (ln 2 split in two so k * hi is
// exact), |r| <= ln(2)/2, exp(r) by its Taylor series to r^12 / 12! (remainder < 2e-16).
__attribute__((target("avx2,fma"))) void exp_to_float_avx2(const float* x, size_t n,
                                                             double* out) {
  const __m256d inv_ln2 = _mm256_set1_pd(1.4426950408889634);
  const __m256d ln2_hi = _mm256_set1_pd(6.93147180369123816490e-01);
  const __m256d ln2_lo = _mm256_set1_pd(1.90821492927058770002e-10);
  const __m256d lim = _mm256_set1_pd(700.0);
  static constexpr double kInvFact[13] = {1.0,
                                          1.0,
                                          1.0 / 2,
                                          1.0 / 6,
                                          1.0 / 24,
                                          1.0 / 120,
                                          1.0 / 720,
                                          1.0 / 5040,
                                          1.0 / 40320,
                                          1.0 / 362880,
                                          1.0 / 3628800,
                                          1.0 / 39916800,
                                          1.0 / 479001600};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    // |v| <= 700 is false for NaN too: such lanes go to std::exp.
    const __m256d in_range =
        _mm256_cmp_pd(_mm256_andnot_pd(_mm256_set1_pd(-0.0), v), lim, _CMP_LE_OQ);
    if (_mm256_movemask_pd(in_range) != 0xF) {
      exp_to_float_scalar(x + i, 4, out + i);
      continue;
    }
    const __m256d k = _mm256_round_pd(_mm256_mul_pd(v, inv_ln2),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(k, ln2_hi, v);
    r = _mm256_fnmadd_pd(k, ln2_lo, r);
    __m256d p = _mm256_set1_pd(kInvFact[12]);
    for (int t = 11; t >= 0; --t) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kInvFact[t]));
    const __m256i k64 = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k));
    const __m256d scale =
        _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(k64, _mm256_set1_epi64x(1023)), 52));
    const __m256d e = _mm256_mul_pd(p, scale);
    _mm256_storeu_pd(out + i, _mm256_cvtps_pd(_mm256_cvtpd_ps(e)));
  }
  exp_to_float_scalar(x + i, n - i, out + i);
}

}  // namespace
#endif

void exp_to_float(const float* x, size_t n, double* out) {
#if defined(__x86_64__)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (ok) return exp_to_float_avx2(x, n, out);
#endif
  exp_to_float_scalar(x, n, out);
}

}  // namespace escpod::demux::detail
