// ADC counts to picoamps. The one formula every path uses (a second copy once drifted by an ulp
// through a fused multiply-add): pA = (adc + offset) * scale, in float32, exactly as the
// official pod5 library computes it (calibrate_signal_array), so our picoamps equal theirs.
#pragma once

#include <cstdint>
#include <span>

namespace escpod::signal {

struct Calibration {
  float offset = 0.0f;  // ADC units, added before scaling
  float scale = 0.0f;   // pA per ADC unit
};

// One sample. Kept inline so scalar callers and the span version share the expression.
inline float adc_to_pa(int16_t adc, Calibration c) {
  // Two separate float roundings; no contraction into an FMA (see the build flags).
  const float shifted = static_cast<float>(adc) + c.offset;
  return shifted * c.scale;
}

// out[i] = adc_to_pa(adc[i]); out.size() must equal adc.size(). Vectorised by the compiler.
void calibrate_to_pa(std::span<const int16_t> adc, Calibration c, std::span<float> out);

}  // namespace escpod::signal
