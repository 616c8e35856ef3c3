// Shape arithmetic shared by constant folding and the planner: output shapes and strided-copy
// geometry of Transpose, Slice, Reshape, Squeeze, Unsqueeze, Concat, Pad and broadcasting.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod::nn::detail {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);
// Row-major strides of `s`.
Shape strides_of(const Shape& s);
// Normalises an axis against `rank` (negative counts from the end); -1 when out of range.
int64_t norm_axis(int64_t axis, int64_t rank);

// out = in transposed by `perm` (empty: reverse). Fills the source strides of each output axis.
Status transpose_geometry(const Shape& in, std::vector<int64_t> perm, Shape& out, Shape& src_strides);

// ONNX Slice semantics (clamping, negative steps). `is_axis0_reverse` is set when the slice is a
// full reversal of axis 0 and the identity on all other axes.
Status slice_geometry(const Shape& in, const std::vector<int64_t>& starts,
                      const std::vector<int64_t>& ends, const std::vector<int64_t>& axes,
                      const std::vector<int64_t>& steps, Shape& out, Shape& src_strides,
                      int64_t& src_start, bool& is_axis0_reverse);

Result<Shape> reshape_shape(const Shape& in, const std::vector<int64_t>& target, bool allow_zero);
Result<Shape> squeeze_shape(const Shape& in, const std::vector<int64_t>& axes);  // empty: all 1s
Result<Shape> unsqueeze_shape(const Shape& in, const std::vector<int64_t>& axes);
Result<Shape> broadcast_shape(const Shape& a, const Shape& b);
// Left-pads `s` with 1s to `rank`.
Shape expand_rank(const Shape& s, size_t rank);

// Generic strided gather over any element type: out[i...] = src[start + sum i_d * strides_d].
template <typename T>
std::vector<T> strided_gather(const T* src, const Shape& out_shape, const Shape& strides, int64_t start) {
  std::vector<T> out(static_cast<size_t>(numel(out_shape)));
  const size_t rank = out_shape.size();
  std::vector<int64_t> idx(rank, 0);
  int64_t s = start;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = src[s];
    for (size_t d = rank; d-- > 0;) {
      ++idx[d];
      s += strides[d];
      if (idx[d] < out_shape[d]) break;
      s -= strides[d] * idx[d];
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace escpod::nn::detail
