#include "escpod/demux/crf_lattice.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "alloc_counter.hpp"
#include "crf_test_support.hpp"
#include "demux/crf_lattice_access.hpp"
#include "demux/crf_passes.hpp"

namespace escpod::demux {
namespace {

double logsumexp(const std::vector<double>& v) {
  double m = -INFINITY;
  for (double x : v) m = std::max(m, x);
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

// Every path of a tiny lattice enumerated: emitted sequence -> log of the summed path weights.
std::map<std::string, double> brute_force(const CrfGeometry& g, const std::vector<float>& s, int64_t T,
                                          double* log_z) {
  const int64_t S = g.n_states(), E = g.n_edges(), n = g.n_base, Q = S / n;
  std::map<std::string, std::vector<double>> paths;
  std::vector<double> all;
  // Each path: initial state and T choices among stay / move with base b.
  int64_t n_choices = 1;
  for (int64_t t = 0; t < T; ++t) n_choices *= E;
  for (int64_t s0 = 0; s0 < S; ++s0) {
    for (int64_t code = 0; code < n_choices; ++code) {
      int64_t state = s0, rest = code;
      double w = 0;
      std::string emitted;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t choice = rest % E;
        rest /= E;
        const float* row = s.data() + t * g.n_scores();
        if (choice == 0) {
          w += row[state * E];
        } else {
          const int64_t b = choice - 1;
          const int64_t dest = (state * n) % S + b;
          w += row[dest * E + 1 + state / Q];
          state = dest;
          emitted += g.alphabet[static_cast<size_t>(1 + b)];
        }
      }
      paths[emitted].push_back(w);
      all.push_back(w);
    }
  }
  *log_z = logsumexp(all);
  std::map<std::string, double> out;
  for (const auto& [e, ws] : paths) out[e] = logsumexp(ws);
  return out;
}

// The constrained forward equals brute-force enumeration for every emission (lengths 0..T, so
// shorter than state_len too), and the probabilities over all emissions sum to 1; on two tiny
// geometries and several random score sets.
TEST(CrfLattice, EqualsBruteForceAndSumsToOne) {
  for (const auto& [n_base, state_len, T] : std::vector<std::tuple<int, int, int64_t>>{{2, 2, 5}, {3, 1, 4}, {2, 3, 4}}) {
    CrfGeometry g;
    g.n_base = n_base;
    g.state_len = state_len;
    g.alphabet = std::string("NACGT").substr(0, static_cast<size_t>(n_base + 1));
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      const std::vector<float> s = test::random_scores(g, T, seed, -2.0f, 2.0f, 0.3f);
      double log_z = 0;
      const auto brute = brute_force(g, s, T, &log_z);
      std::vector<BarcodeRef> refs;
      for (const auto& [e, w] : brute) refs.push_back({std::to_string(refs.size()), e});
      auto scorer = detail::CrfRefScorerAccess::build_any_length(g, refs);
      ASSERT_TRUE(scorer.is_ok()) << scorer.status().to_string();
      // logZ as the decoder computes it.
      auto decoder = CrfPosteriorDecoder::create(g);
      ASSERT_TRUE(decoder.is_ok());
      PosteriorCall call;
      ASSERT_TRUE(decoder->decode(test::view_of(s, g), call).is_ok());
      EXPECT_NEAR(call.log_partition, log_z, 1e-4);
      std::vector<float> logp(refs.size());
      ASSERT_TRUE(scorer->score(test::view_of(s, g), call.log_partition, logp).is_ok());
      double total = 0;
      size_t i = 0;
      for (const auto& [e, w] : brute) {
        EXPECT_NEAR(logp[i], w - log_z, 1e-4) << "emission '" << e << "' n_base " << n_base << " seed " << seed;
        total += std::exp(static_cast<double>(logp[i]));
        ++i;
      }
      EXPECT_NEAR(total, 1.0, 1e-4) << "n_base " << n_base << " state_len " << state_len;
      EXPECT_GT(brute.size(), 20u);
    }
  }
}

// On the real geometry: log-probabilities are <= 0, the shared trie is smaller than separate
// chains, and scoring allocates nothing after the first call.
TEST(CrfLattice, RealGeometryPanel) {
  const CrfGeometry g;
  std::mt19937 rng(11);
  std::vector<BarcodeRef> refs;
  const char* kSym = "ACGT";
  for (int r = 0; r < 16; ++r) {
    std::string seq;
    for (int k = 0; k < 26; ++k) seq += kSym[rng() % 4];
    refs.push_back({std::to_string(r), seq});
  }
  auto scorer = CrfRefScorer::create(g, refs);
  ASSERT_TRUE(scorer.is_ok());
  EXPECT_EQ(scorer->n_refs(), 16u);
  // Root 256 + the 16 chains; chains share their first bases (a 4-base prefix has 64+16+4+1
  // cells when alone), so fewer than 256 + 16 * (85 + 22).
  EXPECT_LT(scorer->n_cells(), 256u + 16u * 107u);
  EXPECT_GT(scorer->n_cells(), 256u + 16u * 22u);
  const std::vector<float> s = test::random_scores(g, 200, 5);
  auto decoder = CrfPosteriorDecoder::create(g);
  ASSERT_TRUE(decoder.is_ok());
  PosteriorCall call;
  ASSERT_TRUE(decoder->decode(test::view_of(s, g), call).is_ok());
  std::vector<float> logp(refs.size());
  ASSERT_TRUE(scorer->score(test::view_of(s, g), call.log_partition, logp).is_ok());
  const size_t before = test::allocation_count();
  ASSERT_TRUE(scorer->score(test::view_of(s, g), call.log_partition, logp).is_ok());
  EXPECT_EQ(test::allocation_count() - before, 0u);
  for (float lp : logp) {
    EXPECT_LE(lp, 1e-4f);
    EXPECT_TRUE(std::isfinite(lp));
  }
  // The scalar log-sum-exp kernel gives the same values.
  auto scalar = CrfRefScorer::create(g, refs, CrfBackend::kScalar);
  ASSERT_TRUE(scalar.is_ok());
  std::vector<float> ref_logp(refs.size());
  ASSERT_TRUE(scalar->score(test::view_of(s, g), call.log_partition, ref_logp).is_ok());
  for (size_t r = 0; r < refs.size(); ++r) EXPECT_NEAR(logp[r], ref_logp[r], 1e-5 * std::abs(call.log_partition));
  std::vector<float> wrong(3);
  EXPECT_FALSE(scorer->score(test::view_of(s, g), call.log_partition, wrong).is_ok());
}

TEST(CrfLattice, RefusesShortReferencesAndForeignSymbols) {
  const CrfGeometry g;
  auto short_ref = CrfRefScorer::create(g, std::vector<BarcodeRef>{{"a", "ACGTACGT"}, {"b", "ACG"}});
  ASSERT_FALSE(short_ref.is_ok());
  EXPECT_NE(short_ref.status().message().find("(b)"), std::string::npos) << short_ref.status().message();
  auto foreign = CrfRefScorer::create(g, std::vector<BarcodeRef>{{"a", "ACGTNCGT"}});
  ASSERT_FALSE(foreign.is_ok());
  EXPECT_NE(foreign.status().message().find("'N' at position 4"), std::string::npos) << foreign.status().message();
  EXPECT_TRUE(CrfRefScorer::create(g, std::vector<BarcodeRef>{{"a", "acgt"}}).is_ok());
}

TEST(CrfLattice, ReportPicksFirstBestAndMarginAgainstBestOther) {
  const std::vector<float> logp = {-3.0f, -0.5f, -0.5f, -7.0f};
  CrfRefReport r = crf_ref_report(logp, 0);
  EXPECT_EQ(r.crf_best, 1);
  EXPECT_FLOAT_EQ(r.crf_logp, -3.0f);
  EXPECT_TRUE(r.has_margin);
  EXPECT_FLOAT_EQ(r.crf_margin, -2.5f);
  r = crf_ref_report(logp, 2);
  EXPECT_EQ(r.crf_best, 1);
  EXPECT_FLOAT_EQ(r.crf_margin, 0.0f);
  const std::vector<float> one = {-0.1f};
  r = crf_ref_report(one, 0);
  EXPECT_FALSE(r.has_margin);
  EXPECT_EQ(r.crf_best, 0);
}

TEST(CrfLattice, GatesRejectInTheDocumentedOrder) {
  BarcodeMatch m;
  m.best_idx = 0;
  m.best_dist = 2;
  m.second_dist = 3;  // margin 1
  CrfRefReport lat;
  lat.crf_logp = std::log(0.4f);
  lat.crf_margin = 0.2f;
  lat.has_margin = true;
  lat.crf_best = 0;
  CrfGates gates;
  EXPECT_EQ(apply_crf_gates(gates, m, lat, 30.0f), CrfGateResult::kPass);
  gates.min_margin = 2;
  gates.min_crf_margin = 1.0;
  gates.min_crf_prob = 0.5;
  gates.min_baseq = 50.0;
  EXPECT_EQ(apply_crf_gates(gates, m, lat, 30.0f), CrfGateResult::kEditMargin);
  gates.min_margin = 1;  // margin 1 is not < 1
  EXPECT_EQ(apply_crf_gates(gates, m, lat, 30.0f), CrfGateResult::kCrfMargin);
  gates.min_crf_margin = 0.2;
  EXPECT_EQ(apply_crf_gates(gates, m, lat, 30.0f), CrfGateResult::kCrfProb);
  gates.min_crf_prob = 0.4;
  EXPECT_EQ(apply_crf_gates(gates, m, lat, 30.0f), CrfGateResult::kBaseq);
  EXPECT_EQ(apply_crf_gates(gates, m, lat, 50.0f), CrfGateResult::kPass);
  EXPECT_EQ(apply_crf_gates(gates, m, lat, std::nullopt), CrfGateResult::kPass);
  // Single reference: no edit or CRF margin, so those gates pass; the probability gate still applies.
  BarcodeMatch single = m;
  single.second_dist = -1;
  CrfRefReport lone = lat;
  lone.has_margin = false;
  lone.crf_margin = -9.0f;
  gates.min_margin = 5;
  gates.min_crf_margin = 5.0;
  EXPECT_EQ(apply_crf_gates(gates, single, lone, 60.0f), CrfGateResult::kPass);
  gates.min_crf_prob = 0.9;
  EXPECT_EQ(apply_crf_gates(gates, single, lone, 60.0f), CrfGateResult::kCrfProb);
  EXPECT_STREQ(crf_gate_result_name(CrfGateResult::kCrfProb), "crf_prob");
  // min_margin 0 keeps exact ties.
  BarcodeMatch tie = m;
  tie.second_dist = 2;
  EXPECT_EQ(apply_crf_gates(CrfGates{}, tie, std::nullopt, std::nullopt), CrfGateResult::kPass);
}

}  // namespace
}  // namespace escpod::demux
