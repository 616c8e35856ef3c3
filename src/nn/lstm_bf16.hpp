// Opt-in bfloat16 recurrent weights for the LSTM's per-step GEMV (GemmLstm, batch 1). The step's
// h [k] x R^T [k][n] is bound by the L2 bandwidth of streaming R^T (bench/results/crf_encoder.md);
// in bf16 it streams half the bytes (measured 0.53x the float32 GEMV). Rounding h and R to bf16
// (8 mantissa bits) moves the outputs (~3e-3 relative per product), so it is off unless
// ESCPOD_NN_LSTM_BF16=1, and its effect on calls is measured, not assumed.
#pragma once

#include <cstdint>
#include <vector>

namespace escpod::nn::detail {

// ESCPOD_NN_LSTM_BF16=1 and the CPU has AVX512_BF16 (decided once).
bool lstm_bf16_enabled();

// Whether the kernel takes this shape: k a multiple of 32 (at most 4096), n of 128.
bool lstm_bf16_shape_ok(int64_t k, int64_t n);

// R^T [k][n] (float, row-major) -> [k/2][n] 32-bit lanes holding (bf16 of row 2i, bf16 of row
// 2i+1) of column j, low half first: vdpbf16ps's operand layout. Round to nearest even.
std::vector<uint32_t> pack_bf16_pairs(const float* rt, int64_t k, int64_t n);

// c[0..n) += bf16(a[0..k)) . W, W from pack_bf16_pairs; only when lstm_bf16_enabled() and
// lstm_bf16_shape_ok(k, n).
void gemv_acc_bf16(const float* a, const uint32_t* w, float* c, int64_t n, int64_t k);

}  // namespace escpod::nn::detail
