#include "escpod/demux/dtw.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include <cstdlib>
#include <string_view>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace escpod::demux {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Column range [lo, hi) of row i, dtaidistance's band for lengths n (rows) and m (columns).
struct Band {
  size_t window;   // effective W (>= 1)
  size_t extra_lo; // max(0, n - m)
  size_t extra_hi; // max(0, m - n)
  size_t m;
  size_t lo(size_t i) const {
    const size_t back = extra_lo + window - 1;
    return i > back ? i - back : 0;
  }
  size_t hi(size_t i) const { return std::min(m, i + extra_hi + window); }
};

Band make_band(size_t n, size_t m, size_t window) {
  Band b;
  b.window = window == 0 ? std::max(n, m) : window;
  b.extra_lo = n > m ? n - m : 0;
  b.extra_hi = m > n ? m - n : 0;
  b.m = m;
  return b;
}


// One block of references against one query: the band rows of dtw_distance for lanes = 4 x VW
// references at once, laid out [column + 1][lane] in `prev` and `cur`. The four vectors of a
// cell are independent chains, which hides the latency of the left-neighbour dependency. Every
// min is MINPD (a < b ? a : b per lane, the scalar expression), with no FMA, so the result is
// bit-identical to dtw_distance (tests compare every bank distance to it, on every ISA the CPU
// has). Returns the row holding D[len-1][*] (the squared distance of lane l at [len * lanes + l]).
#define ESCPOD_DTW_BLOCK_KERNEL(NAME, TARGET, VEC, VW, SET1, LOADU, STOREU, ADD, SUB, MUL, MIN)   \
  TARGET const double* NAME(const double* query, const double* ref, size_t len, const Band& band, \
                            double p2, double* scratch) {                                      \
    constexpr size_t L = 4 * (VW);                                                             \
    double* prev = scratch;                                                                    \
    double* cur = scratch + (len + 1) * L;                                                     \
    const VEC inf = SET1(kInf), pen = SET1(p2);                                                \
    for (size_t k = 0; k < 2 * (len + 1) * L; k += (VW)) STOREU(scratch + k, inf);             \
    for (size_t k = 0; k < L; k += (VW)) STOREU(prev + k, SET1(0.0));                          \
    for (size_t i = 0; i < len; ++i) {                                                         \
      const size_t lo = band.lo(i), hi = band.hi(i);                                           \
      for (size_t k = 0; k < L; k += (VW)) STOREU(cur + lo * L + k, inf);                      \
      if (i > 0)                                                                               \
        for (size_t k = 0; k < L; k += (VW)) STOREU(prev + k, inf);                            \
      const VEC q = SET1(query[i]);                                                            \
      VEC left0 = inf, left1 = inf, left2 = inf, left3 = inf;                                  \
      for (size_t j = lo; j < hi; ++j) {                                                       \
        const double* rj = ref + j * L;                                                        \
        const double* diag = prev + j * L;                                                     \
        const double* up = prev + (j + 1) * L;                                                 \
        double* dst = cur + (j + 1) * L;                                                       \
        ESCPOD_DTW_CELL(left0, 0, VW, LOADU, STOREU, ADD, SUB, MUL, MIN)                       \
        ESCPOD_DTW_CELL(left1, 1, VW, LOADU, STOREU, ADD, SUB, MUL, MIN)                       \
        ESCPOD_DTW_CELL(left2, 2, VW, LOADU, STOREU, ADD, SUB, MUL, MIN)                       \
        ESCPOD_DTW_CELL(left3, 3, VW, LOADU, STOREU, ADD, SUB, MUL, MIN)                       \
      }                                                                                        \
      std::swap(prev, cur);                                                                    \
    }                                                                                          \
    return prev;                                                                               \
  }
// One vector of one cell: best = min(diag, up + P^2, left + P^2); left = (q - ref)^2 + best.
#define ESCPOD_DTW_CELL(LEFT, V, VW, LOADU, STOREU, ADD, SUB, MUL, MIN)   \
  {                                                                       \
    const auto d = SUB(q, LOADU(rj + (V) * (VW)));                        \
    auto best = LOADU(diag + (V) * (VW));                                 \
    best = MIN(ADD(LOADU(up + (V) * (VW)), pen), best);                   \
    best = MIN(ADD(LEFT, pen), best);                                     \
    LEFT = ADD(MUL(d, d), best);                                          \
    STOREU(dst + (V) * (VW), LEFT);                                       \
  }

#if defined(__x86_64__) || defined(__i386__)
ESCPOD_DTW_BLOCK_KERNEL(block_sse2, , __m128d, 2, _mm_set1_pd, _mm_loadu_pd, _mm_storeu_pd,
                        _mm_add_pd, _mm_sub_pd, _mm_mul_pd, _mm_min_pd)
ESCPOD_DTW_BLOCK_KERNEL(block_avx2, __attribute__((target("avx2"))), __m256d, 4, _mm256_set1_pd,
                        _mm256_loadu_pd, _mm256_storeu_pd, _mm256_add_pd, _mm256_sub_pd,
                        _mm256_mul_pd, _mm256_min_pd)
// GCC 12's _mm512_set1_pd trips a false -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
ESCPOD_DTW_BLOCK_KERNEL(block_avx512, __attribute__((target("avx512f"))), __m512d, 8,
                        _mm512_set1_pd, _mm512_loadu_pd, _mm512_storeu_pd, _mm512_add_pd,
                        _mm512_sub_pd, _mm512_mul_pd, _mm512_min_pd)
#pragma GCC diagnostic pop
#else
// Portable lanes: the same per-lane expressions on plain doubles (VW = 2, 8 lanes).
struct Pair {
  double v[2];
};
inline Pair p_set1(double x) { return {{x, x}}; }
inline Pair p_load(const double* p) { return {{p[0], p[1]}}; }
inline void p_store(double* p, Pair a) { p[0] = a.v[0], p[1] = a.v[1]; }
inline Pair p_add(Pair a, Pair b) { return {{a.v[0] + b.v[0], a.v[1] + b.v[1]}}; }
inline Pair p_sub(Pair a, Pair b) { return {{a.v[0] - b.v[0], a.v[1] - b.v[1]}}; }
inline Pair p_mul(Pair a, Pair b) { return {{a.v[0] * b.v[0], a.v[1] * b.v[1]}}; }
inline Pair p_min(Pair a, Pair b) {
  return {{a.v[0] < b.v[0] ? a.v[0] : b.v[0], a.v[1] < b.v[1] ? a.v[1] : b.v[1]}};
}
ESCPOD_DTW_BLOCK_KERNEL(block_sse2, , Pair, 2, p_set1, p_load, p_store, p_add, p_sub, p_mul, p_min)
#endif
#undef ESCPOD_DTW_BLOCK_KERNEL
#undef ESCPOD_DTW_CELL

using BlockKernel = const double* (*)(const double*, const double*, size_t, const Band&, double,
                                      double*);

size_t lanes_of(DtwIsa isa) {
  switch (isa) {
    case DtwIsa::kAvx512: return 32;
    case DtwIsa::kAvx2: return 16;
    case DtwIsa::kSse2: break;
  }
  return 8;
}

BlockKernel kernel_of(DtwIsa isa) {
#if defined(__x86_64__) || defined(__i386__)
  switch (isa) {
    case DtwIsa::kAvx512: return block_avx512;
    case DtwIsa::kAvx2: return block_avx2;
    case DtwIsa::kSse2: break;
  }
#endif
  (void)isa;
  return block_sse2;
}

}  // namespace

double dtw_distance(std::span<const double> a, std::span<const double> b, const DtwParams& params,
                    std::span<double> scratch) {
  const size_t n = a.size(), m = b.size();
  if (n == 0 || m == 0) return kInf;
  assert(scratch.size() >= dtw_scratch_size(m));
  const double p2 = params.penalty * params.penalty;
  const Band band = make_band(n, m, params.window);
  // prev/cur hold D[i-1][j-1 .. ] shifted by one: index j+1 is column j, index 0 is column -1.
  double* prev = scratch.data();
  double* cur = prev + (m + 1);
  std::fill(prev, prev + 2 * (m + 1), kInf);
  prev[0] = 0.0;  // D[-1][-1]
  for (size_t i = 0; i < n; ++i) {
    const size_t lo = band.lo(i), hi = band.hi(i);
    cur[lo] = kInf;  // the cell left of the band (stale from two rows ago otherwise)
    if (i > 0) prev[0] = kInf;
    const double ai = a[i];
    for (size_t j = lo; j < hi; ++j) {
      const double d = ai - b[j];
      double best = prev[j];
      const double up = prev[j + 1] + p2;
      if (up < best) best = up;
      const double left = cur[j] + p2;
      if (left < best) best = left;
      cur[j + 1] = d * d + best;
    }
    std::swap(prev, cur);
  }
  return std::sqrt(prev[m]);
}

double dtw_distance(std::span<const double> a, std::span<const double> b, const DtwParams& params) {
  std::vector<double> scratch(dtw_scratch_size(b.size()));
  return dtw_distance(a, b, params, scratch);
}

bool dtw_isa_supported(DtwIsa isa) {
#if defined(__x86_64__) || defined(__i386__)
  switch (isa) {
    case DtwIsa::kAvx512: return __builtin_cpu_supports("avx512f");
    case DtwIsa::kAvx2: return __builtin_cpu_supports("avx2");
    case DtwIsa::kSse2: return true;
  }
#endif
  return isa == DtwIsa::kSse2;
}

const char* dtw_isa_name(DtwIsa isa) {
  switch (isa) {
    case DtwIsa::kAvx512: return "avx512";
    case DtwIsa::kAvx2: return "avx2";
    case DtwIsa::kSse2: break;
  }
  return "sse2";
}

DtwIsa dtw_best_isa() {
  static const DtwIsa best = [] {
    DtwIsa cap = DtwIsa::kAvx512;
    if (const char* env = std::getenv("ESCPOD_DTW_ISA")) {
      const std::string_view v(env);
      if (v == "sse2") cap = DtwIsa::kSse2;
      if (v == "avx2") cap = DtwIsa::kAvx2;
    }
    for (DtwIsa isa : {DtwIsa::kAvx512, DtwIsa::kAvx2}) {
      if (static_cast<int>(isa) <= static_cast<int>(cap) && dtw_isa_supported(isa)) return isa;
    }
    return DtwIsa::kSse2;
  }();
  return best;
}

DtwBank::DtwBank(std::span<const double> rows, size_t n_rows, size_t length, DtwIsa isa)
    : m_n_rows(n_rows), m_length(length), m_isa(isa), m_lanes(lanes_of(isa)) {
  assert(rows.size() == n_rows * length);
  assert(dtw_isa_supported(isa));
  const size_t L = m_lanes;
  const size_t n_blocks = (n_rows + L - 1) / L;
  m_interleaved.assign(n_blocks * length * L, 0.0);
  for (size_t r = 0; r < n_rows; ++r) {
    const size_t blk = r / L, lane = r % L;
    for (size_t j = 0; j < length; ++j) {
      m_interleaved[(blk * length + j) * L + lane] = rows[r * length + j];
    }
  }
}

void DtwBank::distances_to(std::span<const double> query, const DtwParams& params,
                           std::span<double> scratch, std::span<double> out) const {
  const size_t len = m_length;
  assert(query.size() == len);
  assert(out.size() == m_n_rows);
  assert(scratch.size() >= scratch_size());
  if (len == 0) {
    std::fill(out.begin(), out.end(), kInf);
    return;
  }
  const size_t L = m_lanes;
  const double p2 = params.penalty * params.penalty;
  const Band band = make_band(len, len, params.window);
  const BlockKernel kernel = kernel_of(m_isa);
  const size_t n_blocks = (m_n_rows + L - 1) / L;
  for (size_t blk = 0; blk < n_blocks; ++blk) {
    const double* last =
        kernel(query.data(), m_interleaved.data() + blk * len * L, len, band, p2, scratch.data());
    const size_t base = blk * L;
    const size_t n_here = std::min(L, m_n_rows - base);
    for (size_t l = 0; l < n_here; ++l) out[base + l] = std::sqrt(last[len * L + l]);
  }
}

}  // namespace escpod::demux
