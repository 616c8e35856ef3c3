// Reading and writing float32 NumPy .npy files (C order), the tensor exchange format of
// `escpod model run` and of the nn test fixtures.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod::nn {

// A float32 array in C (row-major) order.
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // product(shape) values
};

// Reads a version 1, 2 or 3 .npy file holding little-endian float32 ('<f4') in C order.
// Fails with kNotFound/kIoError when unreadable, kCorrupt on a malformed header or short data,
// kUnsupported for other dtypes or Fortran order (the message names the dtype found).
Result<NpyArray> read_npy(const std::filesystem::path& path);

// Writes `data` with `shape` as a version 1 .npy ('<f4', C order). `data.size()` must equal the
// product of `shape` (kInvalidArgument otherwise); kIoError when the file cannot be written.
Status write_npy(const std::filesystem::path& path, std::span<const int64_t> shape,
                 std::span<const float> data);

}  // namespace escpod::nn
