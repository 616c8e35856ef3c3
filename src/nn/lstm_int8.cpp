// int8 recurrent product of the LSTM on AVX-512 VNNI (lstm_int8.hpp).
#include "nn/lstm_int8.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "nn/simd.hpp"

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() as the unused merge operand of their
// unmasked forms, which -Wmaybe-uninitialized reports once they are inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace escpod::nn::detail {

bool lstm_int8_available() {
  static const bool ok = simd_level() == SimdLevel::kAvx512 && __builtin_cpu_supports("avx512vnni") &&
                         __builtin_cpu_supports("avx512bw");
  return ok;
}

bool lstm_int8_shape_ok(int64_t n, int64_t k) {
  return k > 0 && k % 4 == 0 && k <= kLstmInt8MaxK && n > 0 && n % 16 == 0;
}

Int8Recurrent quantise_recurrent(const float* r, int64_t n, int64_t k) {
  Int8Recurrent q;
  q.n = n;
  q.k = k;
  q.w.resize(static_cast<size_t>(n * k));
  q.offset.resize(static_cast<size_t>(n));
  q.scale.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const float* row = r + j * k;
    float max_abs = 0.0f;
    for (int64_t i = 0; i < k; ++i) max_abs = std::max(max_abs, std::fabs(row[i]));
    const float s = max_abs / 127.0f;  // a zero row keeps s = 0: every q is 0
    int32_t sum = 0;
    for (int64_t i = 0; i < k; ++i) {
      const float v = s > 0.0f ? std::nearbyint(row[i] / s) : 0.0f;
      const auto qv = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
      q.w[static_cast<size_t>(((i / 4) * n + j) * 4 + i % 4)] = qv;
      sum += qv;
    }
    q.offset[static_cast<size_t>(j)] = 128 * sum;
    q.scale[static_cast<size_t>(j)] = s / 127.0f;
  }
  return q;
}

namespace {

#define ESCPOD_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

// u[i] = round(127 * clamp(h[i], -1, 1)) + 128 for i < k (k a multiple of 4).
ESCPOD_VNNI_TARGET inline void quantise_h(const float* h, int64_t k, uint8_t* u) {
  const __m512 lo = _mm512_set1_ps(-1.0f), hi = _mm512_set1_ps(1.0f), mul = _mm512_set1_ps(127.0f);
  const __m512i bias = _mm512_set1_epi32(128);
  for (int64_t i = 0; i < k; i += 16) {
    const auto m = static_cast<__mmask16>(k - i >= 16 ? 0xFFFF : (1u << (k - i)) - 1u);
    const __m512 x = _mm512_min_ps(_mm512_max_ps(_mm512_maskz_loadu_ps(m, h + i), lo), hi);
    const __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x, mul)), bias);  // 1 .. 255
    _mm512_mask_cvtepi32_storeu_epi8(u + i, m, v);
  }
}

// c[col .. col + 16 A) += the product for one h row, A accumulators of 16 gates each.
template <int A>
ESCPOD_VNNI_TARGET inline void block(const Int8Recurrent& r, const uint8_t* u, float* c, int64_t col) {
  __m512i acc[A];
  for (int a = 0; a < A; ++a) acc[a] = _mm512_setzero_si512();
  const int8_t* w = r.w.data() + col * 4;
  for (int64_t g = 0; g < r.k / 4; ++g) {
    int32_t four;
    std::memcpy(&four, u + 4 * g, sizeof four);
    const __m512i hv = _mm512_set1_epi32(four);
    const int8_t* wg = w + g * r.n * 4;
#pragma GCC unroll 24
    for (int a = 0; a < A; ++a) acc[a] = _mm512_dpbusd_epi32(acc[a], hv, _mm512_loadu_si512(wg + 64 * a));
  }
#pragma GCC unroll 24
  for (int a = 0; a < A; ++a) {
    const int64_t j = col + 16 * a;
    const __m512i exact = _mm512_sub_epi32(acc[a], _mm512_loadu_si512(r.offset.data() + j));
    const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(exact), _mm512_loadu_ps(r.scale.data() + j));
    _mm512_storeu_ps(c + j, _mm512_add_ps(_mm512_loadu_ps(c + j), v));
  }
}

}  // namespace

ESCPOD_VNNI_TARGET void gemv_acc_int8(const Int8Recurrent& r, const float* h, int64_t ldh, float* c, int64_t ldc,
                                      int64_t rows) {
  alignas(64) uint8_t u[kLstmInt8MaxK];
  for (int64_t row = 0; row < rows; ++row) {
    quantise_h(h + row * ldh, r.k, u);
    float* cr = c + row * ldc;
    int64_t col = 0;
    for (; col + 384 <= r.n; col += 384) block<24>(r, u, cr, col);  // 4H = 384 at H = 96: one pass
    for (; col + 128 <= r.n; col += 128) block<8>(r, u, cr, col);
    for (; col < r.n; col += 16) block<1>(r, u, cr, col);
  }
}

#undef ESCPOD_VNNI_TARGET

}  // namespace escpod::nn::detail
