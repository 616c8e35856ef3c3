#include "escpod/demux/crf_decode.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <string>

#include "demux/crf_passes.hpp"

namespace escpod::demux {

int64_t CrfGeometry::n_states() const {
  int64_t n = 1;
  for (int i = 0; i < state_len; ++i) n *= n_base;
  return n;
}

Status validate_geometry(const CrfGeometry& g) {
  if (g.n_base < 2 || g.n_base > 8)
    return Status::invalid_argument("CRF geometry: n_base " + std::to_string(g.n_base) +
                                    " is outside 2..8");
  if (g.state_len < 1 || g.state_len > 16)
    return Status::invalid_argument("CRF geometry: state_len " + std::to_string(g.state_len) +
                                    " is outside 1..16");
  if (g.n_states() > 65536)
    return Status::invalid_argument("CRF geometry: " + std::to_string(g.n_base) + "^" +
                                    std::to_string(g.state_len) + " states exceed 65536");
  if (static_cast<int64_t>(g.alphabet.size()) != g.n_base + 1)
    return Status::invalid_argument("CRF geometry: alphabet \"" + g.alphabet + "\" has " +
                                    std::to_string(g.alphabet.size()) + " symbols, expected n_base + 1 = " +
                                    std::to_string(g.n_base + 1) + " (blank first)");
  for (size_t i = 0; i < g.alphabet.size(); ++i) {
    const auto c = static_cast<unsigned char>(g.alphabet[i]);
    if (!std::isgraph(c))
      return Status::invalid_argument("CRF geometry: alphabet symbol " + std::to_string(i) +
                                      " is not a printable character");
    if (g.alphabet.find(g.alphabet[i], i + 1) != std::string::npos)
      return Status::invalid_argument("CRF geometry: alphabet \"" + g.alphabet + "\" repeats '" +
                                      std::string(1, g.alphabet[i]) + "'");
  }
  return Status::ok();
}

Status validate_scores(const CrfScoresView& s, const CrfGeometry& g) {
  if (s.data == nullptr) return Status::invalid_argument("CRF scores: no data");
  if (s.n_steps < 1)
    return Status::invalid_argument("CRF scores: " + std::to_string(s.n_steps) + " steps (need >= 1)");
  if (s.step_stride < g.n_scores())
    return Status::invalid_argument("CRF scores: step stride " + std::to_string(s.step_stride) +
                                    " is below the " + std::to_string(g.n_scores()) +
                                    " scores of a step");
  return Status::ok();
}

const char* crf_backend_name(CrfBackend backend) {
  switch (backend) {
    case CrfBackend::kAuto: return "auto";
    case CrfBackend::kScalar: return "scalar";
    case CrfBackend::kAvx2: return "avx2";
    case CrfBackend::kAvx512: return "avx512";
  }
  return "?";
}

namespace {

bool cpu_has(CrfBackend backend) {
  switch (backend) {
    case CrfBackend::kAuto:
    case CrfBackend::kScalar: return true;
    case CrfBackend::kAvx2:
    case CrfBackend::kAvx512: {
      const CrfBackend best = detail::crf_best_simd_backend();
      if (best == CrfBackend::kAvx512) return true;
      return best == CrfBackend::kAvx2 && backend == CrfBackend::kAvx2;
    }
  }
  return false;
}

}  // namespace

bool crf_backend_available(CrfBackend backend, const CrfGeometry& geometry) {
  if (backend == CrfBackend::kAuto || backend == CrfBackend::kScalar) return true;
  if (!validate_geometry(geometry).is_ok()) return false;
  return cpu_has(backend) && detail::crf_simd_geometry(detail::crf_dims(geometry));
}

namespace detail {

CrfDims crf_dims(const CrfGeometry& g) {
  CrfDims d;
  d.n_base = g.n_base;
  d.state_len = g.state_len;
  d.n_states = g.n_states();
  d.n_edges = g.n_edges();
  d.n_scores = g.n_scores();
  d.n_prev = d.n_states / d.n_base;
  return d;
}

bool crf_simd_geometry(const CrfDims& d) { return d.n_base == 4 && d.state_len >= 3 && d.state_len <= 8; }

CrfBackend crf_best_simd_backend() {
#if defined(__x86_64__)
  static const CrfBackend best = [] {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
      return CrfBackend::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CrfBackend::kAvx2;
    return CrfBackend::kScalar;
  }();
  return best;
#else
  return CrfBackend::kScalar;
#endif
}

CrfPasses crf_passes(CrfBackend backend) {
  switch (backend) {
#if defined(__x86_64__)
    case CrfBackend::kAvx512: return {crf_forward_backward_avx512, crf_posterior_decode_avx512};
    case CrfBackend::kAvx2: return {crf_forward_backward_avx2, crf_posterior_decode_avx2};
#endif
    default: break;
  }
  return {crf_forward_backward_scalar, crf_posterior_decode_scalar};
}

float crf_logsumexp(const float* v, int n) {
  float m = v[0];
  for (int i = 1; i < n; ++i) m = std::max(m, v[i]);
  if (!std::isfinite(m)) return m;
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += std::exp(v[i] - m);
  return m + std::log(sum);
}

void crf_lse_rows(CrfBackend backend, const float* planes, int n_planes, int64_t stride, int64_t n, float* out) {
#if defined(__x86_64__)
  if (backend == CrfBackend::kAvx512) return crf_lse_rows_avx512(planes, n_planes, stride, n, out);
  if (backend == CrfBackend::kAvx2) return crf_lse_rows_avx2(planes, n_planes, stride, n, out);
#endif
  float v[16];
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < n_planes; ++k) v[k] = planes[k * stride + i];
    out[i] = crf_logsumexp(v, n_planes);
  }
}

namespace {

constexpr int kMaxEdges = 9;  // n_base <= 8

// The scalar passes share one recursion shape; `Reduce` is logsumexp or max.
struct LogReduce {
  static float apply(const float* v, int n) { return crf_logsumexp(v, n); }
};
struct MaxReduce {
  static float apply(const float* v, int n) { return *std::max_element(v, v + n); }
};

// next[c] = reduce_e(cur[src(c, e)] + step[c * E + e]); stay replaced by *stay when given.
template <class Reduce>
void forward_step(const CrfDims& d, const float* step, const float* stay, const float* cur, float* next) {
  float v[kMaxEdges];
  const int n_edges = static_cast<int>(d.n_edges);
  for (int64_t c = 0; c < d.n_states; ++c) {
    const float* sc = step + c * d.n_edges;
    v[0] = cur[c] + (stay ? *stay : sc[0]);
    for (int j = 0; j < d.n_base; ++j) v[1 + j] = cur[j * d.n_prev + c / d.n_base] + sc[1 + j];
    next[c] = Reduce::apply(v, n_edges);
  }
}

// cur[s] = reduce over the outgoing edges of s of (step[dest * E + e] + next[dest]).
template <class Reduce>
void backward_step(const CrfDims& d, const float* step, const float* stay, const float* next, float* cur) {
  float v[kMaxEdges];
  const int n_edges = static_cast<int>(d.n_edges);
  for (int64_t s = 0; s < d.n_states; ++s) {
    v[0] = (stay ? *stay : step[s * d.n_edges]) + next[s];
    const int64_t edge = 1 + s / d.n_prev;
    const int64_t dest0 = (s % d.n_prev) * d.n_base;
    for (int k = 0; k < d.n_base; ++k) v[1 + k] = step[(dest0 + k) * d.n_edges + edge] + next[dest0 + k];
    cur[s] = Reduce::apply(v, n_edges);
  }
}

int64_t source_of(const CrfDims& d, int64_t c, int64_t e) {
  return e == 0 ? c : (e - 1) * d.n_prev + c / d.n_base;
}

}  // namespace

float crf_forward_backward_scalar(const CrfDims& d, const CrfScoresView& s, const float* stay,
                                  float* alpha, float* beta, float* /*work*/) {
  const int64_t row = crf_row_floats(d), T = s.n_steps;
  std::fill(alpha, alpha + d.n_states, 0.0f);
  for (int64_t t = 0; t < T; ++t)
    forward_step<LogReduce>(d, s.data + t * s.step_stride, stay, alpha + t * row, alpha + (t + 1) * row);
  std::fill(beta + T * row, beta + T * row + d.n_states, 0.0f);
  for (int64_t t = T - 1; t >= 0; --t)
    backward_step<LogReduce>(d, s.data + t * s.step_stride, stay, beta + (t + 1) * row, beta + t * row);
  return crf_logsumexp(alpha + T * row, static_cast<int>(d.n_states));
}

float crf_posterior_decode_scalar(const CrfDims& d, const CrfScoresView& s, float* alpha, float* beta,
                                  float* work, int32_t* edge, float* value, CrfLogLattice* lattice) {
  const int64_t row = crf_row_floats(d), T = s.n_steps, C = d.n_scores;
  const float log_z = crf_forward_backward_scalar(d, s, nullptr, alpha, beta, work);
  if (lattice) {
    lattice->filled = true;
    for (int64_t t = 0; t < T && lattice->filled; ++t) {
      for (int64_t c = 0; c < d.n_states; ++c) lattice->filled &= s.data[t * s.step_stride + c * d.n_edges] == lattice->stay;
    }
  }
  if (lattice && lattice->filled) {
    std::copy(alpha, alpha + (T + 1) * row, lattice->alpha);
    std::copy(beta, beta + (T + 1) * row, lattice->beta);
    lattice->log_z = log_z;
  }
  // Edge log-posteriors, ln(softmax + 1e-8), into work[t * C + flat].
  for (int64_t t = 0; t < T; ++t) {
    const float* step = s.data + t * s.step_stride;
    const float* a = alpha + t * row;
    const float* b = beta + (t + 1) * row;
    float* lp = work + t * C;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < d.n_states; ++c) {
      for (int64_t e = 0; e < d.n_edges; ++e) {
        const float x = a[source_of(d, c, e)] + step[c * d.n_edges + e] + b[c];
        lp[c * d.n_edges + e] = x;
        m = std::max(m, x);
      }
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < C; ++i) {
      lp[i] = std::exp(lp[i] - m);
      sum += lp[i];
    }
    for (int64_t i = 0; i < C; ++i) lp[i] = std::log(lp[i] / sum + 1e-8f);
  }
  // Max semiring over the log-posteriors: forward into alpha, backward two rows of beta.
  const CrfScoresView lps{work, T, C};
  std::fill(alpha, alpha + d.n_states, 0.0f);
  for (int64_t t = 0; t < T; ++t)
    forward_step<MaxReduce>(d, lps.data + t * C, nullptr, alpha + t * row, alpha + (t + 1) * row);
  float* next = beta;
  float* cur = beta + row;
  std::fill(next, next + d.n_states, 0.0f);
  for (int64_t t = T - 1; t >= 0; --t) {
    const float* lp = work + t * C;
    const float* a = alpha + t * row;
    float best = -std::numeric_limits<float>::infinity();
    int32_t best_idx = 0;
    for (int64_t c = 0; c < d.n_states; ++c) {
      for (int64_t e = 0; e < d.n_edges; ++e) {
        const float v = a[source_of(d, c, e)] + lp[c * d.n_edges + e] + next[c];
        if (v > best) {  // strict: ties keep the lowest flat index
          best = v;
          best_idx = static_cast<int32_t>(c * d.n_edges + e);
        }
      }
    }
    edge[t] = best_idx;
    value[t] = best;
    backward_step<MaxReduce>(d, lp, nullptr, next, cur);
    std::swap(next, cur);
  }
  return log_z;
}

}  // namespace detail

CrfPosteriorDecoder::CrfPosteriorDecoder(CrfGeometry geometry, CrfBackend backend)
    : m_geometry(std::move(geometry)), m_backend(backend) {}

Result<CrfPosteriorDecoder> CrfPosteriorDecoder::create(const CrfGeometry& geometry, CrfBackend backend) {
  ESCPOD_RETURN_IF_ERROR(validate_geometry(geometry));
  const detail::CrfDims d = detail::crf_dims(geometry);
  if (backend == CrfBackend::kAuto)
    backend = detail::crf_simd_geometry(d) ? detail::crf_best_simd_backend() : CrfBackend::kScalar;
  if (!crf_backend_available(backend, geometry))
    return Status::invalid_argument(std::string("CRF decoder: backend ") + crf_backend_name(backend) +
                                    " is not available for this CPU and geometry (n_base " +
                                    std::to_string(geometry.n_base) + ", state_len " +
                                    std::to_string(geometry.state_len) + ")");
  return CrfPosteriorDecoder(geometry, backend);
}

Status CrfPosteriorDecoder::decode(const CrfScoresView& scores, PosteriorCall& out, CrfBeamSearch* beam) {
  if (beam) beam->m_guided = {};  // whatever happens below, no earlier guides stay usable
  ESCPOD_RETURN_IF_ERROR(validate_scores(scores, m_geometry));
  const detail::CrfDims d = detail::crf_dims(m_geometry);
  const int64_t T = scores.n_steps, row = detail::crf_row_floats(d);
  const auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  grow(m_alpha, (T + 1) * row);
  grow(m_beta, (T + 1) * row);
  grow(m_work, detail::crf_work_floats(d, T));
  grow(m_step, T);
  out.step_edge.resize(static_cast<size_t>(T));
  const detail::CrfPasses passes = detail::crf_passes(m_backend);
  // The beam search's forward-backward is this pass's first half when both run the same backend
  // and the scores' stays are its blank score (the pass checks those).
  detail::CrfLogLattice lattice;
  const bool share = beam != nullptr && beam->backend() == m_backend;
  if (share) {
    grow(beam->m_alpha, (T + 1) * row);
    grow(beam->m_beta, (T + 1) * row);
    lattice.alpha = beam->m_alpha.data();
    lattice.beta = beam->m_beta.data();
    lattice.stay = beam->options().blank_score;
  }
  out.log_partition = passes.posterior_decode(d, scores, m_alpha.data(), m_beta.data(), m_work.data(),
                                              out.step_edge.data(), m_step.data(), share ? &lattice : nullptr);
  if (lattice.filled) {
    beam->m_log_z = lattice.log_z;
    beam->m_guided = scores;
  }
  out.sequence.clear();
  float best = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < T; ++t) {
    best = std::max(best, m_step[static_cast<size_t>(t)]);
    const int32_t flat = out.step_edge[static_cast<size_t>(t)];
    if (flat % d.n_edges != 0)
      out.sequence.push_back(m_geometry.alphabet[static_cast<size_t>(1 + (flat / d.n_edges) % d.n_base)]);
  }
  out.path_score = best;
  out.mean_logpost = best / static_cast<float>(T);
  return Status::ok();
}

}  // namespace escpod::demux
