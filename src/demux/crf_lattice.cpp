#include "escpod/demux/crf_lattice.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>

#include "demux/crf_passes.hpp"

namespace escpod::demux {

namespace {

// Base index (0..n_base-1) of a symbol of the geometry's alphabet (blank excluded), or -1.
int base_of(const CrfGeometry& g, char c) {
  const int up = std::toupper(static_cast<unsigned char>(c));
  for (int b = 0; b < g.n_base; ++b)
    if (std::toupper(static_cast<unsigned char>(g.alphabet[static_cast<size_t>(1 + b)])) == up) return b;
  return -1;
}

struct TrieNode {
  int32_t first_cell = 0;
  int32_t n_cells = 0;
  int64_t code = 0;  // newest min(depth, state_len) bases, oldest most significant
};

}  // namespace

Result<CrfRefScorer> CrfRefScorer::create(const CrfGeometry& geometry, std::span<const BarcodeRef> refs,
                                          CrfBackend backend) {
  return build(geometry, refs, false, backend);
}

Result<CrfRefScorer> CrfRefScorer::build(const CrfGeometry& g, std::span<const BarcodeRef> refs, bool allow_short,
                                         CrfBackend backend) {
  ESCPOD_RETURN_IF_ERROR(validate_geometry(g));
  const CrfBackend best = detail::crf_best_simd_backend();
  if (backend == CrfBackend::kAuto) backend = best;
  if (backend != CrfBackend::kScalar && backend != best && !(backend == CrfBackend::kAvx2 && best == CrfBackend::kAvx512))
    return Status::invalid_argument(std::string("lattice scoring: backend ") + crf_backend_name(backend) +
                                    " is not available on this CPU");
  const int64_t n = g.n_base, S = g.n_states(), sl = g.state_len;
  CrfRefScorer sc;
  sc.m_geometry = g;
  sc.m_backend = backend;
  // Position 0: every state, stays only.
  for (int64_t s = 0; s < S; ++s) {
    sc.m_cell_state.push_back(static_cast<int32_t>(s));
    sc.m_in_begin.push_back(0);
  }
  std::vector<TrieNode> nodes = {{0, static_cast<int32_t>(S), 0}};
  std::map<std::vector<int>, size_t> node_of;  // emitted prefix -> node
  node_of[{}] = 0;
  const auto add_move = [&](int64_t src, int64_t edge) {
    sc.m_in_src.push_back(static_cast<int32_t>(src));
    sc.m_in_edge.push_back(static_cast<int32_t>(edge));
  };
  for (size_t r = 0; r < refs.size(); ++r) {
    const std::string& seq = refs[r].sequence;
    const std::string where = "reference " + std::to_string(r) + " (" + refs[r].name + ")";
    if (!allow_short && static_cast<int64_t>(seq.size()) < sl)
      return Status::invalid_argument(where + ": " + std::to_string(seq.size()) +
                                      " bases, lattice scoring needs at least state_len = " + std::to_string(sl));
    std::vector<int> prefix;
    size_t node = 0;
    for (size_t k = 0; k < seq.size(); ++k) {
      const int b = base_of(g, seq[k]);
      if (b < 0)
        return Status::invalid_argument(where + ": symbol '" + std::string(1, seq[k]) + "' at position " +
                                        std::to_string(k) + " is not a base of the alphabet \"" + g.alphabet + "\"");
      prefix.push_back(b);
      auto it = node_of.find(prefix);
      if (it != node_of.end()) {
        node = it->second;
        continue;
      }
      const TrieNode parent = nodes[node];
      const int64_t j = static_cast<int64_t>(prefix.size());
      TrieNode child;
      child.first_cell = static_cast<int32_t>(sc.m_cell_state.size());
      child.code = (parent.code * n) % S + b;
      if (j <= sl) {
        int64_t n_sub = 1, n_pow_j = 1;
        for (int64_t i = 0; i < sl - j; ++i) n_sub *= n;
        for (int64_t i = 0; i < j; ++i) n_pow_j *= n;
        for (int64_t u = 0; u < n_sub; ++u) {
          sc.m_cell_state.push_back(static_cast<int32_t>(u * n_pow_j + child.code));
          sc.m_in_begin.push_back(static_cast<int32_t>(sc.m_in_src.size()));
          for (int64_t d = 0; d < n; ++d) add_move(parent.first_cell + d * n_sub + u, 1 + d);
        }
        child.n_cells = static_cast<int32_t>(n_sub);
      } else {
        sc.m_cell_state.push_back(static_cast<int32_t>(child.code));
        sc.m_in_begin.push_back(static_cast<int32_t>(sc.m_in_src.size()));
        add_move(parent.first_cell, 1 + prefix[static_cast<size_t>(j - sl - 1)]);
        child.n_cells = 1;
      }
      node = nodes.size();
      nodes.push_back(child);
      node_of[prefix] = node;
    }
    sc.m_final_begin.push_back(nodes[node].first_cell);
    sc.m_final_end.push_back(nodes[node].first_cell + nodes[node].n_cells);
  }
  sc.m_in_begin.push_back(static_cast<int32_t>(sc.m_in_src.size()));
  return sc;
}

Status CrfRefScorer::score(const CrfScoresView& scores, float log_partition, std::span<float> logp) {
  ESCPOD_RETURN_IF_ERROR(validate_scores(scores, m_geometry));
  if (logp.size() != n_refs())
    return Status::invalid_argument("lattice scoring: " + std::to_string(logp.size()) + " outputs for " +
                                    std::to_string(n_refs()) + " references");
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t S = m_geometry.n_states(), E = m_geometry.n_edges();
  const int64_t n_cells = static_cast<int64_t>(m_cell_state.size()), M = n_cells - S;
  const int64_t M_pad = (M + 15) / 16 * 16;
  const int n_planes = static_cast<int>(E);
  m_cur.assign(static_cast<size_t>(S + M_pad), kNegInf);
  m_next.resize(static_cast<size_t>(S + M_pad));
  m_terms.assign(static_cast<size_t>(n_planes * M_pad), kNegInf);  // unused terms stay -inf
  std::fill(m_cur.begin(), m_cur.begin() + S, 0.0f);
  // Per step: roots only stay; every other cell's terms (its stay, its moves) go into planes,
  // reduced by one vectorised log-sum-exp over all cells.
  for (int64_t t = 0; t < scores.n_steps; ++t) {
    const float* row = scores.data + t * scores.step_stride;
    for (int64_t i = 0; i < S; ++i) m_next[static_cast<size_t>(i)] = m_cur[static_cast<size_t>(i)] + row[i * E];
    for (int64_t j = 0; j < M; ++j) {
      const auto cell = static_cast<size_t>(S + j);
      const float* sc = row + static_cast<int64_t>(m_cell_state[cell]) * E;
      m_terms[static_cast<size_t>(j)] = m_cur[cell] + sc[0];
      int64_t k = 1;
      for (int32_t m = m_in_begin[cell]; m < m_in_begin[cell + 1]; ++m, ++k)
        m_terms[static_cast<size_t>(k * M_pad + j)] =
            m_cur[static_cast<size_t>(m_in_src[static_cast<size_t>(m)])] + sc[m_in_edge[static_cast<size_t>(m)]];
    }
    detail::crf_lse_rows(m_backend, m_terms.data(), n_planes, M_pad, M_pad, m_next.data() + S);
    std::swap(m_cur, m_next);
  }
  for (size_t r = 0; r < n_refs(); ++r) {
    const int32_t b = m_final_begin[r], e = m_final_end[r];
    logp[r] = detail::crf_logsumexp(m_cur.data() + b, e - b) - log_partition;
  }
  return Status::ok();
}

CrfRefReport crf_ref_report(std::span<const float> logp, int32_t chosen) {
  CrfRefReport rep;
  rep.crf_logp = logp[static_cast<size_t>(chosen)];
  float other = -std::numeric_limits<float>::infinity();
  for (size_t r = 0; r < logp.size(); ++r) {
    if (rep.crf_best < 0 || logp[r] > logp[static_cast<size_t>(rep.crf_best)]) rep.crf_best = static_cast<int32_t>(r);
    if (static_cast<int32_t>(r) != chosen) other = std::max(other, logp[r]);
  }
  rep.has_margin = logp.size() > 1;
  rep.crf_margin = rep.has_margin ? rep.crf_logp - other : 0.0f;
  return rep;
}

const char* crf_gate_result_name(CrfGateResult result) {
  switch (result) {
    case CrfGateResult::kPass: return "pass";
    case CrfGateResult::kEditMargin: return "edit_margin";
    case CrfGateResult::kCrfMargin: return "crf_margin";
    case CrfGateResult::kCrfProb: return "crf_prob";
    case CrfGateResult::kBaseq: return "baseq";
  }
  return "?";
}

CrfGateResult apply_crf_gates(const CrfGates& gates, const BarcodeMatch& match,
                              const std::optional<CrfRefReport>& lattice, std::optional<float> baseq) {
  if (match.has_second() && match.margin() < gates.min_margin) return CrfGateResult::kEditMargin;
  if (lattice.has_value()) {
    if (gates.min_crf_margin && lattice->has_margin && lattice->crf_margin < *gates.min_crf_margin)
      return CrfGateResult::kCrfMargin;
    if (gates.min_crf_prob && std::exp(static_cast<double>(lattice->crf_logp)) < *gates.min_crf_prob)
      return CrfGateResult::kCrfProb;
  }
  if (gates.min_baseq && baseq.has_value() && *baseq < *gates.min_baseq) return CrfGateResult::kBaseq;
  return CrfGateResult::kPass;
}

}  // namespace escpod::demux
