// Lattice passes behind the CRF decoders: a plain scalar reference for any geometry and
// vectorised kernels (AVX2, AVX-512) for n_base 4. Internal to the demux layer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "escpod/demux/crf_decode.hpp"

namespace escpod::demux::detail {

struct CrfDims {
  int n_base = 0;
  int state_len = 0;
  int64_t n_states = 0;
  int64_t n_edges = 0;
  int64_t n_scores = 0;
  int64_t n_prev = 0;  // n_states / n_base: the stride between a move's possible sources
};
CrfDims crf_dims(const CrfGeometry& geometry);

// Floats per alpha/beta row (n_states plus padding that vector loads may read past the end).
inline int64_t crf_row_floats(const CrfDims& d) { return d.n_states + 64; }
// Floats of the work buffer a backend needs for a read of n_steps.
inline int64_t crf_work_floats(const CrfDims& d, int64_t n_steps) {
  return n_steps * d.n_scores + 2 * d.n_scores + 64;
}

// What posterior_decode can leave for a beam search over the same scores: forward_backward(d,
// scores, &stay, ...)'s alpha and beta (n_steps + 1 rows of crf_row_floats each) and logZ, when
// every stay score equals `stay` (then that is the lattice of the decode's own first pass).
struct CrfLogLattice {
  float* alpha = nullptr;
  float* beta = nullptr;
  float stay = 0.0f;
  float log_z = 0.0f;   // out
  bool filled = false;  // out: alpha, beta and log_z were written
};

// The passes of one backend. Buffers: alpha and beta hold n_steps + 1 rows of
// crf_row_floats(d) floats; work holds crf_work_floats(d, n_steps) floats. Contents on entry are
// ignored. Neither function allocates.
struct CrfPasses {
  // Log-semiring forward and backward over the raw scores, rows in natural state order:
  // alpha_0 = 0, beta_T = 0. `stay` (nullable) replaces every stay score when given.
  // Returns logZ = logsumexp_s alpha_T[s].
  float (*forward_backward)(const CrfDims& d, const CrfScoresView& scores, const float* stay,
                            float* alpha, float* beta, float* work);
  // The two-pass posterior decode of crf_decode.hpp: edge[t] = winning flat edge at step t,
  // value[t] = its value. Returns logZ. alpha/beta are clobbered. With `lattice`, when every stay
  // score equals lattice->stay, its first pass also leaves there what forward_backward(d, scores,
  // &lattice->stay, ...) computes, bit for bit (the beam search's guides, without a second pass
  // over the lattice), and sets lattice->filled.
  float (*posterior_decode)(const CrfDims& d, const CrfScoresView& scores, float* alpha,
                            float* beta, float* work, int32_t* edge, float* value, CrfLogLattice* lattice);
};

// kScalar, kAvx2 or kAvx512 (never kAuto).
CrfPasses crf_passes(CrfBackend backend);
// Widest vector backend this CPU supports (kScalar when none).
CrfBackend crf_best_simd_backend();
// Whether the vector kernels handle this geometry (n_base 4, state_len 3..8).
bool crf_simd_geometry(const CrfDims& d);

// log(sum exp(v[i])) with a max shift; a non-finite maximum is returned as is (scalar reference).
float crf_logsumexp(const float* v, int n);

// out[i] = logsumexp over k < n_planes of planes[k * stride + i], for i < n; n must be a multiple
// of 16 (pad with -inf). -inf terms contribute nothing; all -inf gives -inf. `backend` kScalar
// uses crf_logsumexp, kAvx2/kAvx512 the vector kernels (any geometry).
void crf_lse_rows(CrfBackend backend, const float* planes, int n_planes, int64_t stride, int64_t n, float* out);
void crf_lse_rows_avx2(const float* planes, int n_planes, int64_t stride, int64_t n, float* out);
void crf_lse_rows_avx512(const float* planes, int n_planes, int64_t stride, int64_t n, float* out);

// Scalar reference passes (crf_decode.cpp) and the vector ones (crf_simd.cpp).
float crf_forward_backward_scalar(const CrfDims& d, const CrfScoresView& scores, const float* stay,
                                  float* alpha, float* beta, float* work);
float crf_posterior_decode_scalar(const CrfDims& d, const CrfScoresView& scores, float* alpha,
                                  float* beta, float* work, int32_t* edge, float* value,
                                  CrfLogLattice* lattice);
float crf_forward_backward_avx2(const CrfDims& d, const CrfScoresView& scores, const float* stay,
                                float* alpha, float* beta, float* work);
float crf_posterior_decode_avx2(const CrfDims& d, const CrfScoresView& scores, float* alpha,
                                  float* beta, float* work, int32_t* edge, float* value,
                                  CrfLogLattice* lattice);
float crf_forward_backward_avx512(const CrfDims& d, const CrfScoresView& scores,
                                  const float* stay, float* alpha, float* beta, float* work);
float crf_posterior_decode_avx512(const CrfDims& d, const CrfScoresView& scores, float* alpha,
                                  float* beta, float* work, int32_t* edge, float* value,
                                  CrfLogLattice* lattice);

}  // namespace escpod::demux::detail
