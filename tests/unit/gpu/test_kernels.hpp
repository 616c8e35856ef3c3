// Device helpers for the GPU tests (tests only).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace escpod::gpu::test {

// Enqueues a one-thread kernel on `stream` that spins until *flag (mapped host memory, device
// pointer) becomes non-zero, or until `timeout_ns` of device time passed, in which case it sets
// *timed_out (mapped host memory, device pointer) to 1. Everything enqueued after it waits.
cudaError_t launch_gate(const int* flag, std::uint64_t timeout_ns, int* timed_out, cudaStream_t stream);

}  // namespace escpod::gpu::test
