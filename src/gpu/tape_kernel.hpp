// The CUDA interpreter kernel's interface for host code (no CUDA headers): its by-value argument
// and its address, for cudaLaunchKernel and graph kernel nodes. The kernel is in tape_kernel.cu.
#pragma once

#include "gpu/tape_format.hpp"

#include <cstdint>

namespace escpod::gpu::detail {

// The kernel's only argument, passed by value: under kKernelArgument the register file travels
// inside it (regs_device == nullptr), so each launch and each graph kernel node owns its copy.
struct StageLaunch {
  const RawDescriptor* ops;
  const std::int32_t* block_prefix;  // n_ops + 1 entries; the last is the grid size
  std::int32_t n_ops;
  std::int32_t reserved;
  const RawRegisters* regs_device;  // device register array (staged deliveries), or nullptr
  RawRegisters regs;
};
static_assert(sizeof(StageLaunch) <= 4096, "kernel parameters are limited to 4 KiB");

// Host-side address of the interpreter kernel (launch with kThreadsPerBlock threads).
const void* stage_kernel_address();

}  // namespace escpod::gpu::detail
