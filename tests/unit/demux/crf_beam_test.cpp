#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "alloc_counter.hpp"
#include "crf_test_support.hpp"
#include "demux/crf_passes.hpp"
#include "escpod/demux/crf_decode.hpp"

namespace escpod::demux {
namespace {

CrfGeometry tiny(int n_base, int state_len) {
  CrfGeometry g;
  g.n_base = n_base;
  g.state_len = state_len;
  g.alphabet = std::string("NACGT").substr(0, static_cast<size_t>(n_base + 1));
  return g;
}

struct Greedy {
  std::string sequence;
  std::vector<uint8_t> moves;
  int32_t initial_state = 0;
  float score = 0;
};

// The beam-of-one search written out: start at the best beta_0 state, then at every step take the
// best of (moves by base, then the stay) by score + beta_{t+1}, first on ties.
Greedy greedy_path(const CrfGeometry& g, const std::vector<float>& s, float blank) {
  const detail::CrfDims d = detail::crf_dims(g);
  const int64_t T = static_cast<int64_t>(s.size()) / d.n_scores, row = detail::crf_row_floats(d);
  std::vector<float> alpha(static_cast<size_t>((T + 1) * row)), beta(alpha.size()),
      work(static_cast<size_t>(detail::crf_work_floats(d, T)));
  detail::crf_forward_backward_scalar(d, test::view_of(s, g), &blank, alpha.data(), beta.data(), work.data());
  Greedy out;
  int64_t state = 0;
  for (int64_t c = 1; c < d.n_states; ++c)
    if (beta[static_cast<size_t>(c)] > beta[static_cast<size_t>(state)]) state = c;
  out.initial_state = static_cast<int32_t>(state);
  for (int64_t t = 0; t < T; ++t) {
    const float* step = s.data() + t * d.n_scores;
    const float* guide = beta.data() + (t + 1) * row;
    float best_rank = -INFINITY, best_score = 0;
    int64_t best_dest = -1;
    for (int64_t b = 0; b < d.n_base; ++b) {
      const int64_t dest = (state * d.n_base) % d.n_states + b;
      const float sc = out.score + step[dest * d.n_edges + 1 + state / d.n_prev];
      if (sc + guide[dest] > best_rank) {
        best_rank = sc + guide[dest];
        best_score = sc;
        best_dest = dest;
      }
    }
    const float stay = out.score + blank;
    if (stay + guide[state] > best_rank) {
      out.score = stay;
      out.moves.push_back(0);
      continue;
    }
    out.score = best_score;
    state = best_dest;
    out.moves.push_back(1);
    out.sequence += g.alphabet[static_cast<size_t>(1 + state % d.n_base)];
  }
  return out;
}

TEST(CrfBeamSearch, WidthOneEqualsTheGreedyPath) {
  for (const CrfGeometry& g : {CrfGeometry{}, tiny(2, 2), tiny(4, 3)}) {
    for (uint32_t seed = 1; seed <= 5; ++seed) {
      const std::vector<float> s = test::random_scores(g, g.n_base == 4 && g.state_len == 4 ? 250 : 40, seed);
      const Greedy want = greedy_path(g, s, 2.0f);
      BeamOptions opt;
      opt.beam_width = 1;
      opt.force_first_move = false;
      auto beam = CrfBeamSearch::create(g, opt, CrfBackend::kScalar);
      ASSERT_TRUE(beam.is_ok()) << beam.status().to_string();
      BeamCall call;
      ASSERT_TRUE(beam->decode(test::view_of(s, g), call).is_ok());
      EXPECT_EQ(call.sequence, want.sequence) << "n_base " << g.n_base << " state_len " << g.state_len << " seed " << seed;
      EXPECT_EQ(call.moves, want.moves);
      EXPECT_EQ(call.initial_state, want.initial_state);
      EXPECT_NEAR(call.score, want.score, 1e-3 * std::max(1.0f, std::abs(want.score)));
      EXPECT_GT(want.sequence.size(), 3u);
    }
  }
}

double logsumexp(const std::vector<double>& v) {
  double m = -INFINITY;
  for (double x : v) m = std::max(m, x);
  double sum = 0;
  for (double x : v) sum += std::exp(x - m);
  return m + std::log(sum);
}

// With a beam wide enough for every hypothesis and no score cut, the search is exhaustive: its
// answer is the (initial state, emitted bases) whose paths' summed weight is largest.
TEST(CrfBeamSearch, FullBeamEqualsExhaustiveSearch) {
  for (const auto& [n_base, state_len, T] : std::vector<std::tuple<int, int, int64_t>>{{2, 1, 6}, {2, 2, 5}, {3, 1, 4}}) {
    const CrfGeometry g = tiny(n_base, state_len);
    const int64_t S = g.n_states(), E = g.n_edges(), n = g.n_base, Q = S / n;
    for (uint32_t seed = 1; seed <= 8; ++seed) {
      const float blank = 0.7f;
      const std::vector<float> s = test::random_scores(g, T, seed, -2.0f, 2.0f, blank);
      std::map<std::pair<int64_t, std::string>, std::vector<double>> hyp;
      int64_t n_choices = 1;
      for (int64_t t = 0; t < T; ++t) n_choices *= E;
      for (int64_t s0 = 0; s0 < S; ++s0)
        for (int64_t code = 0; code < n_choices; ++code) {
          int64_t state = s0, rest = code;
          double w = 0;
          std::string bases;
          for (int64_t t = 0; t < T; ++t, rest /= E) {
            const float* row = s.data() + t * g.n_scores();
            if (rest % E == 0) {
              w += blank;
              continue;
            }
            const int64_t dest = (state * n) % S + (rest % E - 1);
            w += row[dest * E + 1 + state / Q];
            state = dest;
            bases += g.alphabet[static_cast<size_t>(1 + dest % n)];
          }
          hyp[{s0, bases}].push_back(w);
        }
      double best = -INFINITY;
      std::pair<int64_t, std::string> best_key;
      for (const auto& [key, ws] : hyp) {
        const double v = logsumexp(ws);
        if (v > best) {
          best = v;
          best_key = key;
        }
      }
      BeamOptions opt;
      opt.beam_width = 1024;
      opt.beam_cut = 0.0f;
      opt.blank_score = blank;
      opt.force_first_move = false;
      auto beam = CrfBeamSearch::create(g, opt);
      ASSERT_TRUE(beam.is_ok());
      BeamCall call;
      ASSERT_TRUE(beam->decode(test::view_of(s, g), call).is_ok());
      EXPECT_EQ(call.initial_state, best_key.first) << "n_base " << n_base << " seed " << seed;
      EXPECT_EQ(call.sequence, best_key.second) << "n_base " << n_base << " seed " << seed;
      EXPECT_NEAR(call.score, best, 1e-4);
      int moves = 0;
      for (uint8_t m : call.moves) moves += m;
      EXPECT_EQ(static_cast<size_t>(moves), call.sequence.size());
    }
  }
}

// Real geometry: vector and scalar backends give the same call, twice in a row, with a quality per
// base, the first step counted as a move, and no allocation once warmed up.
TEST(CrfBeamSearch, RealGeometryDeterministicAcrossBackends) {
  const CrfGeometry g;
  auto scalar = CrfBeamSearch::create(g, {}, CrfBackend::kScalar);
  auto fast = CrfBeamSearch::create(g);
  ASSERT_TRUE(scalar.is_ok());
  ASSERT_TRUE(fast.is_ok());
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const std::vector<float> s = test::random_scores(g, 260, seed);
    BeamCall a, b, c;
    ASSERT_TRUE(scalar->decode(test::view_of(s, g), a).is_ok());
    ASSERT_TRUE(fast->decode(test::view_of(s, g), b).is_ok());
    c.sequence.reserve(300);
    c.quality.reserve(300);
    c.moves.reserve(300);
    const size_t before = test::allocation_count();
    ASSERT_TRUE(fast->decode(test::view_of(s, g), c).is_ok());
    EXPECT_EQ(test::allocation_count() - before, 0u);
    EXPECT_EQ(a.sequence, b.sequence) << "seed " << seed;
    EXPECT_EQ(a.moves, b.moves);
    EXPECT_EQ(b.sequence, c.sequence);
    EXPECT_EQ(b.quality, c.quality);
    EXPECT_EQ(b.score, c.score);
    ASSERT_EQ(b.quality.size(), b.sequence.size());
    EXPECT_EQ(b.moves[0], 1);
    int moves = 0;
    for (uint8_t m : b.moves) moves += m;
    EXPECT_EQ(static_cast<size_t>(moves), b.sequence.size());
    double sum = 0;
    for (uint8_t q : b.quality) {
      EXPECT_GE(q, 1);
      EXPECT_LE(q, 90);
      sum += q;
    }
    EXPECT_FLOAT_EQ(b.baseq, static_cast<float>(sum / static_cast<double>(b.quality.size())));
    EXPECT_GT(b.sequence.size(), 20u);
  }
}

// Through the public API: a beam search handed its guides by the posterior decode of the same
// scores (as the fused head runs them) makes the call of a beam search on its own, bit for bit,
// on every backend and both lattice domains; guides left for other scores are not used.
TEST(CrfBeamSearch, GuidesFromThePosteriorDecodeGiveTheSameCall) {
  const CrfGeometry g;
  for (const CrfBackend backend : {CrfBackend::kScalar, CrfBackend::kAvx2, CrfBackend::kAvx512}) {
    if (!crf_backend_available(backend, g)) continue;
    auto alone = CrfBeamSearch::create(g, {}, backend);
    auto guided = CrfBeamSearch::create(g, {}, backend);
    auto posterior = CrfPosteriorDecoder::create(g, backend);
    ASSERT_TRUE(alone.is_ok() && guided.is_ok() && posterior.is_ok());
    for (const float range : {5.0f, 12.0f}) {
      for (uint32_t seed = 1; seed <= 3; ++seed) {
        const std::vector<float> s = test::random_scores(g, 210, seed, -range, range);
        const std::vector<float> other = test::random_scores(g, 210, seed + 50, -range, range);
        BeamCall a, b, c, d;
        PosteriorCall p, q;
        ASSERT_TRUE(alone->decode(test::view_of(s, g), a).is_ok());
        ASSERT_TRUE(posterior->decode(test::view_of(s, g), p, &*guided).is_ok());
        ASSERT_TRUE(guided->decode(test::view_of(s, g), b).is_ok());
        ASSERT_TRUE(posterior->decode(test::view_of(s, g), q).is_ok());
        EXPECT_EQ(p.step_edge, q.step_edge);
        EXPECT_EQ(p.log_partition, q.log_partition);
        const std::string what = std::string(crf_backend_name(backend)) + " seed " + std::to_string(seed);
        EXPECT_EQ(a.sequence, b.sequence) << what;
        EXPECT_EQ(a.quality, b.quality) << what;
        EXPECT_EQ(a.moves, b.moves) << what;
        EXPECT_EQ(a.score, b.score) << what;
        EXPECT_EQ(a.log_partition, b.log_partition) << what;
        // Guides left for `s`, then a decode of `other`: its own pass runs.
        ASSERT_TRUE(posterior->decode(test::view_of(s, g), p, &*guided).is_ok());
        ASSERT_TRUE(guided->decode(test::view_of(other, g), c).is_ok());
        ASSERT_TRUE(alone->decode(test::view_of(other, g), d).is_ok());
        EXPECT_EQ(c.sequence, d.sequence) << what;
        EXPECT_EQ(c.quality, d.quality) << what;
        EXPECT_EQ(c.log_partition, d.log_partition) << what;
      }
    }
  }
}

// A wider beam never finds a worse hypothesis than the greedy one on these reads.
TEST(CrfBeamSearch, WiderBeamScoresAtLeastTheGreedy) {
  const CrfGeometry g;
  BeamOptions one;
  one.beam_width = 1;
  auto narrow = CrfBeamSearch::create(g, one);
  auto wide = CrfBeamSearch::create(g);
  ASSERT_TRUE(narrow.is_ok());
  ASSERT_TRUE(wide.is_ok());
  for (uint32_t seed = 10; seed < 14; ++seed) {
    const std::vector<float> s = test::random_scores(g, 200, seed);
    BeamCall a, b;
    ASSERT_TRUE(narrow->decode(test::view_of(s, g), a).is_ok());
    ASSERT_TRUE(wide->decode(test::view_of(s, g), b).is_ok());
    EXPECT_GE(b.score, a.score - 1e-3f) << "seed " << seed;
  }
}

TEST(CrfBeamSearch, RefusesBadOptions) {
  BeamOptions opt;
  opt.beam_width = 0;
  EXPECT_FALSE(CrfBeamSearch::create(CrfGeometry{}, opt).is_ok());
  opt.beam_width = 5000;
  EXPECT_FALSE(CrfBeamSearch::create(CrfGeometry{}, opt).is_ok());
  opt = BeamOptions{};
  opt.blank_score = NAN;
  EXPECT_FALSE(CrfBeamSearch::create(CrfGeometry{}, opt).is_ok());
  EXPECT_FALSE(CrfBeamSearch::create(tiny(2, 1), BeamOptions{}, CrfBackend::kAvx2).is_ok());
}

}  // namespace
}  // namespace escpod::demux
