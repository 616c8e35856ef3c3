// DeviceTape internals shared by device_tape.cpp and graph_runner.cpp (CUDA builds only).
#pragma once

#include "escpod/core/status.hpp"
#include "escpod/gpu/device_tape.hpp"
#include "gpu/device_tape_access.hpp"
#include "gpu/tape_interpreter.hpp"
#include "gpu/tape_kernel.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace escpod::gpu::detail {

struct StageTable {
  const RawDescriptor* ops = nullptr;
  const std::int32_t* block_prefix = nullptr;
  int n_ops = 0;
  unsigned n_blocks = 0;
};

// "<what>: <CUDA error name>: <description>" as an internal (or unsupported, for missing
// devices and drivers) error; OK for cudaSuccess.
Status cuda_status(cudaError_t e, std::string_view what);

// As cuda_status, but the context is formatted only on failure: the run path must not build
// strings (or allocate) for calls that succeed.
template <typename... Args>
Status cuda_check(cudaError_t e, fmt::format_string<Args...> context, Args&&... args) {
  if (e == cudaSuccess) return Status::ok();
  return cuda_status(e, fmt::format(context, std::forward<Args>(args)...));
}

}  // namespace escpod::gpu::detail

namespace escpod::gpu {

struct DeviceTape::Impl {
  explicit Impl(PrepTape p) : program(std::move(p)) {}
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  PrepTape program;
  RegisterDelivery delivery = RegisterDelivery::kKernelArgument;
  bool racy = false;  // test-only persistent pinned staging (DeviceTapeAccess)
  void* d_tables = nullptr;
  std::vector<detail::StageTable> stages;
  detail::RawRegisters* d_registers = nullptr;  // staged deliveries only
  detail::RawRegisters* racy_pinned = nullptr;
  struct StagingBlock {
    detail::RawRegisters* host = nullptr;
    cudaEvent_t done = nullptr;
  };
  std::vector<StagingBlock> pool;
  // Appends a new pinned block and its event to the pool.
  Status add_staging_block();
  // Uploads every stage's descriptors and block prefix table in one device blob (per stage, its
  // descriptors then its prefix table, each 64-byte aligned: d_tables) and records where each
  // stage's lie (stages). Nothing to upload for a tape without descriptors.
  Status upload_stage_tables();
  std::size_t pool_cursor = 0;
  DeviceTapeStats stats;
};

}  // namespace escpod::gpu
