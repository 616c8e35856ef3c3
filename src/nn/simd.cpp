#include "nn/simd.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include <immintrin.h>

#include "escpod/nn/simd_vec.hpp"
#include "nn/plan.hpp"

// The vector helpers below are always inlined into their target-specific callers, so the
// "vector argument ABI changes without AVX" note does not apply.
//
// A kernel that writes the upper halves of ymm0-15 clears them (vzeroupper) before it returns or
// calls baseline code, where GCC 12 does not on its own: the callers are baseline SSE code, which
// pays for dirty upper halves on every instruction (on Zen 4 the fused demux run's signal code ran
// ~10% slower after an AVX2 kernel that left them dirty).
#pragma GCC diagnostic ignored "-Wpsabi"

namespace escpod::nn::detail {
namespace {

// The target of every AVX-512 function below.
#define ESCPOD_AVX512_TARGET __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))

using simd::load;
using simd::store;
using simd::vf;
using simd::vi;

// AVX-512 instructions GCC does not emit from vector-type arithmetic, as inline assembly (their
// intrinsics would not inline through these untargeted templates; only W = 16 callers, which are
// all AVX-512 functions, reach them).
// min / max of x and a bound; a NaN x stays NaN (the instructions return their second source,
// here x, when either is NaN).
[[gnu::always_inline]] inline vf<16> avx512_min(vf<16> x, vf<16> bound) {
  asm("vminps %1, %2, %0" : "=v"(x) : "v"(x), "v"(bound));
  return x;
}
[[gnu::always_inline]] inline vf<16> avx512_max(vf<16> x, vf<16> bound) {
  asm("vmaxps %1, %2, %0" : "=v"(x) : "v"(x), "v"(bound));
  return x;
}
[[gnu::always_inline]] inline vf<16> avx512_round(vf<16> a) {  // to nearest, ties to even
  asm("vrndscaleps $0, %1, %0" : "=v"(a) : "v"(a));
  return a;
}
[[gnu::always_inline]] inline vf<16> avx512_scalef(vf<16> a, vf<16> n) {  // a * 2^floor(n)
  asm("vscalefps %2, %1, %0" : "=v"(a) : "v"(a), "v"(n));
  return a;
}
[[gnu::always_inline]] inline vf<16> avx512_rcp14(vf<16> d) {  // 1 / d, relative error < 2^-14
  asm("vrcp14ps %1, %0" : "=v"(d) : "v"(d));
  return d;
}

// exp(x) for x clamped to [-87, 88], in place over U independent vectors (relative error ~2e-7).
// Each step runs over all U before the next, so the U dependency chains interleave in the
// instruction stream: one vector's chain is ~25 dependent instructions, and an LSTM cell run one
// vector at a time was latency-bound. Written on GCC vector types (W floats); W = 1 handles loop
// tails. Below AVX-512: simd::exp_in_range (Cephes). AVX-512, where these kernels are bound by
// the vector ports, spends 10 fewer instructions: vrndscaleps rounds, e^r on |r| <= ln2 / 2 is
// a degree-5 polynomial in Horner form (coefficients fitted here for minimax relative error:
// 7.5e-8 in exact arithmetic, 2.1e-7 evaluated in float32, as Cephes' degree-6 form), and
// vscalefps applies 2^n.
template <int W, int U>
[[gnu::always_inline]] inline void vexp_n(vf<W> (&x)[U]) {
  const vf<W> lo = vf<W>{} - 87.0f, hi = vf<W>{} + 88.0f;
  if constexpr (W == 16) {
    vf<W> n[U], r[U], p[U];
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) x[u] = avx512_min(avx512_max(x[u], lo), hi);
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) n[u] = avx512_round(x[u] * 1.44269504088896341f);
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) r[u] = (x[u] - n[u] * 0.693359375f) - n[u] * -2.12194440e-4f;
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) p[u] = r[u] * 8.2976548001e-3f + 4.1915383190e-2f;
    for (const float coefficient : {1.6667574644e-1f, 4.9998894334e-01f, 9.9999970198e-01f, 1.0000001192e+00f}) {
#pragma GCC unroll 16
      for (int u = 0; u < U; ++u) p[u] = p[u] * r[u] + coefficient;
    }
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) x[u] = avx512_scalef(p[u], n[u]);
  } else {
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) {
      x[u] = x[u] < lo ? lo : x[u];
      x[u] = x[u] > hi ? hi : x[u];
      x[u] = simd::exp_in_range<W>(x[u]);
    }
  }
}

template <int W>
[[gnu::always_inline]] inline vf<W> vexp(vf<W> x) {
  vf<W> v[1] = {x};
  vexp_n<W, 1>(v);
  return v[0];
}

// 1 / d for d >= 1 (the sigmoid and tanh denominators). On AVX-512 the 14-bit estimate and one
// Newton step (relative error ~2^-27, within an ulp or two of the division) instead of vdivps;
// elsewhere the division.
template <int W>
[[gnu::always_inline]] inline vf<W> vrecip(vf<W> d) {
  if constexpr (W == 16) {
    const vf<W> r = avx512_rcp14(d);
    return r * (2.0f - d * r);
  } else {
    return 1.0f / d;
  }
}

template <int W>
[[gnu::always_inline]] inline vf<W> vsigmoid(vf<W> x) {
  return vrecip<W>(1.0f + vexp<W>(-x));
}
template <int W>
[[gnu::always_inline]] inline vf<W> vtanh(vf<W> x) {
  return 1.0f - 2.0f * vrecip<W>(1.0f + vexp<W>(2.0f * x));
}

// V vectors of one row, k to k + V * W: the 4V gate activations as one interleaved group, then the
// V cell updates, then the V tanh(c) as another.
template <int W, int V>
[[gnu::always_inline]] inline void cell_block(const float* g, const float* bias, float* cr, float* hr, int64_t h,
                                              int64_t k) {
  vf<W> e[4 * V];  // per vector: i, o, f (sigmoids: exp(-x)), c candidate (tanh: exp(2x))
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) {
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const int64_t at = q * h + k + v * W;
      const vf<W> x = load<W>(g + at) + load<W>(bias + at);
      e[4 * v + q] = q < 3 ? -x : 2.0f * x;
    }
  }
  vexp_n<W, 4 * V>(e);
  vf<W> o[V], t[V];
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) {
    const vf<W> i = vrecip<W>(1.0f + e[4 * v]);
    o[v] = vrecip<W>(1.0f + e[4 * v + 1]);
    const vf<W> f = vrecip<W>(1.0f + e[4 * v + 2]);
    const vf<W> cc = 1.0f - 2.0f * vrecip<W>(1.0f + e[4 * v + 3]);
    const vf<W> cn = f * load<W>(cr + k + v * W) + i * cc;
    store<W>(cr + k + v * W, cn);
    t[v] = 2.0f * cn;
  }
  vexp_n<W, V>(t);
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) store<W>(hr + k + v * W, o[v] * (1.0f - 2.0f * vrecip<W>(1.0f + t[v])));
}

template <int W>
[[gnu::always_inline]] inline void lstm_cell_impl(const float* gates, const float* bias, float* c, float* h_out,
                                                  int64_t n, int64_t h, int64_t h_stride) {
  for (int64_t row = 0; row < n; ++row) {
    const float* g = gates + row * 4 * h;
    float* cr = c + row * h;
    float* hr = h_out + row * h_stride;
    int64_t k = 0;
    for (; k + 3 * W <= h; k += 3 * W) cell_block<W, 3>(g, bias, cr, hr, h, k);
    for (; k + W <= h; k += W) cell_block<W, 1>(g, bias, cr, hr, h, k);
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
      cell_block<W, 1>(tg, tb, tc, th, W, 0);
      for (int64_t j = 0; j < m; ++j) {
        cr[k + j] = tc[j];
        hr[k + j] = th[j];
      }
    }
  }
}

// c + a b, fused where the vector has FMA (AVX2, AVX-512: written out, so that the products are
// fused in every build, not only where the compiler contracts them, as at -O2), else rounded twice.
template <int W>
[[gnu::always_inline]] inline vf<W> fused_multiply_add(vf<W> a, vf<W> b, vf<W> c) {
  if constexpr (W == 16) {
    return __builtin_ia32_vfmaddps512_mask(a, b, c, static_cast<__mmask16>(-1), _MM_FROUND_CUR_DIRECTION);
  } else if constexpr (W == 8) {
    return __builtin_ia32_vfmaddps256(a, b, c);
  } else {
    return c + a * b;
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
      const vf<W> av = a[r * lda + k] - vf<W>{};  // a broadcast (x - 0 folds to x; x + 0 would not)
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[r][v] = fused_multiply_add<W>(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) store<W>(c + r * ldc + v * W, acc[r][v]);
  }
}

// `rows` (a multiple of R) rows of C, a panel of V vectors of columns at a time: each panel of B
// (k rows of V W floats) is swept over every R-row block while it is in L1. Streaming all of B
// per block of rows instead ran the CRF linear layer's product ([64 x 96] x [96 x 1024] blocks)
// at ~0.6x the AVX2 FMA peak, B's rows 4 KB apart.
template <int W, int R, int V>
[[gnu::always_inline]] inline void gemm_rows(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                             int64_t ldc, int64_t rows, int64_t n, int64_t k_size) {
  int64_t j = 0;
  for (; j + V * W <= n; j += V * W) {
    for (int64_t r = 0; r < rows; r += R) gemm_block<W, R, V>(a + r * lda, lda, b + j, ldb, c + r * ldc + j, ldc, k_size);
  }
  for (; j + W <= n; j += W) {
    for (int64_t r = 0; r < rows; r += R) gemm_block<W, R, 1>(a + r * lda, lda, b + j, ldb, c + r * ldc + j, ldc, k_size);
  }
  for (; j < n; ++j) {  // the tail columns as the vector lanes sum theirs: fused where W has FMA
    for (int64_t r = 0; r < rows; ++r) {
      float s = c[r * ldc + j];
      for (int64_t k = 0; k < k_size; ++k) {
        if constexpr (W >= 8) {
          s = __builtin_fmaf(a[r * lda + k], b[k * ldb + j], s);
        } else {
          s += a[r * lda + k] * b[k * ldb + j];
        }
      }
      c[r * ldc + j] = s;
    }
  }
}

template <int W>
[[gnu::always_inline]] inline void gemm_acc_impl(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                                 int64_t ldc, int64_t m, int64_t n, int64_t k) {
  // R rows x V vectors of accumulators, V vectors of B and a broadcast must fit the registers (32
  // on AVX-512, 16 below: 4 x 4 there spilled, and ran the AVX2 product at ~0.6x its FMA peak).
  constexpr int V4 = W == 16 ? 4 : 3, V3 = W == 16 ? 4 : 3, V2 = 6;
  const int64_t r = m - m % 4;
  if (r > 0) gemm_rows<W, 4, V4>(a, lda, b, ldb, c, ldc, r, n, k);
  switch (m - r) {
    case 3: gemm_rows<W, 3, V3>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, 3, n, k); break;
    case 2: gemm_rows<W, 2, V2>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, 2, n, k); break;
    case 1: gemm_rows<W, 1, 8>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, 1, n, k); break;
    default: break;
  }
}

ESCPOD_AVX512_TARGET void gemm_acc_avx512(
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

ESCPOD_AVX512_TARGET void lstm_cell_avx512(
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

// Bonito's padded CRF rows: y[5r] = blank, y[5r + 1 + j] = alpha tanh(x[4r + j]) + beta.
// alpha tanh(x) + beta over four vectors of inputs as one interleaved group (see vexp_n).
template <int W>
[[gnu::always_inline]] inline void scaled_tanh4(const float* x, vf<W> (&v)[4], float alpha, float beta) {
#pragma GCC unroll 4
  for (int u = 0; u < 4; ++u) v[u] = 2.0f * load<W>(x + u * W);
  vexp_n<W, 4>(v);
#pragma GCC unroll 4
  for (int u = 0; u < 4; ++u) v[u] = alpha * (1.0f - 2.0f * vrecip<W>(1.0f + v[u])) + beta;
}

// The last rows, one at a time.
inline void blank_pad_tanh_rows(const float* x, float* y, int64_t rows, float blank, float alpha, float beta) {
  for (int64_t r = 0; r < rows; ++r, x += 4, y += 5) {
    y[0] = blank;
    for (int j = 0; j < 4; ++j) y[1 + j] = alpha * vtanh<1>(vf<1>{x[j]})[0] + beta;
  }
}

// W rows per round (four input vectors), each row's four results stored behind its blank.
template <int W>
[[gnu::always_inline]] inline void blank_pad_tanh_impl(const float* x, float* y, int64_t rows, float blank,
                                                       float alpha, float beta) {
  int64_t r = 0;
  float t[4 * W];
  for (; r + W <= rows; r += W, x += 4 * W) {
    vf<W> v[4];
    scaled_tanh4<W>(x, v, alpha, beta);
    __builtin_memcpy(t, v, sizeof(t));
    for (int64_t q = 0; q < W; ++q, y += 5) {
      y[0] = blank;
      __builtin_memcpy(y + 1, t + 4 * q, 4 * sizeof(float));
    }
  }
  blank_pad_tanh_rows(x, y, rows - r, blank, alpha, beta);
}

// AVX-512: 16 rows per round, the 80 outputs as five vector stores. Output o = 5 r + q is the
// blank (q = 0) or input 4 r + q - 1; output vector j draws from input vectors kFirst[j] and
// kFirst[j] + 1 (vpermt2ps), its blank lanes from the blank vector (kBlank[j]).
constexpr int pad_source(int o) { return o % 5 == 0 ? -1 : 4 * (o / 5) + o % 5 - 1; }
constexpr int pad_first(int j) {
  int first = 64;
  for (int l = 0; l < 16; ++l) first = pad_source(16 * j + l) >= 0 ? std::min(first, pad_source(16 * j + l)) : first;
  return std::min(first / 16, 2);
}
struct PadTables {
  int first[5];
  int shuffle[5][16];
  uint16_t blank[5];
};
constexpr PadTables make_pad_tables() {
  PadTables t{};
  for (int j = 0; j < 5; ++j) {
    t.first[j] = pad_first(j);
    for (int l = 0; l < 16; ++l) {
      const int src = pad_source(16 * j + l);
      t.shuffle[j][l] = src < 0 ? 0 : src - 16 * t.first[j];
      if (src < 0) t.blank[j] = static_cast<uint16_t>(t.blank[j] | (1u << l));
    }
  }
  return t;
}
constexpr PadTables kPadTables = make_pad_tables();

ESCPOD_AVX512_TARGET void blank_pad_tanh_avx512(
    const float* x, float* y, int64_t rows, float blank, float alpha, float beta) {
  __m512i shuffle[5];
  for (int j = 0; j < 5; ++j) shuffle[j] = _mm512_loadu_si512(kPadTables.shuffle[j]);
  const __m512 blank_v = _mm512_set1_ps(blank);
  int64_t r = 0;
  for (; r + 16 <= rows; r += 16, x += 64, y += 80) {
    vf<16> v[4];
    scaled_tanh4<16>(x, v, alpha, beta);
#pragma GCC unroll 5
    for (int j = 0; j < 5; ++j) {
      const __m512 moved = _mm512_permutex2var_ps(reinterpret_cast<__m512>(v[kPadTables.first[j]]), shuffle[j],
                                                  reinterpret_cast<__m512>(v[kPadTables.first[j] + 1]));
      _mm512_storeu_ps(y + 16 * j, _mm512_mask_blend_ps(kPadTables.blank[j], moved, blank_v));
    }
  }
  blank_pad_tanh_rows(x, y, rows - r, blank, alpha, beta);
}
__attribute__((target("avx2,fma"))) void blank_pad_tanh_avx2(const float* x, float* y, int64_t rows, float blank,
                                                              float alpha, float beta) {
  blank_pad_tanh_impl<8>(x, y, rows, blank, alpha, beta);
  _mm256_zeroupper();  // see the note at the top
}
void blank_pad_tanh_sse2(const float* x, float* y, int64_t rows, float blank, float alpha, float beta) {
  blank_pad_tanh_impl<4>(x, y, rows, blank, alpha, beta);
}

// y = x sigmoid(x) over n floats in place, eight vectors at a time as one interleaved group.
template <int W>
[[gnu::always_inline]] inline void silu_in_place(float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 * W <= n; i += 8 * W) {
    vf<W> x[8], e[8];
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) {
      x[u] = load<W>(y + i + u * W);
      e[u] = -x[u];
    }
    vexp_n<W, 8>(e);
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) store<W>(y + i + u * W, x[u] * vrecip<W>(1.0f + e[u]));
  }
  for (; i + W <= n; i += W) {
    const vf<W> x = load<W>(y + i);
    store<W>(y + i, x * vsigmoid<W>(x));
  }
  for (; i < n; ++i) y[i] = y[i] * vsigmoid<1>(vf<1>{y[i]})[0];
}

ESCPOD_AVX512_TARGET void silu_avx512(float* y, int64_t n) {
  silu_in_place<16>(y, n);
}
__attribute__((target("avx2,fma"))) void silu_avx2(float* y, int64_t n) { silu_in_place<8>(y, n); }
void silu_sse2(float* y, int64_t n) { silu_in_place<4>(y, n); }


// The lanes of the last of a row's vectors that hold channels (oc not a multiple of 16).
inline __mmask16 last_vector_lanes(int64_t oc) {
  const int64_t rem = oc - (oc - 1) / 16 * 16;
  return static_cast<__mmask16>((1u << rem) - 1u);
}

// Vector v of output position t's row: float32 lanes masked to the channels, or rounded to
// bfloat16 (vcvtneps2bf16, as convert_to_bf16 rounds; the planner asks for it only where the CPU
// has the instruction, which the kernels' target leaves out, hence the inline assembly).
[[gnu::always_inline]] ESCPOD_AVX512_TARGET inline void store_row_vector(const SmallConvGeometry& g, void* yn, int64_t t,
                                                                         int64_t v, vf<16> acc, __mmask16 lanes) {
  const int64_t at = t * g.oc + v * 16;
  if (!g.dst_bf16) {
    _mm512_mask_storeu_ps(static_cast<float*>(yn) + at, lanes, reinterpret_cast<__m512>(acc));
    return;
  }
  __m256i h;
  asm("vcvtneps2bf16 %1, %0" : "=v"(h) : "v"(acc));
  _mm256_mask_storeu_epi16(static_cast<uint16_t*>(yn) + at, lanes, h);
}

// The post-operation on U vectors in registers.
template <int U>
[[gnu::always_inline]] ESCPOD_AVX512_TARGET inline void post_in_registers(vf<16> (&acc)[U], SmallConvPost post) {
  if (post == SmallConvPost::kRelu) {
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) acc[u] = avx512_max(acc[u], vf<16>{});
  } else if (post == SmallConvPost::kSilu) {
    vf<16> e[U];
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) e[u] = -acc[u];
    vexp_n<16, U>(e);
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) acc[u] *= vrecip<16>(1.0f + e[u]);
  }
}

// Whether the post-operation runs on the registers before the store, or afterwards over the
// float32 output: with fewer than 16 channels most lanes of a register are padding, and a pass
// over the packed output is cheaper.
bool post_after_store(const SmallConvGeometry& g, SmallConvPost post) {
  return post != SmallConvPost::kNone && g.oc % 16 != 0 && !g.dst_bf16;
}

// One output position near an edge (taps outside the input skipped), V vectors of channels.
template <int V>
ESCPOD_AVX512_TARGET void small_conv_edge(const SmallConvGeometry& g, const float* xn, const float* weights,
                                          const float* bias, void* yn, int64_t t, SmallConvPost post) {
  const int64_t c_step = g.src_nwc ? 1 : g.iw, pos_step = g.src_nwc ? g.ic : 1;
  vf<16> acc[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) acc[v] = load<16>(bias + 16 * v);
  for (int64_t kk = 0; kk < g.k; ++kk) {
    const int64_t pos = t * g.stride + kk - g.pad_l;
    if (pos < 0 || pos >= g.iw) continue;
    for (int64_t c = 0; c < g.ic; ++c) {
      const float xv = xn[c * c_step + pos * pos_step];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[v] += load<16>(weights + (kk * g.ic + c) * 16 * V + 16 * v) * xv;
    }
  }
  if (!post_after_store(g, post)) post_in_registers<V>(acc, post);
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) store_row_vector(g, yn, t, v, acc[v], v == V - 1 ? last_vector_lanes(g.oc) : 0xffff);
}

// P output positions from t on, all of whose taps fall inside the input (independent accumulators:
// P * V of them).
template <int V, int P>
[[gnu::always_inline]] ESCPOD_AVX512_TARGET inline void small_conv_block(const SmallConvGeometry& g, const float* xn,
                                                                         const float* weights, const float* bias,
                                                                         void* yn, int64_t t, SmallConvPost post) {
  const int64_t c_step = g.src_nwc ? 1 : g.iw, pos_step = g.src_nwc ? g.ic : 1;
  vf<16> acc[P * V];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[p * V + v] = load<16>(bias + 16 * v);
  }
  const float* x0 = xn + (t * g.stride - g.pad_l) * pos_step;
  for (int64_t kk = 0; kk < g.k; ++kk) {
    for (int64_t c = 0; c < g.ic; ++c) {
      vf<16> w[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) w[v] = load<16>(weights + (kk * g.ic + c) * 16 * V + 16 * v);
      const float* xc = x0 + kk * pos_step + c * c_step;
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) {
        const float xv = xc[p * g.stride * pos_step];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[p * V + v] += w[v] * xv;
      }
    }
  }
  if (!post_after_store(g, post)) post_in_registers<P * V>(acc, post);
  const __mmask16 last = last_vector_lanes(g.oc);
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) store_row_vector(g, yn, t + p, v, acc[p * V + v], v == V - 1 ? last : 0xffff);
  }
}

// The convolution of SmallConvFn with V = ceil(oc / 16) vectors of channels, P positions per block.
template <int V, int P>
ESCPOD_AVX512_TARGET void small_conv_channels(const SmallConvGeometry& g, const float* x, const float* weights,
                                              const float* bias, void* y, SmallConvPost post) {
  // Output positions whose k taps all fall inside the input: [interior_lo, interior_hi).
  const int64_t interior_lo = std::min(g.ow, (g.pad_l + g.stride - 1) / g.stride);
  const int64_t last = g.iw - g.k + g.pad_l;
  const int64_t interior_hi = last < 0 ? interior_lo : std::clamp(last / g.stride + 1, interior_lo, g.ow);
  const int64_t elem_bytes = g.dst_bf16 ? 2 : 4;
  for (int64_t n = 0; n < g.n; ++n) {
    const float* xn = x + n * g.ic * g.iw;
    void* yn = static_cast<char*>(y) + n * g.ow * g.oc * elem_bytes;
    int64_t t = 0;
    for (; t < interior_lo; ++t) small_conv_edge<V>(g, xn, weights, bias, yn, t, post);
    for (; t + P <= interior_hi; t += P) small_conv_block<V, P>(g, xn, weights, bias, yn, t, post);
    for (; t < g.ow; ++t) small_conv_edge<V>(g, xn, weights, bias, yn, t, post);
    if (post_after_store(g, post)) {
      float* yf = static_cast<float*>(yn);
      if (post == SmallConvPost::kSilu) {
        silu_in_place<16>(yf, g.ow * g.oc);
      } else {
        for (int64_t i = 0; i < g.ow * g.oc; ++i) yf[i] = yf[i] < 0.0f ? 0.0f : yf[i];
      }
    }
  }
}

ESCPOD_AVX512_TARGET void small_conv_avx512(const SmallConvGeometry& g, const float* x, const float* weights,
                                            const float* bias, void* y, SmallConvPost post) {
  switch ((g.oc + 15) / 16) {
    case 1: small_conv_channels<1, 8>(g, x, weights, bias, y, post); break;
    case 2: small_conv_channels<2, 8>(g, x, weights, bias, y, post); break;
    case 3: small_conv_channels<3, 4>(g, x, weights, bias, y, post); break;
    default: small_conv_channels<4, 4>(g, x, weights, bias, y, post); break;
  }
  _mm256_zeroupper();  // see the note at the top
}

// taps[s][0, 16) for the input positions s of one batch element (SmallDeconvFn), a row as 16 / W
// vectors of W lanes: AVX-512 (W 16, eight positions per block) or AVX2 (W 8, four positions of
// two vectors). The same products and sums in the same order either way.
template <int W>
[[gnu::always_inline]] inline void deconv_taps(const SmallConvGeometry& g, const float* xn, const float* weights,
                                               float* taps) {
  constexpr int V = 16 / W;
  constexpr int64_t kBlock = 8 / V;  // input positions per register block (independent accumulators)
  const int64_t c_step = g.src_nwc ? 1 : g.iw, pos_step = g.src_nwc ? g.ic : 1;
  int64_t s = 0;
  for (; s + kBlock <= g.iw; s += kBlock) {
    vf<W> acc[kBlock][V];
#pragma GCC unroll 8
    for (int64_t p = 0; p < kBlock; ++p) {
      for (int v = 0; v < V; ++v) acc[p][v] = vf<W>{};
    }
    const float* x0 = xn + s * pos_step;
    for (int64_t c = 0; c < g.ic; ++c) {
      vf<W> w[V];
      for (int v = 0; v < V; ++v) w[v] = load<W>(weights + c * 16 + v * W);
      const float* xc = x0 + c * c_step;
#pragma GCC unroll 8
      for (int64_t p = 0; p < kBlock; ++p) {
        for (int v = 0; v < V; ++v) acc[p][v] += w[v] * xc[p * pos_step];
      }
    }
#pragma GCC unroll 8
    for (int64_t p = 0; p < kBlock; ++p) {
      for (int v = 0; v < V; ++v) store<W>(taps + (s + p) * 16 + v * W, acc[p][v]);
    }
  }
  for (; s < g.iw; ++s) {
    for (int v = 0; v < V; ++v) {
      vf<W> acc{};
      for (int64_t c = 0; c < g.ic; ++c) acc += load<W>(weights + c * 16 + v * W) * xn[s * pos_step + c * c_step];
      store<W>(taps + s * 16 + v * W, acc);
    }
  }
}

ESCPOD_AVX512_TARGET void deconv_taps_avx512(const SmallConvGeometry& g, const float* xn, const float* weights,
                                             float* taps) {
  deconv_taps<16>(g, xn, weights, taps);
}

// Each output from its taps (the phase of t + pad_l, kept without a division per output).
// Inlined into each kernel, so that it is encoded for the kernel's instruction set.
[[gnu::always_inline]] inline void deconv_outputs(const SmallConvGeometry& g, const float* taps, const float* bias, float* yn, bool dst_nwc) {
  for (int64_t o = 0; o < g.oc; ++o) {
    int64_t q = g.pad_l / g.stride, r = g.pad_l % g.stride;  // t + pad_l = q * stride + r
    for (int64_t t = 0; t < g.ow; ++t) {
      float acc = bias[o];
      for (int64_t kk = r, s = q; kk < g.k && s >= 0; kk += g.stride, --s) {
        if (s < g.iw) acc += taps[s * 16 + o * g.k + kk];
      }
      yn[dst_nwc ? t * g.oc + o : o * g.ow + t] = acc;
      if (++r == g.stride) {
        r = 0;
        ++q;
      }
    }
  }
}

// The outputs of one input position's phase group at once: group q holds the outputs t = q *
// stride + r - pad_l (r < stride) of every channel, lane (o, r). Term j of a lane is the tap
// taps[q - j][o * k + r + j * stride], where r + j * stride < k: one permutation of row q - j per
// term, added in deconv_outputs' order (bias, then j ascending), so the sums are its bits.
struct DeconvGroups {
  static constexpr int64_t kMaxTerms = 16;
  int64_t terms = 0;                 // ceil(k / stride)
  alignas(64) int32_t index[kMaxTerms][16]{};
  std::array<__mmask16, kMaxTerms> has_tap{};
  alignas(64) float bias[16]{};
  std::array<int64_t, 16> lane_o{}, lane_r{};

  static bool fits(const SmallConvGeometry& g) { return g.oc * g.stride <= 16 && (g.k + g.stride - 1) / g.stride <= kMaxTerms; }

  // Without fits(g), terms stays 0 and the groups are not used.
  DeconvGroups(const SmallConvGeometry& g, const float* b, bool dst_nwc) {
    if (!fits(g)) return;
    terms = (g.k + g.stride - 1) / g.stride;
    for (int64_t o = 0; o < g.oc; ++o) {
      for (int64_t r = 0; r < g.stride; ++r) {
        const int64_t lane = dst_nwc ? r * g.oc + o : o * g.stride + r;
        lane_o[static_cast<size_t>(lane)] = o;
        lane_r[static_cast<size_t>(lane)] = r;
        bias[lane] = b[o];
        for (int64_t j = 0; j < terms; ++j) {
          const int64_t kk = r + j * g.stride;
          if (kk >= g.k) continue;
          index[j][lane] = static_cast<int32_t>(o * g.k + kk);
          has_tap[static_cast<size_t>(j)] |= static_cast<__mmask16>(1u << lane);
        }
      }
    }
  }
};

// Group q's lanes one by one, those whose outputs t fall inside [0, ow): the groups at the two
// ends, where a vector store's base could lie outside the output.
ESCPOD_AVX512_TARGET void store_group_lanes(const SmallConvGeometry& g, const DeconvGroups& d, int64_t q, __m512 acc,
                                            float* yn, bool dst_nwc) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  for (int64_t lane = 0; lane < g.oc * g.stride; ++lane) {
    const int64_t o = d.lane_o[static_cast<size_t>(lane)];
    const int64_t t = q * g.stride + d.lane_r[static_cast<size_t>(lane)] - g.pad_l;
    if (t >= 0 && t < g.ow) yn[dst_nwc ? t * g.oc + o : o * g.ow + t] = lanes[lane];
  }
}

// deconv_outputs over phase groups (DeconvGroups::fits).
ESCPOD_AVX512_TARGET void deconv_outputs_grouped(const SmallConvGeometry& g, const DeconvGroups& d, const float* taps,
                                                 float* yn, bool dst_nwc) {
  const auto full = static_cast<__mmask16>((1u << (g.oc * g.stride)) - 1u);
  const int64_t q_first = g.pad_l / g.stride, q_last = (g.ow - 1 + g.pad_l) / g.stride;
  for (int64_t q = q_first; q <= q_last; ++q) {
    __m512 acc = _mm512_load_ps(d.bias);
    for (int64_t j = 0; j < d.terms; ++j) {
      const int64_t s = q - j;
      if (s < 0) break;
      if (s >= g.iw) continue;
      const __mmask16 has = d.has_tap[static_cast<size_t>(j)];
      const __m512 tap = _mm512_maskz_permutexvar_ps(has, _mm512_load_si512(d.index[j]), _mm512_loadu_ps(taps + s * 16));
      acc = _mm512_mask_add_ps(acc, has, acc, tap);
    }
    if (q == q_first || q == q_last) {
      store_group_lanes(g, d, q, acc, yn, dst_nwc);
      continue;
    }
    const int64_t t0 = q * g.stride - g.pad_l;  // > 0 here: the output of lane r = 0
    if (dst_nwc) {
      _mm512_mask_storeu_ps(yn + t0 * g.oc, full, acc);
      continue;
    }
    // Channel o's lanes o * stride + r go to y[o][t0 + r]: the vector stored from o * stride
    // lanes before (inside the output: ow > stride here), masked to them.
    for (int64_t o = 0; o < g.oc; ++o) {
      const auto mine = static_cast<__mmask16>(((1u << g.stride) - 1u) << (o * g.stride));
      _mm512_mask_storeu_ps(yn + o * g.ow + t0 - o * g.stride, mine, acc);
    }
  }
}

// Below AVX-512 the outputs are summed one by one (the phase groups use AVX-512 permutations).
__attribute__((target("avx2,fma"))) void small_deconv_avx2(const SmallConvGeometry& g, const float* x,
                                                          const float* weights, const float* bias, float* y,
                                                          bool dst_nwc, float* taps) {
  for (int64_t n = 0; n < g.n; ++n) {
    deconv_taps<8>(g, x + n * g.ic * g.iw, weights, taps);
    deconv_outputs(g, taps, bias, y + n * g.oc * g.ow, dst_nwc);
  }
  _mm256_zeroupper();
}

ESCPOD_AVX512_TARGET void small_deconv_avx512(const SmallConvGeometry& g, const float* x, const float* weights,
                                              const float* bias, float* y, bool dst_nwc, float* taps) {
  const DeconvGroups groups(g, bias, dst_nwc);
  const bool grouped = groups.terms > 0;
  for (int64_t n = 0; n < g.n; ++n) {
    deconv_taps_avx512(g, x + n * g.ic * g.iw, weights, taps);
    if (grouped) {
      deconv_outputs_grouped(g, groups, taps, y + n * g.oc * g.ow, dst_nwc);
    } else {
      deconv_outputs(g, taps, bias, y + n * g.oc * g.ow, dst_nwc);
    }
  }
  _mm256_zeroupper();
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

SmallConvFn small_conv_fn(SimdLevel level) { return level == SimdLevel::kAvx512 ? small_conv_avx512 : nullptr; }

SmallDeconvFn small_deconv_fn(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return small_deconv_avx512;
    case SimdLevel::kAvx2: return small_deconv_avx2;
    case SimdLevel::kSse2: break;
  }
  return nullptr;
}

SiluFn silu_fn(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return silu_avx512;
    case SimdLevel::kAvx2: return silu_avx2;
    case SimdLevel::kSse2: break;
  }
  return silu_sse2;
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
