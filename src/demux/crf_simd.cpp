// Vectorised CRF lattice passes (n_base 4, state_len 3..8) on GCC vector types, compiled for
// AVX2 and AVX-512 through target attributes, with a polynomial exp/log (relative error ~2e-7).
// forward_backward (beam search guides) runs the scalar reference's log-domain recursions. The
// posterior decode runs its first pass in a scaled probability domain instead: exp(score) once
// per score, alpha/beta rows renormalised to a maximum of 1 each step (logZ = sum of the logs of
// the normalisers), edge posteriors as products: 1 exp + 1 log per edge and step instead of
// 3 exp + 1.4 log (see bench/results/crf_decode.md). Reads whose scores could spread a row over
// more than float's range (|score| > max_prob_score: 9.2 for state_len 4) take the log domain.
//
// Layout: each step's n_scores floats are transposed once into planes P[e][c] (e = edge, c =
// destination state), so every pass works on contiguous destination lanes. The two index
// patterns of the lattice become register permutes:
//  - a move into c comes from alpha[j * Q + c / 4] (Q = n_states / 4): W/4 consecutive alphas,
//    each repeated 4 times ("bcast4");
//  - the 4 moves out of s go to destinations 4 * (s % Q) + k: a stride-4 de-interleave of 4W
//    consecutive values ("deinterleave4").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "demux/crf_passes.hpp"
#include "escpod/nn/simd_vec.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// The vector helpers are always inlined into their target-specific callers, so the "vector
// argument ABI changes without AVX" note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace escpod::demux::detail {
namespace {

using nn::simd::load;
using nn::simd::store;
using nn::simd::vf;
using nn::simd::vi;

#define ESCPOD_INLINE [[gnu::always_inline]] inline

template <int W>
ESCPOD_INLINE vf<W> splat(float x) {
  return vf<W>{} + x;
}
template <int W>
ESCPOD_INLINE vf<W> vmax(vf<W> a, vf<W> b) {
  return a > b ? a : b;
}

// exp(x) (see nn::simd::exp_in_range). Inputs below the smallest normal result give 0 (as
// std::exp to within denormals).
template <int W>
ESCPOD_INLINE vf<W> vexp(vf<W> x) {
  const vf<W> lo = splat<W>(-87.33654f), hi = splat<W>(88.0f);
  const vi<W> under = x < lo;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const vf<W> e = nn::simd::exp_in_range<W>(x);
  return under ? vf<W>{} : e;
}

// log(x) for positive normal x: x = m 2^e, m in [sqrt(1/2), sqrt(2)), Cephes logf polynomial.
template <int W>
ESCPOD_INLINE vf<W> vlog(vf<W> x) {
  const vi<W> bits = (vi<W>)x;
  vi<W> e = ((bits >> 23) & 0xff) - 126;
  vf<W> m = (vf<W>)((bits & 0x007fffff) | 0x3f000000);
  const vi<W> small = m < 0.70710678118654752f;
  e = e + small;  // small is -1 where true
  m = small ? (m + m) - 1.0f : m - 1.0f;
  const vf<W> z = m * m;
  vf<W> y = splat<W>(7.0376836292e-2f);
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  const vf<W> fe = __builtin_convertvector(e, vf<W>);
  y = y + fe * -2.12194440e-4f;
  y = y - 0.5f * z;
  vf<W> r = m + y;
  return r + fe * 0.693359375f;
}

template <int W>
ESCPOD_INLINE float hmax(vf<W> v) {
  float m = v[0];
  for (int l = 1; l < W; ++l) m = std::max(m, v[l]);
  return m;
}
template <int W>
ESCPOD_INLINE float hsum(vf<W> v) {
  float s = 0.0f;
  for (int l = 0; l < W; ++l) s += v[l];
  return s;
}

// Permutation masks, built once per pass call.
template <int W>
struct Masks {
  vi<W> bcast;            // lane l <- l / 4
  vi<W> half[4], join;    // deinterleave4: pick 4l + k from a pair, then join two halves
  vi<W> t01[5], t23[5], tab[5], t4[5];  // transpose of 5 vectors of [state][edge]

  Masks() {
    for (int l = 0; l < W; ++l) {
      bcast[l] = l / 4;
      join[l] = l < W / 2 ? l : W + (l - W / 2);
      for (int k = 0; k < 4; ++k) half[k][l] = l < W / 2 ? 4 * l + k : 0;
      for (int e = 0; e < 5; ++e) {
        const int f = 5 * l + e;
        t01[e][l] = f < 2 * W ? f : 0;
        t23[e][l] = (f >= 2 * W && f < 4 * W) ? f - 2 * W : 0;
        tab[e][l] = f < 2 * W ? l : W + l;
        t4[e][l] = f < 4 * W ? l : W + (f - 4 * W);
      }
    }
  }
};

template <int W>
ESCPOD_INLINE vf<W> bcast4(const Masks<W>& mk, const float* p) {
  return __builtin_shuffle(load<W>(p), mk.bcast);
}

// Reduction of 5 terms: logsumexp (max shift; a non-finite max returned as is) or max.
template <bool kLog, int W>
ESCPOD_INLINE vf<W> reduce5(vf<W> x0, vf<W> x1, vf<W> x2, vf<W> x3, vf<W> x4) {
  const vf<W> m = vmax<W>(vmax<W>(vmax<W>(x0, x1), vmax<W>(x2, x3)), x4);
  if constexpr (!kLog) {
    return m;
  } else {
    const vf<W> s = vexp<W>(x0 - m) + vexp<W>(x1 - m) + vexp<W>(x2 - m) + vexp<W>(x3 - m) + vexp<W>(x4 - m);
    const vi<W> finite = (m - m) == 0.0f;
    return finite ? m + vlog<W>(s) : m;
  }
}

template <int W>
struct Pass {
  const CrfDims& d;
  Masks<W> mk;
  int64_t S, Q, row;
  explicit Pass(const CrfDims& dims) : d(dims), S(dims.n_states), Q(dims.n_prev), row(crf_row_floats(dims)) {}

  // [state][edge] step -> planes P[e * S + c]; plane 0 filled with *stay when given.
  ESCPOD_INLINE void transpose(const float* aos, const float* stay, float* planar) const {
    for (int64_t c0 = 0; c0 < S; c0 += W) {
      const float* x = aos + 5 * c0;
      const vf<W> x0 = load<W>(x), x1 = load<W>(x + W), x2 = load<W>(x + 2 * W), x3 = load<W>(x + 3 * W),
                  x4 = load<W>(x + 4 * W);
#pragma GCC unroll 5
      for (int e = 0; e < 5; ++e) {
        const vf<W> a = __builtin_shuffle(x0, x1, mk.t01[e]);
        const vf<W> b = __builtin_shuffle(x2, x3, mk.t23[e]);
        const vf<W> ab = __builtin_shuffle(a, b, mk.tab[e]);
        store<W>(planar + e * S + c0, __builtin_shuffle(ab, x4, mk.t4[e]));
      }
    }
    if (stay != nullptr) std::fill(planar, planar + S, *stay);
  }

  // Source term of edge e into the W destinations starting at c0.
  ESCPOD_INLINE vf<W> source(const float* a, int e, int64_t c0) const {
    return e == 0 ? load<W>(a + c0) : bcast4<W>(mk, a + (e - 1) * Q + c0 / 4);
  }

  template <bool kLog>
  ESCPOD_INLINE void forward(const float* P, const float* a, float* out) const {
    for (int64_t c0 = 0; c0 < S; c0 += W) {
      const vf<W> x0 = load<W>(a + c0) + load<W>(P + c0);
      const vf<W> x1 = bcast4<W>(mk, a + c0 / 4) + load<W>(P + S + c0);
      const vf<W> x2 = bcast4<W>(mk, a + Q + c0 / 4) + load<W>(P + 2 * S + c0);
      const vf<W> x3 = bcast4<W>(mk, a + 2 * Q + c0 / 4) + load<W>(P + 3 * S + c0);
      const vf<W> x4 = bcast4<W>(mk, a + 3 * Q + c0 / 4) + load<W>(P + 4 * S + c0);
      store<W>(out + c0, reduce5<kLog, W>(x0, x1, x2, x3, x4));
    }
  }

  template <bool kLog>
  ESCPOD_INLINE void backward(const float* P, const float* next, float* cur) const {
    for (int64_t s0 = 0; s0 < S; s0 += W) {
      const int64_t j = s0 / Q, dest0 = 4 * (s0 % Q);
      const float* pm = P + (1 + j) * S + dest0;
      const float* bn = next + dest0;
      const vf<W> x0 = load<W>(P + s0) + load<W>(next + s0);
      const vf<W> y0 = load<W>(pm) + load<W>(bn), y1 = load<W>(pm + W) + load<W>(bn + W),
                  y2 = load<W>(pm + 2 * W) + load<W>(bn + 2 * W), y3 = load<W>(pm + 3 * W) + load<W>(bn + 3 * W);
      vf<W> z[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k)
        z[k] = __builtin_shuffle(__builtin_shuffle(y0, y1, mk.half[k]), __builtin_shuffle(y2, y3, mk.half[k]),
                                 mk.join);
      store<W>(cur + s0, reduce5<kLog, W>(x0, z[0], z[1], z[2], z[3]));
    }
  }

  // Planes of step t -> ln(softmax(alpha_t[src] + P + beta_{t+1}) + 1e-8), in place.
  ESCPOD_INLINE void log_posteriors(float* P, const float* a, const float* b) const {
    vf<W> mv = splat<W>(-std::numeric_limits<float>::infinity());
    for (int e = 0; e < 5; ++e) {
      for (int64_t c0 = 0; c0 < S; c0 += W) {
        float* p = P + e * S + c0;
        const vf<W> x = (source(a, e, c0) + load<W>(p)) + load<W>(b + c0);
        store<W>(p, x);
        mv = vmax<W>(mv, x);
      }
    }
    const float m = hmax<W>(mv);
    vf<W> sv{};
    for (int64_t i = 0; i < 5 * S; i += W) {
      const vf<W> ex = vexp<W>(load<W>(P + i) - m);
      store<W>(P + i, ex);
      sv += ex;
    }
    const float sum = hsum<W>(sv);
    for (int64_t i = 0; i < 5 * S; i += W) store<W>(P + i, vlog<W>(load<W>(P + i) / sum + 1e-8f));
  }

  // Winning flat edge at step t: max of alpha'_t[src] + LP + beta'_{t+1}, lowest flat index on
  // ties. `vals` holds 5 * S floats of scratch.
  ESCPOD_INLINE int32_t argmax(const float* LP, const float* a, const float* b, float* vals, float* best) const {
    vf<W> mv = splat<W>(-std::numeric_limits<float>::infinity());
    for (int e = 0; e < 5; ++e) {
      for (int64_t c0 = 0; c0 < S; c0 += W) {
        const vf<W> v = (source(a, e, c0) + load<W>(LP + e * S + c0)) + load<W>(b + c0);
        store<W>(vals + e * S + c0, v);
        mv = vmax<W>(mv, v);
      }
    }
    const float m = hmax<W>(mv);
    vi<W> lane;
    for (int l = 0; l < W; ++l) lane[l] = 5 * l;
    const vi<W> none = vi<W>{} + std::numeric_limits<int32_t>::max();
    vi<W> iv = none;
    for (int e = 0; e < 5; ++e) {
      for (int64_t c0 = 0; c0 < S; c0 += W) {
        const vi<W> flat = lane + static_cast<int32_t>(5 * c0 + e);
        const vi<W> cand = load<W>(vals + e * S + c0) == m ? flat : none;
        iv = cand < iv ? cand : iv;
      }
    }
    int32_t idx = iv[0];
    for (int l = 1; l < W; ++l) idx = std::min(idx, static_cast<int32_t>(iv[l]));
    *best = m;
    if (idx == std::numeric_limits<int32_t>::max()) idx = 0;  // NaN values: nothing equals m
    return idx;
  }

  // Scaled probability domain (posterior decode): E = exp(P) planes; rows are normalised to a
  // maximum of 1 after each step, and the normaliser is returned (its logs sum to logZ).
  ESCPOD_INLINE void exp_step(float* P) const {
    for (int64_t i = 0; i < 5 * S; i += W) store<W>(P + i, vexp<W>(load<W>(P + i)));
  }
  // Whether all S values of P equal v.
  ESCPOD_INLINE bool all_equal(const float* P, float v) const {
    vi<W> same = load<W>(P) == v;
    for (int64_t i = W; i < S; i += W) same &= load<W>(P + i) == v;
    for (int l = 0; l < W; ++l) {
      if (same[l] == 0) return false;
    }
    return true;
  }
  ESCPOD_INLINE float max_abs(const float* P, int64_t n) const {
    vf<W> mv{};
    for (int64_t i = 0; i < n; i += W) {
      const vf<W> x = load<W>(P + i);
      mv = vmax<W>(mv, vmax<W>(x, -x));
      mv = x != x ? splat<W>(std::numeric_limits<float>::infinity()) : mv;  // NaN: not in range
    }
    return hmax<W>(mv);
  }
  ESCPOD_INLINE float normalise(float* out, vf<W> mv) const {
    const float m = hmax<W>(mv);
    const float inv = 1.0f / m;
    for (int64_t c0 = 0; c0 < S; c0 += W) store<W>(out + c0, load<W>(out + c0) * inv);
    return m;
  }
  ESCPOD_INLINE float prob_forward(const float* E, const float* a, float* out) const {
    vf<W> mv{};
    for (int64_t c0 = 0; c0 < S; c0 += W) {
      vf<W> v = load<W>(a + c0) * load<W>(E + c0);
      v = v + bcast4<W>(mk, a + c0 / 4) * load<W>(E + S + c0);
      v = v + bcast4<W>(mk, a + Q + c0 / 4) * load<W>(E + 2 * S + c0);
      v = v + bcast4<W>(mk, a + 2 * Q + c0 / 4) * load<W>(E + 3 * S + c0);
      v = v + bcast4<W>(mk, a + 3 * Q + c0 / 4) * load<W>(E + 4 * S + c0);
      store<W>(out + c0, v);
      mv = vmax<W>(mv, v);
    }
    return normalise(out, mv);
  }
  ESCPOD_INLINE float prob_backward(const float* E, const float* next, float* cur) const {
    vf<W> mv{};
    for (int64_t s0 = 0; s0 < S; s0 += W) {
      const int64_t j = s0 / Q, dest0 = 4 * (s0 % Q);
      const float* em = E + (1 + j) * S + dest0;
      const float* bn = next + dest0;
      const vf<W> y0 = load<W>(em) * load<W>(bn), y1 = load<W>(em + W) * load<W>(bn + W),
                  y2 = load<W>(em + 2 * W) * load<W>(bn + 2 * W), y3 = load<W>(em + 3 * W) * load<W>(bn + 3 * W);
      vf<W> v = load<W>(E + s0) * load<W>(next + s0);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k)
        v = v + __builtin_shuffle(__builtin_shuffle(y0, y1, mk.half[k]), __builtin_shuffle(y2, y3, mk.half[k]),
                                  mk.join);
      store<W>(cur + s0, v);
      mv = vmax<W>(mv, v);
    }
    return normalise(cur, mv);
  }

  // Step t's E planes -> ln(q / sum(q) + 1e-8) in place, q = alpha~_t[src] * E * beta~_{t+1}, in
  // float. The factors are normalised separately, so q can underflow; that changes nothing while
  // sum(q) >= 1e-20 (a q lost to underflow has q / sum < 1e-18, below the 1e-8 floor's rounding).
  // Returns false, with P clobbered, when the sum is smaller (the caller redoes the step in double).
  ESCPOD_INLINE bool prob_posteriors(float* P, const float* a, const float* b) const {
    vf<W> sv{};
    for (int e = 0; e < 5; ++e) {
      for (int64_t c0 = 0; c0 < S; c0 += W) {
        float* p = P + e * S + c0;
        const vf<W> q = (source(a, e, c0) * load<W>(p)) * load<W>(b + c0);
        store<W>(p, q);
        sv += q;
      }
    }
    const float total = hsum<W>(sv);
    if (!(total >= 1e-20f) || !(total <= std::numeric_limits<float>::max())) return false;
    const float inv = 1.0f / total;
    for (int64_t i = 0; i < 5 * S; i += W) store<W>(P + i, vlog<W>(load<W>(P + i) * inv + 1e-8f));
    return true;
  }

  ESCPOD_INLINE float log_forward_backward(const float* planar, int64_t T, float* alpha, float* beta) const {
    const int64_t C = 5 * S;
    std::fill(alpha, alpha + S, 0.0f);
    for (int64_t t = 0; t < T; ++t) forward<true>(planar + t * C, alpha + t * row, alpha + (t + 1) * row);
    std::fill(beta + T * row, beta + T * row + S, 0.0f);
    for (int64_t t = T - 1; t >= 0; --t) backward<true>(planar + t * C, beta + (t + 1) * row, beta + t * row);
    return crf_logsumexp(alpha + T * row, static_cast<int>(S));
  }

  ESCPOD_INLINE void transpose_all(const CrfScoresView& s, const float* stay, float* planar) const {
    for (int64_t t = 0; t < s.n_steps; ++t) transpose(s.data + t * s.step_stride, stay, planar + t * 5 * S);
  }
};

template <int H>
struct VecD {
  typedef double d __attribute__((vector_size(H * 8)));
};

// q = alpha~_t[src] * E * beta~_{t+1}[dest] of H edges, in double: the three factors may each be
// far below 1 (they are normalised separately), so their float product could underflow.
template <int H>
ESCPOD_INLINE typename VecD<H>::d edge_product(const Masks<H>& mk, int64_t S, int64_t Q, const float* P,
                                               const float* a, const float* b, int e, int64_t c0) {
  using vd = typename VecD<H>::d;
  const vf<H> src = e == 0 ? load<H>(a + c0) : bcast4<H>(mk, a + (e - 1) * Q + c0 / 4);
  return (__builtin_convertvector(src, vd) * __builtin_convertvector(load<H>(P + e * S + c0), vd)) *
         __builtin_convertvector(load<H>(b + c0), vd);
}

// The same in double (the fallback of Pass::prob_posteriors for steps whose float sum is tiny).
template <int H>
ESCPOD_INLINE void prob_posteriors(const Masks<H>& mk, int64_t S, int64_t Q, float* P, const float* a,
                                   const float* b) {
  using vd = typename VecD<H>::d;
  vd sum{};
  for (int e = 0; e < 5; ++e)
    for (int64_t c0 = 0; c0 < S; c0 += H) sum += edge_product<H>(mk, S, Q, P, a, b, e, c0);
  double total = 0.0;
  for (int l = 0; l < H; ++l) total += sum[l];
  const double inv = 1.0 / total;
  for (int e = 0; e < 5; ++e)
    for (int64_t c0 = 0; c0 < S; c0 += H)
      store<H>(P + e * S + c0, __builtin_convertvector(edge_product<H>(mk, S, Q, P, a, b, e, c0) * inv, vf<H>));
  // The logs at full width (2H floats).
  for (int64_t i = 0; i < 5 * S; i += 2 * H) store<2 * H>(P + i, vlog<2 * H>(load<2 * H>(P + i) + 1e-8f));
}

// Forward/backward/posteriors in the scaled probability domain: one exp per score instead of
// one per edge and pass, no log per state. Every state is state_len moves from any other, so with
// |score| <= L the log-values of one alpha or beta row span at most state_len (2L + ln 5) nats;
// keeping that below 80 keeps every normalised value a normal float (>= e^-87), so nothing is
// lost to underflow. Beyond that bound the caller uses the log domain.
inline float max_prob_score(const CrfDims& d) {
  const auto sl = static_cast<float>(d.state_len);
  return (80.0f - sl * 1.6094379f) / (2.0f * sl);
}

// Row of normalised values -> log(row) + offset, into `out`.
template <int W>
ESCPOD_INLINE void to_log(const float* r, float* out, int64_t S, double offset) {
  const auto off = static_cast<float>(offset);
  for (int64_t i = 0; i < S; i += W) store<W>(out + i, vlog<W>(load<W>(r + i)) + off);
}

// With `lattice`, the rows also go there as forward_backward_impl turns them into logs (the same
// normalisers, offsets and conversions, so the same bits).
template <int W>
ESCPOD_INLINE float prob_forward_backward_posteriors(const Pass<W>& pass, const CrfScoresView& scores,
                                                     float* alpha, float* beta, float* work, CrfLogLattice* lattice) {
  const int64_t T = scores.n_steps;
  const int64_t S = pass.S, C = 5 * S, row = pass.row;
  for (int64_t t = 0; t < T; ++t) pass.exp_step(work + t * C);
  std::fill(alpha, alpha + S, 1.0f);
  double log_z = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    const double next = log_z + std::log(static_cast<double>(
                                    pass.prob_forward(work + t * C, alpha + t * row, alpha + (t + 1) * row)));
    if (lattice) to_log<W>(alpha + t * row, lattice->alpha + t * row, S, log_z);
    log_z = next;
  }
  if (lattice) {
    to_log<W>(alpha + T * row, lattice->alpha + T * row, S, log_z);
    lattice->log_z = crf_logsumexp(lattice->alpha + T * row, static_cast<int>(S));
  }
  double last = 0.0;
  for (int64_t s = 0; s < S; ++s) last += alpha[T * row + s];
  log_z += std::log(last);
  std::fill(beta + T * row, beta + T * row + S, 1.0f);
  double offset = 0.0;
  for (int64_t t = T - 1; t >= 0; --t) {
    const double next = offset + std::log(static_cast<double>(
                                     pass.prob_backward(work + t * C, beta + (t + 1) * row, beta + t * row)));
    if (lattice) to_log<W>(beta + (t + 1) * row, lattice->beta + (t + 1) * row, S, offset);
    offset = next;
  }
  if (lattice) to_log<W>(beta, lattice->beta, S, offset);
  for (int64_t t = 0; t < T; ++t) {
    float* P = work + t * C;
    if (pass.prob_posteriors(P, alpha + t * row, beta + (t + 1) * row)) continue;
    pass.transpose(scores.data + t * scores.step_stride, nullptr, P);
    pass.exp_step(P);
    prob_posteriors<W / 2>(Masks<W / 2>(), S, pass.Q, P, alpha + t * row, beta + (t + 1) * row);
  }
  return static_cast<float>(log_z);
}


template <int W>
ESCPOD_INLINE float forward_backward_impl(const CrfDims& d, const CrfScoresView& s, const float* stay,
                                          float* alpha, float* beta, float* work) {
  const Pass<W> pass(d);
  const int64_t T = s.n_steps, S = d.n_states, C = d.n_scores, row = pass.row;
  pass.transpose_all(s, stay, work);
  if (pass.max_abs(work, T * C) > max_prob_score(d)) return pass.log_forward_backward(work, T, alpha, beta);
  // Scaled probability domain, then back to logs: log alpha_t = log(alpha~_t) + sum of the logs
  // of the normalisers so far (a state below 1e-38 of its row's best reads about -87 + offset).
  for (int64_t t = 0; t < T; ++t) pass.exp_step(work + t * C);
  // A row turns into logs once the next one has been computed from it.
  std::fill(alpha, alpha + S, 1.0f);
  double offset = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    const double next = offset + std::log(static_cast<double>(
                                     pass.prob_forward(work + t * C, alpha + t * row, alpha + (t + 1) * row)));
    to_log<W>(alpha + t * row, alpha + t * row, S, offset);
    offset = next;
  }
  to_log<W>(alpha + T * row, alpha + T * row, S, offset);
  std::fill(beta + T * row, beta + T * row + S, 1.0f);
  offset = 0.0;
  for (int64_t t = T - 1; t >= 0; --t) {
    const double next = offset + std::log(static_cast<double>(
                                     pass.prob_backward(work + t * C, beta + (t + 1) * row, beta + t * row)));
    to_log<W>(beta + (t + 1) * row, beta + (t + 1) * row, S, offset);
    offset = next;
  }
  to_log<W>(beta, beta, S, offset);
  return crf_logsumexp(alpha + T * row, static_cast<int>(S));
}

template <int W>
ESCPOD_INLINE float posterior_decode_impl(const CrfDims& d, const CrfScoresView& s, float* alpha, float* beta,
                                          float* work, int32_t* edge, float* value, CrfLogLattice* lattice) {
  const Pass<W> pass(d);
  const int64_t T = s.n_steps, C = d.n_scores, row = pass.row;
  pass.transpose_all(s, nullptr, work);
  if (lattice) {  // plane 0 of every step holds the stays
    lattice->filled = true;
    for (int64_t t = 0; t < T && lattice->filled; ++t) lattice->filled = pass.all_equal(work + t * C, lattice->stay);
    if (!lattice->filled) lattice = nullptr;
  }
  float log_z;
  if (pass.max_abs(work, T * C) <= max_prob_score(d)) {
    log_z = prob_forward_backward_posteriors<W>(pass, s, alpha, beta, work, lattice);
  } else {
    log_z = pass.log_forward_backward(work, T, alpha, beta);
    if (lattice) {
      std::copy(alpha, alpha + (T + 1) * row, lattice->alpha);
      std::copy(beta, beta + (T + 1) * row, lattice->beta);
      lattice->log_z = log_z;
    }
    for (int64_t t = 0; t < T; ++t) pass.log_posteriors(work + t * C, alpha + t * row, beta + (t + 1) * row);
  }
  std::fill(alpha, alpha + d.n_states, 0.0f);
  for (int64_t t = 0; t < T; ++t) pass.template forward<false>(work + t * C, alpha + t * row, alpha + (t + 1) * row);
  float* next = beta;
  float* cur = beta + row;
  float* vals = work + T * C;
  std::fill(next, next + d.n_states, 0.0f);
  for (int64_t t = T - 1; t >= 0; --t) {
    const float* lp = work + t * C;
    edge[t] = pass.argmax(lp, alpha + t * row, next, vals, value + t);
    pass.template backward<false>(lp, next, cur);
    std::swap(next, cur);
  }
  return log_z;
}

// out[i] = logsumexp_k planes[k * stride + i] over n_planes planes, i < n (n a multiple of W).
template <int W>
ESCPOD_INLINE void lse_rows_impl(const float* planes, int n_planes, int64_t stride, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += W) {
    vf<W> m = load<W>(planes + i);
    for (int k = 1; k < n_planes; ++k) m = vmax<W>(m, load<W>(planes + k * stride + i));
    vf<W> sum{};
    for (int k = 0; k < n_planes; ++k) sum += vexp<W>(load<W>(planes + k * stride + i) - m);
    const vi<W> finite = (m - m) == 0.0f;
    store<W>(out + i, finite ? m + vlog<W>(sum) : m);
  }
}

#undef ESCPOD_INLINE

}  // namespace

#if defined(__x86_64__)
#define ESCPOD_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#define ESCPOD_AVX2 __attribute__((target("avx2,fma")))

ESCPOD_AVX512 float crf_forward_backward_avx512(const CrfDims& d, const CrfScoresView& s, const float* stay,
                                                float* alpha, float* beta, float* work) {
  return forward_backward_impl<16>(d, s, stay, alpha, beta, work);
}
ESCPOD_AVX512 float crf_posterior_decode_avx512(const CrfDims& d, const CrfScoresView& s, float* alpha,
                                                float* beta, float* work, int32_t* edge, float* value,
                                                CrfLogLattice* lattice) {
  return posterior_decode_impl<16>(d, s, alpha, beta, work, edge, value, lattice);
}
ESCPOD_AVX2 float crf_forward_backward_avx2(const CrfDims& d, const CrfScoresView& s, const float* stay,
                                            float* alpha, float* beta, float* work) {
  return forward_backward_impl<8>(d, s, stay, alpha, beta, work);
}
ESCPOD_AVX2 float crf_posterior_decode_avx2(const CrfDims& d, const CrfScoresView& s, float* alpha, float* beta,
                                            float* work, int32_t* edge, float* value, CrfLogLattice* lattice) {
  return posterior_decode_impl<8>(d, s, alpha, beta, work, edge, value, lattice);
}
ESCPOD_AVX512 void crf_lse_rows_avx512(const float* planes, int n_planes, int64_t stride, int64_t n, float* out) {
  lse_rows_impl<16>(planes, n_planes, stride, n, out);
}
ESCPOD_AVX2 void crf_lse_rows_avx2(const float* planes, int n_planes, int64_t stride, int64_t n, float* out) {
  lse_rows_impl<8>(planes, n_planes, stride, n, out);
  _mm256_zeroupper();  // GCC 12 leaves the upper halves dirty on one exit; the callers are SSE code
}
#undef ESCPOD_AVX512
#undef ESCPOD_AVX2
#endif

}  // namespace escpod::demux::detail
