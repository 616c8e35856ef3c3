// The SVM kernel's exponential in WarpDemuX's float32 arithmetic, many values at a time.
#pragma once

#include <cstddef>

namespace escpod::demux::detail {

// out[i] = float(exp(double(x[i]))) as a double: the float32 exponential WarpDemuX's numpy kernel
// evaluates. On AVX2+FMA the exponential is a vector polynomial accurate to a few double ulps,
// so the float it rounds to is the correctly rounded one except when exp(x) lies within ~1e-15
// (relative) of a float rounding midpoint, where it may be its neighbour (1 float ulp); lanes
// outside [-700, 700] or NaN take std::exp. Elsewhere std::exp throughout.
void exp_to_float(const float* x, size_t n, double* out);

// std::exp only (tests compare the two).
void exp_to_float_scalar(const float* x, size_t n, double* out);

}  // namespace escpod::demux::detail
