// Decoders for CTC-CRF barcode heads (bonito's CTC_CRF lattice): the two-pass posterior decode
// escapepod uses for its bundles and the beam search bonito/koi run for SeqTagger's models.
// Specification: docs/demux.md §7.1, §7.3, §7.4.
//
// Score layout (the encoder's output, time-major): step t of a read holds n_scores floats,
// index `dest * n_edges + edge`. Edge 0 is the stay/blank (source = dest, emits nothing); edge
// 1 + j is the move whose source is j * (n_states / n_base) + dest / n_base (base j drops off the
// oldest end) and which emits alphabet[1 + dest % n_base]. n_states = n_base^state_len,
// n_edges = n_base + 1. Every decoder here reads that buffer in place (no copy of the encoder's
// output is required from the caller).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod::demux {

// Shape of a CRF lattice. The shipped models use n_base 4, state_len 4, alphabet "NACGT".
// Decoders are generic over n_base and state_len so tiny lattices can be checked exhaustively.
struct CrfGeometry {
  int n_base = 4;
  int state_len = 4;
  std::string alphabet = "NACGT";  // blank first, then one symbol per base; size n_base + 1

  int64_t n_states() const;
  int64_t n_edges() const { return n_base + 1; }
  int64_t n_scores() const { return n_states() * n_edges(); }
};

// OK when 2 <= n_base <= 8, 1 <= state_len, n_states <= 65536, and the alphabet has n_base + 1
// distinct printable characters; otherwise invalid_argument naming the field.
Status validate_geometry(const CrfGeometry& geometry);

// One read's scores inside an encoder output buffer: step t's n_scores floats start at
// data + t * step_stride (step_stride = n_scores for a [T, n_scores] buffer, batch * n_scores for
// row r of a [T, batch, n_scores] buffer with data pointing at row r). A view: the caller keeps
// the buffer alive for the duration of a call.
struct CrfScoresView {
  const float* data = nullptr;
  int64_t n_steps = 0;
  int64_t step_stride = 0;
};

// Checks a view against a geometry: non-null data, n_steps >= 1, step_stride >= n_scores.
Status validate_scores(const CrfScoresView& scores, const CrfGeometry& geometry);

// Kernel set of the lattice passes. kScalar is the plain reference (std::exp/std::log, any
// geometry); kAvx2 and kAvx512 are vectorised (n_base 4 and state_len >= 3 only). kAuto takes the
// widest one the CPU and geometry allow.
enum class CrfBackend : uint8_t { kAuto, kScalar, kAvx2, kAvx512 };
const char* crf_backend_name(CrfBackend backend);
// Whether this CPU can run `backend` for `geometry` (kAuto and kScalar: always).
bool crf_backend_available(CrfBackend backend, const CrfGeometry& geometry);

// Result of the posterior decode. Buffers are reused across calls (no allocation once sized).
struct PosteriorCall {
  std::string sequence;            // emitted symbols, one per winning move edge, in time order
  std::vector<int32_t> step_edge;  // per step: winning flat edge index dest * n_edges + edge
  float path_score = 0.0f;         // max-semiring value of the winning path over log-posteriors
  float mean_logpost = 0.0f;       // path_score / n_steps
  float log_partition = 0.0f;      // logZ of the raw scores (log-semiring forward)
};

// The two-pass posterior decode (docs/demux.md §7.3 steps 1-4):
//   1. log-semiring forward/backward over the raw scores (alpha_0 = beta_T = 0);
//   2. edge posteriors: per step, softmax over all n_scores of alpha_t[src] + S_t + beta_{t+1},
//      replaced by ln(posterior + 1e-8);
//   3. max-semiring forward/backward over those, and per step the edge maximising
//      alpha'_t[src] + LP_t + beta'_{t+1}[dest], ties to the lowest flat index; moves emit their
//      symbol, stays nothing (no repeat collapsing);
//   4. path_score = the largest winning value over steps; mean_logpost = path_score / T.
// Reproduces crf_golden.json on every backend. The vector backends compute steps 1-2 in a scaled
// probability domain with polynomial exp/log (the log domain for reads with |score| > 9.2 at
// state_len 4, whose rows could underflow float), so their intermediate values differ from
// kScalar's in the last float bits (path_score by ~2e-5 relative); ties break the same way.
// Owns its scratch (sized on first use to the longest read seen): one decoder per worker thread;
// not thread-safe; movable.
class CrfBeamSearch;

class CrfPosteriorDecoder {
 public:
  // invalid_argument for a bad geometry or a backend this CPU/geometry cannot run.
  static Result<CrfPosteriorDecoder> create(const CrfGeometry& geometry,
                                            CrfBackend backend = CrfBackend::kAuto);

  // Decodes one read into `out`. invalid_argument if the view does not fit the geometry.
  // Scores are expected finite; a non-finite score gives a non-finite path_score, never a crash.
  // With `beam` (the fused head runs both decoders on every window): when its forward-backward
  // is this decoder's first pass (the same backend, and every stay score equal to its blank
  // score), that pass also fills the beam search's guides, and its next decode() of the same,
  // unchanged scores skips its own pass.
  Status decode(const CrfScoresView& scores, PosteriorCall& out, CrfBeamSearch* beam = nullptr);

  const CrfGeometry& geometry() const { return m_geometry; }
  CrfBackend backend() const { return m_backend; }  // the resolved backend (never kAuto)

 private:
  CrfPosteriorDecoder(CrfGeometry geometry, CrfBackend backend);
  CrfGeometry m_geometry;
  CrfBackend m_backend;
  std::vector<float> m_alpha, m_beta, m_work, m_step;
};

namespace detail {
struct BeamElement {
  int32_t state;
  int32_t parent;  // index in the previous step's beam
  uint8_t stay;
};
struct BeamCandidate {
  uint64_t hash;  // identity of (initial state, emitted bases)
  float score;    // log-score without the guide
  float ranked;   // score + guide
  int32_t state;
  int32_t parent;
  int32_t length;  // bases emitted
  uint8_t stay;
};
}  // namespace detail

// Beam search as bonito/koi run SeqTagger's models (learned from dorado's open CPU decoder, not
// copied): hypotheses are (initial state, emitted bases); each step extends every hypothesis by a
// stay (score blank_score) or one of n_base moves (the move's score from the buffer); a stay and a
// move that yield the same hypothesis are merged by log-sum-exp; candidates are ranked by
// score + beta_{t+1}[state] (the log-semiring backward "guide" over the same scores) and the
// beam keeps the best beam_width of those within log(beam_cut) of the best (exact top-k; ties to
// the earlier candidate: parents in beam order, each parent's moves by base, then the stays).
// By default the first step always counts as a move (moves[0] = 1: the first state's newest base
// is emitted even when the first step stayed), as dorado's published decoder does.
struct BeamOptions {
  int beam_width = 32;            // 1..4096
  float beam_cut = 100.0f;        // candidates more than log(beam_cut) below the best are cut;
                                  // <= 0 or infinite: no cut
  float blank_score = 2.0f;       // stay score used everywhere (guides, posteriors, beam), as koi
  float q_scale = 1.0f;           // qscore = raw * q_scale + q_shift, clamped to [1, 90]
  float q_shift = 0.0f;
  bool force_first_move = true;   // false: moves and sequence are exactly the winning hypothesis'
};

struct BeamCall {
  std::string sequence;
  std::vector<uint8_t> quality;  // phred per base (rounded), same length as sequence
  std::vector<uint8_t> moves;    // per step: 1 = a base was emitted at this step
  float baseq = 0.0f;            // mean of `quality` (0 for an empty call)
  float score = 0.0f;            // log-score of the winning hypothesis (all its merged paths)
  float log_partition = 0.0f;    // logZ of the scores (with the blank score), for lattice scoring
  int32_t initial_state = 0;     // the winning hypothesis' state before step 0
};

// Per-base quality (dorado's published CPU formula): at each step, the state posterior
// exp(alpha_t + beta_t - logZ) of the path's state plus those of its predecessor and successor
// k-mers (homopolymer state counted once), clamped to [0, 1] and raised to 0.4; averaged over the steps a base spans (its move and
// the stays after it); q = -10 log10(1 - mean), then scale/shift and clamp [1, 90], rounded.
// Owns scratch like CrfPosteriorDecoder: one per worker; not thread-safe.
class CrfBeamSearch {
 public:
  // invalid_argument for a bad geometry, options out of range, or an unavailable backend.
  static Result<CrfBeamSearch> create(const CrfGeometry& geometry, const BeamOptions& options = {},
                                      CrfBackend backend = CrfBackend::kAuto);

  // Decodes one read. Uses the guides a CrfPosteriorDecoder::decode(scores, ..., this) of the
  // same view has just left (the same bits as its own forward-backward), else runs its own.
  Status decode(const CrfScoresView& scores, BeamCall& out);

  const BeamOptions& options() const { return m_options; }
  CrfBackend backend() const { return m_backend; }

 private:
  friend class CrfPosteriorDecoder;
  CrfBeamSearch(CrfGeometry geometry, BeamOptions options, CrfBackend backend);
  void search(const CrfScoresView& scores, BeamCall& out);
  int64_t init_beam();
  int64_t extend(const float* step, const float* guide, int64_t beam);
  void merge(const float* guide, int64_t beam);
  int64_t select(int64_t n_candidates, float cut, detail::BeamElement* hist);
  void trace_back(int64_t n_steps, int64_t beam, BeamCall& out);
  void qualities(BeamCall& out);
  CrfGeometry m_geometry;
  BeamOptions m_options;
  CrfBackend m_backend;
  float m_log_z = 0.0f;
  std::vector<float> m_alpha, m_beta, m_work;
  CrfScoresView m_guided{};  // the scores m_alpha / m_beta / m_log_z were left for (data null: none)
  std::vector<int32_t> m_states;  // per step: the winning path's state after the step
  std::vector<int32_t> m_order;   // candidate indices during selection
  std::vector<int32_t> m_table;   // open-addressing hash -> move candidate (stay/move merging)
  std::vector<detail::BeamElement> m_history;  // beam_width per step: the back-pointers
  std::vector<detail::BeamCandidate> m_front, m_next;
};

}  // namespace escpod::demux
