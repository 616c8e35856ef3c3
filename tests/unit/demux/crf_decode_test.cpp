#include "escpod/demux/crf_decode.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "alloc_counter.hpp"
#include "crf_test_support.hpp"
#include "demux/crf_passes.hpp"
#include "test_data.hpp"

namespace escpod::demux {
namespace {

nlohmann::json load_golden() {
  const auto path = test::shared_data("escapepod/crf/crf_golden.json");
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot open " << path;
    return {};
  }
  return nlohmann::json::parse(in);
}

std::vector<CrfBackend> all_backends() {
  return {CrfBackend::kScalar, CrfBackend::kAvx2, CrfBackend::kAvx512};
}

// Every backend reproduces the golden "small" case exactly: per-step winning flat edge, the path
// symbols derived from it and the sequences.
TEST(CrfPosteriorDecode, ReproducesGoldenOnEveryBackend) {
  const nlohmann::json golden = load_golden();
  ASSERT_TRUE(golden.contains("small"));
  const auto& f = golden["formula"];
  const int64_t T = f["T"], N = f["N"], C = f["C"];
  const std::vector<float> scores = test::golden_small_scores(T, N, C);
  const auto& small = golden["small"];
  const std::vector<int> tb = small["traceback_argmax_flat"].get<std::vector<int>>();
  const std::vector<int> path = small["path_flat"].get<std::vector<int>>();
  const CrfGeometry g;
  ASSERT_EQ(C, g.n_scores());
  int backends_run = 0;
  for (const CrfBackend backend : all_backends()) {
    if (!crf_backend_available(backend, g)) {
      std::printf("[crf] %s not available on this CPU: not run\n", crf_backend_name(backend));
      continue;
    }
    ++backends_run;
    auto decoder = CrfPosteriorDecoder::create(g, backend);
    ASSERT_TRUE(decoder.is_ok()) << decoder.status().to_string();
    for (int64_t n = 0; n < N; ++n) {
      PosteriorCall call;
      const CrfScoresView view{scores.data() + n * C, T, N * C};
      ASSERT_TRUE(decoder->decode(view, call).is_ok());
      EXPECT_EQ(call.sequence, small["seqs"][static_cast<size_t>(n)].get<std::string>())
          << crf_backend_name(backend) << " read " << n;
      for (int64_t t = 0; t < T; ++t) {
        const auto i = static_cast<size_t>(t * N + n);
        const int32_t e = call.step_edge[static_cast<size_t>(t)];
        EXPECT_EQ(e, tb[i]) << crf_backend_name(backend) << " read " << n << " step " << t;
        EXPECT_EQ(e % 5 != 0 ? 1 + (e / 5) % 4 : 0, path[i]) << "step " << t;
      }
      EXPECT_TRUE(std::isfinite(call.path_score));
      EXPECT_LT(call.path_score, 0.0f);
      EXPECT_FLOAT_EQ(call.mean_logpost, call.path_score / static_cast<float>(T));
    }
  }
  EXPECT_GE(backends_run, 1);
}

struct Checksum {
  double sum = 0, min = 1e300, max = -1e300;
  void add(float v) {
    sum += v;
    min = std::min(min, static_cast<double>(v));
    max = std::max(max, static_cast<double>(v));
  }
};

// The log-semiring alpha/beta of every backend against the golden checksums (sum, min, max over
// [T + 1, N, 256]); the golden's own float32 kernel was within 2e-5 of float64.
TEST(CrfPosteriorDecode, ForwardBackwardMatchGoldenChecksums) {
  const nlohmann::json golden = load_golden();
  ASSERT_TRUE(golden.contains("small"));
  const auto& f = golden["formula"];
  const int64_t T = f["T"], N = f["N"], C = f["C"];
  const std::vector<float> scores = test::golden_small_scores(T, N, C);
  const CrfGeometry g;
  const detail::CrfDims d = detail::crf_dims(g);
  const int64_t row = detail::crf_row_floats(d);
  for (const CrfBackend backend : all_backends()) {
    if (!crf_backend_available(backend, g)) continue;
    const detail::CrfPasses passes = detail::crf_passes(backend);
    Checksum ca, cb;
    std::vector<float> alpha(static_cast<size_t>((T + 1) * row)), beta(alpha.size()),
        work(static_cast<size_t>(detail::crf_work_floats(d, T)));
    for (int64_t n = 0; n < N; ++n) {
      const CrfScoresView view{scores.data() + n * C, T, N * C};
      const float log_z = passes.forward_backward(d, view, nullptr, alpha.data(), beta.data(), work.data());
      for (int64_t t = 0; t <= T; ++t)
        for (int64_t s = 0; s < d.n_states; ++s) {
          ca.add(alpha[static_cast<size_t>(t * row + s)]);
          cb.add(beta[static_cast<size_t>(t * row + s)]);
        }
      // logZ from the forward equals logsumexp_s(beta_0[s]) (alpha_0 = 0).
      EXPECT_NEAR(log_z, detail::crf_logsumexp(beta.data(), static_cast<int>(d.n_states)), 1e-3);
    }
    const auto& ga = golden["small"]["checksums"]["alpha_log"];
    const auto& gb = golden["small"]["checksums"]["beta_log"];
    const char* name = crf_backend_name(backend);
    EXPECT_NEAR(ca.sum, ga["sum"].get<double>(), 1e-5 * std::abs(ga["sum"].get<double>())) << name;
    EXPECT_NEAR(ca.min, ga["min"].get<double>(), 1e-4) << name;
    EXPECT_NEAR(ca.max, ga["max"].get<double>(), 1e-3) << name;
    EXPECT_NEAR(cb.sum, gb["sum"].get<double>(), 1e-5 * std::abs(gb["sum"].get<double>())) << name;
    EXPECT_NEAR(cb.min, gb["min"].get<double>(), 1e-4) << name;
    EXPECT_NEAR(cb.max, gb["max"].get<double>(), 1e-3) << name;
  }
}

// The posterior decode's first pass, handed a lattice, leaves there exactly (bit for bit) what
// forward_backward computes with the same stay score, in the scaled-probability domain (scores
// within +-5) and the log domain (+-12) of every backend; a stay differing anywhere (one step
// of one state) leaves it unfilled. The decode itself is unchanged by the lattice.
TEST(CrfPosteriorDecode, FirstPassLeavesTheBeamGuidesBitForBit) {
  const CrfGeometry g;
  const detail::CrfDims d = detail::crf_dims(g);
  const int64_t row = detail::crf_row_floats(d), T = 230;
  int filled = 0;
  for (const CrfBackend backend : all_backends()) {
    if (!crf_backend_available(backend, g)) continue;
    const detail::CrfPasses passes = detail::crf_passes(backend);
    for (const float range : {5.0f, 12.0f}) {
      for (const bool odd_stay : {false, true}) {
        std::vector<float> s = test::random_scores(g, T, 7, -range, range, 2.0f);
        if (odd_stay) s[static_cast<size_t>(101 * d.n_scores + 37 * d.n_edges)] = 2.5f;
        const CrfScoresView view = test::view_of(s, g);
        const auto rows = static_cast<size_t>((T + 1) * row);
        std::vector<float> alpha(rows), beta(rows), work(static_cast<size_t>(detail::crf_work_floats(d, T)));
        std::vector<float> want_a(rows), want_b(rows), got_a(rows, -1.0f), got_b(rows, -1.0f), value(T), value2(T);
        std::vector<int32_t> edge(T), edge2(T);
        const float stay = 2.0f;
        const float want_z = passes.forward_backward(d, view, &stay, want_a.data(), want_b.data(), work.data());
        detail::CrfLogLattice lattice{got_a.data(), got_b.data(), stay};
        const float z1 = passes.posterior_decode(d, view, alpha.data(), beta.data(), work.data(), edge.data(),
                                                 value.data(), &lattice);
        const float z2 = passes.posterior_decode(d, view, alpha.data(), beta.data(), work.data(), edge2.data(),
                                                 value2.data(), nullptr);
        const std::string what = std::string(crf_backend_name(backend)) + " range " + std::to_string(range);
        EXPECT_EQ(z1, z2) << what;
        EXPECT_EQ(edge, edge2) << what;
        EXPECT_EQ(value, value2) << what;
        ASSERT_EQ(lattice.filled, !odd_stay) << what;
        if (!lattice.filled) continue;
        ++filled;
        EXPECT_EQ(lattice.log_z, want_z) << what;
        for (int64_t t = 0; t <= T; ++t) {
          for (int64_t c = 0; c < d.n_states; ++c) {
            const auto i = static_cast<size_t>(t * row + c);
            ASSERT_EQ(got_a[i], want_a[i]) << what << " alpha t " << t << " state " << c;
            ASSERT_EQ(got_b[i], want_b[i]) << what << " beta t " << t << " state " << c;
          }
        }
      }
    }
  }
  EXPECT_GE(filled, 2);  // the scalar backend at least, in both domains
}

// Vector backends against the scalar reference on encoder-like reads of the real geometry: the
// same per-step edges and sequence, logZ and path score within float32 rounding.
TEST(CrfPosteriorDecode, SimdMatchesScalarOnRandomReads) {
  const CrfGeometry g;
  auto scalar = CrfPosteriorDecoder::create(g, CrfBackend::kScalar);
  ASSERT_TRUE(scalar.is_ok());
  int compared = 0;
  for (const CrfBackend backend : {CrfBackend::kAvx2, CrfBackend::kAvx512}) {
    if (!crf_backend_available(backend, g)) continue;
    auto simd = CrfPosteriorDecoder::create(g, backend);
    ASSERT_TRUE(simd.is_ok());
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      const int64_t T = 200 + 20 * seed;
      const std::vector<float> s = test::random_scores(g, T, seed);
      PosteriorCall a, b;
      ASSERT_TRUE(scalar->decode(test::view_of(s, g), a).is_ok());
      ASSERT_TRUE(simd->decode(test::view_of(s, g), b).is_ok());
      EXPECT_EQ(a.sequence, b.sequence) << crf_backend_name(backend) << " seed " << seed;
      EXPECT_EQ(a.step_edge, b.step_edge) << crf_backend_name(backend) << " seed " << seed;
      EXPECT_NEAR(a.log_partition, b.log_partition, 1e-5 * std::abs(a.log_partition));
      // Each step's log-posterior carries the rounding of alpha + S + beta at |logZ| (~500:
      // ulp 6e-5) in the log-domain reference; the vector path works in a scaled probability domain.
      EXPECT_NEAR(a.path_score, b.path_score, 2e-5 * std::abs(a.path_score));
      EXPECT_GT(a.sequence.size(), 10u);
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

// Scores beyond the vector kernels' scaled-probability range (|score| > 9.2) take their
// log-domain path: still the scalar reference's call.
TEST(CrfPosteriorDecode, SimdLogDomainPathForHugeScores) {
  const CrfGeometry g;
  auto scalar = CrfPosteriorDecoder::create(g, CrfBackend::kScalar);
  ASSERT_TRUE(scalar.is_ok());
  std::vector<float> s = test::random_scores(g, 120, 77);
  for (float& v : s) v *= 20.0f;  // [-100, 100], stays 40
  PosteriorCall want;
  ASSERT_TRUE(scalar->decode(test::view_of(s, g), want).is_ok());
  int compared = 0;
  for (const CrfBackend backend : {CrfBackend::kAvx2, CrfBackend::kAvx512}) {
    if (!crf_backend_available(backend, g)) continue;
    auto simd = CrfPosteriorDecoder::create(g, backend);
    ASSERT_TRUE(simd.is_ok());
    PosteriorCall got;
    ASSERT_TRUE(simd->decode(test::view_of(s, g), got).is_ok());
    EXPECT_EQ(got.sequence, want.sequence) << crf_backend_name(backend);
    EXPECT_EQ(got.step_edge, want.step_edge) << crf_backend_name(backend);
    EXPECT_NEAR(got.log_partition, want.log_partition, 1e-5 * std::abs(want.log_partition));
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

// Exact ties break to the lowest flat index on every backend: with every score equal, every edge
// of every step ties, so each step picks edge 0 of state 0 (a stay) and nothing is emitted.
TEST(CrfPosteriorDecode, ExactTiesBreakToTheLowestFlatIndex) {
  const CrfGeometry g;
  const std::vector<float> s(static_cast<size_t>(50 * g.n_scores()), 2.0f);
  for (const CrfBackend backend : all_backends()) {
    if (!crf_backend_available(backend, g)) continue;
    auto decoder = CrfPosteriorDecoder::create(g, backend);
    ASSERT_TRUE(decoder.is_ok());
    PosteriorCall call;
    ASSERT_TRUE(decoder->decode(test::view_of(s, g), call).is_ok());
    EXPECT_EQ(call.sequence, "") << crf_backend_name(backend);
    EXPECT_EQ(call.step_edge, std::vector<int32_t>(50, 0)) << crf_backend_name(backend);
    // logZ = T * (2 + ln 5) + ln 256: every state has 5 equal edges.
    EXPECT_NEAR(call.log_partition, 50 * (2.0 + std::log(5.0)) + std::log(256.0), 1e-3) << crf_backend_name(backend);
  }
}

// The max-semiring path over log-posteriors against brute force on a tiny lattice: the winning
// value is the best path's total, and the per-step edges form that path.
TEST(CrfPosteriorDecode, TinyLatticeEdgesFormTheBestPath) {
  CrfGeometry g;
  g.n_base = 2;
  g.state_len = 2;
  g.alphabet = "NAB";
  const int64_t T = 5;
  auto decoder = CrfPosteriorDecoder::create(g);
  ASSERT_TRUE(decoder.is_ok());
  EXPECT_EQ(decoder->backend(), CrfBackend::kScalar);
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const std::vector<float> s = test::random_scores(g, T, seed, -3.0f, 3.0f, 0.5f);
    PosteriorCall call;
    ASSERT_TRUE(decoder->decode(test::view_of(s, g), call).is_ok());
    // The edges chain: each move's source is the previous step's destination.
    const int64_t E = g.n_edges(), Q = g.n_states() / g.n_base;
    for (int64_t t = 1; t < T; ++t) {
      const int32_t prev = call.step_edge[static_cast<size_t>(t - 1)], cur = call.step_edge[static_cast<size_t>(t)];
      const int64_t c = cur / E, e = cur % E;
      const int64_t src = e == 0 ? c : (e - 1) * Q + c / g.n_base;
      EXPECT_EQ(src, prev / E) << "seed " << seed << " step " << t;
    }
    EXPECT_NEAR(call.mean_logpost * static_cast<float>(T), call.path_score, 1e-5);
  }
}

TEST(CrfPosteriorDecode, RefusesBadGeometryAndViews) {
  CrfGeometry g;
  g.alphabet = "NACG";
  EXPECT_FALSE(CrfPosteriorDecoder::create(g).is_ok());
  g = CrfGeometry{};
  g.n_base = 1;
  EXPECT_FALSE(validate_geometry(g).is_ok());
  g = CrfGeometry{};
  g.alphabet = "NACGA";
  EXPECT_FALSE(validate_geometry(g).is_ok());
  CrfGeometry tiny;
  tiny.n_base = 2;
  tiny.state_len = 1;
  tiny.alphabet = "NAB";
  EXPECT_FALSE(CrfPosteriorDecoder::create(tiny, CrfBackend::kAvx512).is_ok());

  auto decoder = CrfPosteriorDecoder::create(CrfGeometry{});
  ASSERT_TRUE(decoder.is_ok());
  PosteriorCall call;
  std::vector<float> s(1280);
  EXPECT_FALSE(decoder->decode({nullptr, 1, 1280}, call).is_ok());
  EXPECT_FALSE(decoder->decode({s.data(), 0, 1280}, call).is_ok());
  const Status st = decoder->decode({s.data(), 1, 1000}, call);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("stride"), std::string::npos) << st.message();
}

// Same input, same output, and no heap allocation once the decoder has seen its longest read.
TEST(CrfPosteriorDecode, DeterministicAndAllocationFree) {
  const CrfGeometry g;
  auto decoder = CrfPosteriorDecoder::create(g);
  ASSERT_TRUE(decoder.is_ok());
  const std::vector<float> s = test::random_scores(g, 300, 99);
  PosteriorCall first, again;
  ASSERT_TRUE(decoder->decode(test::view_of(s, g), first).is_ok());
  again.sequence.reserve(300);
  again.step_edge.reserve(300);
  const size_t before = test::allocation_count();
  ASSERT_TRUE(decoder->decode(test::view_of(s, g), again).is_ok());
  EXPECT_EQ(test::allocation_count() - before, 0u);
  EXPECT_EQ(first.sequence, again.sequence);
  EXPECT_EQ(first.step_edge, again.step_edge);
  EXPECT_EQ(first.path_score, again.path_score);
}

}  // namespace
}  // namespace escpod::demux
