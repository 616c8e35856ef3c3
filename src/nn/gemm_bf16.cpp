// float32 -> bfloat16 rounding for the opt-in bfloat16 GEMMs and convolutions (gemm_bf16.hpp).
#include "nn/gemm_bf16.hpp"

#include <immintrin.h>

#include <cstring>
#include <string>

#include "nn/plan.hpp"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace escpod::nn::detail {

bool bf16_available() {
  static const bool ok = [] {
    const std::string isa = dnnl_isa_name();
    return (isa == "avx512_core_amx" || isa == "avx512_core_bf16") && __builtin_cpu_supports("avx512bf16");
  }();
  return ok;
}

namespace {

// As vcvtneps2bf16 does: denormal inputs count as zero (of their sign).
uint16_t round_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__attribute__((target("avx512f,avx512bf16,avx512vl"))) void convert_avx512(const float* src, uint16_t* dst,
                                                                           size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), reinterpret_cast<const __m256i&>(v));
  }
  for (; i < n; ++i) dst[i] = round_to_bf16(src[i]);
  _mm256_zeroupper();  // GCC 12 leaves the upper halves dirty on one exit; the callers are SSE code
}

}  // namespace

void convert_to_bf16(const float* src, uint16_t* dst, size_t n) {
  static const bool has_instruction = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vl");
  if (has_instruction) {
    convert_avx512(src, dst, n);
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}

}  // namespace escpod::nn::detail
