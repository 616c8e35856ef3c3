// Vectorised element-wise kernels with runtime ISA dispatch (AVX-512, AVX2, baseline x86-64 SSE2).
// One source, compiled three times through target attributes; the variant is chosen once from
// oneDNN's effective ISA, so ONEDNN_MAX_CPU_ISA / set_max_isa cap these kernels too.
#pragma once

#include <cstdint>

namespace escpod::nn::detail {

enum class SimdLevel { kSse2, kAvx2, kAvx512 };

// The level in use (decided on first call from the effective oneDNN ISA).
SimdLevel simd_level();
const char* simd_level_name(SimdLevel level);

// One LSTM time step for `n` rows, ONNX gate order (i, o, f, c):
//   g = gates[row] + bias (4h values per row), c = sig(f)*c + sig(i)*tanh(g_c),
//   h_out[row] = sig(o) * tanh(c).
// gates: [n][4h], c: [n][h] (updated), h_out: row stride `h_stride`.
using LstmCellFn = void (*)(const float* gates, const float* bias, float* c, float* h_out,
                            int64_t n, int64_t h, int64_t h_stride);
LstmCellFn lstm_cell_fn(SimdLevel level);

// C[m][n] += A[m][k] * B[k][n] (row-major, leading dimensions in floats) for the small
// matrices of an LSTM step (m = batch, k = hidden, n = 4 * hidden): register-blocked, no packing,
// so the per-call cost stays proportional to the arithmetic even at m = 1.
using GemmAccFn = void (*)(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                           int64_t m, int64_t n, int64_t k);
GemmAccFn gemm_acc_fn(SimdLevel level);

// Bonito's CRF scores with their blank column: for each of `rows` runs of 4 values,
//   y[5r] = blank, y[5r + 1 + j] = alpha * tanh(x[4r + j]) + beta.
using BlankPadTanhFn = void (*)(const float* x, float* y, int64_t rows, float blank, float alpha, float beta);
BlankPadTanhFn blank_pad_tanh_fn(SimdLevel level);

}  // namespace escpod::nn::detail
