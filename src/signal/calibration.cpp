#include "escpod/signal/calibration.hpp"

#include <cassert>

namespace escpod::signal {

void calibrate_to_pa(std::span<const int16_t> adc, Calibration c, std::span<float> out) {
  assert(adc.size() == out.size());
  const size_t n = adc.size();
  const int16_t* in = adc.data();
  float* dst = out.data();
  for (size_t i = 0; i < n; ++i) dst[i] = adc_to_pa(in[i], c);
}

}  // namespace escpod::signal
