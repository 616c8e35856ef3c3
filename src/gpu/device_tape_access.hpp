// Internal access to DeviceTape for the graph runner and the GPU tests. Not public API: it lives
// in src/, which only this library, its tests and benchmarks see. No CUDA headers here.
#pragma once

#include "escpod/core/status.hpp"
#include "escpod/gpu/device_tape.hpp"
#include "escpod/gpu/prep_tape.hpp"

#include <cstdint>

namespace escpod::gpu::detail {

struct StageLaunch;  // the interpreter kernel's by-value argument (device_tape_impl.cuh)

struct DeviceTapeAccess {
  // Test-only. Switches `tape` to the delivery TokenSpeed had before PR #1218: one persistent
  // pinned host array, rewritten by every run and uploaded asynchronously into a device register
  // array. It is deliberately racy (a queued upload reads whatever the latest run wrote) and
  // exists only as the negative control of the register-isolation test, which must fail under
  // it. Production code never calls it.
  static Status use_racy_persistent_staging(DeviceTape& tape);

  // Pinned staging blocks currently held (kFencedStaging pool, or 1 for the racy array).
  static std::int64_t staging_blocks(const DeviceTape& tape);

  // The kernel argument and grid of stage `stage_idx` with registers `regs` passed by value
  // (for graph kernel nodes). CUDA builds only.
  static void stage_launch(const DeviceTape& tape, int stage_idx, const Registers& regs,
                           StageLaunch& out, unsigned& n_blocks);
};

}  // namespace escpod::gpu::detail
