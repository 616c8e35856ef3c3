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

// A direct 1-D convolution for layers with few inputs per output (the CRF encoders' first two:
// 1 -> 4 and 4 -> 16 channels, k 5; the boundary CNN's first: 1 -> 64, k 7, stride 3), where
// oneDNN's blocked kernels spend most of their time off the arithmetic. oc <= 64 output channels
// (up to four vectors), dilation 1, channels-last output y[n][ow][oc]; x is [n][ic][iw] or, with
// src_nwc, [n][iw][ic]; zero padding. `weights` are packed [k][ic][16 V] (V = ceil(oc / 16)
// vectors of output lanes, zeros beyond oc), `bias` [16 V]. The post-operation (none, SiLU or
// ReLU) follows the bias. With dst_bf16 the output is rounded to bfloat16 as convert_to_bf16
// rounds (y is then uint16_t; only where bf16_available()).
struct SmallConvGeometry {
  int64_t n = 0, ic = 0, oc = 0, iw = 0, ow = 0, k = 0, stride = 1, pad_l = 0;
  bool src_nwc = false;
  bool dst_bf16 = false;
};
enum class SmallConvPost { kNone, kSilu, kRelu };
using SmallConvFn = void (*)(const SmallConvGeometry& g, const float* x, const float* weights, const float* bias,
                             void* y, SmallConvPost post);
// The AVX-512 kernel, or null below AVX-512 (callers then use oneDNN).
SmallConvFn small_conv_fn(SimdLevel level);

// A direct 1-D transposed convolution for layers with few outputs per input position (oc * k <=
// 16: the boundary CNN's last layer, 64 -> 2 channels, k 7, stride 3), where oneDNN's kernels
// spend most of their time off the arithmetic. Per input position s, the oc * k products
// taps[s][o * k + kk] = sum_c x[s][c] w[c][o][kk] fill one vector; then each output sums its
// taps in kk order after the bias: y[o][t] = bias[o] + sum_kk taps[(t + pad_l - kk) / stride][o * k
// + kk] over the kk that divide evenly and fall inside the input. Dilation 1; x as for
// SmallConvFn (g.src_nwc); y is [n][oc][ow], or [n][ow][oc] with `dst_nwc`. `weights` packed
// [ic][16] (ONNX's [ic][oc][k] rows, zeros beyond oc * k), `bias` [oc]; `taps` is scratch of
// g.iw * 16 floats.
using SmallDeconvFn = void (*)(const SmallConvGeometry& g, const float* x, const float* weights, const float* bias,
                               float* y, bool dst_nwc, float* taps);
// The AVX-512 or AVX2 kernel (the same sums in the same order), or null below AVX2 (callers then
// use oneDNN).
SmallDeconvFn small_deconv_fn(SimdLevel level);

// y = y * sigmoid(y) over n floats, in place.
using SiluFn = void (*)(float* y, int64_t n);
SiluFn silu_fn(SimdLevel level);

}  // namespace escpod::nn::detail
