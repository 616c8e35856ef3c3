#include "nn/simd.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "escpod/nn/simd_vec.hpp"
#include "nn/plan.hpp"

// The vector helpers below are always inlined into their target-specific callers, so the
// "vector argument ABI changes without AVX" note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace escpod::nn::detail {
namespace {

using simd::load;
using simd::store;
using simd::vf;
using simd::vi;

// exp(x) for any x, clamped to [-87, 88] (relative error ~2e-7, see simd::exp_in_range).
// Written on GCC vector types (W floats) so every ISA variant gets the same arithmetic; W = 1
// handles loop tails.
template <int W>
[[gnu::always_inline]] inline vf<W> vexp(vf<W> x) {
  const vf<W> lo = vf<W>{} - 87.0f, hi = vf<W>{} + 88.0f;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  return simd::exp_in_range<W>(x);
}

template <int W>
[[gnu::always_inline]] inline vf<W> vsigmoid(vf<W> x) {
  return 1.0f / (1.0f + vexp<W>(-x));
}
template <int W>
[[gnu::always_inline]] inline vf<W> vtanh(vf<W> x) {
  return 1.0f - 2.0f / (1.0f + vexp<W>(2.0f * x));
}

template <int W>
[[gnu::always_inline]] inline void cell_block(const float* g, const float* bias, float* cr, float* hr, int64_t h,
                                              int64_t k) {
  const vf<W> i = vsigmoid<W>(load<W>(g + k) + load<W>(bias + k));
  const vf<W> o = vsigmoid<W>(load<W>(g + h + k) + load<W>(bias + h + k));
  const vf<W> f = vsigmoid<W>(load<W>(g + 2 * h + k) + load<W>(bias + 2 * h + k));
  const vf<W> cc = vtanh<W>(load<W>(g + 3 * h + k) + load<W>(bias + 3 * h + k));
  const vf<W> cn = f * load<W>(cr + k) + i * cc;
  store<W>(cr + k, cn);
  store<W>(hr + k, o * vtanh<W>(cn));
}

template <int W>
[[gnu::always_inline]] inline void lstm_cell_impl(const float* gates, const float* bias, float* c, float* h_out,
                                                  int64_t n, int64_t h, int64_t h_stride) {
  for (int64_t row = 0; row < n; ++row) {
    const float* g = gates + row * 4 * h;
    float* cr = c + row * h;
    float* hr = h_out + row * h_stride;
    int64_t k = 0;
    for (; k + W <= h; k += W) cell_block<W>(g, bias, cr, hr, h, k);
    if (k < h) {
      // Tail: run one full vector over padded copies of the last h - k lanes.
      const int64_t m = h - k;
      float tg[4 * W] = {}, tb[4 * W] = {}, tc[W] = {}, th[W] = {};
      for (int64_t q = 0; q < 4; ++q) {
        for (int64_t j = 0; j < m; ++j) {
          tg[q * W + j] = g[q * h + k + j];
          tb[q * W + j] = bias[q * h + k + j];
        }
      }
      for (int64_t j = 0; j < m; ++j) tc[j] = cr[k + j];
      cell_block<W>(tg, tb, tc, th, W, 0);
      for (int64_t j = 0; j < m; ++j) {
        cr[k + j] = tc[j];
        hr[k + j] = th[j];
      }
    }
  }
}

// C[m][j] += sum_k A[m][k] * B[k][j] over a block of R rows and V vectors of columns, the
// accumulators held in registers. B is streamed once per R rows.
template <int W, int R, int V>
[[gnu::always_inline]] inline void gemm_block(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                              int64_t ldc, int64_t k_size) {
  vf<W> acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[r][v] = load<W>(c + r * ldc + v * W);
  }
  for (int64_t k = 0; k < k_size; ++k) {
    vf<W> bv[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) bv[v] = load<W>(b + k * ldb + v * W);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float av = a[r * lda + k];
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[r][v] += av * bv[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) store<W>(c + r * ldc + v * W, acc[r][v]);
  }
}

template <int W, int R, int V>
[[gnu::always_inline]] inline void gemm_rows(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                             int64_t ldc, int64_t n, int64_t k_size) {
  int64_t j = 0;
  for (; j + V * W <= n; j += V * W) gemm_block<W, R, V>(a, lda, b + j, ldb, c + j, ldc, k_size);
  for (; j + W <= n; j += W) gemm_block<W, R, 1>(a, lda, b + j, ldb, c + j, ldc, k_size);
  for (; j < n; ++j) {
    for (int r = 0; r < R; ++r) {
      float s = c[r * ldc + j];
      for (int64_t k = 0; k < k_size; ++k) s += a[r * lda + k] * b[k * ldb + j];
      c[r * ldc + j] = s;
    }
  }
}

template <int W>
[[gnu::always_inline]] inline void gemm_acc_impl(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                                 int64_t ldc, int64_t m, int64_t n, int64_t k) {
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) gemm_rows<W, 4, 4>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, n, k);
  switch (m - r) {
    case 3: gemm_rows<W, 3, 4>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, n, k); break;
    case 2: gemm_rows<W, 2, 6>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, n, k); break;
    case 1: gemm_rows<W, 1, 8>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, n, k); break;
    default: break;
  }
}

__attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma"))) void gemm_acc_avx512(
    const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n, int64_t k) {
  gemm_acc_impl<16>(a, lda, b, ldb, c, ldc, m, n, k);
}
__attribute__((target("avx2,fma"))) void gemm_acc_avx2(const float* a, int64_t lda, const float* b, int64_t ldb,
                                                        float* c, int64_t ldc, int64_t m, int64_t n, int64_t k) {
  gemm_acc_impl<8>(a, lda, b, ldb, c, ldc, m, n, k);
}
void gemm_acc_sse2(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m,
                   int64_t n, int64_t k) {
  gemm_acc_impl<4>(a, lda, b, ldb, c, ldc, m, n, k);
}

__attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma"))) void lstm_cell_avx512(
    const float* gates, const float* bias, float* c, float* h_out, int64_t n, int64_t h, int64_t h_stride) {
  lstm_cell_impl<16>(gates, bias, c, h_out, n, h, h_stride);
}

__attribute__((target("avx2,fma"))) void lstm_cell_avx2(const float* gates, const float* bias, float* c,
                                                         float* h_out, int64_t n, int64_t h, int64_t h_stride) {
  lstm_cell_impl<8>(gates, bias, c, h_out, n, h, h_stride);
}

void lstm_cell_sse2(const float* gates, const float* bias, float* c, float* h_out, int64_t n, int64_t h,
                    int64_t h_stride) {
  lstm_cell_impl<4>(gates, bias, c, h_out, n, h, h_stride);
}

// W / 4 rows per vector: tanh over W inputs, then each row's four results behind its blank.
template <int W>
[[gnu::always_inline]] inline void blank_pad_tanh_impl(const float* x, float* y, int64_t rows, float blank,
                                                       float alpha, float beta) {
  constexpr int64_t kRowsPerVector = W / 4;
  int64_t r = 0;
  float t[W];
  for (; r + kRowsPerVector <= rows; r += kRowsPerVector, x += W) {
    store<W>(t, alpha * vtanh<W>(load<W>(x)) + beta);
    for (int64_t q = 0; q < kRowsPerVector; ++q, y += 5) {
      y[0] = blank;
      __builtin_memcpy(y + 1, t + 4 * q, 4 * sizeof(float));
    }
  }
  for (; r < rows; ++r, x += 4, y += 5) {
    y[0] = blank;
    for (int j = 0; j < 4; ++j) y[1 + j] = alpha * vtanh<1>(vf<1>{x[j]})[0] + beta;
  }
}

__attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma"))) void blank_pad_tanh_avx512(
    const float* x, float* y, int64_t rows, float blank, float alpha, float beta) {
  blank_pad_tanh_impl<16>(x, y, rows, blank, alpha, beta);
}
__attribute__((target("avx2,fma"))) void blank_pad_tanh_avx2(const float* x, float* y, int64_t rows, float blank,
                                                              float alpha, float beta) {
  blank_pad_tanh_impl<8>(x, y, rows, blank, alpha, beta);
}
void blank_pad_tanh_sse2(const float* x, float* y, int64_t rows, float blank, float alpha, float beta) {
  blank_pad_tanh_impl<4>(x, y, rows, blank, alpha, beta);
}

}  // namespace

BlankPadTanhFn blank_pad_tanh_fn(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return blank_pad_tanh_avx512;
    case SimdLevel::kAvx2: return blank_pad_tanh_avx2;
    case SimdLevel::kSse2: break;
  }
  return blank_pad_tanh_sse2;
}

GemmAccFn gemm_acc_fn(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return gemm_acc_avx512;
    case SimdLevel::kAvx2: return gemm_acc_avx2;
    case SimdLevel::kSse2: break;
  }
  return gemm_acc_sse2;
}

SimdLevel simd_level() {
  static const SimdLevel level = [] {
    const std::string isa = dnnl_isa_name();
    if (isa.rfind("avx512", 0) == 0) return SimdLevel::kAvx512;
    if (isa.rfind("avx2", 0) == 0) return SimdLevel::kAvx2;
    return SimdLevel::kSse2;
  }();
  return level;
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return "avx512";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kSse2: break;
  }
  return "sse2";
}

LstmCellFn lstm_cell_fn(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return lstm_cell_avx512;
    case SimdLevel::kAvx2: return lstm_cell_avx2;
    case SimdLevel::kSse2: break;
  }
  return lstm_cell_sse2;
}

}  // namespace escpod::nn::detail
