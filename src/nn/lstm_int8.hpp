// Opt-in int8 recurrent weights for the LSTM's per-step product h x R^T (GemmLstm), on AVX-512
// VNNI (vpdpbusd). In float32 R (4H x H, 147 KB at H = 96) does not fit the 48 KB L1d, so every
// step streams it from L2, and that product is ~45% of the CRF encoder's time at batch 1
// (bench/results/crf_encoder.md). In int8 R is 37 KB and stays in L1.
//
// Quantisation: each row j of R (one gate output) gets its own scale, R[j][k] ~ s_j * q[j][k]
// with q in [-127, 127] and s_j = max_k |R[j][k]| / 127; h (an LSTM output, in (-1, 1)) is
// rounded each step to u8 as round(127 h) + 128, i.e. h ~ (u - 128) / 127. The integer dot
// product is exact; the offset is removed in integers (128 * sum_k q[j][k], precomputed), and
// the result scaled by s_j / 127. Each product is then off by up to |R[j][k]| / 254 + s_j / 2 in
// absolute terms, so outputs move: the path is off by default (nn::LoadOptions::lstm_int8), and
// its effect on calls is measured, not assumed.
#pragma once

#include <cstdint>
#include <vector>

namespace escpod::nn::detail {

// The CPU has AVX-512 VNNI and the vector kernels run at the AVX-512 level (simd_level(), which
// follows oneDNN's ISA cap). Decided once.
bool lstm_int8_available();

// Whether the kernel takes R of `n` rows (gates) by `k` columns (hidden): k a multiple of 4 (at
// most kLstmInt8MaxK), n a multiple of 16.
constexpr int64_t kLstmInt8MaxK = 4096;
bool lstm_int8_shape_ok(int64_t n, int64_t k);

// R quantised and packed for vpdpbusd.
struct Int8Recurrent {
  int64_t n = 0, k = 0;
  std::vector<int8_t> w;         // [k / 4][n][4]: for column group g and row j, q[j][4g .. 4g + 3]
  std::vector<int32_t> offset;   // [n]: 128 * sum_k q[j][k]
  std::vector<float> scale;      // [n]: s_j / 127
};

// Quantises R [n][k] (row-major, ONNX's recurrence weights of one direction). Precondition:
// lstm_int8_shape_ok(n, k).
Int8Recurrent quantise_recurrent(const float* r, int64_t n, int64_t k);

// c[row][j] += sum_k R[j][k] * h[row][k] (within the quantisation error above) for `rows` rows;
// h rows `ldh` floats apart, c rows `ldc`. Preconditions: lstm_int8_available(); |h| <= 1 (larger
// values are clamped). Allocates nothing.
void gemv_acc_int8(const Int8Recurrent& r, const float* h, int64_t ldh, float* c, int64_t ldc, int64_t rows);

}  // namespace escpod::nn::detail
