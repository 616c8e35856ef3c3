// Beam search over a CTC-CRF lattice (see crf_decode.hpp for the contract). The algorithm is
// bonito/koi's as described by dorado's open CPU decoder; this is our own implementation with an
// exact top-k selection (dorado bisects a score cut-off to keep 80-100% of the width).
#include <algorithm>
#include <cmath>
#include <limits>

#include "demux/crf_passes.hpp"
#include "escpod/demux/crf_decode.hpp"

namespace escpod::demux {

namespace {

// Identity of a hypothesis: its initial state and every state entered by a move (equivalently
// its emitted bases). 64-bit mixing (splitmix64 finaliser); equality also checks state and length.
uint64_t chain_hash(uint64_t h, int64_t state) {
  uint64_t z = h + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(state) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float log_add(float a, float b) {
  const float m = std::max(a, b);
  if (!std::isfinite(m)) return m;
  return m + std::log1p(std::exp(-std::abs(a - b)));
}

constexpr float kDead = -std::numeric_limits<float>::infinity();

}  // namespace

CrfBeamSearch::CrfBeamSearch(CrfGeometry geometry, BeamOptions options, CrfBackend backend)
    : m_geometry(std::move(geometry)), m_options(options), m_backend(backend) {}

Result<CrfBeamSearch> CrfBeamSearch::create(const CrfGeometry& geometry, const BeamOptions& options,
                                            CrfBackend backend) {
  ESCPOD_RETURN_IF_ERROR(validate_geometry(geometry));
  if (options.beam_width < 1 || options.beam_width > 4096)
    return Status::invalid_argument("beam search: beam width " + std::to_string(options.beam_width) +
                                    " is outside 1..4096");
  if (!std::isfinite(options.blank_score) || !std::isfinite(options.q_scale) || !std::isfinite(options.q_shift))
    return Status::invalid_argument("beam search: blank score, q_scale and q_shift must be finite");
  const detail::CrfDims d = detail::crf_dims(geometry);
  if (backend == CrfBackend::kAuto)
    backend = detail::crf_simd_geometry(d) ? detail::crf_best_simd_backend() : CrfBackend::kScalar;
  if (!crf_backend_available(backend, geometry))
    return Status::invalid_argument(std::string("beam search: backend ") + crf_backend_name(backend) +
                                    " is not available for this CPU and geometry");
  return CrfBeamSearch(geometry, options, backend);
}

Status CrfBeamSearch::decode(const CrfScoresView& scores, BeamCall& out) {
  ESCPOD_RETURN_IF_ERROR(validate_scores(scores, m_geometry));
  const detail::CrfDims d = detail::crf_dims(m_geometry);
  const int64_t T = scores.n_steps, row = detail::crf_row_floats(d);
  const auto grow = [](auto& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  grow(m_alpha, (T + 1) * row);
  grow(m_beta, (T + 1) * row);
  grow(m_work, detail::crf_work_floats(d, T));
  const int64_t width = m_options.beam_width;
  grow(m_history, (T + 1) * width);
  grow(m_front, (d.n_base + 1) * width);
  grow(m_next, (d.n_base + 1) * width);
  grow(m_order, (d.n_base + 1) * width);
  grow(m_states, std::max<int64_t>(T, d.n_states));
  int64_t table = 1;
  while (table < 2 * d.n_base * width) table *= 2;
  if (static_cast<int64_t>(m_table.size()) != table) m_table.assign(static_cast<size_t>(table), -1);
  const bool guided = m_guided.data == scores.data && m_guided.n_steps == T && m_guided.step_stride == scores.step_stride;
  m_guided = {};
  if (!guided) {
    m_log_z = detail::crf_passes(m_backend).forward_backward(d, scores, &m_options.blank_score, m_alpha.data(),
                                                             m_beta.data(), m_work.data());
  }
  out.log_partition = m_log_z;
  search(scores, out);
  qualities(out);
  return Status::ok();
}

void CrfBeamSearch::search(const CrfScoresView& scores, BeamCall& out) {
  const int64_t T = scores.n_steps, row = detail::crf_row_floats(detail::crf_dims(m_geometry));
  const float cut = (m_options.beam_cut > 0.0f && std::isfinite(m_options.beam_cut)) ? std::log(m_options.beam_cut)
                                                                                   : std::numeric_limits<float>::infinity();
  int64_t beam = init_beam();
  for (int64_t t = 0; t < T; ++t) {
    const float* guide = m_beta.data() + (t + 1) * row;
    const int64_t n_candidates = extend(scores.data + t * scores.step_stride, guide, beam);
    merge(guide, beam);
    beam = select(n_candidates, cut, m_history.data() + (t + 1) * m_options.beam_width);
  }
  trace_back(T, beam, out);
}

// The `width` states with the largest beta_0 (ties to the lower state), in state order.
int64_t CrfBeamSearch::init_beam() {
  const int64_t S = m_geometry.n_states(), width = m_options.beam_width;
  const float* guide0 = m_beta.data();
  for (int64_t s = 0; s < S; ++s) m_states[static_cast<size_t>(s)] = static_cast<int32_t>(s);
  const int64_t n_init = std::min(width, S);
  std::partial_sort(m_states.begin(), m_states.begin() + n_init, m_states.begin() + S, [&](int32_t a, int32_t b) {
    return guide0[a] > guide0[b] || (guide0[a] == guide0[b] && a < b);
  });
  std::sort(m_states.begin(), m_states.begin() + n_init);
  for (int64_t i = 0; i < n_init; ++i) {
    const int32_t s = m_states[static_cast<size_t>(i)];
    m_front[static_cast<size_t>(i)] = {chain_hash(0x5EEDull, s), 0.0f, 0.0f, s, 0, 0, 0};
    m_history[static_cast<size_t>(i)] = {s, 0, 0};
  }
  return n_init;
}

// Candidates into m_next: every parent's n_base moves (parent order, then base), then every
// parent's stay. Returns their count.
int64_t CrfBeamSearch::extend(const float* step, const float* guide, int64_t beam) {
  const detail::CrfDims d = detail::crf_dims(m_geometry);
  const int64_t n = d.n_base, S = d.n_states, E = d.n_edges;
  int64_t nc = 0;
  for (int64_t i = 0; i < beam; ++i) {
    const detail::BeamCandidate& p = m_front[static_cast<size_t>(i)];
    // Integer divisions once per parent, not per base.
    const int64_t dest0 = (p.state * n) % S, edge = 1 + p.state / d.n_prev;
    for (int64_t b = 0; b < n; ++b) {
      const int64_t dest = dest0 + b;
      const float sc = p.score + step[dest * E + edge];
      m_next[static_cast<size_t>(nc++)] = {chain_hash(p.hash, dest), sc, sc + guide[dest], static_cast<int32_t>(dest),
                                           static_cast<int32_t>(i), p.length + 1, 0};
    }
  }
  for (int64_t i = 0; i < beam; ++i) {
    const detail::BeamCandidate& p = m_front[static_cast<size_t>(i)];
    const float sc = p.score + m_options.blank_score;
    m_next[static_cast<size_t>(nc++)] = {p.hash, sc, sc + guide[p.state], p.state, static_cast<int32_t>(i), p.length, 1};
  }
  return nc;
}

// A stay and a move that reach the same hypothesis are one hypothesis: the lower-scored one folds
// into the other (the move survives ties). Moves are found by hash (linear probing).
void CrfBeamSearch::merge(const float* guide, int64_t beam) {
  const int64_t n = m_geometry.n_base;
  const uint64_t mask = m_table.size() - 1;
  std::fill(m_table.begin(), m_table.end(), -1);
  for (int64_t c = 0; c < n * beam; ++c) {
    uint64_t slot = m_next[static_cast<size_t>(c)].hash & mask;
    while (m_table[slot] >= 0) slot = (slot + 1) & mask;
    m_table[slot] = static_cast<int32_t>(c);
  }
  for (int64_t i = 0; i < beam; ++i) {
    detail::BeamCandidate& stay = m_next[static_cast<size_t>(n * beam + i)];
    for (uint64_t slot = stay.hash & mask; m_table[slot] >= 0; slot = (slot + 1) & mask) {
      detail::BeamCandidate& mv = m_next[static_cast<size_t>(m_table[slot])];
      if (mv.hash != stay.hash || mv.state != stay.state || mv.length != stay.length || mv.score == kDead ||
          stay.score == kDead)
        continue;
      detail::BeamCandidate& keep = stay.score > mv.score ? stay : mv;
      detail::BeamCandidate& drop = stay.score > mv.score ? mv : stay;
      keep.score = log_add(keep.score, drop.score);
      keep.ranked = keep.score + guide[keep.state];
      drop.score = kDead;
      drop.ranked = kDead;
    }
  }
}

// The next beam: the best `width` live candidates within `cut` of the best (ties to the earlier
// candidate), kept in candidate order; their back-pointers go to `hist`. Returns the beam size.
int64_t CrfBeamSearch::select(int64_t n_candidates, float cut, detail::BeamElement* hist) {
  const int64_t width = m_options.beam_width;
  int32_t* order = m_order.data();
  float best = kDead;
  for (int64_t c = 0; c < n_candidates; ++c) best = std::max(best, m_next[static_cast<size_t>(c)].ranked);
  const float floor = best - cut;
  int64_t kept = 0;
  for (int64_t c = 0; c < n_candidates; ++c) {
    const detail::BeamCandidate& x = m_next[static_cast<size_t>(c)];
    if (x.score != kDead && x.ranked >= floor) order[kept++] = static_cast<int32_t>(c);
  }
  if (kept > width) {
    std::nth_element(order, order + width - 1, order + kept, [&](int32_t a, int32_t b) {
      const float ra = m_next[static_cast<size_t>(a)].ranked, rb = m_next[static_cast<size_t>(b)].ranked;
      return ra > rb || (ra == rb && a < b);
    });
    kept = width;
    std::sort(order, order + kept);
  }
  for (int64_t i = 0; i < kept; ++i) {
    const detail::BeamCandidate& x = m_next[static_cast<size_t>(order[i])];
    m_front[static_cast<size_t>(i)] = x;
    hist[i] = {x.state, x.parent, x.stay};
  }
  return kept;
}

// Best final hypothesis (beta_T = 0, so ranked = score), first on ties, traced back to step 0.
void CrfBeamSearch::trace_back(int64_t T, int64_t beam, BeamCall& out) {
  const int64_t width = m_options.beam_width;
  int64_t best_i = 0;
  for (int64_t i = 1; i < beam; ++i)
    if (m_front[static_cast<size_t>(i)].score > m_front[static_cast<size_t>(best_i)].score) best_i = i;
  out.score = m_front[static_cast<size_t>(best_i)].score;
  out.moves.resize(static_cast<size_t>(T));
  int64_t e = best_i;
  for (int64_t t = T; t >= 1; --t) {
    const detail::BeamElement& x = m_history[static_cast<size_t>(t * width + e)];
    m_states[static_cast<size_t>(t - 1)] = x.state;
    out.moves[static_cast<size_t>(t - 1)] = x.stay ? 0 : 1;
    e = x.parent;
  }
  out.initial_state = m_history[static_cast<size_t>(e)].state;
  if (m_options.force_first_move) out.moves[0] = 1;
}

// Qualities (crf_decode.hpp): state posteriors exp(alpha_t + beta_t - logZ) around the path.
void CrfBeamSearch::qualities(BeamCall& out) {
  const detail::CrfDims d = detail::crf_dims(m_geometry);
  const int64_t T = static_cast<int64_t>(out.moves.size()), row = detail::crf_row_floats(d);
  const int64_t n = d.n_base, S = d.n_states, Q = d.n_prev;
  const int64_t hp_step = (S - 1) / (n - 1);  // homopolymer states are multiples of this
  out.sequence.clear();
  out.quality.clear();
  double sum_p = 0.0;
  int64_t n_blocks = 0;
  double total_q = 0.0;
  const auto finish_base = [&]() {
    if (n_blocks == 0) return;
    const double mean = sum_p / static_cast<double>(n_blocks);
    double q = -10.0 * std::log10(1.0 - mean);
    q = std::clamp(q * m_options.q_scale + m_options.q_shift, 1.0, 90.0);
    const auto phred = static_cast<uint8_t>(std::floor(q + 0.5));
    out.quality.push_back(phred);
    total_q += phred;
  };
  for (int64_t t = 0; t < T; ++t) {
    const int64_t st = m_states[static_cast<size_t>(t)];
    const float* a = m_alpha.data() + (t + 1) * row;
    const float* b = m_beta.data() + (t + 1) * row;
    const auto post = [&](int64_t s) { return std::exp(a[s] + b[s] - m_log_z); };
    float p = (st % hp_step == 0) ? -post(st) : post(st);
    for (int64_t k = 0; k < n; ++k) p += post(st / n + Q * k) + post((st * n) % S + k);
    p = std::pow(std::clamp(p, 0.0f, 1.0f), 0.4f);
    // A move starts a base; the stays after it add to that base (stays before any base: none).
    if (out.moves[static_cast<size_t>(t)] != 0) {
      finish_base();
      out.sequence.push_back(m_geometry.alphabet[static_cast<size_t>(1 + st % n)]);
      sum_p = 0.0;
      n_blocks = 0;
    }
    if (!out.sequence.empty()) {
      sum_p += p;
      ++n_blocks;
    }
  }
  finish_base();
  out.baseq = out.quality.empty() ? 0.0f : static_cast<float>(total_q / static_cast<double>(out.quality.size()));
}

}  // namespace escpod::demux
