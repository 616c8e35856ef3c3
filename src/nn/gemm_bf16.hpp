// Opt-in bfloat16 GEMMs for the encoder's dense products (nn::LoadOptions::bf16_gemm): the
// LSTM's input projection (x W^T for a block of time steps) and the MatMul steps (the CRF's
// linear layer). Operands are rounded to bfloat16 (8 significant bits), products accumulate in
// float32, and outputs stay float32; on CPUs with AMX oneDNN runs them on the tile unit (~3x the
// float32 rate of a core, measured in bench/results/crf_encoder.md), elsewhere with the AVX512_BF16
// dot products (~2x the float32 rate, bench/RESULTS.md Session 20). The LSTM recurrence runs in
// bfloat16 too (gemm_acc_bf16, below): h is rounded as the next layer's projection rounds it, and
// on the SeqTagger models' real windows the scores' mean |difference| from float32 grows by
// 3-25% over the projections' alone (bench/results/cpu_kinds.md, Session 23), not compounding
// over the steps. Outputs move (not within float32 tolerance), so the path is off by default and
// its effect on calls is measured.
// Likewise opt-in bfloat16 convolutions (nn::LoadOptions::bf16_conv) for the convolutions with
// many inputs per output (the boundary CNN's), where oneDNN has AVX512_BF16 kernels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace escpod::nn::detail {

// oneDNN runs bfloat16 matmuls and convolutions here, on AMX or with the AVX512_BF16 dot products
// (its ISA, within the cap, is avx512_core_amx or avx512_core_bf16), and the conversion kernel
// below has its AVX-512 BF16 form. Decided once. On a Zen 4 core: ~2x its float32 convolution at
// the boundary CNN's 64 -> 64 layers (Session 19); the CRF encoder's linear layer ([800 x 96] x
// [96 x 1024], tanh fused) 2.02 -> 1.02 ms and its input projections ~0.6 -> ~0.25 ms per layer
// (B 4, Session 20; bench/RESULTS.md). Session 8 had found the matmul slower than sgemm at these
// shapes on an earlier CPU without AMX.
bool bf16_available();

// dst[i] = src[i] rounded to the nearest bfloat16 (ties to even), for i < n. NaNs stay NaNs;
// denormal inputs become zeros of their sign (as the AVX-512 BF16 instruction treats them).
void convert_to_bf16(const float* src, uint16_t* dst, size_t n);

// A float32 matrix B [k][n] (element (q, j) at b[q * stride_k + j * stride_n], so B or a
// transposed source) as the panel gemm_acc_bf16 reads: bf16_pairs_rows(k) rows of `ld` 32-bit
// words (ld >= n, a multiple of 16), word [p][j] holding B[2p][j] in its low half and B[2p + 1][j]
// in its high half, each rounded as convert_to_bf16 rounds; zeros past k and past n.
int64_t bf16_pairs_rows(int64_t k);
void pack_bf16_pairs(const float* b, int64_t stride_k, int64_t stride_n, int64_t k, int64_t n, uint32_t* dst,
                     int64_t ld);

// C[m][j] += sum_q A[m][q] B[q][j] for j < n, q < k, with A in bfloat16 (rows lda elements apart)
// and B packed by pack_bf16_pairs (rows ldb words apart): the AVX512_BF16 dot products, each
// output accumulating the exact products of one pair of q per instruction in float32, register
// blocked and unpacked on A's side, so the cost stays proportional to the arithmetic at m = 1
// (the LSTM recurrence of LoadOptions::bf16_gemm). Columns past n are not written. Only where
// bf16_available().
void gemm_acc_bf16(const uint16_t* a, int64_t lda, const uint32_t* b, int64_t ldb, float* c, int64_t ldc, int64_t m,
                   int64_t n, int64_t k);

}  // namespace escpod::nn::detail
