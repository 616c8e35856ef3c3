// GCC vector types of W floats / W int32, unaligned load/store and the exp core: the
// scaffolding of the ISA-dispatched kernels in nn (simd.cpp) and demux (crf_simd.cpp). One source per kernel is
// compiled per ISA through target attributes; W = 1 handles loop tails. GCC/Clang only.
#pragma once

#include <cstdint>

// Passing vectors by value in these always-inlined helpers does not cross an ABI boundary.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace escpod::nn::simd {

template <int W>
struct Vec {
  typedef float f __attribute__((vector_size(W * 4)));
  typedef int32_t i __attribute__((vector_size(W * 4)));
};
template <int W>
using vf = typename Vec<W>::f;
template <int W>
using vi = typename Vec<W>::i;

// Always inlined so that each target-attributed caller gets its own ISA's instructions (and the
// "vector argument ABI changes without AVX" -Wpsabi note does not apply to them).
template <int W>
[[gnu::always_inline]] inline vf<W> load(const float* p) {
  vf<W> v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}
template <int W>
[[gnu::always_inline]] inline void store(float* p, vf<W> v) {
  __builtin_memcpy(p, &v, sizeof(v));
}

// e^x for x already clamped to [-87.34, 88] (callers choose the clamp and what happens below
// it): x = n ln2 + r, n = round(x log2 e), |r| <= ln2 / 2, e^r by the Cephes expf polynomial
// (relative error ~2e-7), 2^n through the exponent bits.
template <int W>
[[gnu::always_inline]] inline vf<W> exp_in_range(vf<W> x) {
  // Round to nearest by adding and removing 1.5 * 2^23 (|x log2 e| < 2^22 here).
  const vf<W> n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  vf<W> r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vf<W> p = vf<W>{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const vi<W> bits = (__builtin_convertvector(n, vi<W>) + 127) << 23;
  return p * (vf<W>)bits;
}

}  // namespace escpod::nn::simd

#pragma GCC diagnostic pop
