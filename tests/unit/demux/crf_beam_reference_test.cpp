// The beam search (CrfBeamSearch) against a plain, slow reference written here from the contract
// in crf_decode.hpp, on random small lattices: every geometry, width, cut and blank score below.
//
// The reference shares no code with the library: its guides are its own backward pass in double
// precision; a hypothesis is an explicit value (initial state, emitted states, moves), merged with
// another only when they are equal as values (the library hashes them); selection sorts every
// candidate. What it reproduces is the algorithm's contract:
//   - beam 0: the `width` states with the largest beta_0 (ties to the lower state), in state order;
//   - step t: candidates = every hypothesis's moves (hypothesis order, then base), then every
//     hypothesis's stay (score + blank); rank = score + beta_{t+1}(state);
//   - a stay and a move that are the same hypothesis merge into one, scored log(e^a + e^b), which
//     keeps the position and moves of the higher-scored one (the move on ties);
//   - the next beam: live candidates ranked within log(beam_cut) of the best, the best `width` of
//     them (ties to the earlier candidate), kept in candidate order;
//   - the answer: the best-scored final hypothesis (the first on ties); the first step counts as a
//     move when force_first_move.
// Float rounding can flip a choice the two make between near-equal values, so the reference
// records the smallest gap behind each of its choices and a case whose gap is below kAmbiguous is
// not compared (counted, and required to be under 10% of the cases).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "escpod/demux/crf_decode.hpp"

namespace escpod::demux {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr double kAmbiguous = 1e-3;  // nats: float error on these lattices is ~1e-5

struct Lattice {
  int64_t n_base = 0, state_len = 0, n_states = 0, n_edges = 0, T = 0;
  std::string alphabet;
  std::vector<float> scores;  // [T][n_states * n_edges]; edge 0 = stay, 1 + k = from prev state k
  float at(int64_t t, int64_t dest, int64_t edge) const {
    return scores[static_cast<size_t>((t * n_states + dest) * n_edges + edge)];
  }
  // The state reached from `from` by emitting base b, and the edge that move takes.
  int64_t move_dest(int64_t from, int64_t b) const { return (from * n_base) % n_states + b; }
  int64_t move_edge(int64_t from) const { return 1 + from / (n_states / n_base); }
};

double log_add(double a, double b) {
  const double m = std::max(a, b);
  if (m == kNegInf) return m;
  return m + std::log(std::exp(a - m) + std::exp(b - m));
}

// beta[t][s]: log-sum of every path from state s before step t to the end (stays score `blank`).
std::vector<std::vector<double>> backward(const Lattice& L, double blank) {
  std::vector<std::vector<double>> beta(static_cast<size_t>(L.T + 1),
                                        std::vector<double>(static_cast<size_t>(L.n_states), 0.0));
  for (int64_t t = L.T - 1; t >= 0; --t) {
    const auto& next = beta[static_cast<size_t>(t + 1)];
    for (int64_t s = 0; s < L.n_states; ++s) {
      double v = blank + next[static_cast<size_t>(s)];
      for (int64_t b = 0; b < L.n_base; ++b) {
        const int64_t d = L.move_dest(s, b);
        v = log_add(v, L.at(t, d, L.move_edge(s)) + next[static_cast<size_t>(d)]);
      }
      beta[static_cast<size_t>(t)][static_cast<size_t>(s)] = v;
    }
  }
  return beta;
}

struct Hyp {
  int64_t initial = 0, state = 0;
  std::vector<int64_t> entered;  // states entered by moves: with `initial`, the identity
  std::vector<uint8_t> moves;    // the kept path's move flags, one per step so far
  std::vector<int64_t> path;     // the kept path's state after each step so far
  double score = 0.0, ranked = 0.0;
  bool alive = true;
};

struct RefResult {
  std::string sequence;
  std::vector<uint8_t> moves;
  int64_t initial_state = 0;
  double score = 0.0, log_z = 0.0;
  double min_gap = std::numeric_limits<double>::infinity();  // closest call behind any choice
};

// The next beam from ranked candidates: cut, then the best `width`, in candidate order.
std::vector<Hyp> select(std::vector<Hyp>& cand, int64_t width, double cut, double& min_gap) {
  double best = kNegInf;
  for (const Hyp& h : cand)
    if (h.alive) best = std::max(best, h.ranked);
  std::vector<size_t> live;
  for (size_t i = 0; i < cand.size(); ++i) {
    if (!cand[i].alive) continue;
    if (std::isfinite(cut)) min_gap = std::min(min_gap, std::abs(cand[i].ranked - (best - cut)));
    if (cand[i].ranked >= best - cut) live.push_back(i);
  }
  std::vector<size_t> by_rank = live;
  std::stable_sort(by_rank.begin(), by_rank.end(), [&](size_t a, size_t b) { return cand[a].ranked > cand[b].ranked; });
  if (static_cast<int64_t>(by_rank.size()) > width) {
    const auto w = static_cast<size_t>(width);
    min_gap = std::min(min_gap, cand[by_rank[w - 1]].ranked - cand[by_rank[w]].ranked);
    by_rank.resize(w);
  }
  std::sort(by_rank.begin(), by_rank.end());
  std::vector<Hyp> next;
  for (size_t i : by_rank) next.push_back(cand[i]);
  return next;
}

// Merges every stay with the move that is the same hypothesis (same initial state and emitted
// states, compared as values).
void merge(std::vector<Hyp>& cand, size_t n_moves, double& min_gap) {
  for (size_t si = n_moves; si < cand.size(); ++si) {
    Hyp& stay = cand[si];
    for (size_t mi = 0; mi < n_moves; ++mi) {
      Hyp& mv = cand[mi];
      if (!mv.alive || mv.initial != stay.initial || mv.entered != stay.entered) continue;
      min_gap = std::min(min_gap, std::abs(stay.score - mv.score));
      Hyp& keep = stay.score > mv.score ? stay : mv;
      Hyp& drop = stay.score > mv.score ? mv : stay;
      keep.ranked += log_add(keep.score, drop.score) - keep.score;
      keep.score = log_add(keep.score, drop.score);
      drop.alive = false;
    }
  }
}

RefResult reference_beam(const Lattice& L, const BeamOptions& o) {
  const auto beta = backward(L, o.blank_score);
  RefResult r;
  r.log_z = kNegInf;
  for (double v : beta[0]) r.log_z = log_add(r.log_z, v);
  const double cut = o.beam_cut > 0.0f && std::isfinite(o.beam_cut) ? std::log(static_cast<double>(o.beam_cut))
                                                                    : std::numeric_limits<double>::infinity();
  std::vector<Hyp> beam;
  {
    std::vector<Hyp> init;
    for (int64_t s = 0; s < L.n_states; ++s) init.push_back({s, s, {}, {}, {}, 0.0, beta[0][static_cast<size_t>(s)], true});
    double no_cut_gap = std::numeric_limits<double>::infinity();
    beam = select(init, o.beam_width, std::numeric_limits<double>::infinity(), no_cut_gap);
    r.min_gap = std::min(r.min_gap, no_cut_gap);
  }
  for (int64_t t = 0; t < L.T; ++t) {
    const auto& guide = beta[static_cast<size_t>(t + 1)];
    std::vector<Hyp> cand;
    for (const Hyp& h : beam) {
      for (int64_t b = 0; b < L.n_base; ++b) {
        Hyp c = h;
        c.state = L.move_dest(h.state, b);
        c.entered.push_back(c.state);
        c.moves.push_back(1);
        c.path.push_back(c.state);
        c.score = h.score + L.at(t, c.state, L.move_edge(h.state));
        c.ranked = c.score + guide[static_cast<size_t>(c.state)];
        cand.push_back(std::move(c));
      }
    }
    const size_t n_moves = cand.size();
    for (const Hyp& h : beam) {
      Hyp c = h;
      c.moves.push_back(0);
      c.path.push_back(c.state);
      c.score = h.score + o.blank_score;
      c.ranked = c.score + guide[static_cast<size_t>(c.state)];
      cand.push_back(std::move(c));
    }
    merge(cand, n_moves, r.min_gap);
    beam = select(cand, o.beam_width, cut, r.min_gap);
  }
  size_t best = 0;
  for (size_t i = 1; i < beam.size(); ++i)
    if (beam[i].score > beam[best].score) best = i;
  for (size_t i = 0; i < beam.size(); ++i)
    if (i != best) r.min_gap = std::min(r.min_gap, beam[best].score - beam[i].score);
  const Hyp& w = beam[best];
  r.score = w.score;
  r.initial_state = w.initial;
  r.moves = w.moves;
  // A forced first move emits the base of the state after step 0 (the initial one after a stay).
  if (o.force_first_move && !r.moves.empty()) r.moves[0] = 1;
  for (size_t t = 0; t < r.moves.size(); ++t) {
    if (r.moves[t] != 0) r.sequence += L.alphabet[static_cast<size_t>(1 + w.path[t] % L.n_base)];
  }
  return r;
}

Lattice random_lattice(int64_t n_base, int64_t state_len, int64_t T, uint32_t seed) {
  Lattice L;
  L.n_base = n_base;
  L.state_len = state_len;
  L.n_states = 1;
  for (int64_t i = 0; i < state_len; ++i) L.n_states *= n_base;
  L.n_edges = n_base + 1;
  L.T = T;
  L.alphabet = std::string("NACGT").substr(0, static_cast<size_t>(n_base + 1));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  L.scores.resize(static_cast<size_t>(T * L.n_states * L.n_edges));
  for (float& x : L.scores) x = u(rng);  // stays too: the search must use the blank score instead
  return L;
}

TEST(CrfBeamSearchReference, FastSearchEqualsThePlainReferenceOnRandomSmallLattices) {
  // (n_base, state_len, T): tiny geometries, and the real one (256 states) on short reads, where
  // the vector backends run.
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {2, 1, 12}, {2, 2, 14}, {2, 3, 10}, {3, 1, 12}, {3, 2, 10}, {4, 1, 12}, {4, 2, 10}, {4, 4, 24}};
  const std::vector<int> widths = {1, 2, 3, 5, 8, 32};
  const std::vector<float> cuts = {100.0f, 3.0f, 0.0f};  // koi's default, a cut that bites, none
  int compared = 0, ambiguous = 0, with_sequence = 0;
  for (const auto& [n_base, state_len, T] : shapes) {
    CrfGeometry g;
    g.n_base = static_cast<int>(n_base);
    g.state_len = static_cast<int>(state_len);
    g.alphabet = std::string("NACGT").substr(0, static_cast<size_t>(n_base + 1));
    for (int width : widths) {
      for (float cut : cuts) {
        for (uint32_t seed = 1; seed <= 4; ++seed) {
          const Lattice L = random_lattice(n_base, state_len, T, seed * 7919u + static_cast<uint32_t>(width));
          BeamOptions o;
          o.beam_width = width;
          o.beam_cut = cut;
          o.blank_score = seed % 2 == 0 ? 2.0f : 0.5f;
          o.force_first_move = seed % 3 != 0;
          const RefResult want = reference_beam(L, o);
          if (want.min_gap < kAmbiguous) {
            ++ambiguous;
            continue;
          }
          for (CrfBackend backend : {CrfBackend::kScalar, CrfBackend::kAuto}) {
            auto beam = CrfBeamSearch::create(g, o, backend);
            ASSERT_TRUE(beam.is_ok()) << beam.status().to_string();
            BeamCall call;
            ASSERT_TRUE(beam->decode({L.scores.data(), T, g.n_scores()}, call).is_ok());
            const std::string what = "n_base " + std::to_string(n_base) + " state_len " + std::to_string(state_len) +
                                     " width " + std::to_string(width) + " cut " + std::to_string(cut) + " seed " +
                                     std::to_string(seed) + " backend " + crf_backend_name(beam->backend());
            EXPECT_EQ(call.sequence, want.sequence) << what;
            EXPECT_EQ(call.moves, want.moves) << what;
            EXPECT_EQ(call.initial_state, want.initial_state) << what;
            EXPECT_NEAR(call.score, want.score, 1e-3 * std::max(1.0, std::abs(want.score))) << what;
            EXPECT_NEAR(call.log_partition, want.log_z, 1e-3 * std::max(1.0, std::abs(want.log_z))) << what;
          }
          ++compared;
          if (!want.sequence.empty()) ++with_sequence;
        }
      }
    }
  }
  RecordProperty("compared", compared);
  RecordProperty("ambiguous", ambiguous);
  RecordProperty("with_sequence", with_sequence);
  // The comparison is not vacuous: nearly every case is compared, and the calls carry bases.
  EXPECT_GT(compared, 500);
  EXPECT_LT(ambiguous * 10, compared + ambiguous) << ambiguous << " ambiguous of " << compared + ambiguous;
  EXPECT_GT(with_sequence * 10, compared * 9);
}

// The reference itself against exhaustive search on a lattice small enough to enumerate: with a
// beam that holds every hypothesis and no cut, it must return the best (initial state, bases).
TEST(CrfBeamSearchReference, ReferenceWithAFullBeamIsExhaustive) {
  const Lattice L = random_lattice(2, 2, 6, 42);
  const double blank = 0.5;
  // Sum of path weights per hypothesis (initial state, emitted states), by enumeration.
  std::vector<std::tuple<int64_t, std::vector<int64_t>, double>> hyps;
  int64_t n_paths = 1;
  for (int64_t t = 0; t < L.T; ++t) n_paths *= L.n_edges;
  for (int64_t s0 = 0; s0 < L.n_states; ++s0) {
    for (int64_t code = 0; code < n_paths; ++code) {
      int64_t state = s0, rest = code;
      double w = 0.0;
      std::vector<int64_t> entered;
      for (int64_t t = 0; t < L.T; ++t, rest /= L.n_edges) {
        if (rest % L.n_edges == 0) {
          w += blank;
          continue;
        }
        const int64_t d = L.move_dest(state, rest % L.n_edges - 1);
        w += L.at(t, d, L.move_edge(state));
        state = d;
        entered.push_back(d);
      }
      auto it = std::find_if(hyps.begin(), hyps.end(), [&](const auto& h) {
        return std::get<0>(h) == s0 && std::get<1>(h) == entered;
      });
      if (it == hyps.end()) {
        hyps.emplace_back(s0, entered, w);
      } else {
        std::get<2>(*it) = log_add(std::get<2>(*it), w);
      }
    }
  }
  const auto best = std::max_element(hyps.begin(), hyps.end(),
                                     [](const auto& a, const auto& b) { return std::get<2>(a) < std::get<2>(b); });
  BeamOptions o;
  o.beam_width = 4096;
  o.beam_cut = 0.0f;
  o.blank_score = static_cast<float>(blank);
  o.force_first_move = false;
  const RefResult r = reference_beam(L, o);
  EXPECT_EQ(r.initial_state, std::get<0>(*best));
  std::string bases;
  for (int64_t s : std::get<1>(*best)) bases += L.alphabet[static_cast<size_t>(1 + s % L.n_base)];
  EXPECT_EQ(r.sequence, bases);
  EXPECT_NEAR(r.score, std::get<2>(*best), 1e-9);
  EXPECT_GT(hyps.size(), 100u);
}

}  // namespace
}  // namespace escpod::demux
