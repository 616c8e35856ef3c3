// The CUDA entry points of a build without CUDA (ESCPOD_ENABLE_CUDA off): no device, and every
// factory answers "unsupported". No instance of DeviceTape or GraphRunner can exist here, so the
// remaining members are never reached.
#include "escpod/gpu/device_tape.hpp"
#include "escpod/gpu/graph_runner.hpp"
#include "gpu/device_tape_access.hpp"

#include <fmt/format.h>

namespace escpod::gpu {

namespace {
Status no_cuda(std::string_view what) {
  return Status::unsupported(
      fmt::format("{}: this build has no CUDA support (configure with -DESCPOD_ENABLE_CUDA=ON)", what));
}
}  // namespace

bool cuda_enabled_in_build() { return false; }
int cuda_device_count() { return 0; }

struct DeviceTape::Impl {
  PrepTape program;
};

DeviceTape::DeviceTape(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
DeviceTape::~DeviceTape() = default;

Result<std::unique_ptr<DeviceTape>> DeviceTape::create(PrepTape tape, DeviceTapeOptions) {
  return no_cuda(fmt::format("prep tape '{}': DeviceTape::create", tape.name()));
}
Status DeviceTape::run(const Registers&, CUstream_st*) { return no_cuda("DeviceTape::run"); }
const PrepTape& DeviceTape::program() const { return m_impl->program; }
RegisterDelivery DeviceTape::delivery() const { return RegisterDelivery::kKernelArgument; }
DeviceTapeStats DeviceTape::stats() const { return {}; }

struct GraphRunner::Impl {
  Buffer none;
};

GraphRunner::GraphRunner(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
GraphRunner::~GraphRunner() = default;

Result<std::unique_ptr<GraphRunner>> GraphRunner::create(GraphRunnerOptions options) {
  return no_cuda(fmt::format("{}: GraphRunner::create", options.name));
}
int GraphRunner::n_buffers() const { return 0; }
const Buffer& GraphRunner::buffer(int) const { return m_impl->none; }
std::int64_t GraphRunner::capacity_rows() const { return 0; }
Status GraphRunner::set_prep(std::unique_ptr<DeviceTape>, PrepPlacement) {
  return no_cuda("GraphRunner::set_prep");
}
DeviceTape* GraphRunner::prep() const { return nullptr; }
Status GraphRunner::capture(std::int64_t, const CaptureBody&) { return no_cuda("GraphRunner::capture"); }
Status GraphRunner::replay(std::int64_t, const Registers&, CUstream_st*) {
  return no_cuda("GraphRunner::replay");
}
Result<GraphNodeCounts> GraphRunner::node_counts(std::int64_t) const {
  return no_cuda("GraphRunner::node_counts");
}

namespace detail {
Status DeviceTapeAccess::use_racy_persistent_staging(DeviceTape&) {
  return no_cuda("use_racy_persistent_staging");
}
std::int64_t DeviceTapeAccess::staging_blocks(const DeviceTape&) { return 0; }
void DeviceTapeAccess::stage_launch(const DeviceTape&, int, const Registers&, StageLaunch&,
                                    unsigned& n_blocks) {
  n_blocks = 0;
}
}  // namespace detail

}  // namespace escpod::gpu
