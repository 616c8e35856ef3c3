// Score tensors for the CRF decoder tests: the golden file's closed-form "small" case and random
// lattices of any geometry.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "escpod/demux/crf_decode.hpp"

namespace escpod::test {

// crf_golden.json "small": scores[t, n, c] = sin(0.1 t + 0.01 c + 0.7 n) * 2 + cos(0.013 (t C + c)),
// computed in float64 and cast to float32; layout [T, N, C].
inline std::vector<float> golden_small_scores(int64_t T, int64_t N, int64_t C) {
  std::vector<float> s(static_cast<size_t>(T * N * C));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        const double v = std::sin(0.1 * static_cast<double>(t) + 0.01 * static_cast<double>(c) +
                                  0.7 * static_cast<double>(n)) *
                             2.0 +
                         std::cos(0.013 * static_cast<double>(t * C + c));
        s[static_cast<size_t>((t * N + n) * C + c)] = static_cast<float>(v);
      }
  return s;
}

// Encoder-like scores: moves uniform in [lo, hi], stays fixed at `stay` (as the models' 2.0).
inline std::vector<float> random_scores(const demux::CrfGeometry& g, int64_t T, uint32_t seed, float lo = -5.0f,
                                        float hi = 5.0f, float stay = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  const int64_t E = g.n_edges();
  std::vector<float> s(static_cast<size_t>(T * g.n_scores()));
  for (size_t i = 0; i < s.size(); ++i) s[i] = (static_cast<int64_t>(i) % E == 0) ? stay : u(rng);
  return s;
}

inline demux::CrfScoresView view_of(const std::vector<float>& s, const demux::CrfGeometry& g) {
  return {s.data(), static_cast<int64_t>(s.size()) / g.n_scores(), g.n_scores()};
}

}  // namespace escpod::test
