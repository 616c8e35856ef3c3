// Lattice confidence of a CRF call (--ref-scores) and the CRF head's gates
// (docs/demux.md §7.6, §7.7).
//
// For every reference r of a panel, log P(r | signal) = logZ_target(r) - logZ, where logZ is the
// log-semiring partition of the raw scores (PosteriorCall::log_partition) and logZ_target(r) the
// same sum restricted to the paths that emit exactly r: a forward over a chain of "cells" per
// emitted position j (j = 0: every state, stays only; 1 <= j <= state_len: the
// n_base^(state_len - j) states whose newest j bases are r's first j, each reached by n_base moves;
// j > state_len: one state, one move). Cells of identical prefixes are shared across references
// (a trie), so a 16-plex costs about 1,000 cells per step.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/demux/crf_decode.hpp"
#include "escpod/demux/crf_match.hpp"

namespace escpod::demux {

namespace detail {
struct CrfRefScorerAccess;
}

// Log-probabilities of a panel's references under a read's raw scores. Built once per panel and
// geometry; score() reuses per-object buffers, so one scorer per worker thread (not thread-safe;
// copyable to make more).
class CrfRefScorer {
 public:
  // References in the emitted form the panel is matched in (case-insensitive symbols of the
  // geometry's alphabet, blank excluded). invalid_argument naming the reference when one is
  // shorter than state_len or holds another symbol; or for a bad geometry.
  // `backend` picks the log-sum-exp kernel (kAuto: the widest this CPU runs; any geometry).
  static Result<CrfRefScorer> create(const CrfGeometry& geometry, std::span<const BarcodeRef> refs,
                                     CrfBackend backend = CrfBackend::kAuto);

  // logp[r] = log P(ref r | scores) for every reference, given the read's logZ over the same raw
  // scores (PosteriorCall::log_partition). Must run on the raw scores, never on posteriors.
  // invalid_argument when the view does not fit or logp.size() != n_refs(). No allocation after
  // the first call.
  Status score(const CrfScoresView& scores, float log_partition, std::span<float> logp);

  size_t n_refs() const { return m_final_begin.size(); }
  size_t n_cells() const { return m_cell_state.size(); }

 private:
  friend struct detail::CrfRefScorerAccess;
  static Result<CrfRefScorer> build(const CrfGeometry& geometry, std::span<const BarcodeRef> refs,
                                    bool allow_short, CrfBackend backend);
  CrfGeometry m_geometry;
  CrfBackend m_backend = CrfBackend::kScalar;
  std::vector<int32_t> m_cell_state;  // state of each cell; cells of a trie node are contiguous
  std::vector<int32_t> m_in_begin;    // incoming moves of cell i: [m_in_begin[i], m_in_begin[i + 1])
  std::vector<int32_t> m_in_src;      // source cell of each incoming move
  std::vector<int32_t> m_in_edge;     // its edge index (1 + dropped base)
  std::vector<int32_t> m_final_begin, m_final_end;  // cells of each reference's last position
  std::vector<float> m_cur, m_next;
  std::vector<float> m_terms;  // per step: n_base + 1 planes of the non-root cells' terms
};

// The per-read lattice columns for the reference chosen by edit distance.
struct CrfRefReport {
  float crf_logp = 0.0f;    // log P(chosen | signal)
  float crf_margin = 0.0f;  // crf_logp minus the best other reference's (meaningful if has_margin)
  bool has_margin = false;  // false with a single reference
  int32_t crf_best = -1;    // reference with the highest log-probability (first on ties)
};

// Builds the report from every reference's log-probability. chosen must index logp.
CrfRefReport crf_ref_report(std::span<const float> logp, int32_t chosen);

// The CRF head's gates. They only reject (the read becomes unclassified, keeping its scores),
// never re-assign, and are checked in this order, the first failure naming the reason:
//   1. edit margin:  rejects when a margin exists (2+ references) and margin < min_margin
//                    (0 keeps ties: margins are never negative);
//   2. crf margin:   rejects when set, crf_margin exists and crf_margin < min_crf_margin;
//   3. crf prob:     rejects when set and exp(crf_logp) < min_crf_prob;
//   4. base quality: rejects when set, a beam-search baseq exists and baseq < min_baseq.
// Gates 2 and 3 need lattice scores (they imply --ref-scores); without a report they pass.
struct CrfGates {
  int32_t min_margin = 0;
  std::optional<double> min_crf_margin;
  std::optional<double> min_crf_prob;
  std::optional<double> min_baseq;
  bool needs_ref_scores() const { return min_crf_margin.has_value() || min_crf_prob.has_value(); }
};

enum class CrfGateResult : uint8_t { kPass, kEditMargin, kCrfMargin, kCrfProb, kBaseq };
// "pass", "edit_margin", "crf_margin", "crf_prob", "baseq".
const char* crf_gate_result_name(CrfGateResult result);

CrfGateResult apply_crf_gates(const CrfGates& gates, const BarcodeMatch& match,
                              const std::optional<CrfRefReport>& lattice, std::optional<float> baseq);

}  // namespace escpod::demux
