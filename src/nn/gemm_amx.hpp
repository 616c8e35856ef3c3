// Float32 dense products on the AMX tile unit, to float32 accuracy ("bf16x6").
//
// Each operand is split into three bfloat16 terms, v = v0 + v1 + v2 with v0 = bf16(v),
// v1 = bf16(v - v0), v2 = bf16(v - v0 - v1) (round to nearest even: 24 significant bits, so
// exactly v for a normal float whose terms stay normal). Of the nine partial products the six of
// relative order 2^-16 or above (x0 w0, x0 w1, x0 w2, x1 w0, x1 w1, x2 w0) run as bfloat16 tile
// products accumulated in float32; the dropped three are below 2^-23 of |x||w|, under float32's
// own rounding of a K-term sum. Measured against a double-precision product (gemm_amx tests):
// within the error of a plain float32 loop over K; within float32 tolerance of oneDNN's sgemm.
//
// Why: a tile product (16 x 16 outputs, depth 32) issues every 16 cycles, 512 multiply-adds per
// cycle against the FMA ports' 32 in float32, so six of them still take ~0.4x the FMA time; with
// the splits and stores the encoder's dense products run 1.6-1.9x faster than oneDNN's float32
// matmul (bench/results/crf_encoder.md, Session 15). The LSTM recurrence (4 rows a step) stays on
// the FMA ports: a tile has 16 rows.
//
// Special values: a NaN or an infinity in a row of x makes that row of y NaN (an infinite term's
// residual is Inf - Inf; where float32 gives +-Inf this gives NaN), likewise a column of w;
// denormals count as zero (as the bfloat16 conversion and the tile unit treat them). The
// encoders' products see finite activations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace escpod::nn::detail {

// The CPU has AMX-BF16 and AVX512-BF16, oneDNN's ISA cap allows AMX, and the kernel granted this
// process the tile data state. Decided once.
bool amx_f32_available();

// Vector work to interleave with the tile products (a previous block's activation, say): run()
// calls step(ctx) after every group of four tile products (~80 cycles of tile-unit time). step
// does a small piece and returns; what is left when run() returns is the caller's to finish.
// Tile products and AVX-512 arithmetic share execution resources, so this saves only the tile
// unit's idle time between the two kinds of work (the linear layer's blank pad: ~8%).
struct AmxSideWork {
  void (*step)(void* ctx) = nullptr;
  void* ctx = nullptr;
};

// y[rows][n] = x[rows][k] w (+ bias) in float32 via split bfloat16 tile products. One object per
// weight matrix (the packed splits are shared by every object built from the same `w` pointer
// and layout); run() is const and allocation-free, one caller's scratch each.
class AmxF32Gemm {
 public:
  // What the planner sends here: n a multiple of 32 (two tile columns), k >= 64 (k is
  // zero-padded to a multiple of 32; at k 7 - a convolution from one channel - that padding made
  // the product 3x slower than the FMA path's). run() itself takes any k >= 1.
  static bool shape_ok(int64_t k, int64_t n) { return k >= 64 && n >= 32 && n % 32 == 0; }

  // How w holds the [k][n] operand.
  enum class Layout {
    kKN,       // row-major [k][n]
    kNK,       // [n][k] (W^T, as ONNX stores LSTM weights)
    kConvOIW,  // ONNX Conv weights [n = oc][ic][k / ic]: the product's k index is tap * ic + channel,
               // matching channels-last input windows
  };

  // w in `layout` (kConvOIW: `conv_ic` input channels); bias: [n] or null.
  AmxF32Gemm(int64_t k, int64_t n, const float* w, Layout layout, const float* bias, int64_t conv_ic = 0);

  // Bytes of 64-byte-aligned scratch run() needs: two blocks of split rows and one output block.
  std::size_t scratch_bytes() const;

  // Row r of x starts at x + r * ldx (k floats; rows may overlap, as a strided convolution's input
  // windows do), row r of y at y + r * ldy (n floats). Any rows >= 0.
  void run(int64_t rows, const float* x, int64_t ldx, float* y, int64_t ldy, void* scratch,
           const AmxSideWork& side = {}) const;
  // Contiguous rows.
  void run(int64_t rows, const float* x, float* y, void* scratch, const AmxSideWork& side = {}) const {
    run(rows, x, m_k, y, m_n, scratch, side);
  }

  // x split once, ahead (split_to_planes), for rows that overlap: a stride-1 convolution's input
  // windows repeat each input value k times, and run() would split every copy. Term q of row r's
  // k values starts at planes + q * plane + r * ld; every plane must hold plane_elems(rows, ld)
  // elements, finite ones past the data (tiles read whole 32-row blocks and k rounded up to 32;
  // the extra columns meet zero weights). planes 64-byte aligned; tile rows are too when ld is a
  // multiple of 32 (otherwise only slower).
  void run_planes(int64_t rows, const uint16_t* planes, int64_t plane, int64_t ld, float* y, int64_t ldy,
                  void* scratch) const;
  int64_t plane_elems(int64_t rows, int64_t ld) const;
  // v[i] -> its three terms at planes + q * plane + i for i < n; writes up to n rounded up to 16
  // (zeros past n).
  static void split_to_planes(const float* v, int64_t n, uint16_t* planes, int64_t plane);

 private:
  int64_t m_k, m_kp, m_n;
  std::shared_ptr<const uint16_t> m_packed;  // [n / 32][3 terms][kp / 2][32 columns][2]
  std::vector<float> m_bias;                 // n floats, or empty
};

}  // namespace escpod::nn::detail
