#include "test_kernels.hpp"

namespace escpod::gpu::test {
namespace {

__device__ std::uint64_t global_timer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void gate_kernel(const volatile int* flag, std::uint64_t timeout_ns, volatile int* timed_out) {
  const std::uint64_t start = global_timer_ns();
  while (*flag == 0) {
    if (global_timer_ns() - start > timeout_ns) {
      *timed_out = 1;
      return;
    }
    __nanosleep(1000);
  }
}

}  // namespace

cudaError_t launch_gate(const int* flag, std::uint64_t timeout_ns, int* timed_out, cudaStream_t stream) {
  gate_kernel<<<1, 1, 0, stream>>>(flag, timeout_ns, timed_out);
  return cudaGetLastError();
}

}  // namespace escpod::gpu::test
