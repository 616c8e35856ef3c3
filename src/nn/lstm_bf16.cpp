// bfloat16 recurrent GEMV of the LSTM (lstm_bf16.hpp).
#include "nn/lstm_bf16.hpp"

#include <immintrin.h>

#include <cstdlib>
#include <cstring>

namespace escpod::nn::detail {

namespace {

constexpr int64_t kMaxK = 4096;
constexpr int64_t kBlock = 128;  // columns per pass: 8 zmm accumulators

uint32_t bf16_bits(float x) {  // round to nearest even, as vcvtne2ps2bf16 (inputs are finite)
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return u >> 16;
}

}  // namespace

bool lstm_bf16_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("ESCPOD_NN_LSTM_BF16");
    return env != nullptr && std::strcmp(env, "1") == 0 && __builtin_cpu_supports("avx512bf16");
  }();
  return on;
}

bool lstm_bf16_shape_ok(int64_t k, int64_t n) { return k > 0 && k % 32 == 0 && k <= kMaxK && n > 0 && n % kBlock == 0; }

std::vector<uint32_t> pack_bf16_pairs(const float* rt, int64_t k, int64_t n) {
  std::vector<uint32_t> w(static_cast<size_t>(k / 2 * n));
  for (int64_t i = 0; i < k / 2; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      w[static_cast<size_t>(i * n + j)] = bf16_bits(rt[2 * i * n + j]) | (bf16_bits(rt[(2 * i + 1) * n + j]) << 16);
    }
  }
  return w;
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void gemv_acc_bf16(const float* a, const uint32_t* w,
                                                                         float* c, int64_t n, int64_t k) {
  alignas(64) uint32_t pairs[kMaxK / 2];
  for (int64_t i = 0; i < k; i += 32) {  // a -> bf16 pairs (a[2i], a[2i+1]), 32 values at a time
    const __m512bh p = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(a + i));
    _mm512_store_si512(reinterpret_cast<__m512i*>(pairs + i / 2), reinterpret_cast<__m512i>(p));
  }
  const int64_t block = n % 384 == 0 ? 384 : kBlock;  // 24 accumulators when they fit, else 8
  const int n_acc = static_cast<int>(block / 16);
  for (int64_t col = 0; col < n; col += block) {
    __m512 acc[24];
    for (int j = 0; j < n_acc; ++j) acc[j] = _mm512_loadu_ps(c + col + 16 * j);
    for (int64_t i = 0; i < k / 2; ++i) {
      const __m512bh ai = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pairs[i])));
      const uint32_t* row = w + i * n + col;
      for (int j = 0; j < n_acc; ++j) {
        acc[j] = _mm512_dpbf16_ps(acc[j], ai, reinterpret_cast<__m512bh>(_mm512_loadu_si512(row + 16 * j)));
      }
    }
    for (int j = 0; j < n_acc; ++j) _mm512_storeu_ps(c + col + 16 * j, acc[j]);
  }
}

}  // namespace escpod::nn::detail
