#include "escpod/demux/dtw.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "test_data.hpp"

namespace escpod::demux {
namespace {

using nlohmann::json;

json read_json(const std::string& rel) {
  std::ifstream in(test::shared_data(rel));
  return json::parse(in);
}

// Plain O(n*m) reference straight from the definition: full matrix, explicit band predicate.
double reference_dtw(const std::vector<double>& a, const std::vector<double>& b, size_t window,
                     double penalty) {
  const size_t n = a.size(), m = b.size();
  if (n == 0 || m == 0) return std::numeric_limits<double>::infinity();
  const double inf = std::numeric_limits<double>::infinity();
  const auto W = static_cast<long>(window == 0 ? std::max(n, m) : window);
  const long extra_lo = n > m ? static_cast<long>(n - m) : 0;
  const long extra_hi = m > n ? static_cast<long>(m - n) : 0;
  auto in_band = [&](long i, long j) { return j >= i - extra_lo - W + 1 && j < i + extra_hi + W; };
  std::vector<std::vector<double>> D(n, std::vector<double>(m, inf));
  const double p2 = penalty * penalty;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < m; ++j) {
      if (!in_band(static_cast<long>(i), static_cast<long>(j))) continue;
      const double diag = (i == 0 && j == 0) ? 0.0 : (i > 0 && j > 0 ? D[i - 1][j - 1] : inf);
      const double up = i > 0 ? D[i - 1][j] + p2 : inf;
      const double left = j > 0 ? D[i][j - 1] + p2 : inf;
      double best = diag;
      if (up < best) best = up;
      if (left < best) best = left;
      const double d = a[i] - b[j];
      D[i][j] = d * d + best;
    }
  }
  return std::sqrt(D[n - 1][m - 1]);
}

std::vector<double> to_vec(const json& j) { return j.get<std::vector<double>>(); }

TEST(Dtw, GoldenUnitCases) {
  double max_dev = 0;
  size_t n_cases = 0;
  for (const char* file : {"warpdemux/golden_WDX4_rna004_v1_0.json",
                           "warpdemux/golden_WDX10_rna004_v1_0.json"}) {
    const json g = read_json(file);
    const double tol = g["suggested_tolerances"]["dtw_distance_abs"].get<double>();
    ASSERT_EQ(tol, 1e-12);
    for (const json& c : g["dtw_unit_cases"]) {
      const auto a = to_vec(c["a"]), b = to_vec(c["b"]);
      DtwParams p{c["window"].get<size_t>(), c["penalty"].get<double>()};
      const double expect = c["distance"].get<double>();
      const double got = dtw_distance(a, b, p);
      EXPECT_NEAR(got, expect, tol) << file << " case " << n_cases;
      EXPECT_EQ(got, reference_dtw(a, b, p.window, p.penalty));
      EXPECT_EQ(dtw_distance(b, a, p), got);  // symmetric
      max_dev = std::max(max_dev, std::fabs(got - expect));
      ++n_cases;
    }
  }
  EXPECT_EQ(n_cases, 22u);
  std::printf("[dtw] %zu golden unit cases, max |d - expected| = %.3g\n", n_cases, max_dev);
}

TEST(Dtw, GoldenRowsBankAndScalarAgree) {
  for (const char* stem : {"WDX4_rna004_v1_0", "WDX10_rna004_v1_0"}) {
    const json g = read_json(std::string("warpdemux/golden_") + stem + ".json");
    const json model = read_json(std::string("warpdemux/") + stem + ".json");
    const auto& fps = model["training_fingerprints"];
    const size_t n_rows = fps.size(), len = fps[0].size();
    std::vector<double> rows;
    for (const auto& r : fps)
      for (const auto& v : r) rows.push_back(v.get<double>());
    const DtwBank bank(rows, n_rows, len);
    const DtwParams p{model["window"].get<size_t>(), model["penalty"].get<double>()};
    std::vector<double> scratch(bank.scratch_size()), out(n_rows);
    double max_dev = 0;
    // Every ISA this CPU has gives the same bits as the one the bank picked.
    std::vector<DtwBank> others;
    for (DtwIsa isa : {DtwIsa::kSse2, DtwIsa::kAvx2, DtwIsa::kAvx512})
      if (dtw_isa_supported(isa) && isa != bank.isa()) others.emplace_back(rows, n_rows, len, isa);
    for (size_t qi = 0; qi < g["dtw_rows"]["query_ids"].size(); ++qi) {
      const size_t id = g["dtw_rows"]["query_ids"][qi].get<size_t>();
      const auto q = to_vec(g["queries"][id]["fingerprint"]);
      const auto expect = to_vec(g["dtw_rows"]["distances"][qi]);
      ASSERT_EQ(expect.size(), n_rows);
      bank.distances_to(q, p, scratch, out);
      for (const DtwBank& other : others) {
        std::vector<double> other_scratch(other.scratch_size()), other_out(n_rows);
        other.distances_to(q, p, other_scratch, other_out);
        ASSERT_EQ(other_out, out) << stem << " query " << id << " " << dtw_isa_name(other.isa());
      }
      for (size_t r = 0; r < n_rows; ++r) {
        max_dev = std::max(max_dev, std::fabs(out[r] - expect[r]));
        const std::vector<double> row(rows.begin() + static_cast<long>(r * len),
                                      rows.begin() + static_cast<long>((r + 1) * len));
        ASSERT_EQ(out[r], dtw_distance(q, row, p)) << stem << " query " << id << " row " << r;
      }
    }
    EXPECT_LE(max_dev, 1e-12) << stem;
    std::printf("[dtw] %s: 8 full golden rows (%zu distances each), max dev %.3g\n", stem, n_rows,
                max_dev);
    // The golden `nearest` lists (5 smallest distances) for every query.
    double max_dev_nearest = 0;
    for (const json& q : g["queries"]) {
      bank.distances_to(to_vec(q["fingerprint"]), p, scratch, out);
      for (const json& nn : q["nearest"]) {
        const double d = out[nn["index"].get<size_t>()];
        max_dev_nearest = std::max(max_dev_nearest, std::fabs(d - nn["distance"].get<double>()));
      }
    }
    EXPECT_LE(max_dev_nearest, 1e-12) << stem;
  }
}

TEST(Dtw, RandomAgainstReferenceAndProperties) {
  std::mt19937 rng(2025);
  std::normal_distribution<double> g(0.0, 1.0);
  std::uniform_int_distribution<size_t> len(1, 30), win(0, 30);
  std::uniform_real_distribution<double> pen(0.0, 1.0);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<double> a(len(rng)), b(trial % 2 ? a.size() : len(rng));
    for (double& v : a) v = g(rng);
    for (double& v : b) v = g(rng);
    const DtwParams p{win(rng), trial % 5 == 0 ? 0.0 : pen(rng)};
    const double d = dtw_distance(a, b, p);
    ASSERT_EQ(d, reference_dtw(a, b, p.window, p.penalty))
        << "trial " << trial << " (seed 2025), n=" << a.size() << " m=" << b.size()
        << " window=" << p.window;
    ASSERT_EQ(dtw_distance(b, a, p), d) << "symmetry, trial " << trial;
    ASSERT_EQ(dtw_distance(a, a, p), 0.0);
    ASSERT_GE(d, 0.0);
  }
}

TEST(Dtw, WindowOneIsEuclideanAndBandMatters) {
  std::mt19937 rng(11);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> a(25), b(25);
  for (double& v : a) v = g(rng);
  for (double& v : b) v = g(rng);
  double ss = 0;
  for (size_t i = 0; i < 25; ++i) ss += (a[i] - b[i]) * (a[i] - b[i]);
  EXPECT_EQ(dtw_distance(a, b, {1, 0.3}), std::sqrt(ss));
  // A time shift by 14 is reachable with window 15 (|i-j| <= 14) but not 14.
  std::vector<double> x(25, 0.0), y(25, 0.0);
  x[5] = 5.0;
  y[19] = 5.0;
  EXPECT_LT(dtw_distance(x, y, {15, 0.0}), 1e-12);
  EXPECT_GT(dtw_distance(x, y, {14, 0.0}), 1.0);
  // Penalty is squared per non-diagonal step: x shifted by one costs 2 steps of 0.1^2.
  std::vector<double> s1 = {0, 1, 2, 3, 3}, s2 = {0, 0, 1, 2, 3};
  EXPECT_DOUBLE_EQ(dtw_distance(s1, s2, {15, 0.1}), std::sqrt(2 * 0.1 * 0.1));
  EXPECT_TRUE(std::isinf(dtw_distance(std::vector<double>{}, s1, {15, 0.1})));
}

TEST(Dtw, BankPaddingAndOddRowCounts) {
  std::mt19937 rng(3);
  std::normal_distribution<double> g(0.0, 1.0);
  size_t n_isas = 0;
  for (DtwIsa isa : {DtwIsa::kSse2, DtwIsa::kAvx2, DtwIsa::kAvx512}) {
    if (!dtw_isa_supported(isa)) {
      std::printf("[dtw] %s: not on this CPU, not tested\n", dtw_isa_name(isa));
      continue;
    }
    ++n_isas;
    for (size_t n_rows : {1u, 7u, 8u, 9u, 17u, 31u, 32u, 33u, 65u}) {
      std::vector<double> rows(n_rows * 25), q(25);
      for (double& v : rows) v = g(rng);
      for (double& v : q) v = g(rng);
      const DtwBank bank(rows, n_rows, 25, isa);
      ASSERT_EQ(bank.isa(), isa);
      std::vector<double> scratch(bank.scratch_size()), out(n_rows);
      for (size_t w : {0u, 1u, 3u, 15u, 40u}) {
        bank.distances_to(q, {w, 0.1}, scratch, out);
        for (size_t r = 0; r < n_rows; ++r) {
          const std::vector<double> row(rows.begin() + static_cast<long>(r * 25),
                                        rows.begin() + static_cast<long>((r + 1) * 25));
          EXPECT_EQ(out[r], reference_dtw(q, row, w, 0.1))
              << dtw_isa_name(isa) << ", " << n_rows << " rows, window " << w;
        }
      }
    }
  }
  EXPECT_GE(n_isas, 1u);
}

}  // namespace
}  // namespace escpod::demux

namespace escpod::demux {
namespace {

// The float32 bank: within a few float32 ulps of the double DTW, on the SIMD kernel and on the
// portable one (a bank built for SSE2 runs the portable float32 loop), for every window.
TEST(Dtw, Float32BankIsCloseToDoubleOnEveryPath) {
  std::mt19937 rng(11);
  std::normal_distribution<double> g(0.0, 1.0);
  size_t n_paths = 0;
  double worst = 0.0;
  for (DtwIsa isa : {DtwIsa::kSse2, DtwIsa::kAvx2}) {
    if (!dtw_isa_supported(isa)) {
      std::printf("[dtw] float32 on %s: not on this CPU, not tested\n", dtw_isa_name(isa));
      continue;
    }
    ++n_paths;
    for (size_t n_rows : {1u, 63u, 64u, 65u, 129u}) {
      std::vector<double> rows(n_rows * 25), q(25);
      for (double& v : rows) v = g(rng);
      for (double& v : q) v = g(rng);
      const DtwBank bank(rows, n_rows, 25, isa);
      EXPECT_EQ(bank.f32_uses_simd(), isa != DtwIsa::kSse2);
      std::vector<float> scratch(bank.scratch_size_f32(), std::nanf(""));
      std::vector<double> out(n_rows);
      for (size_t w : {0u, 1u, 3u, 15u, 40u}) {
        bank.distances_to_f32(q, {w, 0.1}, scratch, out);
        for (size_t r = 0; r < n_rows; ++r) {
          const std::vector<double> row(rows.begin() + static_cast<long>(r * 25),
                                        rows.begin() + static_cast<long>((r + 1) * 25));
          const double exact = reference_dtw(q, row, w, 0.1);
          const double rel = std::fabs(out[r] - exact) / exact;
          worst = std::max(worst, rel);
          ASSERT_LE(rel, 2e-6) << (bank.f32_uses_simd() ? "simd" : "portable") << ", " << n_rows
                               << " rows, window " << w << ", row " << r << ": " << out[r]
                               << " vs " << exact;
        }
      }
    }
  }
  EXPECT_GE(n_paths, 1u);
  std::printf("[dtw] float32 bank: max relative deviation from the double DTW %.3g\n", worst);
}

// On the real models' references and golden queries the float32 distances stay as close.
TEST(Dtw, Float32BankOnGoldenRows) {
  for (const char* stem : {"WDX4_rna004_v1_0", "WDX10_rna004_v1_0"}) {
    const json m = read_json(std::string("warpdemux/") + stem + ".json");
    const json g = read_json(std::string("warpdemux/golden_") + stem + ".json");
    const auto fps = m["training_fingerprints"].get<std::vector<std::vector<double>>>();
    const size_t len = fps.front().size();
    std::vector<double> rows;
    for (const auto& f : fps) rows.insert(rows.end(), f.begin(), f.end());
    const DtwBank bank(rows, fps.size(), len);
    std::vector<float> scratch(bank.scratch_size_f32());
    std::vector<double> out(fps.size());
    double worst = 0.0;
    for (const json& q : g["queries"]) {
      const auto fp = q["fingerprint"].get<std::vector<double>>();
      bank.distances_to_f32(fp, {15, 0.1}, scratch, out);
      for (size_t r = 0; r < fps.size(); r += 7) {
        const double exact = reference_dtw(fp, fps[r], 15, 0.1);
        worst = std::max(worst, std::fabs(out[r] - exact) / exact);
      }
    }
    EXPECT_LE(worst, 2e-6) << stem;
    std::printf("[dtw] %s float32: max relative deviation %.3g over 200 queries\n", stem, worst);
  }
}

}  // namespace
}  // namespace escpod::demux
