// Runs a finalized host tape through the CUDA interpreter's own code (src/gpu/
// tape_interpreter.hpp) on the CPU: every block of every stage, every thread of each block, in
// turn. The kernel's result cannot depend on the order of blocks or threads within a stage (the
// operations are independent and each element is written by exactly one thread), so a
// sequential walk computes what the device computes. The grid can be sized as DeviceTape sizes
// it, or partitioned at random, since the interpreter must be right for any partition.
#pragma once

#include "escpod/gpu/prep_tape.hpp"
#include "gpu/tape_interpreter.hpp"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace escpod::gpu::test {

struct EmulatedGrid {
  int threads_per_block = detail::kThreadsPerBlock;
  int max_random_blocks = 0;  // 0: size blocks as DeviceTape does; k > 0: 1..k blocks per op
};

// `tape` must be finalized and check_run(regs) must have passed.
inline void emulate_device(const PrepTape& tape, const Registers& regs, const EmulatedGrid& grid,
                           std::mt19937_64& rng) {
  detail::RawRegisters raw;
  std::memcpy(raw.slot, regs.values().data(), sizeof raw.slot);
  for (int s = 0; s < tape.n_stages(); ++s) {
    const auto descs = tape.stage_descriptors(s);
    const auto max_elements = tape.stage_max_elements(s);
    std::vector<detail::RawDescriptor> ops(descs.size());
    std::vector<std::int32_t> prefix(1, 0);
    for (std::size_t k = 0; k < descs.size(); ++k) {
      std::memcpy(ops[k].word, descs[k].words.data(), sizeof ops[k].word);
      std::int64_t blocks;
      if (grid.max_random_blocks > 0) {
        blocks = std::uniform_int_distribution<std::int64_t>(1, grid.max_random_blocks)(rng);
      } else {
        const int log2 = detail::header_dst_log2(descs[k].words[0]);
        blocks = detail::blocks_for_op(max_elements[k], 1 << log2);
      }
      prefix.push_back(prefix.back() + static_cast<std::int32_t>(blocks));
    }
    const auto n_ops = static_cast<int>(ops.size());
    for (std::int64_t b = 0; b < prefix.back(); ++b) {
      detail::BlockWork work;
      detail::decode_block(ops.data(), prefix.data(), n_ops, raw, b, work);
      for (std::int64_t t = 0; t < grid.threads_per_block; ++t) {
        detail::run_block_thread(work, t, grid.threads_per_block);
      }
    }
  }
}

}  // namespace escpod::gpu::test
