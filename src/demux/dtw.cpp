#include "escpod/demux/dtw.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

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


// One block of references against one query: the band rows of dtw_distance for lanes = NV x VW
// references at once (scalar type T), laid out [column + 1][lane] in `prev` and `cur`. The NV
// vectors of a cell are independent chains, which hides the latency of the left-neighbour
// dependency. CELL computes one vector of one cell (below). With the double cells every min is
// a < b ? a : b per lane (MINPD, the scalar expression) and no product is contracted into its
// sum, so the result is bit-identical to dtw_distance (tests compare every bank distance to it,
// on every ISA the CPU has). Returns the row holding D[len-1][*] (the squared distance of lane l
// at [len * lanes + l]).
#define ESCPOD_DTW_BLOCK_KERNEL(NAME, TARGET, T, VEC, VW, NV, SET1, LOADU, STOREU, ADD, SUB, MUL,   \
                                MIN, FMADD, FNMADD, CELL)                                        \
  TARGET const T* NAME(const T* query, const T* ref, size_t len, const Band& band, T p2,         \
                       T* scratch) {                                                             \
    constexpr size_t L = (NV) * (VW);                                                          \
    T* prev = scratch;                                                                         \
    T* cur = scratch + (len + 1) * L;                                                          \
    const VEC inf = SET1(std::numeric_limits<T>::infinity()), pen = SET1(p2);                  \
    [[maybe_unused]] const VEC one = SET1(T(1));                                               \
    for (size_t k = 0; k < 2 * (len + 1) * L; k += (VW)) STOREU(scratch + k, inf);             \
    for (size_t k = 0; k < L; k += (VW)) STOREU(prev + k, SET1(T(0)));                         \
    for (size_t i = 0; i < len; ++i) {                                                         \
      const size_t lo = band.lo(i), hi = band.hi(i);                                           \
      for (size_t k = 0; k < L; k += (VW)) STOREU(cur + lo * L + k, inf);                      \
      if (i > 0)                                                                               \
        for (size_t k = 0; k < L; k += (VW)) STOREU(prev + k, inf);                            \
      const VEC q = SET1(query[i]);                                                            \
      VEC left[NV];                                                                            \
      for (size_t v = 0; v < (NV); ++v) left[v] = inf;                                         \
      for (size_t j = lo; j < hi; ++j) {                                                       \
        const T* rj = ref + j * L;                                                             \
        const T* diag = prev + j * L;                                                          \
        const T* up = prev + (j + 1) * L;                                                      \
        T* dst = cur + (j + 1) * L;                                                            \
        _Pragma("GCC unroll 8") for (size_t v = 0; v < (NV); ++v) {                            \
          CELL(VEC, VW, LOADU, ADD, SUB, MUL, MIN, FMADD, FNMADD)                              \
          STOREU(dst + v * (VW), left[v]);                                                     \
        }                                                                                      \
      }                                                                                        \
      std::swap(prev, cur);                                                                    \
    }                                                                                          \
    return prev;                                                                               \
  }
// dtw_distance's cell as written: best = min(diag, up + P^2, left + P^2); left = (q - r)^2 + best.
#define ESCPOD_DTW_CELL_PLAIN(VEC, VW, LOADU, ADD, SUB, MUL, MIN, FMADD, FNMADD) \
  const VEC d = SUB(q, LOADU(rj + v * (VW)));                                    \
  VEC best = LOADU(diag + v * (VW));                                             \
  best = MIN(ADD(LOADU(up + v * (VW)), pen), best);                              \
  best = MIN(ADD(left[v], pen), best);                                           \
  left[v] = ADD(MUL(d, d), best);
// The same values for the FMA-capable ISAs, rearranged (8 vectors per step there):
//   min(up + P^2, left + P^2) == min(up, left) + P^2 exactly (rounding is monotone), one add
//   fewer; q - r and x + P^2 are issued as fma(-r, 1, q) and fma(x, 1, P^2), whose single
//   rounding gives the same values as the plain sub/add, but they run on the FMA pipes, which the
//   mins and adds leave idle. The product d * d and its add stay separate (no contraction). The
//   longer left-neighbour chain this makes is hidden by the eight independent vectors.
#define ESCPOD_DTW_CELL_FMA(VEC, VW, LOADU, ADD, SUB, MUL, MIN, FMADD, FNMADD) \
  const VEC d = FNMADD(LOADU(rj + v * (VW)), one, q);                          \
  const VEC step = FMADD(MIN(LOADU(up + v * (VW)), left[v]), one, pen);        \
  left[v] = ADD(MUL(d, d), MIN(step, LOADU(diag + v * (VW))));
// The float32 bank's cell: the FMA cell with one change that does alter rounding, (q - r)^2 +
// best as one fused multiply-add: D = fma(d, d, min(min(up, left) + P^2, diag)), d = q - r.
#define ESCPOD_DTW_CELL_F32(VEC, VW, LOADU, ADD, SUB, MUL, MIN, FMADD, FNMADD) \
  const VEC d = FNMADD(LOADU(rj + v * (VW)), one, q);                          \
  const VEC step = FMADD(MIN(LOADU(up + v * (VW)), left[v]), one, pen);        \
  left[v] = FMADD(d, d, MIN(step, LOADU(diag + v * (VW))));

#if defined(__x86_64__) || defined(__i386__)
ESCPOD_DTW_BLOCK_KERNEL(block_sse2, , double, __m128d, 2, 4, _mm_set1_pd, _mm_loadu_pd,
                        _mm_storeu_pd, _mm_add_pd, _mm_sub_pd, _mm_mul_pd, _mm_min_pd, -, -,
                        ESCPOD_DTW_CELL_PLAIN)
ESCPOD_DTW_BLOCK_KERNEL(block_avx2, __attribute__((target("avx2,fma"))), double, __m256d, 4, 8,
                        _mm256_set1_pd, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_add_pd,
                        _mm256_sub_pd, _mm256_mul_pd, _mm256_min_pd, _mm256_fmadd_pd,
                        _mm256_fnmadd_pd, ESCPOD_DTW_CELL_FMA)
// GCC 12's _mm512_set1_pd trips a false -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
ESCPOD_DTW_BLOCK_KERNEL(block_avx512, __attribute__((target("avx512f"))), double, __m512d, 8, 8,
                        _mm512_set1_pd, _mm512_loadu_pd, _mm512_storeu_pd, _mm512_add_pd,
                        _mm512_sub_pd, _mm512_mul_pd, _mm512_min_pd, _mm512_fmadd_pd,
                        _mm512_fnmadd_pd, ESCPOD_DTW_CELL_FMA)
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
ESCPOD_DTW_BLOCK_KERNEL(block_sse2, , double, Pair, 2, 4, p_set1, p_load, p_store, p_add, p_sub,
                        p_mul, p_min, -, -, ESCPOD_DTW_CELL_PLAIN)
#endif

// The float32 block: 64 references (8 vectors of 8 lanes) per step, ESCPOD_DTW_CELL_F32.
constexpr size_t kF32Lanes = 64;

#if defined(__x86_64__) || defined(__i386__)
ESCPOD_DTW_BLOCK_KERNEL(block_f32_avx2, __attribute__((target("avx2,fma"))), float, __m256, 8, 8,
                        _mm256_set1_ps, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_add_ps,
                        _mm256_sub_ps, _mm256_mul_ps, _mm256_min_ps, _mm256_fmadd_ps,
                        _mm256_fnmadd_ps, ESCPOD_DTW_CELL_F32)
#endif
#undef ESCPOD_DTW_BLOCK_KERNEL
#undef ESCPOD_DTW_CELL_PLAIN
#undef ESCPOD_DTW_CELL_FMA
#undef ESCPOD_DTW_CELL_F32

// The same recurrence without SIMD (CPUs without AVX2+FMA, other architectures). The fused step
// is computed in double: d * d is exact there, so the only difference from a true fma is a rare
// double rounding (one float ulp in a cell); tests bound the distances against the SIMD kernel.
const float* block_f32_portable(const float* query, const float* ref, size_t len,
                                const Band& band, float p2, float* scratch) {
  constexpr size_t L = kF32Lanes;
  constexpr float inf = std::numeric_limits<float>::infinity();
  float* prev = scratch;
  float* cur = scratch + (len + 1) * L;
  std::fill(scratch, scratch + 2 * (len + 1) * L, inf);
  std::fill(prev, prev + L, 0.0f);
  float left[L];
  for (size_t i = 0; i < len; ++i) {
    const size_t lo = band.lo(i), hi = band.hi(i);
    std::fill(cur + lo * L, cur + (lo + 1) * L, inf);
    if (i > 0) std::fill(prev, prev + L, inf);
    const float q = query[i];
    std::fill(left, left + L, inf);
    for (size_t j = lo; j < hi; ++j) {
      const float* rj = ref + j * L;
      const float* diag = prev + j * L;
      const float* up = prev + (j + 1) * L;
      float* dst = cur + (j + 1) * L;
      for (size_t l = 0; l < L; ++l) {
        const float d = q - rj[l];
        const float m = up[l] < left[l] ? up[l] : left[l];
        const float step = m + p2;
        const float best = step < diag[l] ? step : diag[l];
        const double dd = static_cast<double>(d);
        left[l] = static_cast<float>(dd * dd + static_cast<double>(best));
        dst[l] = left[l];
      }
    }
    std::swap(prev, cur);
  }
  return prev;
}

using BlockKernel = const double* (*)(const double*, const double*, size_t, const Band&, double,
                                      double*);

size_t lanes_of(DtwIsa isa) {
  switch (isa) {
    case DtwIsa::kAvx512: return 64;
    case DtwIsa::kAvx2: return 32;
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
    case DtwIsa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case DtwIsa::kSse2: return true;
  }
#endif
  return isa == DtwIsa::kSse2;
}

const char* dtw_precision_name(DtwPrecision p) {
  return p == DtwPrecision::kFloat32 ? "float32" : "float64";
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
  // AVX2 by default even where AVX-512 exists: on the Zen 4 machines we measure, 512-bit vectors
  // are issued as two halves and the wider block (64 references) pads more, so the AVX-512
  // kernel is ~20% slower (bench/results/demux.md). ESCPOD_DTW_ISA=avx512 selects it; sse2 or
  // avx2 cap the choice (to compare them, or to rule one out).
  static const DtwIsa best = [] {
    DtwIsa want = DtwIsa::kAvx2;
    if (const char* env = std::getenv("ESCPOD_DTW_ISA")) {
      const std::string_view v(env);
      if (v == "sse2") want = DtwIsa::kSse2;
      if (v == "avx512") want = DtwIsa::kAvx512;
    }
    for (DtwIsa isa : {DtwIsa::kAvx512, DtwIsa::kAvx2}) {
      if (static_cast<int>(isa) <= static_cast<int>(want) && dtw_isa_supported(isa)) return isa;
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
  const size_t n_blocks_f32 = (n_rows + kF32Lanes - 1) / kF32Lanes;
  m_interleaved_f32.assign(n_blocks_f32 * length * kF32Lanes, 0.0f);
  for (size_t r = 0; r < n_rows; ++r) {
    const size_t blk = r / kF32Lanes, lane = r % kF32Lanes;
    for (size_t j = 0; j < length; ++j) {
      m_interleaved_f32[(blk * length + j) * kF32Lanes + lane] =
          static_cast<float>(rows[r * length + j]);
    }
  }
}

size_t DtwBank::scratch_size_f32() const { return 2 * (m_length + 1) * kF32Lanes + m_length + 16; }

bool DtwBank::f32_uses_simd() const {
  // A bank is only built for an ISA the CPU has, and kAvx2 means AVX2 with FMA.
  return static_cast<int>(m_isa) >= static_cast<int>(DtwIsa::kAvx2);
}

namespace {

// The first element of `p` that starts a cache line (scratch sizes leave room for it): a 32-byte
// access at 48 mod 64 would straddle two lines.
template <class T>
T* cache_line_start(T* p) {
  while (reinterpret_cast<uintptr_t>(p) % 64 != 0) ++p;
  return p;
}

// Runs `kernel` over every block of `lanes` interleaved references and writes the square roots
// of the final cells: the part distances_to and distances_to_f32 share.
template <class T, class Kernel>
void run_blocks(Kernel kernel, const T* query, const T* interleaved, size_t n_rows, size_t len,
                size_t lanes, const Band& band, T p2, T* rows, std::span<double> out) {
  const size_t n_blocks = (n_rows + lanes - 1) / lanes;
  for (size_t blk = 0; blk < n_blocks; ++blk) {
    const T* last = kernel(query, interleaved + blk * len * lanes, len, band, p2, rows);
    const size_t base = blk * lanes;
    const size_t n_here = std::min(lanes, n_rows - base);
    for (size_t l = 0; l < n_here; ++l)
      out[base + l] = std::sqrt(static_cast<double>(last[len * lanes + l]));
  }
}

}  // namespace

bool DtwBank::nothing_to_compute(std::span<const double> query, std::span<double> out) const {
  assert(query.size() == m_length);
  assert(out.size() == m_n_rows);
  (void)query;
  if (m_length != 0) return false;
  std::fill(out.begin(), out.end(), kInf);  // as dtw_distance of empty series
  return true;
}

void DtwBank::distances_to_f32(std::span<const double> query, const DtwParams& params,
                               std::span<float> scratch, std::span<double> out) const {
  assert(scratch.size() >= scratch_size_f32());
  if (nothing_to_compute(query, out)) return;
  const size_t len = m_length;
  float* rows = cache_line_start(scratch.data());
  float* q = rows + 2 * (len + 1) * kF32Lanes;  // the float32 query, after the two band rows
  for (size_t i = 0; i < len; ++i) q[i] = static_cast<float>(query[i]);
#if defined(__x86_64__) || defined(__i386__)
  const auto kernel = f32_uses_simd() ? block_f32_avx2 : block_f32_portable;
#else
  const auto kernel = block_f32_portable;
#endif
  run_blocks(kernel, q, m_interleaved_f32.data(), m_n_rows, len, kF32Lanes,
             make_band(len, len, params.window),
             static_cast<float>(params.penalty * params.penalty), rows, out);
}

void DtwBank::distances_to(std::span<const double> query, const DtwParams& params,
                           std::span<double> scratch, std::span<double> out) const {
  assert(scratch.size() >= scratch_size());
  if (nothing_to_compute(query, out)) return;
  const size_t len = m_length;
  run_blocks(kernel_of(m_isa), query.data(), m_interleaved.data(), m_n_rows, len, m_lanes,
             make_band(len, len, params.window), params.penalty * params.penalty,
             cache_line_start(scratch.data()), out);
}

}  // namespace escpod::demux
