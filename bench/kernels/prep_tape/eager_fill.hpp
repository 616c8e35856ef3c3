// The eager baseline of the GPU benchmark: one kernel launch per buffer (what one tensor fill per
// buffer costs in a C++ engine).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace escpod::gpu::bench {

// p[begin, end) = value (its low `width_bytes` bytes; 4 or 8), one launch on `stream`.
cudaError_t launch_fill_tail(void* p, int width_bytes, std::int64_t begin, std::int64_t end,
                             std::int64_t value, cudaStream_t stream);

}  // namespace escpod::gpu::bench
