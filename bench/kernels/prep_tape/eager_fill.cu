#include "eager_fill.hpp"

namespace escpod::gpu::bench {
namespace {

template <typename T>
__global__ void fill_tail_kernel(T* p, std::int64_t begin, std::int64_t end, T value) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = begin + static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < end;
       i += stride) {
    p[i] = value;
  }
}

}  // namespace

cudaError_t launch_fill_tail(void* p, int width_bytes, std::int64_t begin, std::int64_t end, std::int64_t value,
                             cudaStream_t stream) {
  const std::int64_t n = end > begin ? end - begin : 0;
  std::int64_t blocks = (n + 255) / 256;
  if (blocks < 1) blocks = 1;
  if (blocks > 1024) blocks = 1024;
  if (width_bytes == 8) {
    fill_tail_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
        static_cast<std::uint64_t*>(p), begin, end, static_cast<std::uint64_t>(value));
  } else {
    fill_tail_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
        static_cast<std::uint32_t*>(p), begin, end, static_cast<std::uint32_t>(value));
  }
  return cudaGetLastError();
}

}  // namespace escpod::gpu::bench
