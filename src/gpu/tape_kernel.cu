// The CUDA interpreter: one launch per stage; block b runs operation find_op(b) of the stage.
// All the work is in tape_interpreter.hpp, which the CPU tests also run in a grid emulation.
#include "gpu/tape_interpreter.hpp"
#include "gpu/tape_kernel.hpp"

namespace escpod::gpu::detail {

// Thread 0 finds the block's operation through the prefix table and resolves its registers
// into shared memory; then every thread does its share of the operation.
__global__ void __launch_bounds__(kThreadsPerBlock) tape_stage_kernel(const StageLaunch launch) {
  __shared__ BlockWork work;
  if (threadIdx.x == 0) {
    const RawRegisters& regs = launch.regs_device != nullptr ? *launch.regs_device : launch.regs;
    decode_block(launch.ops, launch.block_prefix, launch.n_ops, regs,
                 static_cast<std::int64_t>(blockIdx.x), work);
  }
  __syncthreads();
  run_block_thread(work, static_cast<std::int64_t>(threadIdx.x),
                   static_cast<std::int64_t>(blockDim.x));
}

const void* stage_kernel_address() { return reinterpret_cast<const void*>(&tape_stage_kernel); }

}  // namespace escpod::gpu::detail
