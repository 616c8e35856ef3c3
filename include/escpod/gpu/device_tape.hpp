// A finalized prep tape made executable on a CUDA device: descriptors uploaded once, one
// interpreter kernel launch per non-empty stage per run, each operation spread over as many
// thread blocks as its recorded capacity needs. In a build without CUDA (ESCPOD_ENABLE_CUDA
// off) create() fails with "unsupported" and cuda_device_count() is 0; the host interpreter in
// prep_tape.hpp is then the whole story.
//
// Register delivery: why the register file is a kernel argument.
//   The host enqueues step N+1 while step N's work is still queued. TokenSpeed wrote the
//   registers into one persistent pinned array and enqueued an asynchronous upload; the upload
//   reads the array when it *executes*, so a later run could overwrite the values an earlier,
//   still-queued upload had not read yet (docs/prep_tape.md §6). We pass the whole register
//   file (32 x 8 bytes) by value as a kernel argument instead (kKernelArgument, the default):
//   the CUDA runtime copies argument values when the launch is enqueued (and a captured graph
//   node, or cudaGraphExecKernelNodeSetParams, copies them when the node is set), so nothing a
//   later run or the caller writes can reach an enqueued launch. There is no staging buffer,
//   no host-to-device copy and no event to fence, and the parameter is 288 bytes of the 4 KiB
//   every supported architecture allows. kFencedStaging is the TokenSpeed #1218 design, kept for
//   comparison in the benchmark and for register values that might one day be produced on the
//   device: a pool of pinned blocks, each with an event recorded after its upload; a run takes a
//   block whose event has completed (allocating a new one if none has; it never waits).
//
// Stream rules: run the tape on the stream that replays the graph reading its buffers (or order
// the two with events); a per-step source named by a pointer register must stay allocated until
// the stage reading it has run (allocate it stream-ordered on the same stream). Under
// kFencedStaging all runs of one tape share one device register array, so they must also be
// ordered with each other (one stream); kKernelArgument has no such restriction.
//
// Thread safety: one DeviceTape may be used by one host thread at a time.
#pragma once

#include "escpod/core/status.hpp"
#include "escpod/gpu/prep_tape.hpp"

#include <cstdint>
#include <memory>

struct CUstream_st;  // cudaStream_t is CUstream_st*; nullptr is the legacy default stream

namespace escpod::gpu {

// True when this build contains the CUDA interpreter.
bool cuda_enabled_in_build();

// CUDA devices visible to this process; 0 without CUDA in the build, without a driver, or
// without a device. Never fails.
int cuda_device_count();

enum class RegisterDelivery {
  kKernelArgument,  // registers copied into each launch's parameters (no staging, default)
  kFencedStaging,   // pinned block per run from an event-fenced pool, uploaded to the device
};

struct DeviceTapeOptions {
  RegisterDelivery delivery = RegisterDelivery::kKernelArgument;
};

// Counters, for tests and benchmarks. All monotonic except staging_blocks.
struct DeviceTapeStats {
  std::int64_t runs = 0;                // successful run() calls
  std::int64_t kernel_launches = 0;     // interpreter launches issued by run()
  std::int64_t register_uploads = 0;    // host-to-device copies of the register file
  std::int64_t descriptor_uploads = 0;  // host-to-device copies of descriptor tables (1 per tape)
  std::int64_t device_allocations = 0;  // cudaMalloc calls made by this tape
  std::int64_t staging_blocks = 0;      // pinned blocks currently in the pool (kFencedStaging)
};

namespace detail {
struct DeviceTapeAccess;  // internal: graph runner and test hooks
}

class DeviceTape {
 public:
  // Takes a finalized device tape (MemorySpace::kDevice), checks that every fixed buffer it
  // records is device-accessible memory (not pageable host memory), and uploads its
  // descriptors and block tables to the current device, once. Fails (naming the tape, and the
  // buffer where one is at fault) for an unfinalized or host tape, pageable buffers, no device,
  // or a build without CUDA. The DeviceTape owns the PrepTape and so keeps its buffers alive.
  static Result<std::unique_ptr<DeviceTape>> create(PrepTape tape, DeviceTapeOptions options = {});

  // Frees the device tables and staging memory; this synchronises with the device (cudaFree),
  // so work still reading the tables finishes first.
  ~DeviceTape();
  DeviceTape(const DeviceTape&) = delete;
  DeviceTape& operator=(const DeviceTape&) = delete;

  // Enqueues one run on `stream`: check_run(regs) on the host (a rejected run enqueues
  // nothing), then, under kFencedStaging, one register upload, then one launch per stage in
  // stage order. Never synchronises or waits; allocates no device memory. `regs` is copied
  // before run returns, so the caller may change it at once. Under stream capture only
  // kKernelArgument is allowed (a captured upload would read the pinned block at replay).
  Status run(const Registers& regs, CUstream_st* stream);

  const PrepTape& program() const;
  RegisterDelivery delivery() const;
  DeviceTapeStats stats() const;

 private:
  struct Impl;
  explicit DeviceTape(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
  friend struct detail::DeviceTapeAccess;
};

}  // namespace escpod::gpu
