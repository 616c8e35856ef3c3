// Opt-in bfloat16 GEMMs for the encoder's dense products (nn::LoadOptions::bf16_gemm): the
// LSTM's input projection (x W^T for a block of time steps) and the MatMul steps (the CRF's
// linear layer). Operands are rounded to bfloat16 (8 significant bits), products accumulate in
// float32, and outputs stay float32; on CPUs with AMX oneDNN runs them on the tile unit (~3x the
// float32 rate of a core, measured in bench/results/crf_encoder.md), elsewhere with the AVX512_BF16
// dot products (~2x the float32 rate, bench/RESULTS.md Session 20). The LSTM recurrence stays
// float32: rounding there would compound over the time steps. Outputs move (not within float32
// tolerance), so the path is off by default and its effect on calls is measured.
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

}  // namespace escpod::nn::detail
