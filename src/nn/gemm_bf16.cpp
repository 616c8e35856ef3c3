// float32 -> bfloat16 rounding for the opt-in bfloat16 GEMMs and convolutions (gemm_bf16.hpp).
#include "nn/gemm_bf16.hpp"

#include <immintrin.h>

#include <cstring>
#include <string>

#include "nn/plan.hpp"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace escpod::nn::detail {

bool bf16_available() {
  static const bool ok = [] {
    const std::string isa = dnnl_isa_name();
    return (isa == "avx512_core_amx" || isa == "avx512_core_bf16") && __builtin_cpu_supports("avx512bf16");
  }();
  return ok;
}

namespace {

// As vcvtneps2bf16 does: denormal inputs count as zero (of their sign).
uint16_t round_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__attribute__((target("avx512f,avx512bf16,avx512vl"))) void convert_avx512(const float* src, uint16_t* dst,
                                                                           size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), reinterpret_cast<const __m256i&>(v));
  }
  for (; i < n; ++i) dst[i] = round_to_bf16(src[i]);
  _mm256_zeroupper();  // GCC 12 leaves the upper halves dirty on one exit; the callers are SSE code
}

#define ESCPOD_BF16_TARGET __attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw")))

// A's row at q = 2p, 2p + 1 as one 32-bit broadcast (the low half first, as vdpbf16ps pairs
// them); with kHalf (the last pair of an odd k) the high half is zero, as B's is.
template <bool kHalf>
ESCPOD_BF16_TARGET [[gnu::always_inline]] inline __m512bh a_pair(const uint16_t* row, int64_t p) {
  uint32_t pair = row[2 * p];
  if constexpr (!kHalf) std::memcpy(&pair, row + 2 * p, sizeof pair);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
}

// acc += A's R rows x pair p of B's V vectors.
template <int R, int V, bool kHalf>
ESCPOD_BF16_TARGET [[gnu::always_inline]] inline void dot_pair(__m512 (&acc)[R][V], const uint16_t* a, int64_t lda,
                                                                const uint32_t* b, int64_t ldb, int64_t p) {
  __m512bh bv[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + p * ldb + 16 * v));
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512bh av = a_pair<kHalf>(a + r * lda, p);
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
  }
}

// C's R rows x V vectors of columns (the last vector's lanes `last`) += A B over every pair of k,
// the accumulators in registers; B's panel streams once per R rows.
template <int R, int V>
ESCPOD_BF16_TARGET [[gnu::always_inline]] inline void bf16_block(const uint16_t* a, int64_t lda, const uint32_t* b,
                                                                  int64_t ldb, float* c, int64_t ldc, int64_t k,
                                                                  __mmask16 last) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_maskz_loadu_ps(v == V - 1 ? last : 0xffff, c + r * ldc + 16 * v);
  }
  for (int64_t p = 0; p < k / 2; ++p) dot_pair<R, V, false>(acc, a, lda, b, ldb, p);
  if (k % 2 == 1) dot_pair<R, V, true>(acc, a, lda, b, ldb, k / 2);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, v == V - 1 ? last : 0xffff, acc[r][v]);
  }
}

// `rows` (a multiple of R) rows, a panel of V vectors of columns at a time swept over every block
// of rows while it is in L1; then single vectors, the last one masked to n.
template <int R, int V>
ESCPOD_BF16_TARGET [[gnu::always_inline]] inline void bf16_rows(const uint16_t* a, int64_t lda, const uint32_t* b,
                                                                 int64_t ldb, float* c, int64_t ldc, int64_t rows,
                                                                 int64_t n, int64_t k) {
  int64_t j = 0;
  for (; j + 16 * V <= n; j += 16 * V) {
    for (int64_t r = 0; r < rows; r += R) bf16_block<R, V>(a + r * lda, lda, b + j, ldb, c + r * ldc + j, ldc, k, 0xffff);
  }
  for (; j < n; j += 16) {
    const __mmask16 last = n - j >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (n - j)) - 1);
    for (int64_t r = 0; r < rows; r += R) bf16_block<R, 1>(a + r * lda, lda, b + j, ldb, c + r * ldc + j, ldc, k, last);
  }
}

ESCPOD_BF16_TARGET void gemm_acc_bf16_avx512(const uint16_t* a, int64_t lda, const uint32_t* b, int64_t ldb, float* c,
                                             int64_t ldc, int64_t m, int64_t n, int64_t k) {
  // 4 x 4 accumulators (and four vectors of B, a broadcast) of the 32 registers: the same blocks
  // as the float32 kernel's (simd.cpp), each instruction two steps of k.
  const int64_t r = m - m % 4;
  if (r > 0) bf16_rows<4, 4>(a, lda, b, ldb, c, ldc, r, n, k);
  switch (m - r) {
    case 3: bf16_rows<3, 4>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, 3, n, k); break;
    case 2: bf16_rows<2, 6>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, 2, n, k); break;
    case 1: bf16_rows<1, 8>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, 1, n, k); break;
    default: break;
  }
  _mm256_zeroupper();
}

}  // namespace

int64_t bf16_pairs_rows(int64_t k) { return (k + 1) / 2; }

void pack_bf16_pairs(const float* b, int64_t stride_k, int64_t stride_n, int64_t k, int64_t n, uint32_t* dst,
                     int64_t ld) {
  const auto at = [&](int64_t q, int64_t j) { return q < k ? round_to_bf16(b[q * stride_k + j * stride_n]) : uint16_t{0}; };
  for (int64_t p = 0; p < bf16_pairs_rows(k); ++p) {
    uint32_t* row = dst + p * ld;
    for (int64_t j = 0; j < ld; ++j) {
      row[j] = j < n ? at(2 * p, j) | static_cast<uint32_t>(at(2 * p + 1, j)) << 16 : 0u;
    }
  }
}

void gemm_acc_bf16(const uint16_t* a, int64_t lda, const uint32_t* b, int64_t ldb, float* c, int64_t ldc, int64_t m,
                   int64_t n, int64_t k) {
  gemm_acc_bf16_avx512(a, lda, b, ldb, c, ldc, m, n, k);
}

void convert_to_bf16(const float* src, uint16_t* dst, size_t n) {
  static const bool has_instruction = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vl");
  if (has_instruction) {
    convert_avx512(src, dst, n);
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}

}  // namespace escpod::nn::detail
