// A small CUDA-graph runner for bucketed replay over persistent input buffers, with a prep tape
// in front of the graph or inside it.
//
//   auto runner = GraphRunner::create({"crf", {64, 256, 512}, {{"signal", Width::k4, 2000},
//                                                               {"row_len", Width::k4, 1}}});
//   PrepTape tape("crf scrub", MemorySpace::kDevice);   // record against runner->buffer(i)
//   ... tape.finalize(); runner->set_prep(DeviceTape::create(std::move(tape)), placement);
//   for (bucket : buckets) runner->capture(bucket, body);  // once per bucket
//   per step: regs.set(...); runner->replay(bucket, regs, stream);
//
// Buffers are allocated once, at the largest bucket (capacity = max bucket x elements per row),
// and never move: every bucket's graph and the tape see the same addresses for the runner's
// life. Each Buffer's owner handle keeps its allocation alive, so a tape recorded against it
// may outlive the runner.
//
// Placement of the prep tape:
//   kBeforeGraph  replay = tape run (one launch per stage) + graph launch, on the same stream.
//   kInsideGraph  the tape's stage kernels are the first nodes of every bucket's graph; replay
//                 validates the registers, updates those nodes' parameters
//                 (cudaGraphExecKernelNodeSetParams, which affects only later launches, never
//                 enqueued or running ones) and launches the graph: no extra launch at all.
//                 Needs RegisterDelivery::kKernelArgument.
//
// Without CUDA in the build create() fails with "unsupported". One host thread at a time.
#pragma once

#include "escpod/core/status.hpp"
#include "escpod/gpu/device_tape.hpp"
#include "escpod/gpu/prep_tape.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

struct CUstream_st;

namespace escpod::gpu {

struct GraphBufferSpec {
  std::string name;
  Width width = Width::k4;
  std::int64_t elements_per_row = 1;  // > 0
};

struct GraphRunnerOptions {
  std::string name = "graph runner";
  std::vector<std::int64_t> buckets;       // rows per bucket, each > 0, distinct
  std::vector<GraphBufferSpec> buffers;
};

enum class PrepPlacement { kBeforeGraph, kInsideGraph };

// Nodes of one bucket's instantiated graph (tests count launches with these).
struct GraphNodeCounts {
  int total = 0;        // top-level nodes
  int prep_kernels = 0; // tape stage kernels (kInsideGraph), one per non-empty stage
};

class GraphRunner {
 public:
  // Allocates and zero-fills every buffer at capacity on the current device. Fails on empty,
  // non-positive or duplicate buckets, bad buffer specs, no device, or no CUDA in the build.
  static Result<std::unique_ptr<GraphRunner>> create(GraphRunnerOptions options);
  ~GraphRunner();
  GraphRunner(const GraphRunner&) = delete;
  GraphRunner& operator=(const GraphRunner&) = delete;

  int n_buffers() const;
  // Persistent buffer `i` as a device Buffer (capacity in elements). Valid for 0 <= i < n_buffers().
  const Buffer& buffer(int i) const;
  std::int64_t capacity_rows() const;

  // Attaches the prep tape (recorded against this runner's buffers). Must precede capture();
  // kInsideGraph needs kKernelArgument delivery.
  Status set_prep(std::unique_ptr<DeviceTape> prep, PrepPlacement placement);
  DeviceTape* prep() const;

  // Captures `body` once for `bucket_rows`: body enqueues the bucket's work on the capture
  // stream it is given (stream capture; it must not synchronise). Fails for an unknown or
  // already captured bucket, or when body or capture fails.
  using CaptureBody = std::function<Status(CUstream_st* stream, std::int64_t bucket_rows)>;
  Status capture(std::int64_t bucket_rows, const CaptureBody& body);

  // One step on `stream`: the prep tape with `regs` (if attached, as placed), then the bucket's
  // graph. check_run rejects bad registers before anything is enqueued. Never waits.
  Status replay(std::int64_t bucket_rows, const Registers& regs, CUstream_st* stream);

  Result<GraphNodeCounts> node_counts(std::int64_t bucket_rows) const;

 private:
  struct Impl;
  explicit GraphRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace escpod::gpu
