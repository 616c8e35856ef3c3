// GCC vector types of W floats / W int32 and unaligned load/store, the scaffolding of the
// ISA-dispatched kernels in nn (simd.cpp) and demux (crf_simd.cpp). One source per kernel is
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

}  // namespace escpod::nn::simd

#pragma GCC diagnostic pop
